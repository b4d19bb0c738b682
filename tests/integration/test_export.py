"""``agora export``: a run's agent as a PEFT folder naming its base by hub id, or merged into a
plain model folder that answers exactly as base + adapter did, each with a model card."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from peft import PeftModel
from transformers import AutoModelForCausalLM

from agora.serving.model_folders import SMOLLM2
from agora.train.export import ExportError, base_name, export_agent
from tests.integration.test_policy_vllm import perturbed_learner
from tests.stack_helpers import tiny_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model) -> Path:
    """A run folder as `agora up` leaves it: its config and two adapter versions of player."""
    run = tmp_path_factory.mktemp("runs") / "ttt-1"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(tiny_config().model_dump(mode="json")))
    for version, seed in ((0, 11), (1, 12)):
        perturbed_learner(tiny_model, seed).save_adapter(run / "adapters" / "player" /
                                                        f"v{version}")
    (run / "eval").mkdir()
    (run / "eval" / "eval.md").write_text("| policy | win |\n|---|---|\n| v1 | 61% |\n")
    return run


def test_adapter_export_names_the_base_and_carries_a_model_card(run_dir, tmp_path, tiny_model):
    done = export_agent(run_dir, "player", tmp_path / "out")
    assert done.kind == "adapter" and done.version == 1
    config = json.loads((tmp_path / "out" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == base_name("tiny-random") == tiny_model
    card = (tmp_path / "out" / "README.md").read_text()
    assert "library_name: peft" in card and "| v1 | 61% |" in card
    assert "environment:" in card and "name: tictactoe" in card  # the run's config
    assert base_name(SMOLLM2) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert base_name("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"


def test_merged_export_answers_as_base_plus_adapter(run_dir, tmp_path, tiny_model):
    done = export_agent(run_dir, "player", tmp_path / "merged", version=0, merge=True)
    assert done.kind == "merged"
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    adapted = PeftModel.from_pretrained(base, str(run_dir / "adapters" / "player" / "v0"))
    ids = torch.tensor([[1, 20, 300, 4000, 50, 6]])
    plain = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, adapted(ids).logits, atol=1e-4,
                                   rtol=1e-4)
        assert (merged(ids).logits - plain(ids).logits).abs().max() > 1e-3  # not the base


def test_bad_requests_name_the_option(run_dir, tmp_path):
    with pytest.raises(ExportError, match="--agent: 'nobody'"):
        export_agent(run_dir, "nobody", tmp_path / "a")
    with pytest.raises(ExportError, match="--version: v7"):
        export_agent(run_dir, "player", tmp_path / "b", version=7)
    done = subprocess.run([sys.executable, "-m", "agora.cli", "export", str(tmp_path),
                           "--agent", "player", "--out", str(tmp_path / "c")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "cannot export" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
