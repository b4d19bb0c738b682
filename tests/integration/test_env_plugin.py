"""An env added in one file runs through every layer, with nothing in agora naming it.

``tests/plugins/agora_countdown.py`` (env, bot, ``SPEC``) is installed the way a package is: the
module and a ``.dist-info`` with an ``agora.envs`` entry point on the PYTHONPATH of fresh
processes. Real parts: a reward service that replays the episodes to score them, the session's
vLLM server on the tiny model, Redis and the gateway under uvicorn; the config, the rollout
task body (``play``) and the evaluation's games run in a separate interpreter, because
this one imported the registry before the plugin was on its path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
import yaml

from agora.config.run import parse_config
from agora.stack.procs import free_port
from tests.conftest import ROOT, uvicorn_service
from tests.integration.test_gateway import make_adapter

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "agora_countdown.py"
AGENT = "counter"


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    """Environment variables of a process that has the plugin installed."""
    site = tmp_path_factory.mktemp("site")
    shutil.copy(PLUGIN, site / PLUGIN.name)
    dist = site / "agora_countdown-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: agora-countdown\n"
                                   "Version: 0.1\n")
    (dist / "entry_points.txt").write_text("[agora.envs]\ncountdown = agora_countdown:SPEC\n")
    return {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}


@pytest.fixture(scope="module")
def served_agent(vllm_tiny, tiny_model, tmp_path_factory) -> str:
    """The agent's adapter loaded into vLLM under its name, as the trainer does."""
    base_url, _ = vllm_tiny
    out = tmp_path_factory.mktemp("counter-adapter")
    make_adapter(tiny_model, out)
    body = {"lora_name": AGENT, "lora_path": str(out), "load_inplace": True}
    resp = httpx.post(f"{base_url}/v1/load_lora_adapter", json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    return AGENT


@pytest.fixture(scope="module")
def plugin_reward_url(plugin_env, logs_dir) -> Iterator[str]:
    port = free_port()
    svc = uvicorn_service("reward-plugin", "services.reward.app:app", port,
                          logs_dir / "reward-plugin.log", plugin_env).start()
    try:
        svc.wait_healthy(60)
        yield f"http://127.0.0.1:{port}"
    finally:
        svc.stop()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def countdown_config(vllm_tiny, redis_url: str, reward_url: str) -> dict:
    _, tiny_cfg = vllm_tiny
    return {
        "name": "countdown-run",
        "models": {"tiny": tiny_cfg.model_dump()},
        "agents": [{"name": AGENT, "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                    "sampling": {"temperature": 1.0, "max_tokens": 4, "stop": ["]"],
                                 "legal_actions_only": True}}],
        "environment": {"name": "countdown", "seats": [AGENT, AGENT],
                        "opponents": {"self": 0.5, "countdown_bot": 0.5}},
        "eval": {"opponents": ["countdown_bot"]},
        "services": {"reward_port": _port(reward_url), "redis_port": _port(redis_url),
                     "gateway_port": free_port()},
    }


# Runs in a fresh interpreter with the plugin installed: config, rollouts, evaluation.
SCRIPT = r"""
import dataclasses, json, random, sys
import redis
from agora.config.run import parse_config
from agora.envs.registry import REGISTRY
from agora.evaluation import games
from agora.rollout.records import EpisodeRecord
from agora.rollout.stream import EpisodeStream
from agora.rollout.worker import episode_payload, play

data, redis_url = json.loads(sys.argv[1]), sys.argv[2]
cfg = parse_config(data)
out = {"env_model": type(cfg.environment).__name__, "verifier": cfg.reward.verifier,
       "builtin": "countdown" in REGISTRY}
client = redis.Redis.from_url(redis_url)
stream = EpisodeStream(client, "plugin-run")
stream.set_version(cfg.clock_agent, 0, "")
rng = random.Random(0)
for index in range(6):
    assert play(episode_payload(cfg, "plugin-run", index, rng, redis_url)) == "added"
out["records"] = [json.loads(EpisodeRecord.model_validate_json(raw[b"record"]).model_dump_json())
                  for _, raw in client.xrange(stream.keys.stream)]

agent = cfg.agents[0].name  # the demo's evaluation: the agent against each eval opponent
out["eval"] = {opponent: dataclasses.asdict(result) for opponent, result
               in games.evaluate(cfg, agent, adapter=agent, games=4).items()}
print("RESULT " + json.dumps(out))
"""


