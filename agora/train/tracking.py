"""Experiment tracking: each update's metrics row, logged at ``step = update`` to the trackers a
run names (``tracking.report_to``), beside runs/<id>/metrics.jsonl and Prometheus.

Why these and not our own: they are what TRL's ``report_to`` speaks, so a run's PPO curves and
its SFT/DPO stages land in the same tool. TensorBoard and trackio work offline (files under the
run folder); W&B runs offline unless ``WANDB_MODE`` says otherwise; MLflow logs to
``MLFLOW_TRACKING_URI`` (default: ./mlruns). Each is an optional package: a run that names one
that is not installed is refused before anything starts (``missing_packages``).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger("agora.train.tracking")

Backend = Literal["tensorboard", "trackio", "wandb", "mlflow"]
# The package each backend imports, and how to install it.
TB_DIR_ENV = "TENSORBOARD_LOGGING_DIR"  # read by transformers' TensorBoardCallback
PACKAGES = {"tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb",
            "mlflow": "mlflow"}


class TrackingConfig(BaseModel):
    """The ``tracking:`` section of a run config."""

    model_config = ConfigDict(extra="forbid")

    # Where each update's metrics also go; the TRL stages (support-sft) get the same list.
    report_to: list[Backend] = Field(default_factory=list)
    project: str = Field("agora", min_length=1, max_length=100,
                         description="project (trackio, W&B) or experiment (MLflow) name")


def missing_packages(cfg: TrackingConfig) -> list[str]:
    """One message per named tracker whose package is not installed."""
    return [f"tracking.report_to: '{name}' needs the {PACKAGES[name]} package "
            f"(pip install {PACKAGES[name]})"
            for name in cfg.report_to if importlib.util.find_spec(PACKAGES[name]) is None]


def flat_metrics(row: dict[str, Any]) -> dict[str, float]:
    """A metrics.jsonl row as ``{"<agent>/<stat>": value}`` plus the run-level numbers."""
    out = {k: float(v) for k, v in row.items()
           if k not in ("update", "agents") and isinstance(v, (int, float))}
    for agent, stats in (row.get("agents") or {}).items():
        for key, value in stats.items():
            if isinstance(value, (int, float)):
                out[f"{agent}/{key}"] = float(value)
    return out


class Trackers:
    """The run's open trackers; ``log`` sends one row to each."""

    def __init__(self, cfg: TrackingConfig, run_id: str, run_dir: Path,
                 params: dict[str, Any] | None = None) -> None:
        self.backends: list[tuple[str, Any]] = []
        for name in cfg.report_to:
            self.backends.append((name, _open(name, cfg.project, run_id, run_dir, params or {})))

    def log(self, row: dict[str, Any]) -> None:
        metrics, step = flat_metrics(row), int(row["update"])
        for name, handle in self.backends:
            try:
                _log(name, handle, metrics, step)
            except Exception as err:  # a tracker's hiccup must not stop training
                log.warning("tracking: %s failed to log update %d: %s", name, step, err)

    def close(self) -> None:
        for name, handle in self.backends:
            try:
                _close(name, handle)
            except Exception as err:
                log.warning("tracking: closing %s failed: %s", name, err)
        self.backends = []


def _open(name: str, project: str, run_id: str, run_dir: Path, params: dict[str, Any]) -> Any:
    if name == "tensorboard":
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(log_dir=str(run_dir / "tensorboard"))
    if name == "trackio":
        import trackio

        os.environ.setdefault("TRACKIO_DIR", str(run_dir / "trackio"))
        return trackio.init(project=project, name=run_id, config=params)
    if name == "wandb":
        import wandb

        os.environ.setdefault("WANDB_MODE", "offline")
        return wandb.init(project=project, name=run_id, dir=str(run_dir), config=params)
    import mlflow

    mlflow.set_experiment(project)
    return mlflow.start_run(run_name=run_id)


def _log(name: str, handle: Any, metrics: dict[str, float], step: int) -> None:
    if name == "tensorboard":
        for key, value in metrics.items():
            handle.add_scalar(key, value, step)
        handle.flush()
    elif name == "trackio":
        import trackio

        trackio.log(metrics, step=step)
    elif name == "wandb":
        handle.log(metrics, step=step)
    else:
        import mlflow

        mlflow.log_metrics({k.replace(":", "_"): v for k, v in metrics.items()}, step=step)


def _close(name: str, handle: Any) -> None:
    if name == "tensorboard":
        handle.close()
    elif name == "trackio":
        import trackio

        trackio.finish()
    elif name == "wandb":
        handle.finish()
    else:
        import mlflow

        mlflow.end_run()


def trl_report_to(cfg: TrackingConfig) -> list[str] | str:
    """``TrainingArguments.report_to`` for the TRL stages: the same trackers, or none."""
    return list(cfg.report_to) or "none"


@contextmanager
def trl_tracking(cfg: TrackingConfig, log_dir: Path) -> Iterator[list[str] | str]:
    """A TRL stage's ``report_to``, with TensorBoard's event files kept in ``log_dir``:
    transformers' TensorBoard callback writes under the trainer's ``output_dir`` (our stages
    use a scratch folder, deleted afterwards) unless ``TENSORBOARD_LOGGING_DIR`` names another."""
    before = os.environ.get(TB_DIR_ENV)
    if "tensorboard" in cfg.report_to:
        os.environ[TB_DIR_ENV] = str(log_dir)
    try:
        yield trl_report_to(cfg)
    finally:
        if before is None:
            os.environ.pop(TB_DIR_ENV, None)
        else:
            os.environ[TB_DIR_ENV] = before
