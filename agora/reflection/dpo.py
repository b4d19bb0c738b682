"""Stage (d): DPO of both adapters (TRL's DPOTrainer), starting from SFT.

Each role's SFT adapter is loaded trainable on the base model and handed to DPOTrainer with no
``ref_model`` and no ``peft_config``: TRL then adds a frozen copy of the adapter ("ref") as the
reference policy, so the KL anchor of DPO is the SFT policy, as in the paper (the SFT-ed actor
and critic are its reference policy). Only the trained adapter is saved, to ``<run>/dpo/<role>``.
``dpo.sft_weight`` adds an SFT term on the chosen answers (RPO, Pang et al. 2024): measured
here, DPO raised the actor's first answers but undid the turns that SFT had taught.

A role without any pair keeps its SFT adapter (copied, and said so in the report and log):
there is nothing to prefer, and a missing adapter would stop the evaluation of the other role.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

from agora.algos.compute import resolve
from agora.reflection.config import ROLES, ReflectionConfig
from agora.reflection.pairs import pairs_path
from agora.reflection.records import DataError, PreferencePair, read_rows
from agora.reflection.server import stage_adapter_dir
from agora.reflection.training import (
    META_FILE,
    load_base,
    log_callback,
    save_adapter,
    scratch_dir,
    torch_threads,
    trainer_args,
)
from agora.serving.model_folders import resolve_model
from agora.train.tracking import trl_tracking


def train_dpo(cfg: ReflectionConfig, log: Callable[[str], None] = print) -> dict[str, dict]:
    """DPO both adapters; returns per role: pairs, steps, seconds, last loss (or 'kept sft')."""
    pairs = {role: read_rows(pairs_path(cfg, role), PreferencePair,
                             "agora reflect pairs CONFIG") for role in ROLES}
    for role in ROLES:
        sft = stage_adapter_dir(cfg, "sft", role)
        if not (sft / "adapter_config.json").is_file():
            raise DataError(f"{sft}: no SFT adapter for the {role}; run "
                            "`agora reflect sft CONFIG` first")
    if not any(pairs.values()):
        raise DataError(f"{cfg.run_dir / 'pairs'}: no preference pair for either role; the "
                        "oracle data has no right/wrong contrast (see `agora reflect pairs`)")
    report = {}
    for role in ROLES:
        if pairs[role]:
            report[role] = _train_role(cfg, role, pairs[role], log)
            continue
        out = stage_adapter_dir(cfg, "dpo", role)
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(stage_adapter_dir(cfg, "sft", role), out)
        log(f"dpo {role}: no preference pairs; keeping the SFT adapter")
        report[role] = {"pairs": 0, "kept": "sft"}
    return report


def _train_role(cfg: ReflectionConfig, role: str, pairs: list[PreferencePair],
                log: Callable[[str], None]) -> dict:
    from datasets import Dataset
    from peft import PeftModel
    from transformers.trainer_callback import PrinterCallback
    from trl import DPOConfig, DPOTrainer

    log(f"dpo {role}: {len(pairs)} pairs, from {stage_adapter_dir(cfg, 'sft', role)}")
    placement = resolve(cfg.trainer)
    base, tokenizer = load_base(resolve_model(cfg.policy.model), placement)
    model = PeftModel.from_pretrained(base, str(stage_adapter_dir(cfg, "sft", role)),
                                      is_trainable=True)
    data = Dataset.from_list([{"prompt": p.prompt, "chosen": p.chosen, "rejected": p.rejected}
                              for p in pairs])
    history: list[dict] = []
    started = time.monotonic()
    tracked = trl_tracking(cfg.tracking, cfg.run_dir / "tensorboard" / "dpo")
    with scratch_dir() as scratch, torch_threads(cfg.dpo.threads), tracked as report_to:
        # With sft_weight, TRL adds its NLL term on the chosen answers to the sigmoid loss.
        losses = ({"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, cfg.dpo.sft_weight]}
                  if cfg.dpo.sft_weight > 0 else {})
        args = DPOConfig(**trainer_args(cfg.dpo, scratch, cfg.seed, placement, report_to),
                         beta=cfg.dpo.beta, **losses)
        trainer = DPOTrainer(model=model, args=args, train_dataset=data,
                             processing_class=tokenizer,
                             callbacks=[log_callback(log, history, f"dpo {role}")])
        trainer.remove_callback(PrinterCallback)
        result = trainer.train()
    seconds = time.monotonic() - started
    losses = [h for h in history if "loss" in h]
    last = losses[-1] if losses else {}
    summary = {"pairs": len(pairs), "sft_weight": cfg.dpo.sft_weight,
               "steps": result.global_step, "seconds": round(seconds, 1),
               "final_loss": last.get("loss", result.training_loss),
               "reward_accuracy": last.get("rewards/accuracies"),
               "reward_margin": last.get("rewards/margins")}
    save_adapter(trainer.model, stage_adapter_dir(cfg, "dpo", role),
                 {"stage": "dpo", "role": role, "base_model": cfg.policy.model,
                  "from": str(stage_adapter_dir(cfg, "sft", role) / META_FILE), **summary})
    return summary
