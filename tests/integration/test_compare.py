"""`agora compare`: how the two arms are derived from one config for each env, their budgets,
and the CLI's refusals. The whole command on tiny-random (two arms trained, each evaluated) is
tests/e2e/test_compare_cli.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agora.cli.main import app
from agora.evaluation.compare import (
    ArmResult,
    CompareInputError,
    arm_configs,
    multi_agent_config,
    single_agent_config,
    with_budget,
)
from tests.stack_helpers import tiny_config, write_config

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"


def _agent(name: str) -> dict:
    return {"name": name, "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
            "sampling": {"temperature": 1.0, "max_tokens": 8, "stop": ["\n\n"]}}


def discussion_config(**ppo):
    return tiny_config(
        agents=[_agent("alice"), _agent("bob")],
        environment={"name": "discussion", "seats": ["alice", "bob"], "rounds": 3,
                     "prefill": "", "opponents": {"self": 1.0},
                     "task": {"source": "jsonl", "path": str(SAMPLES / "gsm8k_sample.jsonl"),
                              "format": "gsm8k"}},
        reward={"verifier": "math", "cooperation": 0.5},
        ppo=ppo, trainer={"max_updates": None, "max_minutes": 5},
    )


def test_single_arm_is_the_first_learner_alone_answering_once():
    cfg = discussion_config()
    single = single_agent_config(cfg)
    assert [a.name for a in single.agents] == ["alice"]
    assert single.environment.seats == ["alice"] and single.environment.rounds == 1
    # Everything that decides what alice learns from stays the same.
    assert single.agents[0] == cfg.agents[0]
    assert single.ppo == cfg.ppo and single.environment.task == cfg.environment.task
    multi = multi_agent_config(cfg)
    assert multi.environment.seats == ["alice", "bob"] and multi.environment.rounds == 3
    assert single.name != multi.name  # separate run folders


def test_budget_is_wall_clock_or_updates_never_both():
    cfg = discussion_config()
    by_time = with_budget(cfg, 2.5, None)
    assert by_time.trainer.max_minutes == 2.5 and by_time.trainer.max_updates is None
    by_updates = with_budget(cfg, None, 7)
    assert by_updates.trainer.max_updates == 7 and by_updates.trainer.max_minutes is None
    assert with_budget(cfg, None, None).ppo == cfg.ppo
    with pytest.raises(ValueError, match="not both"):
        with_budget(cfg, 1.0, 3)


def test_arm_reads_its_updates_and_curve_from_the_run_log(tmp_path):
    rows = [{"update": i, "elapsed_s": 30.0 * i,
             "agents": {"alice": {"accuracy_last": 0.1 * i}, "bob": {}}} for i in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    arm = ArmResult("multi-agent", tmp_path, before={}, after={})
    assert arm.updates() == 3
    assert arm.curve("alice") == [(0.5, 0.1), (1.0, 0.2), (1.5, pytest.approx(0.3))]
    assert arm.curve("bob") == []
    assert ArmResult("x", tmp_path / "none", {}, {}).updates() == 0


@pytest.mark.parametrize(("args", "message"), [
    (["--minutes", "1", "--updates", "2"], "give one budget, not both"),
    (["--updates", "0"], "--updates"),
])
def test_cli_refuses_bad_budgets_before_starting_anything(tmp_path, args, message):
    path = write_config(discussion_config(), tmp_path / "run.yaml")
    result = CliRunner().invoke(app, ["compare", str(path), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "runs").exists()


def negotiation_config(**extra):
    return tiny_config(
        agents=[_agent("alice")],
        context_agents={"partner": {"cycle": ["fair", "greedy"], "every": 2}},
        environment={"name": "negotiation", "seats": ["alice", "context:partner"],
                     "prefill": "", "opponents": {"self": 1.0}}, **extra)


def test_negotiation_arms_are_scripted_partners_vs_a_learning_peer():
    cfg = negotiation_config()
    (label_s, single), (label_m, multi) = arm_configs(cfg)
    assert (label_s, label_m) == ("single-agent", "multi-agent")
    # Alone: the config as written, the learner against the scripted partner.
    assert single.environment.seats == ["alice", "context:partner"]
    assert [a.name for a in single.trainable_agents] == ["alice"]
    # Together: the scripted seat is a learning copy of alice, same settings, own adapter.
    assert multi.environment.seats == ["alice", "alice-peer"]
    assert [a.name for a in multi.trainable_agents] == ["alice", "alice-peer"]
    peer = multi.agent("alice-peer")
    assert peer.model_dump(exclude={"name"}) == cfg.agent("alice").model_dump(exclude={"name"})
    assert multi.learner == "alice" and single.ppo == multi.ppo == cfg.ppo


def test_research_arms_are_the_scripted_writer_vs_a_learning_writer():
    """The issue's "retrieval writer alone" reading: the researcher with the scripted copy
    writer, vs beside a learning copy of itself in the writer's seat."""
    cfg = tiny_config(
        agents=[_agent("scout")], context_agents={"writer": {"strategy": "copy_writer"}},
        environment={"name": "research", "seats": ["scout", "context:writer"], "prefill": "",
                     "opponents": {"self": 1.0}},
        reward={"verifier": "judge"}, trainer={"max_updates": None, "max_minutes": 5})
    (_, single), (_, multi) = arm_configs(cfg)
    assert single.environment.seats == ["scout", "context:writer"]
    assert multi.environment.seats == ["scout", "scout-peer"]
    assert [a.name for a in multi.trainable_agents] == ["scout", "scout-peer"]


def test_code_debug_single_arm_is_the_fixer_alone_on_the_bug_list():
    cfg = tiny_config(
        agents=[_agent("fixer")],
        context_agents={"author": {"strategy": "buggy_author"}},
        environment={"name": "code_debug", "seats": ["context:author", "fixer"],
                     "prefill": "", "opponents": {"self": 1.0},
                     "code_debug": {"mode": "pair"}},
        reward={"verifier": "code_tests"})
    single, multi = (c for _, c in arm_configs(cfg))
    assert single.environment.seats == ["fixer"]
    assert single.environment.code_debug.mode == "fixer" and not single.context_agents
    assert multi.environment.seats == ["context:author", "fixer"]
    assert multi.environment.code_debug.mode == "pair"


@pytest.mark.parametrize(("cfg", "message"), [
    (tiny_config(), "tictactoe is a game against bots"),
    (tiny_config(agents=[_agent("alice"), _agent("bob")],
                 environment={"name": "negotiation", "seats": ["alice", "bob"], "prefill": "",
                              "opponents": {"self": 1.0}}),
     "no seat holds one"),
], ids=["game", "no-scripted-partner"])
def test_envs_without_a_single_agent_reading_are_refused(cfg, message):
    with pytest.raises(CompareInputError, match=message):
        arm_configs(cfg)


def test_cli_refuses_a_config_without_a_single_agent_reading(tmp_path):
    path = write_config(tiny_config(), tmp_path / "ttt.yaml")
    result = CliRunner().invoke(app, ["compare", str(path), "--updates", "1"])
    assert result.exit_code == 2
    assert "environment.name: tictactoe is a game against bots" in result.output
    assert not (tmp_path / "runs").exists()
