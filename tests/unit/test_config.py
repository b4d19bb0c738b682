"""Run-config loading: the shipped example loads; every kind of mistake fails loudly, naming the
dotted path of the field at fault."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from agora.config.base import ConfigError
from agora.config.run import RunConfig, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "configs" / "tictactoe_selfplay.yaml"


@pytest.fixture
def example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def config_error(tmp_path: Path, data: object) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, data))
    return str(info.value)


def test_example_config_loads():
    cfg = load_config(EXAMPLE)
    assert isinstance(cfg, RunConfig)
    assert cfg.name == "tictactoe-selfplay"
    assert cfg.environment.seats == ["player", "player"]
    assert set(cfg.environment.opponents) == {"self", "random"}  # self-play plus a bot
    assert [a.name for a in cfg.trainable_agents] == ["player"]
    assert cfg.agent("player").base == "smol"
    assert cfg.agent("player").sampling.stop == ["]"]
    assert cfg.ppo.learning_rate == pytest.approx(1e-3)
    assert cfg.trainer.max_minutes == 15
    assert cfg.policy_url("player") == "http://127.0.0.1:8100"
    assert cfg.all_ports() == {
        "redis": 6390, "reward": 8201, "gateway": 8200, "trainer": 8202, "judge": 8203,
        "policy-smol": 8100,
    }


def test_budget_and_cpu_knobs_live_under_trainer_and_old_run_files_still_load(tmp_path, example):
    # The shipped file names them under trainer:, and ppo: holds only the algorithm.
    assert "max_minutes" not in example["ppo"] and example["trainer"]["max_minutes"] == 15
    old = copy.deepcopy(example)
    old["ppo"].update(old.pop("trainer"), max_updates=9, nice=3)
    cfg = load_config(write(tmp_path, old))  # a run folder written before the move
    assert (cfg.trainer.max_minutes, cfg.trainer.max_updates, cfg.trainer.nice) == (15, 9, 3)
    assert cfg.model_dump()["ppo"].keys().isdisjoint({"max_minutes", "nice", "torch_threads"})
    both = copy.deepcopy(example)
    both["ppo"]["max_minutes"] = 5
    assert "ppo.max_minutes: set it under trainer: only" in config_error(tmp_path, both)

def test_minimal_config_fills_in_defaults():
    cfg = parse_config({
        "models": {"m": {"model": "tiny-random"}},
        "agents": [{"name": "a", "base": "m"}],
        "environment": {"seats": ["a", "a"]},
    })
    assert cfg.environment.opponents == {"self": 1.0}
    assert cfg.reward.win == 1.0 and cfg.reward.loss == -1.0
    assert cfg.ppo.clip_range == 0.2
    assert cfg.agent("a").lora_rank == 16


def test_config_survives_a_json_round_trip():
    """Workers rebuild the config from ``model_dump_json`` in each task payload."""
    cfg = load_config(EXAMPLE)
    assert parse_config(yaml.safe_load(cfg.model_dump_json())) == cfg


def test_wrong_type_names_the_field(tmp_path, example):
    example["ppo"]["learning_rate"] = "fast"
    message = config_error(tmp_path, example)
    assert "ppo.learning_rate" in message
    assert "valid number" in message


def test_out_of_range_value_names_the_field(tmp_path, example):
    example["ppo"]["clip_range"] = 1.5
    assert "ppo.clip_range: Input should be less than 1" in config_error(tmp_path, example)


def test_misspelt_key_is_rejected_not_ignored(tmp_path, example):
    example["ppo"]["learning_rte"] = 1e-3
    message = config_error(tmp_path, example)
    assert "ppo.learning_rte" in message
    assert "Extra inputs are not permitted" in message


def test_every_bad_field_is_reported_at_once(tmp_path, example):
    example["ppo"]["epochs"] = 0
    example["workers"]["count"] = "many"
    message = config_error(tmp_path, example)
    assert "ppo.epochs" in message
    assert "workers.count" in message


def test_nan_reward_is_rejected(tmp_path, example):
    """YAML's .nan would pass every range check and poison the rewards."""
    path = write(tmp_path, example)
    path.write_text(path.read_text().replace("win: 1.0", "win: .nan"))
    with pytest.raises(ConfigError, match=r"reward\.win"):
        load_config(path)


def test_seat_naming_an_unknown_agent(tmp_path, example):
    example["environment"]["seats"] = ["player", "stranger"]
    message = config_error(tmp_path, example)
    assert "environment.seats" in message
    assert "'stranger'" in message


def test_seat_count_must_match_the_game(tmp_path, example):
    example["environment"]["seats"] = ["player"]
    message = config_error(tmp_path, example)
    assert "environment.seats" in message
    assert "tictactoe has 2 seats, got 1" in message


def test_agent_base_not_in_models(tmp_path, example):
    example["agents"][0]["base"] = "llama"
    message = config_error(tmp_path, example)
    assert "agents.player.base" in message
    assert "'llama'" in message


def test_duplicate_agent_names(tmp_path, example):
    example["agents"].append(copy.deepcopy(example["agents"][0]))
    assert "duplicate agent names" in config_error(tmp_path, example)


