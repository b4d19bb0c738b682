"""Experiment tracking: metrics rows logged at step = update to TensorBoard (offline, under the
run folder), the TRL stages told the same trackers, a tracker that is not installed refused
before anything starts."""

from __future__ import annotations

import importlib.util

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from agora.reflection.config import TrainStageConfig
from agora.reflection.training import trainer_args
from agora.stack.preflight import model_problems
from agora.train.tracking import Trackers, TrackingConfig, flat_metrics, trl_report_to
from tests.stack_helpers import FP32, tiny_config


def _row(update: int) -> dict:
    return {"update": update, "elapsed_s": 1.5 * update, "episodes": 4,
            "agents": {"player": {"reward_mean": 0.1 * update, "kl": 0.01, "win_rate": 0.5}}}


def test_rows_land_in_tensorboard_at_step_update(tmp_path):
    trackers = Trackers(TrackingConfig(report_to=["tensorboard"]), "run-1", tmp_path)
    for update in (1, 2, 3):
        trackers.log(_row(update))
    trackers.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    rewards = events.Scalars("player/reward_mean")
    assert [e.step for e in rewards] == [1, 2, 3]
    assert [round(e.value, 4) for e in rewards] == [0.1, 0.2, 0.3]
    assert "episodes" in events.Tags()["scalars"]


def test_flat_metrics_prefix_each_agent():
    assert flat_metrics(_row(2)) == {"elapsed_s": 3.0, "episodes": 4.0,
                                     "player/reward_mean": 0.2, "player/kl": 0.01,
                                     "player/win_rate": 0.5}


def test_trl_stages_report_to_the_same_trackers():
    stage = TrainStageConfig()
    from agora.algos.compute import resolve

    placement = resolve(FP32)
    tracking = TrackingConfig(report_to=["tensorboard"])
    assert trainer_args(stage, "out", 0, placement, trl_report_to(tracking))["report_to"] == [
        "tensorboard"]
    assert trainer_args(stage, "out", 0, placement)["report_to"] == "none"


def test_a_tracker_that_is_not_installed_is_refused_naming_the_field(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",  # as on a machine without mlflow
                        lambda name, *a: None if name == "mlflow" else real(name, *a))
    cfg = tiny_config(tracking={"report_to": ["tensorboard", "mlflow"]})
    problems = [p for p in model_problems(cfg) if "tracking" in p]
    assert problems == ["tracking.report_to: 'mlflow' needs the mlflow package "
                        "(pip install mlflow)"]
