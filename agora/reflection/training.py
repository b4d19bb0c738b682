"""What SFT and DPO training share: the base model, the LoRA config, the TRL arguments of the
run's device, log lines and saving an adapter that vLLM loads.

Device, precision and attention kernel come from the config's ``trainer:`` section, resolved
the same way as for the PPO learner (``agora.algos.compute``): a GPU trains in bf16 there, a
CPU in bf16 only where it has native support. Activations are never recomputed (TRL's
``gradient_checkpointing`` default): memory is ample for these models; recomputation only costs
time.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agora.algos.compute import Placement
from agora.config.agents import AgentConfig
from agora.reflection.config import RoleConfig, TrainStageConfig

META_FILE = "agora_reflection.json"


def lora_config(role: RoleConfig | AgentConfig):  # -> peft.LoraConfig
    """The PEFT config of a reflection role or a run's agent (same LoRA fields)."""
    from peft import LoraConfig

    return LoraConfig(r=role.lora_rank, lora_alpha=role.lora_alpha,
                      lora_dropout=role.lora_dropout, target_modules=list(role.lora_targets),
                      layers_to_transform=role.lora_layers, task_type="CAUSAL_LM")


def load_base(model_path: str, placement: Placement):  # -> (model, tokenizer)
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # bars between our log lines
    datasets.disable_progress_bars()
    tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_path, local_files_only=True,
                                                 **placement.model_kwargs())
    model.config.use_cache = False
    return model, tokenizer


def trainer_args(stage: TrainStageConfig, out: Path, seed: int, placement: Placement,
                 report_to: list[str] | str = "none") -> dict[str, Any]:
    """The ``TrainingArguments`` fields SFTConfig and DPOConfig share, on ``placement``;
    ``report_to``: TRL's own experiment trackers (agora/train/tracking.py ``trl_tracking``)."""
    return {
        "output_dir": str(out),
        "per_device_train_batch_size": stage.batch_size,
        "gradient_accumulation_steps": stage.grad_accum,
        "num_train_epochs": stage.epochs,
        "max_steps": stage.max_steps or -1,
        "learning_rate": stage.learning_rate,
        "max_length": stage.max_length,
        "gradient_checkpointing": False,
        **placement.trl_args(),
        "report_to": report_to,
        "save_strategy": "no",
        "eval_strategy": "no",
        "logging_steps": stage.logging_steps,
        # A progress bar for a person at a terminal; logs (CI, agora up's log files) get the
        # one line per logging step of log_callback instead.
        "disable_tqdm": not sys.stderr.isatty(),
        "seed": seed,
        "dataloader_num_workers": 0,
    }


def log_callback(log: Callable[[str], None], history: list[dict], label: str):
    """Trainer logs as one line per logging step instead of printed dicts."""
    from transformers.trainer_callback import TrainerCallback

    class _Log(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
            entry = {"step": state.global_step, **dict(logs or {})}
            history.append(entry)
            if "loss" in entry:
                # TRL's SFT logs the share of completion tokens that are the model's top-1
                # (the demonstration's brackets and end token too, not only its move).
                extra = "".join(f"  {k.split('/')[-1]} {entry[k]:.3f}" for k in
                                ("mean_token_accuracy", "rewards/accuracies",
                                 "rewards/margins") if k in entry)
                log(f"  {label} step {state.global_step}/{state.max_steps}  "
                    f"loss {entry['loss']:.4f}{extra}")

    return _Log()


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """``threads`` torch threads for one training job, then the process's own number again
    (a CLI run ends anyway; a long-lived caller such as a test session must not inherit it)."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def scratch_dir() -> Iterator[Path]:
    """Where the Trainer may write (we save nothing through it)."""
    path = Path(tempfile.mkdtemp(prefix="agora-reflect-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def save_adapter(model, out: Path, meta: dict[str, Any]) -> None:  # noqa: ANN001
    """Only the trained adapter ('default'; DPO's frozen 'ref' copy stays out), written to a
    temp folder and renamed, so a crash never leaves a half adapter that vLLM would load."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        model.save_pretrained(str(tmp), selected_adapters=["default"])
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide it from a server run by another user
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
