"""The trainer's opponent pool (agora/train/snapshots.py): PFSP draws from its ratings, the
ratings on /metrics, and `agora eval`'s table of them; with several learners, a league."""

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


def pool_game(snapshot: str, learner_result: str, learner: str = "player") -> EpisodeRecord:
    other = {"win": "loss", "loss": "win", "draw": "draw"}[learner_result]
    snap = {"name": snapshot, "agent": snapshot.split("@")[0], "path": "/x", "version": 1}
    return EpisodeRecord(run_id="r", episode_id=f"e-{random.random()}", env="tictactoe", seed=0,
                         seats=[learner, snapshot], opponent="pool",
                         results=[learner_result, other], info={"snapshots": {"1": snap}})


def rating(agent: str, player: str) -> float | None:
    return REGISTRY.get_sample_value("agora_pool_rating", {"agent": agent, "player": player})


def test_pfsp_pool_draws_what_the_learner_loses_to_and_exports_the_ratings(tmp_path):
    pool = SnapshotPool(pool_config("pfsp"), tmp_path / "opponent_pool.json")
    for update in (0, 1):
        assert pool.maybe_add(update, "player", update, tmp_path / f"v{update}")
    # The learner beats v0 every time and loses to v1 every time.
    pool.record([pool_game("player@v0", "win") for _ in range(10)]
                 + [pool_game("player@v1", "loss") for _ in range(10)])
    ratings = pool.pool.ratings()
    assert ratings["player@v1"] > ratings["player"] > ratings["player@v0"]
    rng = random.Random(0)
    drawn = [pool.draw(rng, 0)["1"]["name"] for _ in range(500)]
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


def test_a_league_seats_each_learners_snapshots_and_rates_them_on_one_scale(tmp_path):
    cfg = tiny_config(
        agents=[{"name": name, "base": "tiny", "lora_rank": 8, "lora_alpha": 16}
                for name in ("alice", "bob")],
        environment={"name": "tictactoe", "seats": ["alice", "bob"],
                     "opponents": {"self": 0.5, "pool": 0.5},
                     "pool": {"snapshot_every": 2, "max_snapshots": 2}})
    pool = SnapshotPool(cfg, tmp_path / "opponent_pool.json")
    assert pool.agents == ["alice", "bob"]
    for update in range(7):  # each learner keeps its own newest 2 (v4, v6)
        for agent in pool.agents:
            pool.maybe_add(update, agent, update, tmp_path / agent / f"v{update}")
    assert [s.name for s in pool.pool.snapshots("alice")] == ["alice@v4", "alice@v6"]
    assert [s.name for s in pool.pool.snapshots("bob")] == ["bob@v4", "bob@v6"]

    rng = random.Random(1)
    # alice live in seat 0 meets bob's past versions, bob live in seat 1 alice's.
    for _ in range(20):
        snap = pool.draw(rng, 0)["1"]
        assert snap["agent"] == "bob" and snap["name"].startswith("bob@v")
        assert snap["path"] == str(tmp_path / "bob" / f"v{snap['version']}")
        assert set(pool.draw(rng, 1)) == {"0"} and pool.draw(rng, 1)["0"]["agent"] == "alice"

    assert pool.record([pool_game("bob@v6", "win", "alice") for _ in range(5)]
                       + [pool_game("alice@v6", "loss", "bob") for _ in range(5)]) == 10
    ratings = pool.pool.ratings()
    assert ratings["alice"] > 1000 > ratings["bob@v6"]
    assert ratings["alice@v6"] > 1000 > ratings["bob"]
    assert rating("bob", "bob@v6") == ratings["bob@v6"]  # labelled by whose snapshot it is
    assert rating("alice", "alice") == pool.learner_rating("alice") == ratings["alice"]
    saved = training_pool(tmp_path)
    assert {p["name"] for p in saved["players"]} == {"alice", "bob", "alice@v4", "alice@v6",
                                                     "bob@v4", "bob@v6"}


def test_self_play_with_context_seats_gives_every_other_seat_the_learners_snapshot(tmp_path):
    cfg = tiny_config(
        agents=[{"name": "learner", "base": "tiny", "lora_rank": 8, "lora_alpha": 16}],
        context_agents={"partner": {"strategy": "fair"}},
        environment={"name": "negotiation", "seats": ["learner", "learner", "context:partner"],
                     "opponents": {"pool": 1.0}})
    pool = SnapshotPool(cfg, tmp_path / "opponent_pool.json")
    pool.maybe_add(0, "learner", 0, tmp_path / "v0")
    seats = pool.draw(random.Random(0), 1)
    assert sorted(seats) == ["0", "2"] and seats["0"] is seats["2"]
    assert seats["0"]["name"] == "learner@v0"
