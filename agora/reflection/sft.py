"""Stage (b): SFT of the actor and the critic adapters (TRL's SFTTrainer, PEFT LoRA).

Which oracle texts are trained on (``sft_examples``), so that the ground truth vouches for all
of them:

- actor, first turn: ``actor prompt -> a right first answer``. A problem with no right first
  answer borrows the oracle's first right refinement instead (STaR's rationalisation), so the
  actor also learns the problems it could not solve alone.
- actor, refinement: ``refine prompt (question, first answer, feedback) -> the refinement``
  whenever the refinement is right.
- critic: ``critic prompt (question, first answer) -> the feedback`` whenever the refinement
  written after that feedback is right (the paper's value of a critique) and the feedback's
  verdict does not contradict the ground truth (a missing verdict is allowed). The same rule
  runs on ``critic_rows``, the refinements judged again as answers
  (``critic_judges_refinements``; ``refined_answers.py``).

Identical (prompt, completion) examples are kept once; with ``balance_critic`` the critic's
examples count right and wrong first answers equally (``balance.py``). Each role trains its own
fresh LoRA adapter on the base model, saved to ``<run>/sft/<role>/``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from agora.algos.compute import resolve
from agora.reflection.balance import balance_by_answer
from agora.reflection.config import ROLES, ReflectionConfig, TrainStageConfig
from agora.reflection.oracle import ORACLE_FILE
from agora.reflection.program_critic import critic_completion
from agora.reflection.prompts import CriticCheck, actor_messages, critic_messages, refine_messages
from agora.reflection.records import (
    Critique,
    DataError,
    OracleRow,
    SFTExample,
    read_rows,
    write_rows,
)
from agora.reflection.refined_answers import extra_critic_rows
from agora.reflection.training import (
    load_base,
    log_callback,
    lora_config,
    save_adapter,
    scratch_dir,
    torch_threads,
    trainer_args,
)
from agora.serving.model_folders import resolve_model
from agora.train.tracking import trl_tracking


def _assistant(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text.strip()}]


def sft_examples(rows: list[OracleRow], max_chars: int, balance_critic: bool = False,
                 seed: int = 0, critic_rows: Sequence[OracleRow] = (),
                 check: CriticCheck = "text") -> dict[str, list[SFTExample]]:
    """The SFT examples of each role, by the rules in the module docstring; ``check``: how
    the critic checks (``critic_check``: a program critic learns its program alone)."""
    out: dict[str, list[SFTExample]] = {role: [] for role in ROLES}
    answer_right: dict[str, list[bool]] = {role: [] for role in ROLES}
    seen: set[tuple[str, str, str]] = set()

    def add(role: str, kind: str, row: OracleRow, prompt: list, text: str) -> None:
        key = (role, repr(prompt), text.strip())
        if text.strip() and key not in seen:
            seen.add(key)
            out[role].append(SFTExample(role=role, kind=kind, task_id=row.task.task_id,
                                        prompt=prompt, completion=_assistant(text)))
            answer_right[role].append(row.initial_correct)

    def add_critique(row: OracleRow, c: Critique) -> None:  # c.refined is known to be right
        if c.verdict is None or row.verdict_right(c):
            add("critic", "critique", row,
                critic_messages(row.task.question, row.initial, max_chars, check),
                critic_completion(c.feedback, check))

    by_task: dict[str, list[OracleRow]] = {}
    for row in rows:
        by_task.setdefault(row.task.task_id, []).append(row)
    for task_rows in by_task.values():
        question = task_rows[0].task.question
        right_first = [r for r in task_rows if r.initial_correct]
        for row in right_first:
            add("actor", "first_turn", row, actor_messages(question), row.initial)
        if not right_first:
            borrowed = next(((r, c) for r in task_rows for c in r.critiques
                             if c.refined_correct), None)
            if borrowed:
                add("actor", "first_turn", borrowed[0], actor_messages(question),
                    borrowed[1].refined)
        for row in task_rows:
            for c in row.critiques:
                if not c.refined_correct:
                    continue
                add("actor", "refine", row,
                    refine_messages(question, row.initial, c.feedback, max_chars), c.refined)
                add_critique(row, c)
    for row in critic_rows:
        for c in row.critiques:
            if c.refined_correct:
                add_critique(row, c)
    if balance_critic:
        out["critic"] = balance_by_answer(out["critic"], answer_right["critic"], seed)
    return out


def train_sft(cfg: ReflectionConfig, log: Callable[[str], None] = print) -> dict[str, dict]:
    """SFT both adapters; returns per role: examples, steps, seconds, last loss."""
    rows = read_rows(cfg.run_dir / ORACLE_FILE, OracleRow, "agora reflect oracle CONFIG")
    examples = sft_examples(rows, cfg.max_shown_chars, cfg.balance_critic, cfg.seed,
                            extra_critic_rows(cfg, rows), cfg.critic_check)
    for role in ROLES:
        if not examples[role]:
            raise DataError(f"{cfg.run_dir / ORACLE_FILE}: no SFT example for the {role} (no "
                            "right answer or refinement among the oracle's); raise "
                            "oracle.samples, turn on oracle.show_reference or use a stronger "
                            "oracle")
    report = {}
    for role in ROLES:
        write_rows(cfg.run_dir / "sft" / f"{role}_data.jsonl", examples[role])
        report[role] = _train_role(cfg, role, examples[role], log)
    return report


def role_sft_stage(cfg: ReflectionConfig, role: str) -> TrainStageConfig:
    """``cfg.sft`` with the role's own ``sft_epochs`` where it sets them."""
    epochs = cfg.role(role).sft_epochs
    return cfg.sft if epochs is None else cfg.sft.model_copy(update={"epochs": epochs})


def _train_role(cfg: ReflectionConfig, role: str, examples: list[SFTExample],
                log: Callable[[str], None]) -> dict:
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    kinds = {k: sum(e.kind == k for e in examples) for k in dict.fromkeys(e.kind for e in examples)}
    log(f"sft {role}: {len(examples)} examples {kinds}")
    placement = resolve(cfg.trainer)
    stage = role_sft_stage(cfg, role)
    model, tokenizer = load_base(resolve_model(cfg.policy.model), placement)
    data = Dataset.from_list([{"prompt": e.prompt, "completion": e.completion} for e in examples])
    history: list[dict] = []
    started = time.monotonic()
    tracked = trl_tracking(cfg.tracking, cfg.run_dir / "tensorboard" / f"sft-{role}")
    with scratch_dir() as scratch, torch_threads(cfg.sft.threads), tracked as report_to:
        args = SFTConfig(**trainer_args(stage, scratch, cfg.seed, placement, report_to),
                         completion_only_loss=True)
        trainer = SFTTrainer(model=model, args=args, train_dataset=data,
                             processing_class=tokenizer, peft_config=lora_config(cfg.role(role)),
                             callbacks=[log_callback(log, history, f"sft {role}")])
        trainer.remove_callback(PrinterCallback)
        result = trainer.train()
    seconds = time.monotonic() - started
    losses = [h["loss"] for h in history if "loss" in h]
    summary = {"examples": len(examples), "kinds": kinds, "epochs": stage.epochs,
               "steps": result.global_step,
               "seconds": round(seconds, 1),
               "final_loss": losses[-1] if losses else result.training_loss}
    save_adapter(trainer.model, cfg.run_dir / "sft" / role,
                 {"stage": "sft", "role": role, "base_model": cfg.policy.model, **summary})
    return summary
