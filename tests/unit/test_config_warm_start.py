"""``agents[].warm_start``: the shipped warm recipe, the refusals that name the field, what the
trainer's stage does with a resumed run or a given adapter, and PPO's budget after it. (The SFT
itself runs in tests/e2e/test_demo_cli.py, inside a real trainer.)"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from agora.config.run import load_config, parse_config
from agora.results.commands import steps
from agora.results.plan import load_plan
from agora.train.run_warm_start import warm_start_agents, warm_start_dir
from agora.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
WARM = ROOT / "configs" / "tictactoe_warm.yaml"
COLD = ROOT / "configs" / "tictactoe_selfplay.yaml"


@pytest.fixture
def warm() -> dict:
    return yaml.safe_load(WARM.read_text())


def refusal(data: dict) -> str:
    with pytest.raises(ValueError) as info:
        parse_config(data)
    return " ".join(str(info.value).split())


def test_the_demo_recipe_is_the_cold_one_plus_the_measured_warm_start():
    warm, cold = load_config(WARM), load_config(COLD)
    ws = warm.agent("player").warm_start
    assert cold.agent("player").warm_start is None
    assert (ws.every_position, ws.demonstrator, ws.epochs, ws.learning_rate, ws.batch_size,
            ws.max_steps) == (True, "minimax_canonical", 12, 2e-3, 8, 504)
    # PPO held to it, with minimax among the opponents (tictactoe-15-warm-every-fit's run).
    assert (warm.ppo.learning_rate, warm.ppo.kl_coef) == (2e-4, 0.05)
    assert warm.agent("player").kl_reference == "init"
    assert warm.environment.opponents == {"self": 0.2, "random": 0.5, "minimax": 0.3}
    # Everything else is the cold recipe's: the model, the LoRA shape vLLM serves, the budget.
    same = ("models", "environment.prefill", "trainer.max_minutes", "eval", "reward")
    for path in same:
        a, b = warm, cold
        for key in path.split("."):
            a, b = getattr(a, key), getattr(b, key)
        assert a == b, path
    assert warm.agent("player").model_dump(exclude={"warm_start"}) == \
        cold.agent("player").model_dump(exclude={"warm_start"})


@pytest.mark.parametrize(("warm_name", "base_name", "changed"), [
    # the measured PPO of negotiation-warm-nokl: no KL term
    ("negotiation_warm", "negotiation", {"ppo": {"kl_coef": 0.0}}),
    # research-warm-gentle: lr / 5, KL x 5, 10 updates
    ("research_warm", "research", {"ppo": {"learning_rate": 1e-4, "kl_coef": 0.05},
                                   "trainer": {"max_minutes": None, "max_updates": 10}}),
])
def test_the_shipped_warm_recipes_are_their_base_plus_the_measured_warm_start(
        warm_name, base_name, changed):
    """Each warm config is the base recipe + the SFT its results plan entry ran through agora
    warm-start + that entry's PPO settings, nothing else: the figures quoted in its header
    are then this config's."""
    warm = load_config(ROOT / "configs" / f"{warm_name}.yaml").model_dump()
    base = load_config(ROOT / "configs" / f"{base_name}.yaml").model_dump()
    ws = warm["agents"][0].pop("warm_start")
    assert base["agents"][0].pop("warm_start") is None
    plan = {e.name: e for e in load_plan(ROOT / "configs" / "results.yaml").experiments}
    measured = plan[f"{base_name}-warm"].warm_start
    assert {k: ws[k] for k in ("episodes", "epochs", "max_steps", "learning_rate",
                               "batch_size", "demonstrator", "opponents")} == \
        {k: getattr(measured, k) for k in ("episodes", "epochs", "max_steps",
                                           "learning_rate", "batch_size", "demonstrator",
                                           "opponents")}
    for section, fields in changed.items():
        for key, value in fields.items():
            assert warm[section][key] == value, f"{section}.{key}"
            assert base[section][key] != value, f"{section}.{key} is no change"
            warm[section][key] = base[section][key]
    warm["name"] = base["name"]
    assert warm == base


