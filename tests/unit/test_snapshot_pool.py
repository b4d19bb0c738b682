"""The trainer's opponent pool (agora/train/snapshots.py): PFSP draws from its ratings, the
ratings on /metrics, and `agora eval`'s table of them."""

from __future__ import annotations

import random

from prometheus_client import REGISTRY

from agora.evaluation.report import training_pool_md
from agora.evaluation.runner import training_pool
from agora.rollout.records import EpisodeRecord
from agora.train.snapshots import SnapshotPool
from tests.stack_helpers import tiny_config


def pool_config(sampling: str):
    return tiny_config(environment={"opponents": {"self": 0.5, "pool": 0.5},
                                    "pool": {"sampling": sampling, "snapshot_every": 1}})


def pool_game(snapshot: str, learner_result: str) -> EpisodeRecord:
    other = {"win": "loss", "loss": "win", "draw": "draw"}[learner_result]
    return EpisodeRecord(run_id="r", episode_id=f"e-{random.random()}", env="tictactoe", seed=0,
                         seats=["player", snapshot], opponent="pool",
                         results=[learner_result, other],
                         info={"snapshot": {"name": snapshot, "path": "/x", "version": 1}})


def rating(agent: str, player: str) -> float | None:
    return REGISTRY.get_sample_value("agora_pool_rating", {"agent": agent, "player": player})


def test_pfsp_pool_draws_what_the_learner_loses_to_and_exports_the_ratings(tmp_path):
    pool = SnapshotPool(pool_config("pfsp"), tmp_path / "opponent_pool.json")
    for update in (0, 1):
        assert pool.maybe_add(update, update, tmp_path / f"v{update}")
    # The learner beats v0 every time and loses to v1 every time.
    pool.record([pool_game("player@v0", "win") for _ in range(10)]
                 + [pool_game("player@v1", "loss") for _ in range(10)])
    ratings = pool.pool.ratings()
    assert ratings["player@v1"] > ratings["player"] > ratings["player@v0"]
    rng = random.Random(0)
    drawn = [pool.draw(rng)["name"] for _ in range(500)]
    weights = pool.pool.pfsp_weights("player")  # oldest first: v0, v1
    assert drawn.count("player@v1") / 500 > 0.7 and drawn.count("player@v0") > 0
    assert abs(drawn.count("player@v1") / 500 - weights[1] / sum(weights)) < 0.05
    assert rating("player", "player@v1") == ratings["player@v1"]
    assert rating("player", "player") == ratings["player"]

    report = training_pool(tmp_path)
    assert [p["name"] for p in report["players"]] == ["player@v1", "player", "player@v0"]
    assert report["players"][1]["snapshot"] is False and report["players"][0]["games"] == 10
    md = "\n".join(training_pool_md(report))
    assert "| player@v1 |" in md and "| player (learner) |" in md


def test_no_pool_no_table_and_a_bad_file_is_reported(tmp_path):
    assert training_pool(tmp_path) is None and training_pool(None) is None
    (tmp_path / "opponent_pool.json").write_text('{"k": 32}')
    bad = training_pool(tmp_path)
    assert bad["players"] == [] and "unreadable" in bad["error"]
    assert "unreadable" in "\n".join(training_pool_md(bad))
