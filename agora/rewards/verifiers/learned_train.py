"""Train the learned verifier with TRL's RewardTrainer, on the CPU or a GPU, from a data file
of labelled answers (``agora verifier gen-data`` / ``balance``).

What RewardTrainer (TRL 1.x) needs, and how it is given:
- a dataset of preference pairs. It accepts text columns ``chosen``/``rejected`` (optionally
  with a ``prompt``) or already tokenised ``chosen_ids``/``rejected_ids``. We hand it token ids
  made by ``agora.rewards.verifiers.learned.encode``: its own ``max_length`` *drops* over-long pairs
  rather than truncating them, and the service must score with exactly the ids trained on.
- a sequence classifier with ``num_labels=1`` and ``config.pad_token_id`` set (it pools the
  last non-padding token); a pad token on the tokenizer (SmolLM2's is ``<|im_end|>``).
- its defaults are GPU-minded: ``bf16=True`` and ``gradient_checkpointing=True``. We take
  device and precision from ``TrainOptions.compute`` (a CPU without native bf16 trains in
  fp32) and never checkpoint (recomputation only costs time, memory is ample).
- with PEFT, the new ``score`` head must be in ``modules_to_save`` or it stays random.

Full fine-tuning by default (LoRA measured no faster on CPU: see ``TrainOptions.lora_rank``).
The saved folder is always a plain classifier (LoRA is merged), so the service loads it with
transformers alone.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agora.algos.compute import ComputeConfig, resolve
from agora.rewards.verifiers.learned import (
    DEFAULT_MAX_LENGTH,
    META_FILE,
    LearnedVerifier,
    encode,
    ensure_pad_token,
)
from agora.rewards.verifiers.learned_data import (
    DataError,
    Pair,
    VerifierRow,
    build_pairs,
    split_by_question,
)

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
# Train accuracy is a sanity check: a sample is enough (scoring 128 pairs on SmolLM2 ~1.5 min)
MAX_TRAIN_ACCURACY_PAIRS = 128


@dataclass
class TrainOptions:
    model: str = "smollm2-135m"
    out: Path = Path("verifier")
    epochs: float = 1.0
    lr: float = 1e-4
    max_length: int = DEFAULT_MAX_LENGTH
    batch_size: int = 8
    eval_fraction: float = 0.2
    seed: int = 0
    # LoRA rank on q/k/v/o; 0 = full fine-tuning, the default. Measured on SmolLM2-135M (fp32,
    # 2 busy cores, 8 pairs = 16 sequences x 160 tokens per step): full 38.4 s/step, LoRA r=16
    # 37.4 s/step. Backward through every layer (which LoRA needs too, its adapters sit in all
    # of them) dominates; the weight gradients and AdamW step add ~3%, and the extra ~2 GB of
    # optimizer state fits easily. LoRA buys no speed here, so it stays an option (less
    # memory, a gentler update on very small data sets).
    lora_rank: int = 0
    max_steps: int | None = None  # stop early (tests, smoke runs); None = epochs decide
    threads: int | None = None  # torch threads; None = torch's default
    # Device and precision, as a run config's trainer: section (agora/algos/compute.py).
    compute: ComputeConfig = field(default_factory=ComputeConfig)


@dataclass
class TrainReport:
    train_pairs: int
    eval_pairs: int
    same_question_pairs: int
    unpaired_rows: int
    steps: int
    seconds: float
    train_accuracy: float | None
    eval_accuracy: float | None
    final_loss: float | None
    out: str
    logs: list[dict] = field(default_factory=list)


def make_pairs(
    rows: list[VerifierRow], eval_fraction: float, seed: int
) -> tuple[list[Pair], list[Pair], int]:
    """Train and held-out pairs (split by question first) and the rows left unpaired."""
    train_rows, eval_rows = split_by_question(rows, eval_fraction, seed)
    train_pairs, unpaired_train = build_pairs(train_rows, seed)
    eval_pairs, unpaired_eval = build_pairs(eval_rows, seed + 1)
    if not train_pairs:
        raise DataError(
            f"no (right, wrong) pair to train on among {len(train_rows)} training rows: every "
            "question needs a right and a wrong answer, in it or in its difficulty bucket"
        )
    return train_pairs, eval_pairs, unpaired_train + unpaired_eval


def pair_accuracy(verifier: LearnedVerifier, pairs: list[Pair]) -> float | None:
    """Share of pairs whose right answer scores above the wrong one."""
    if not pairs:
        return None
    scores = verifier.score_pairs(
        [(p.chosen.question, p.chosen.answer) for p in pairs]
        + [(p.rejected.question, p.rejected.answer) for p in pairs]
    )
    n = len(pairs)
    return sum(scores[i] > scores[n + i] for i in range(n)) / n


def train_verifier(
    rows: list[VerifierRow], opts: TrainOptions, log: Callable[[str], None] = print
) -> TrainReport:
    """Train, save a plain classifier + tokenizer + ``agora_verifier.json`` to ``opts.out``,
    then reload what was saved and measure pair accuracy with the serving code path."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback, TrainerCallback
    from transformers.utils import logging as transformers_logging
    from trl import RewardConfig, RewardTrainer
    from trl.trainer.reward_trainer import suppress_seqcls_warning

    from agora.serving.model_folders import resolve_model

    if opts.threads:
        torch.set_num_threads(opts.threads)
    transformers_logging.disable_progress_bar()  # "Loading weights" bars between our lines
    train_pairs, eval_pairs, unpaired = make_pairs(rows, opts.eval_fraction, opts.seed)
    log(f"{len(train_pairs)} train pairs, {len(eval_pairs)} held-out pairs, "
        f"{unpaired} rows without a partner")
    path = resolve_model(opts.model)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    ensure_pad_token(tokenizer)
    placement = resolve(opts.compute)
    torch.manual_seed(opts.seed)  # the new score head is random: make it the same every run
    with suppress_seqcls_warning():
        model = AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=1, local_files_only=True,
            **placement.model_kwargs(full_weights=opts.lora_rank == 0)
        )
    model.config.pad_token_id = tokenizer.pad_token_id

    def ids(pairs: list[Pair]) -> Dataset:
        return Dataset.from_list([
            {"chosen_ids": encode(tokenizer, p.chosen.question, p.chosen.answer,
                                  opts.max_length),
             "rejected_ids": encode(tokenizer, p.rejected.question, p.rejected.answer,
                                    opts.max_length)}
            for p in pairs
        ])

    peft_config = None
    if opts.lora_rank > 0:
        from peft import LoraConfig

        peft_config = LoraConfig(
            task_type="SEQ_CLS", r=opts.lora_rank, lora_alpha=2 * opts.lora_rank,
            lora_dropout=0.0, target_modules=LORA_TARGETS, modules_to_save=["score"],
        )
    history: list[dict] = []

    class _Log(TrainerCallback):
        """Trainer logs as one line per logging step (instead of printed dicts)."""

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
            entry = dict(logs or {})
            history.append({"step": state.global_step, **entry})
            if "loss" in entry:
                log(f"step {state.global_step}/{state.max_steps}  loss {entry['loss']:.4f}  "
                    f"pair acc {entry.get('accuracy', float('nan')):.2f}")

    scratch = Path(tempfile.mkdtemp(prefix="agora-rm-"))
    started = time.monotonic()
    try:
        config = RewardConfig(
            output_dir=str(scratch),
            per_device_train_batch_size=opts.batch_size,
            num_train_epochs=opts.epochs,
            max_steps=opts.max_steps if opts.max_steps else -1,
            learning_rate=opts.lr,
            max_length=None,  # encode() already cut every input to opts.max_length
            gradient_checkpointing=False,
            **placement.trl_args(),
            report_to="none",
            save_strategy="no",
            eval_strategy="no",
            logging_steps=max(1, min(10, opts.max_steps or 10)),
            disable_tqdm=True,
            seed=opts.seed,
            dataloader_num_workers=0,
        )
        trainer = RewardTrainer(
            model=model, args=config, train_dataset=ids(train_pairs),
            processing_class=tokenizer, peft_config=peft_config, callbacks=[_Log()],
        )
        trainer.remove_callback(PrinterCallback)
        result = trainer.train()
        trained = trainer.model
        if peft_config is not None:
            trained = trained.merge_and_unload()
        seconds = time.monotonic() - started
        _save(trained, tokenizer, opts, len(train_pairs), len(eval_pairs))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    verifier = LearnedVerifier.load(opts.out)
    train_sample = train_pairs[:MAX_TRAIN_ACCURACY_PAIRS]  # build_pairs shuffled them already
    losses = [entry["loss"] for entry in history if "loss" in entry]
    return TrainReport(
        train_pairs=len(train_pairs), eval_pairs=len(eval_pairs),
        same_question_pairs=sum(p.same_question for p in train_pairs + eval_pairs),
        unpaired_rows=unpaired, steps=result.global_step, seconds=round(seconds, 1),
        train_accuracy=pair_accuracy(verifier, train_sample),
        eval_accuracy=pair_accuracy(verifier, eval_pairs),
        final_loss=losses[-1] if losses else None, out=str(opts.out), logs=history,
    )


def _save(model, tokenizer, opts: TrainOptions, n_train: int, n_eval: int) -> None:  # noqa: ANN001
    """Write the folder the service loads; the metadata carries what ``encode`` needs."""
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    meta = {
        "kind": "agora-learned-verifier",
        "max_length": opts.max_length,
        "base_model": opts.model,
        "options": {**{k: str(v) if isinstance(v, Path) else v
                       for k, v in asdict(opts).items() if k != "compute"},
                    "compute": opts.compute.model_dump()},
        "train_pairs": n_train,
        "eval_pairs": n_eval,
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