def test_a_warm_start_that_cannot_run_is_refused_naming_the_field(warm):
    def with_(change) -> dict:
        data = copy.deepcopy(warm)
        change(data)
        return data

    agent = "agents.player.warm_start"
    assert f"{agent}: the SFT trains a LoRA adapter" in refusal(
        with_(lambda d: d["agents"][0].update(trainable=False)))
    assert f"{agent}.demonstrator: 'random' is not one of tictactoe's demonstrators" in \
        refusal(with_(lambda d: d["agents"][0]["warm_start"].update(demonstrator="random")))
    assert f"{agent}: with trainer.processes > 1" in refusal(
        with_(lambda d: d["trainer"].update(processes=2)))
    assert "agents.0.warm_start.epochs" in refusal(
        with_(lambda d: d["agents"][0]["warm_start"].update(epochs=0)))
    assert "agents.0.warm_start.nope" in refusal(
        with_(lambda d: d["agents"][0]["warm_start"].update(nope=1)))

    def unseated(d: dict) -> None:
        d["agents"].append({**d["agents"][0], "name": "coach"})
        d["agents"][0]["warm_start"] = None
    assert "agents.coach.warm_start: 'coach' sits in no seat" in refusal(with_(unseated))

    hanabi = yaml.safe_load((ROOT / "configs" / "hanabi_selfplay.yaml").read_text())
    hanabi["agents"][0]["warm_start"] = {"every_position": True}
    learner = hanabi["agents"][0]["name"]
    assert (f"agents.{learner}.warm_start.every_position: 'hanabi' is not a small game "
            "without chance") in refusal(hanabi)
    hanabi["agents"][0]["warm_start"] = {"episodes": 5}  # sampled games: fine
    assert parse_config(hanabi).agents[0].warm_start.episodes == 5


def test_a_resumed_run_takes_its_warm_start_from_the_run_folder_and_trains_nothing(tmp_path):
    cfg = load_config(WARM)
    done = warm_start_dir(tmp_path, "player")
    done.mkdir(parents=True)
    (done / "adapter_config.json").write_text("{}")
    heard: list[str] = []
    assert warm_start_agents(cfg, tmp_path, log=heard.append) == {}  # nothing trained
    assert cfg.agent("player").init_adapter == str(done)  # v0 and the KL reference are it
    assert any("not trained again" in line for line in heard)


def test_a_given_init_adapter_wins_over_the_warm_start(tmp_path):
    cfg = load_config(WARM, ["agents.0.init_adapter=/somewhere/sft"])
    heard: list[str] = []
    assert warm_start_agents(cfg, tmp_path, log=heard.append) == {}
    assert cfg.agent("player").init_adapter == "/somewhere/sft"
    assert not warm_start_dir(tmp_path, "player").exists()
    assert heard == ["player: init_adapter /somewhere/sft given; warm_start skipped"]
    cold = load_config(COLD)  # no warm start: nothing happens
    assert warm_start_agents(cold, tmp_path, log=heard.append) == {}
    assert cold.agent("player").init_adapter is None and len(heard) == 1


def test_the_minutes_budget_is_ppos_and_starts_after_the_warm_start():
    cfg = load_config(WARM)  # trainer.max_minutes: 15
    now = time.monotonic()
    run = SimpleNamespace(cfg=cfg, update_index=0, started=now - 25 * 60,
                          warm_start_s=20 * 60)  # 20 min of SFT, then 5 of PPO
    assert Trainer.budget_progress(run) == pytest.approx(5 / 15, abs=0.01)
    run.warm_start_s = 0.0  # the same 25 minutes without a warm start: spent
    assert Trainer.budget_progress(run) == 1.0


def test_the_plans_warm_start_takes_the_configs_fields_and_passes_threads(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"experiments": [{
        "name": "t", "recipe": "r", "kind": "demo", "config": str(COLD), "minutes": 1,
        "warm_start": {"every_position": True, "threads": 2}}]}))
    (exp,) = load_plan(path).experiments
    assert exp.warm_start.episodes == 100  # the plan's own default (the config's is 200)
    warm, _ = steps(exp, tmp_path / "runs")
    assert warm.args[warm.args.index("--threads") + 1] == "2"
