"""Where tasks come from, as config: one spec per source, discriminated by ``source``.

A spec is plain data (it sits in a run's YAML), so it validates without importing the heavy
libraries (reasoning-gym and datasets take ~5 s each to import); names that only those libraries
know (a reasoning-gym dataset, a Hub dataset) are checked when the tasks are loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agora.data.formats import Format

Split = Literal["train", "test", "all"]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    seed: int = Field(0, ge=0, description="decides the train/test split (and rg's generation)")
    difficulty: str | int | None = Field(
        None, description="a label copied onto every task, e.g. for a curriculum"
    )


class ReasoningGymSpec(_Spec):
    """Procedurally generated tasks: train and test hold disjoint questions, each drawn from the
    generator's own distribution (agora/data/rgym.py)."""

    source: Literal["reasoning_gym"]
    name: str = Field(..., description="a reasoning-gym dataset: basic_arithmetic, gsm_symbolic")
    size: int = Field(500, ge=1, le=2**29, description="train tasks")
    test_size: int | None = Field(None, ge=1, le=2**29, description="test tasks; default: size")
    # The share of the *question space* held out (by a hash of the question text; see
    # agora/data/rgym.py): both splits then follow the generator's own distribution.
    test_fraction: float = Field(
        0.1, gt=0.0, lt=1.0, description="share of distinct questions reserved for 'test'"
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="the dataset's difficulty knobs (min_terms, ...)"
    )


class _RowSpec(_Spec):
    format: Format
    test_fraction: float = Field(
        0.2, ge=0.0, le=1.0, description="share of rows held out as 'test', chosen by seed"
    )


class JsonlSpec(_RowSpec):
    """A JSON-lines file in GSM8K, ANLI or MATH format (agora/data/formats.py)."""

    source: Literal["jsonl"]
    path: Path


class HFSpec(_RowSpec):
    """A Hugging Face dataset through ``datasets.load_dataset`` (needs the Hub or its cache).

    ``split`` unset: the dataset's own split named like the requested one ("train"/"test") is
    read whole. ``split`` set (e.g. ANLI's "train_r1", or its three rounds as a list
    ``[test_r1, test_r2, test_r3]``): those splits are read, joined in order, and divided into
    train/test by ``test_fraction`` and ``seed``, like a file.
    """

    source: Literal["hf"]
    name: str = Field(..., description="'openai/gsm8k', 'facebook/anli', or a builder: 'json'")
    subset: str | None = Field(None, description="the config name, e.g. 'main' for GSM8K")
    split: str | list[str] | None = Field(None, min_length=1)
    data_files: str | list[str] | dict[str, str | list[str]] | None = None
    cache_dir: str | None = None


TaskSpec = Annotated[ReasoningGymSpec | JsonlSpec | HFSpec, Field(discriminator="source")]