def run_with_plugin(plugin_env: dict[str, str], *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True,
                          env={**os.environ, **plugin_env}, cwd=str(ROOT), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def test_this_process_does_not_know_the_plugin_env():
    """The point of the separate processes: here (no plugin installed) the name is refused."""
    with pytest.raises(ValueError, match="unknown environment 'countdown'"):
        parse_config({"models": {"m": {"model": "tiny-random"}},
                      "agents": [{"name": "a", "base": "m"}],
                      "environment": {"name": "countdown", "seats": ["a", "a"]}})


def test_a_one_file_env_plays_scores_and_evaluates_through_the_real_services(
        plugin_env, served_agent, vllm_tiny, redis_url, plugin_reward_url):
    data = countdown_config(vllm_tiny, redis_url, plugin_reward_url)
    out = run_with_plugin(plugin_env, json.dumps(data), redis_url)
    assert out["env_model"] == "CountdownEnvironment" and out["verifier"] == "game_outcome"
    records = out["records"]
    assert len(records) == 6
    for record in records:
        assert record["env"] == "countdown"
        # The reward service replayed the game: a winner and a loser, rewarded +1 / -1.
        assert sorted(record["results"]) in (["loss", "win"], ["illegal", "win"])
        winner = record["results"].index("win")
        took = sum(int(re.search(r"[12]", t["text"]).group()) for t in record["turns"]
                   if t["legal"])
        assert took == 5 + record["seed"] % 3  # the counter ran down to exactly 0
        assert record["turns"][-1]["seat"] == winner
        llm_turns = [t for t in record["turns"] if not t["agent"].startswith("bot:")]
        assert llm_turns and all(t["legal"] for t in llm_turns)  # legal_actions_only
        if AGENT in record["rewards"] and not any(s.startswith("bot:") for s in record["seats"]):
            assert record["rewards"][AGENT] == pytest.approx(0.0)  # self-play: +1 and -1
    against_bot = [r for r in records if any(s.startswith("bot:") for s in r["seats"])]
    assert against_bot, "the opponent mix drew no bot episode in 6"
    for record in against_bot:
        seat = next(i for i, s in enumerate(record["seats"]) if not s.startswith("bot:"))
        assert record["rewards"][AGENT] == {"win": 1.0, "loss": -1.0}[record["results"][seat]]
    # The evaluation against the game's bot (eval.opponents): 4 games, no draw in this game,
    # every sampled move legal.
    (result,) = out["eval"].values()
    assert result["opponent"] == "countdown_bot" and result["games"] == 4
    assert result["wins"] + result["losses"] == 4 and result["draws"] == 0
    assert result["llm_turns"] == result["legal_turns"] > 0


def test_the_gateway_plays_the_plugin_env_with_a_user_and_its_bot(
        plugin_env, served_agent, vllm_tiny, redis_url, plugin_reward_url, logs_dir, tmp_path):
    data = countdown_config(vllm_tiny, redis_url, plugin_reward_url)
    parse_config({**data, "environment": {"name": "tictactoe", "seats": [AGENT, AGENT]},
                  "eval": {}})  # the rest of the config is valid here too
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(data))
    db_url = re.sub(r"/\d+$", "/9", redis_url)
    redis.Redis.from_url(db_url).flushdb()  # no API keys: the gateway is open
    port = data["services"]["gateway_port"]
    env = {**plugin_env, "AGORA_CONFIG": str(config_path), "AGORA_REDIS_URL": db_url,
           "AGORA_RUN_ID": "plugin-run", "AGORA_RUN_DIR": str(tmp_path / "run"),
           "AGORA_GATEWAY_RUNS_DIR": str(tmp_path / "runs")}
    svc = uvicorn_service("gateway-plugin", "services.gateway.app:app", port,
                          logs_dir / "gateway-plugin.log", env).start()
    try:
        svc.wait_healthy(120)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
            bad = http.post("/v1/episodes", json={"env": "countdown", "seats": ["user"]})
            assert bad.status_code == 422 and "countdown has 2 seats, got 1" in bad.text
            state = http.post("/v1/episodes", json={"env": "countdown",
                                                    "seats": ["user", "bot:countdown_bot"],
                                                    "seed": 1}).json()
            while state["outcome"] is None:  # the user always takes 1; the bot answers
                state = http.post(f"/v1/episodes/{state['id']}/moves",
                                  json={"move": "[1]"}).json()
            assert state["outcome"]["results"] == ["loss", "win"]  # the bot plays perfectly
            vs_agent = http.post("/v1/episodes", json={"env": "countdown",
                                                       "seats": [AGENT, "user"]}).json()
            assert vs_agent["turns"][0]["player"] == AGENT  # the agent moved first, via vLLM
            assert re.fullmatch(r"\[[12]\]", vs_agent["turns"][0]["text"])
    finally:
        svc.stop()