def test_lora_rank_above_the_servers_max_lora_rank(tmp_path, example):
    example["agents"][0]["lora_rank"] = 32
    message = config_error(tmp_path, example)
    assert "agents.player.lora_rank" in message
    assert "models.smol.max_lora_rank=8" in message


def test_a_trainable_agent_samples_the_whole_distribution(tmp_path, example):
    example["agents"][0].setdefault("sampling", {})["top_p"] = 0.9
    assert "agents.player.sampling.top_p: a trainable agent samples with top_p 1.0" in \
        config_error(tmp_path, example)
    example["agents"][0]["trainable"] = False  # a frozen agent may sample as it likes
    example["environment"]["seats"] = ["player", "player"]
    assert RunConfig.model_validate(example).agents[0].sampling.top_p == 0.9


def test_service_port_clashing_with_a_policy_server(tmp_path, example):
    # Ports have defaults in code (policy servers 8100): the shipped file sets none.
    example["services"] = {"reward_port": 8100}
    message = config_error(tmp_path, example)
    assert "models.smol.port" in message
    assert "services.reward_port" in message
    assert "8100" in message


def test_two_services_on_one_port(tmp_path, example):
    example["services"] = {"gateway_port": 6390}  # the default redis_port
    message = config_error(tmp_path, example)
    assert "services.gateway_port: port 6390 is already used by services.redis_port" in message


def test_unknown_opponent_name(tmp_path, example):
    example["environment"]["opponents"] = {"self": 0.5, "minmax": 0.5}
    message = config_error(tmp_path, example)
    assert "environment.opponents" in message
    assert "minmax" in message


def test_opponent_weights_must_not_all_be_zero(tmp_path, example):
    example["environment"]["opponents"] = {"self": 0.0, "random": 0.0}
    assert "environment.opponents" in config_error(tmp_path, example)


def test_unknown_eval_opponent(tmp_path, example):
    example["eval"]["opponents"] = ["random", "stockfish"]
    message = config_error(tmp_path, example)
    assert "eval.opponents: ['stockfish'] cannot play tictactoe" in message


def test_missing_required_section(tmp_path, example):
    del example["environment"]
    assert "environment: Field required" in config_error(tmp_path, example)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


def test_directory_instead_of_a_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path)


def test_invalid_yaml(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("models: {smol: [unclosed\nagents: -\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(path)


@pytest.mark.parametrize(("text", "kind"), [("- a\n- b\n", "list"), ("", "NoneType"), ("7", "int")])
def test_top_level_must_be_a_mapping(tmp_path, text, kind):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"expected a mapping at the top level, got {kind}"):
        load_config(path)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def _discussion(example: dict) -> dict:
    data = copy.deepcopy(example)
    data["agents"].append({**data["agents"][0], "name": "critic"})
    data["environment"] = {"name": "discussion", "seats": ["player", "critic"], "rounds": 3,
                           "prefill": "",
                           "task": {"source": "reasoning_gym", "name": "basic_arithmetic"}}
    data["reward"] = {"verifier": "math", "cooperation": 0.5}
    return data


def test_discussion_config_loads_with_a_task_source(example):
    cfg = parse_config(_discussion(example))
    assert cfg.environment.rounds == 3
    assert cfg.environment.task.source == "reasoning_gym"
    assert cfg.reward.cooperation == 0.5


def test_discussion_errors_name_the_field(tmp_path, example):
    data = _discussion(example)
    del data["environment"]["task"]
    assert "environment: task: a discussion needs a task source" in config_error(tmp_path, data)
    data = _discussion(example)
    data["environment"]["task"] = {"source": "jsonl", "format": "gsm8k"}
    assert "environment.task.jsonl.path" in config_error(tmp_path, data)
    data = _discussion(example)
    data["reward"]["verifier"] = "game_outcome"
    assert "reward.verifier" in config_error(tmp_path, data)
    data = _discussion(example)
    data["environment"]["opponents"] = {"random": 1.0}
    assert "opponents" in config_error(tmp_path, data)


def test_llm_judge_needs_a_model_it_can_reach(tmp_path, example):
    data = copy.deepcopy(example)
    data["judge"] = {"backend": "llm"}
    assert "judge" in config_error(tmp_path, data)
    data["judge"] = {"backend": "llm", "model": "nope"}
    assert "judge.model" in config_error(tmp_path, data)
    data["judge"] = {"backend": "llm", "model": "smol"}
    assert parse_config(data).judge_model_url() == "http://127.0.0.1:8100/v1"
    # Ways of reading a judge model's answers, without one: named, not ignored.
    for reading in ("constrained", "logprobs"):
        data["judge"] = {"backend": "rubric", reading: True}
        assert f"judge.{reading}" in config_error(tmp_path, data)
        data["judge"] = {"backend": "llm", "model": "smol", reading: True}
        assert getattr(parse_config(data).judge, reading) is True


def test_learned_reward_mode_needs_a_trained_verifier(tmp_path, example):
    data = _discussion(example)
    data["reward"] = {"verifier": "math", "mode": "blend"}
    assert "learned_model" in config_error(tmp_path, data)
    data["reward"] = {"verifier": "math", "mode": "blend", "blend_weight": 0.7,
                      "learned_model": "runs/verifier"}
    assert parse_config(data).reward.blend_weight == 0.7
