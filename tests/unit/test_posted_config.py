"""A run config posted to the gateway's /v1/runs may not choose code, hosts, URLs or server
files (issue 18); every shipped config stays postable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agora.gateway.errors import GatewayError
from agora.gateway.posted_config import refuse_server_choices

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [p for p in sorted((ROOT / "configs").glob("*.yaml"))
           if "agents" in (yaml.safe_load(p.read_text()) or {})]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_config_can_be_posted(path):
    refuse_server_choices(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize(("change", "field"), [
    ({"environment": {"support": {"tool_modules": ["os"]}}}, "environment.support.tool_modules"),
    ({"services": {"host": "0.0.0.0"}}, "services.host"),
    ({"services": {"hosts": {"reward": "evil.example"}}}, "services.hosts"),
    ({"judge": {"backend": "llm", "base_url": "http://evil.example/v1"}}, "judge.base_url"),
    ({"models": {"m": {"model": "tiny-random", "extra_args": ["--chat-template", "x"]}}},
     "models.m.extra_args"),
    ({"agents": [{"name": "a", "base": "m", "init_adapter": "runs/other/adapters/a/v3"}]},
     "agents.0.init_adapter"),
    ({"reward": {"learned_model": "runs/verifier"}}, "reward.learned_model"),
    ({"environment": {"task": {"source": "jsonl", "path": "/etc/passwd"}}},
     "environment.task.path"),
    ({"environment": {"task": {"source": "jsonl", "path": "data/../../etc/passwd"}}},
     "environment.task.path"),
    ({"models": {"m": {"model": "/srv/private-model"}}}, "models.m.model"),
    ({"models": {"m": {"model": "../secrets"}}}, "models.m.model"),
    ({"tracking": {"project": "https://evil.example/x"}}, "tracking.project"),
])
def test_server_choices_are_refused_naming_the_field(change, field):
    with pytest.raises(GatewayError) as refused:
        refuse_server_choices({"name": "x", **change})
    assert refused.value.status == 422 and refused.value.param == field
    assert refused.value.message.startswith(field)


def test_the_posters_own_choices_pass():
    refuse_server_choices({
        "models": {"m": {"model": "HuggingFaceH4/zephyr-7b-beta", "port": 8100}},
        "agents": [{"name": "a", "base": "m", "sampling": {"stop": ["</tool>", "\n\n"]}}],
        "environment": {"task": {"source": "jsonl", "path": "data/samples/gsm8k_sample.jsonl"}},
        "services": {"gateway_port": 8300}, "ppo": {"learning_rate": 1e-4},
    })


def test_a_refused_field_named_with_lone_surrogates_is_still_answered():
    """A JSON key may hold an unpaired surrogate escape (found by the gateway's fuzzing): the
    422 naming it must still encode, with the surrogate escaped, not become a 500."""
    with pytest.raises(GatewayError) as refused:
        refuse_server_choices({"config": {"\udb14\udefd": {"path": [[], {}, -1]}}})
    body = json.loads(refused.value.response().body)
    assert refused.value.status == 422
    assert body["error"]["param"] == "config.\\udb14\\udefd.path"
    assert body["error"]["message"].startswith("config.\\udb14\\udefd.path: names a file")
