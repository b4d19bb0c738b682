"""Config conveniences every command shares: ``--set`` overrides, the JSON schema, and the
generated reference (docs/configuration.md) kept current."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agora.config.base import ConfigError
from agora.config.reference import render
from agora.config.run import apply_overrides, load_config

ROOT = Path(__file__).resolve().parents[2]
TICTACTOE = ROOT / "configs" / "tictactoe_selfplay.yaml"


def _agora(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agora.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_set_overrides_fields_lists_and_new_sections():
    cfg = load_config(TICTACTOE, ["ppo.learning_rate=2e-4", "agents.0.lora_rank=8",
                                  "trainer.dtype=fp32", "environment.opponents={random: 1.0}",
                                  "trainer.max_updates=7"])
    assert cfg.ppo.learning_rate == 2e-4 and cfg.trainer.max_updates == 7
    assert cfg.agents[0].lora_rank == 8 and cfg.trainer.dtype == "fp32"
    assert cfg.environment.opponents == {"random": 1.0}
    data = {"a": [{"b": 1}]}
    assert apply_overrides(data, ["a.0.b=2", "c.d=[1, 2]"]) == {"a": [{"b": 2}],
                                                                 "c": {"d": [1, 2]}}
    assert data == {"a": [{"b": 1}]}  # a copy: the file's data is left alone


@pytest.mark.parametrize(("override", "message"), [
    ("ppo.learning_rte=1", r"ppo.learning_rte: Extra inputs are not permitted"),
    ("ppo.epochs=many", r"ppo.epochs: Input should be a valid integer"),
    ("agents.5.lora_rank=8", r"--set agents.5.lora_rank: agents.5 is not an index"),
    ("ppo.learning_rate", r"expected KEY.PATH=VALUE"),
    ("ppo..x=1", r"expected KEY.PATH=VALUE"),
    ("seed.x=1", None),  # a scalar on the way becomes a mapping: the model then refuses it
])
def test_bad_overrides_name_the_field(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(TICTACTOE, [override])
    assert message is None or re.search(message, str(err.value)), str(err.value)


def test_cli_commands_take_set_and_refuse_a_bad_one_before_starting_anything():
    done = _agora("up", str(TICTACTOE), "--set", "ppo.clip_range=-1")
    assert done.returncode == 2
    assert "ppo.clip_range" in done.stdout and "Traceback" not in done.stdout + done.stderr
    reflection = ROOT / "configs" / "reflection_math.yaml"  # the reflection commands too
    done = _agora("reflect", "oracle", str(reflection), "--set", "actor.lora_rnk=8")
    assert done.returncode == 2
    assert "actor.lora_rnk: Extra inputs" in done.stdout, done.stdout + done.stderr


def test_reflection_configs_take_set_overrides():
    from agora.reflection.config import load_reflection_config

    reflection = ROOT / "configs" / "reflection_math.yaml"
    cfg = load_reflection_config(reflection, ["train_tasks=5", "dpo.beta=0.2"])
    assert cfg.train_tasks == 5 and cfg.dpo.beta == 0.2


def test_schema_is_the_run_configs_json_schema():
    done = _agora("config", "schema")
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)
    assert {"agents", "models", "environment", "trainer", "ppo"} <= set(schema["properties"])
    assert "processes" in schema["$defs"]["TrainerConfig"]["properties"]
    # The environment is a union over the envs, told apart by name, each with its options.
    union = schema["properties"]["environment"]
    assert union["discriminator"] == {"propertyName": "name"}
    by_name = {v["properties"]["name"]["const"]: v for v in union["oneOf"]}
    assert {"tictactoe", "hanabi", "discussion", "negotiation", "support"} <= set(by_name)
    assert "negotiation" in by_name["negotiation"]["properties"]
    assert "negotiation" not in by_name["tictactoe"]["properties"]


def test_the_reference_page_is_generated_and_current():
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == render(), "run: agora config reference > docs/configuration.md"
    # Every section and field of a shipped config is documented.
    for name in ("trainer", "ppo", "agents[]", "environment", "services"):
        assert f"## `{name}`" in page
    shipped = yaml.safe_load(TICTACTOE.read_text())
    for section, values in shipped.items():
        if isinstance(values, dict):
            for key in values:
                assert f"| `{key}` |" in page or section in ("models",), (section, key)
