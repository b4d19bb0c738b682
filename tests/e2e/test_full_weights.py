"""Full-weight agents (``agents[].finetune: full``) through the embedded stack on tiny-random:
the agent's own vLLM server serves the run's copy of its weights; after every update the
trainer replaces those files and vLLM reloads them in place (``/collective_rpc
reload_weights``); what vLLM then serves is exactly the learner's new model."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import pytest
import redis
import torch
import yaml
from safetensors.torch import load_file

from agora.algos.ppo import PPOLearner, TurnSample
from agora.config.agents import SamplingConfig
from agora.config.base import ConfigError
from agora.config.training import PPOConfig
from agora.evaluation.target import EvalInputError, resolve_target
from agora.rollout.stream import RunKeys
from agora.serving.auth import API_KEY_ENV
from agora.serving.client import PolicyClient
from agora.serving.weights import live_weights_dir
from agora.stack.launcher import make_stack
from tests.stack_helpers import FP32, tiny_config

PLAYER = {"name": "player", "base": "tiny", "finetune": "full", "lora_rank": 8,
          "sampling": {"temperature": 1.0, "max_tokens": 4, "stop": ["]"]}}


def test_full_weight_agent_trains_and_vllm_serves_each_new_version(tmp_path, tiny_model,
                                                                    monkeypatch):
    cfg = tiny_config(agents=[PLAYER], ppo={"learning_rate": 2e-4}, trainer={"max_updates": 2})
    stack = make_stack(cfg, "full", False, runs_root=tmp_path)
    monkeypatch.setenv(API_KEY_ENV, stack.vllm_api_key)  # this test asks the policy server too
    live = live_weights_dir(stack.run_dir, "player")
    try:
        stack.start()
        stack.watch(period_s=1.0)  # returns when the trainer is done
        client = redis.Redis.from_url(stack.redis_url)
        assert int(client.get(RunKeys(stack.run_id).version("player"))) == 2
        assert client.get(RunKeys(stack.run_id).adapter_path("player")).decode() == str(live)
        rows = [json.loads(x) for x in (stack.run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [r["update"] for r in rows] == [1, 2]
        # The served folder holds version 2: every decoder weight moved off the base; the
        # staged version folders were used up; the checkpoint keeps the whole model.
        base = load_file(f"{tiny_model}/model.safetensors")
        served = load_file(str(live / "model.safetensors"))
        assert sorted(served) == sorted(base)
        assert all(not torch.equal(served[k], base[k]) for k in base if "layers." in k)
        assert not list(live.parent.glob("v*"))
        checkpoint = stack.run_dir / "checkpoints" / "ckpt-000002" / "player" / "weights"
        torch.testing.assert_close(load_file(str(checkpoint / "model.safetensors"))[
            "model.layers.0.mlp.up_proj.weight"], served["model.layers.0.mlp.up_proj.weight"])

        # Development mode's endpoints want the run's key like /v1 (agora's --middleware);
        # the trainer's reloads above sent it.
        server = cfg.policy_url("player")
        assert httpx.post(server + "/collective_rpc", json={"method": "reload_weights"},
                          timeout=30).status_code == 401
        assert httpx.post(server + "/reset_prefix_cache", timeout=30,
                          headers={"authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(server + "/health", timeout=30).status_code == 200

        # vLLM answers as the learner's final model, not the base it started from.
        agent = cfg.agent("player")
        final = PPOLearner(str(live), agent, PPOConfig(), compute=FP32)
        start = PPOLearner(tiny_model, agent, PPOConfig(), compute=FP32)
        policy = PolicyClient(cfg.policy_url("player"), "player", final.tokenizer,
                              SamplingConfig(max_tokens=8, stop=[], temperature=1.0))
        gen = asyncio.run(policy.generate([{"role": "user", "content": "Your move?"}]))
        turn = TurnSample(gen.prompt_token_ids, gen.completion_token_ids, gen.logprobs, 0.0)
        ours, theirs = torch.tensor(final.sequence_logprobs(turn)), torch.tensor(gen.logprobs)
        assert (ours - theirs).abs().max().item() < 2e-3
        assert (torch.tensor(start.sequence_logprobs(turn)) - theirs).abs().max().item() > 1e-2
    finally:
        stack.stop()


def test_full_weight_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"agents.player.finetune: 'full' needs a models key"):
        tiny_config(agents=[PLAYER, {**PLAYER, "name": "other", "finetune": "lora"}],
                    environment={"name": "tictactoe", "seats": ["player", "other"],
                                 "opponents": {"self": 1.0}})
    with pytest.raises(ConfigError, match=r"agents.player.finetune: 'full' is for a trainable"):
        tiny_config(agents=[{**PLAYER, "trainable": False}])
    with pytest.raises(ConfigError, match=r"opponent pool"):
        tiny_config(agents=[PLAYER], environment={"name": "tictactoe",
                                                  "seats": ["player", "player"],
                                                  "opponents": {"pool": 1.0}})


def test_demo_and_eval_say_they_do_not_take_full_weight_agents_yet(tmp_path):
    cfg = tiny_config(agents=[PLAYER])
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    (run / "metrics.jsonl").write_text("")
    with pytest.raises(EvalInputError, match=r"agents.player.finetune: full-weight agents"):
        resolve_target(run)
    done = subprocess.run([sys.executable, "-m", "agora.cli", "demo", str(run / "config.yaml")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "agents.player.finetune" in done.stdout
