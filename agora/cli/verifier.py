"""``agora verifier ...``: build, balance and train the learned verifier.

    agora verifier gen-data runs/<id> [runs/<id2> ...] --out data/verifier.jsonl
    agora verifier balance data/verifier.jsonl --out data/verifier.balanced.jsonl
    agora verifier train data/verifier.balanced.jsonl --model smollm2-135m --out verifiers/v1
    AGORA_REWARD_MODEL=verifiers/v1 uvicorn services.reward.app:app   # serves /v1/score

Like the main CLI, every input mistake ends in a one-line message naming the file and line and
exit code 2, never a traceback.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agora.algos.compute import ComputeConfig, resolve
from agora.rewards.verifiers.learned import DEFAULT_MAX_LENGTH
from agora.rewards.verifiers.learned_data import (
    BucketCounts,
    DataError,
    DifficultyMode,
    GenStats,
    balance,
    gen_data,
    read_rows,
    write_rows,
)

verifier_app = typer.Typer(
    add_completion=False, no_args_is_help=True,
    help="The learned verifier: data from runs, balancing, RewardTrainer training.",
)
console = Console()


def _fail(err: Exception) -> typer.Exit:
    console.print(f"[bold red]error[/]: {escape(str(err))}", soft_wrap=True)
    return typer.Exit(2)


@verifier_app.command("gen-data")
def gen_data_cmd(
    run_dirs: list[Path] = typer.Argument(..., help="run folders with an episodes.jsonl"),
    out: Path = typer.Option(..., "--out", "-o", help="JSONL file to write"),
    config: Path = typer.Option(
        None, help="run config to reload tasks from (default: each run's config.yaml)"
    ),
    difficulty: str = typer.Option(
        "auto", help="auto: the task's difficulty if set, else the proxy; task; proxy "
        "(digits in the question, bucketed)"
    ),
) -> None:
    """One row per discussion answer: question, answer, label (1 right / 0 wrong, from the
    rule verifier's info['scores']), difficulty, task_id, round; identical (question, answer)
    pairs are kept once."""
    if difficulty not in ("auto", "task", "proxy"):
        raise _fail(ValueError(f"--difficulty must be auto, task or proxy, not {difficulty!r}"))
    stats = GenStats()
    mode: DifficultyMode = difficulty  # type: ignore[assignment]
    try:
        rows = gen_data(run_dirs, config, mode, stats)
    except DataError as err:
        raise _fail(err) from None
    if not rows:
        raise _fail(DataError(f"no discussion answers in {len(run_dirs)} run(s) "
                              f"({stats.episodes} episodes read)"))
    write_rows(out, rows)
    console.print(
        f"{stats.episodes} episodes, {stats.discussions} discussions -> {len(rows)} answers "
        f"({stats.by_label[1]} right, {stats.by_label[0]} wrong, {stats.duplicates} duplicates "
        f"dropped) -> {out}"
    )


def counts_table(counts: list[BucketCounts]) -> Table:
    table = Table(title="right / wrong per difficulty bucket")
    for column in ("difficulty", "right", "wrong", "kept right", "kept wrong", ""):
        table.add_column(column, justify="left" if column == "difficulty" else "right")
    for c in counts:
        note = "dropped: one label only" if c.dropped else ""
        table.add_row(c.bucket, str(c.right), str(c.wrong), str(c.kept_right),
                      str(c.kept_wrong), note)
    table.add_row("[bold]total", *(str(sum(getattr(c, k) for c in counts))
                                   for k in ("right", "wrong", "kept_right", "kept_wrong")), "")
    return table


@verifier_app.command("balance")
def balance_cmd(
    data: Path = typer.Argument(..., help="JSONL from gen-data"),
    out: Path = typer.Option(..., "--out", "-o", help="JSONL file to write"),
    seed: int = typer.Option(0, help="which majority rows are kept"),
) -> None:
    """Downsample the majority label in every difficulty bucket so right == wrong there (a
    bucket with one label only is dropped): the classifier cannot learn difficulty alone."""
    try:
        rows = read_rows(data)
    except DataError as err:
        raise _fail(err) from None
    kept, counts = balance(rows, seed)
    console.print(counts_table(counts))
    if not kept:
        raise _fail(DataError(f"{data}: no difficulty bucket has both right and wrong answers"))
    write_rows(out, kept)
    console.print(f"{len(rows)} rows -> {len(kept)} -> {out}")


@verifier_app.command("train")
def train_cmd(
    data: Path = typer.Argument(..., help="JSONL of labelled answers (balanced)"),
    model: str = typer.Option("smollm2-135m", help="smollm2-135m, tiny-random or a folder"),
    out: Path = typer.Option(..., "--out", "-o", help="folder for the model + tokenizer"),
    epochs: float = typer.Option(1.0, min=0.01),
    lr: float = typer.Option(1e-4, min=0.0),
    max_length: int = typer.Option(DEFAULT_MAX_LENGTH, min=32, help="tokens per input"),
    batch_size: int = typer.Option(8, min=1, help="pairs per step"),
    eval_fraction: float = typer.Option(0.2, min=0.0, max=0.95,
                                        help="share of questions held out"),
    lora_rank: int = typer.Option(
        0, min=0, help="0 = full fine-tuning (as fast as LoRA on CPU); > 0: LoRA of this rank "
        "on q/k/v/o, merged when saved"),
    max_steps: int = typer.Option(None, min=1, help="stop after this many steps"),
    seed: int = typer.Option(0),
    threads: int = typer.Option(None, min=1, help="torch threads (default: torch's)"),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N, as trainer.device"),
    dtype: str = typer.Option("auto", help="auto | bf16 | fp16 | fp32, as trainer.dtype"),
) -> None:
    """Train a 1-logit sequence classifier with TRL's RewardTrainer on (right, wrong) answer
    pairs (same question where possible, else same difficulty), on --device; print pair
    accuracy on the training pairs and on held-out questions."""
    from agora.rewards.verifiers.learned_train import (
        MAX_TRAIN_ACCURACY_PAIRS,
        TrainOptions,
        train_verifier,
    )

    try:  # checked before any data is read or model loaded
        compute = ComputeConfig(device=device, dtype=dtype)
        resolve(compute, field_prefix="verifier train")
    except ValueError as err:  # pydantic's ValidationError is one
        raise _fail(ValueError(f"--device / --dtype: {err}")) from None
    try:
        rows = read_rows(data)
        opts = TrainOptions(model=model, out=out, epochs=epochs, lr=lr, max_length=max_length,
                            batch_size=batch_size, eval_fraction=eval_fraction, seed=seed,
                            lora_rank=lora_rank, max_steps=max_steps, threads=threads,
                            compute=compute)
        report = train_verifier(rows, opts, log=console.print)
    except (DataError, FileNotFoundError) as err:
        raise _fail(err) from None
    table = Table(title=f"learned verifier -> {report.out}")
    table.add_column("")
    table.add_column("pairs", justify="right")
    table.add_column("pair accuracy", justify="right")
    sampled = min(report.train_pairs, MAX_TRAIN_ACCURACY_PAIRS)
    for name, n, acc in (("train", sampled, report.train_accuracy),
                         ("held out", report.eval_pairs, report.eval_accuracy)):
        table.add_row(name, str(n), "-" if acc is None else f"{acc:.3f}")
    console.print(table)
    loss = "-" if report.final_loss is None else f"{report.final_loss:.4f}"
    console.print(f"{report.steps} steps in {report.seconds:.1f} s, last loss {loss}; "
                  f"{report.same_question_pairs} of {report.train_pairs + report.eval_pairs} "
                  "pairs share their question")
