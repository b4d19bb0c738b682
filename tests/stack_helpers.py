"""Helpers for tests that start the embedded stack (or parts of it) on tiny-random."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import psutil
import redis
import yaml

from agora.algos.compute import ComputeConfig
from agora.config.run import RunConfig, parse_config
from agora.stack.procs import free_port

# The learner's placement of unit tests: fp32 on the CPU, whatever the machine's bf16 support.
FP32 = ComputeConfig(device="cpu", dtype="fp32")


def tiny_config(**overrides) -> RunConfig:
    """A fast run config on tiny-random with free ports; ``overrides`` are merged per section."""
    data: dict = {
        "name": "t",
        "models": {"tiny": {"model": "tiny-random", "port": free_port(), "max_model_len": 512,
                            "max_loras": 2, "max_lora_rank": 8,
                            "dtype": "float32"}},
        "agents": [{"name": "player", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                    "sampling": {"temperature": 1.0, "max_tokens": 4, "stop": ["]"]}}],
        "environment": {"name": "tictactoe", "seats": ["player", "player"],
                        "opponents": {"self": 0.5, "random": 0.5}},
        "ppo": {"batch_turns": 8, "minibatch_turns": 8},
        # fp32 on the CPU wherever the suite runs: logprobs are compared with vLLM's fp32.
        "trainer": {"max_updates": 3, "torch_threads": 1, "device": "cpu", "dtype": "fp32"},
        "workers": {"count": 1, "concurrency": 4, "queue_ahead": 8, "visibility_timeout": 8,
                    "metrics_port": free_port()},
        "services": {"redis_port": free_port(), "reward_port": free_port(),
                     "gateway_port": free_port(), "trainer_metrics_port": free_port(),
                     "judge_port": free_port(),
                     # Longer than the 1 s the stack tests scrape at: they see the final values.
                     "trainer_final_scrape_s": 2.5,
                     "health_timeout_s": 700},  # vLLM: ~60 s alone, >400 s on a busy 2-core box
    }
    for section, values in overrides.items():
        if section == "models" and isinstance(values, dict):
            # Per-model merge, so an override can change one field of the tiny model.
            data["models"] = {name: {**data["models"].get(name, {}), **fields}
                              for name, fields in {**data["models"], **values}.items()}
        elif isinstance(values, dict) and isinstance(data.get(section), dict):
            data[section] = {**data[section], **values}
        else:
            data[section] = values
    return parse_config(data)


def url_port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def session_servers_config(vllm_url: str, reward_url: str, redis_url: str,
                           **overrides) -> RunConfig:
    """``tiny_config`` pointed at the test session's vLLM (1024-token context, fp32), reward
    service and Redis, for tests that play episodes through the real rollout task."""
    return tiny_config(
        models={"tiny": {"model": "tiny-random", "port": url_port(vllm_url),
                         "max_model_len": 1024, "max_loras": 2, "max_lora_rank": 16,
                         "dtype": "float32"}},
        services={"reward_port": url_port(reward_url), "redis_port": url_port(redis_url)},
        **overrides,
    )


def write_config(cfg: RunConfig, path: Path) -> Path:
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return path


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str | Callable[[], str],
             period_s: float = 0.5) -> None:
    """Poll ``predicate``; on timeout fail with ``what`` (a callable is evaluated then, so the
    message can show the state at the moment of failure)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(period_s)
    detail = what() if callable(what) else what
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {detail}")


def state(redis_url: str, run_id: str) -> dict[str, str]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    return client.hgetall(f"agora:{run_id}:state")


def descendants_alive(pids: list[int]) -> list[int]:
    """Which of ``pids`` still exist (zombies count as gone)."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def processes_of_run(run_id: str) -> list[int]:
    """Live processes whose environment carries AGORA_RUN_ID=run_id (the launcher tags all)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("AGORA_RUN_ID") == run_id and proc.status() != "zombie":
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def process_tree(pid: int) -> list[int]:
    try:
        proc = psutil.Process(pid)
        return [pid] + [c.pid for c in proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def completion_logprob(learner, example: dict) -> float:  # learner: agora.algos.ppo.PPOLearner
    """Mean logprob per token of an SFT example's completion under ``learner`` (warm-start and
    support-SFT tests compare a warm learner with a fresh one)."""
    from agora.algos.ppo import TurnSample
    from agora.serving.client import render_prompt

    tok = learner.tokenizer
    prompt = render_prompt(tok, example["prompt"])
    completion = tok.encode(example["completion"][0]["content"], add_special_tokens=False)
    sample = TurnSample(prompt, completion, [0.0] * len(completion), 0.0)
    return sum(learner.sequence_logprobs(sample)) / len(completion)


def randomize_lora_b(model, seed: int, scale: float = 0.2) -> None:
    """Random LoRA B matrices (PEFT starts them at zero, which makes an adapter identical to
    its base): an adapter whose served and learned logprobs can be told apart from the base."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * scale)


def bandit_samples(learner, good: int, bad: int, n: int) -> list:  # -> list[TurnSample]
    """A one-token bandit: the same prompt, half the turns pick `good` (+1), half `bad` (-1),
    with behaviour logprobs taken from the current policy (on-policy)."""
    from agora.algos.ppo import TurnSample

    prompt = learner.tokenizer.encode("Pick a letter:", add_special_tokens=False)
    out = []
    for i in range(n):
        token = good if i % 2 == 0 else bad
        sample = TurnSample(prompt, [token], [0.0], 1.0 if token == good else -1.0)
        sample.behaviour_logprobs = learner.sequence_logprobs(sample)
        out.append(sample)
    return out


def feed_on_own_queue(redis_url: str, cfg: RunConfig, prefix: str):
    """A trainer's episode feed (agora/train/feed.py) for ``cfg`` on a new run id, with the
    stream's consumer group made, whose rollout tasks go to a queue of their own (no worker of
    another test takes them). Returns (feed, stream, queue); delete the queue when done."""
    import uuid

    from agora.rollout.delivery import Delivery
    from agora.rollout.stream import EpisodeStream
    from agora.rollout.worker import TASK_NAME
    from agora.train.feed import EpisodeFeed

    run_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    stream = EpisodeStream(client, run_id)
    stream.ensure_group()
    feed = EpisodeFeed(cfg, run_id, redis_url, client, stream)
    queue = f"rollouts-{run_id}"
    feed.delivery = Delivery(stream, feed.celery, TASK_NAME, queue)
    return feed, stream, queue
