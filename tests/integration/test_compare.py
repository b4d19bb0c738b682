"""`agora compare`: how the two arms are derived from one config, their budgets, and the CLI's
refusals. (Each arm is an ordinary `agora up` run plus a held-out discussion evaluation; both
are tested end to end in test_multiagent_stack.py and test_eval_cli.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agora.cli.main import app
from agora.evaluation.compare import ArmResult, multi_agent_config, single_agent_config, with_budget
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
    arm = ArmResult("multi-agent", tmp_path, before=None, after=None)
    assert arm.updates() == 3
    assert arm.curve("alice") == [(0.5, 0.1), (1.0, 0.2), (1.5, pytest.approx(0.3))]
    assert arm.curve("bob") == []
    assert ArmResult("x", tmp_path / "none", None, None).updates() == 0


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


def test_cli_refuses_a_config_that_is_not_a_discussion(tmp_path):
    path = write_config(tiny_config(), tmp_path / "ttt.yaml")
    result = CliRunner().invoke(app, ["compare", str(path), "--updates", "1"])
    assert result.exit_code == 2
    assert "environment.name: compare needs a discussion" in result.output
