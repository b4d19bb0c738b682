"""Rollout throughput: episodes/s through the queue (Celery workers + Redis stream) vs the same
episodes run directly against vLLM from one process (the baseline), measured in one run.

    .venv/bin/python bench/throughput.py [--model smollm2-135m] [--episodes 96]

Both paths do the same work per episode: play it through vLLM, verify it with the reward
service. The ratio (queue / direct) is the cost of the distributed plumbing; 1.0 means free.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from pathlib import Path

import httpx
import redis
from results import append_section

from agora.config.run import parse_config
from agora.envs.registry import make_env
from agora.rollout.runner import run_episode
from agora.rollout.stream import EpisodeStream
from agora.rollout.worker import (
    QUEUE,
    TASK_NAME,
    apply_verdict,
    build_players,
    episode_payload,
    make_celery,
)
from agora.serving.auth import API_KEY_ENV
from agora.stack.launcher import make_stack
from agora.stack.procs import free_port


def bench_config(model: str, concurrency: int):
    return parse_config({
        "name": "bench",
        "models": {"m": {"model": model, "port": free_port(), "max_lora_rank": 8}},
        "agents": [{"name": "player", "base": "m", "lora_rank": 8, "lora_alpha": 16}],
        "environment": {"name": "tictactoe", "seats": ["player", "player"],
                        "opponents": {"self": 0.5, "random": 0.5}},
        "workers": {"count": 1, "concurrency": concurrency, "queue_ahead": 1000},
        "services": {"redis_port": free_port(), "reward_port": free_port(),
                     "gateway_port": free_port(), "trainer_metrics_port": free_port()},
    })


async def direct(cfg, payloads: list[dict], stream: EpisodeStream, concurrency: int) -> float:
    """Baseline: the same episodes from one asyncio process, same concurrency."""
    reward_url = f"http://127.0.0.1:{cfg.services.reward_port}/v1/verify"
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=300) as http:
        async def one(payload: dict) -> None:
            async with gate:
                players = build_players(cfg, payload, stream)
                record = await run_episode(make_env(cfg.environment.name), players,
                                           run_id="direct", episode_id=payload["episode_id"],
                                           seed=payload["seed"], opponent=payload["opponent"])
                resp = await http.post(reward_url, json={
                    "env": record.env, "actions": [t.text for t in record.turns]})
                apply_verdict(record, resp.json())

        started = time.perf_counter()
        await asyncio.gather(*(one(p) for p in payloads))
        return time.perf_counter() - started


def through_queue(stack, cfg, payloads: list[dict]) -> float:
    client = redis.Redis.from_url(stack.redis_url)
    stream = EpisodeStream(client, stack.run_id)
    celery = make_celery(stack.redis_url)
    started = time.perf_counter()
    for payload in payloads:
        client.incr(stream.keys.episodes_enqueued)
        celery.send_task(TASK_NAME, args=[payload], queue=QUEUE)
    while stream.outstanding() > 0:
        time.sleep(0.1)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--episodes", type=int, default=96)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    cfg = bench_config(args.model, args.concurrency)
    stack = make_stack(cfg, "bench", False, runs_root=Path(tempfile.mkdtemp()))
    os.environ[API_KEY_ENV] = stack.vllm_api_key  # this process asks the policy server too
    try:
        stack.start(with_trainer=False)
        client = redis.Redis.from_url(stack.redis_url)
        stream = EpisodeStream(client, stack.run_id)
        # Load the agent's adapter (= base weights) the way the trainer would.
        from agora.algos.ppo import PPOLearner
        from agora.serving.client import PolicyAdmin
        from agora.serving.model_folders import resolve_model

        learner = PPOLearner(resolve_model(args.model), cfg.agent("player"), cfg.ppo,
                             compute=cfg.trainer)
        PolicyAdmin(cfg.policy_url("player")).load_adapter(
            "player", str(learner.save_adapter(stack.run_dir / "adapter")))
        rng = random.Random(0)
        warm = [episode_payload(cfg, "warm", i, rng, stack.redis_url) for i in range(8)]
        asyncio.run(direct(cfg, warm, stream, args.concurrency))  # warm vLLM's caches
        payloads = [episode_payload(cfg, stack.run_id, i, rng, stack.redis_url)
                    for i in range(1, args.episodes + 1)]
        direct_s = asyncio.run(direct(cfg, payloads, stream, args.concurrency))
        queue_s = through_queue(stack, cfg, payloads)
    finally:
        stack.stop()
    n = args.episodes
    lines = [f"model {args.model}, {n} episodes, concurrency {args.concurrency}",
             f"direct (one process -> vLLM): {n / direct_s:.2f} episodes/s ({direct_s:.1f} s)",
             f"queue (Celery + Redis stream): {n / queue_s:.2f} episodes/s ({queue_s:.1f} s)",
             f"ratio queue/direct: {direct_s / queue_s:.2f}"]
    print("\n".join(lines))
    append_section("throughput.py", "\n".join(f"- {line}" for line in lines))


if __name__ == "__main__":
    main()
