"""A vision-language agent's cost against the text version of the same game (docs/vlm.md):
Tic-Tac-Toe turns per second through vLLM (the board as text vs as an image), and PPO update
seconds per turn on those turns, on the same model, server and machine, in one run.

    .venv/bin/python bench/vlm_turns.py [--model tiny-random-vlm] [--turns 64]

The model must be a vision-language one (the text arm sends it text-only prompts). Both arms
play the same positions with the same adapter; the text arm is the baseline of each ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import torch
from results import append_section, markdown_table

from agora.algos.compute import ComputeConfig
from agora.algos.ppo import PPOLearner, TurnSample
from agora.config.agents import AgentConfig, BaseModelConfig, SamplingConfig
from agora.config.training import PPOConfig
from agora.envs.tictactoe import TicTacToe
from agora.serving.client import PolicyAdmin, PolicyClient
from agora.serving.model_folders import resolve_model
from agora.serving.vllm_server import vllm_command, vllm_env
from agora.stack.procs import Service, free_port, http_ok

SAMPLING = SamplingConfig(temperature=1.0, max_tokens=4, stop=["]"])


def positions(count: int, mode: str) -> list[list[dict]]:
    """``count`` mid-game positions (the same ones for every mode)."""
    env, views = TicTacToe(observation=mode), []
    for game in range(count):
        env.reset(game)
        for cell in [4, 0, 8, 2][: game % 4]:
            env.step(f"[{cell}]")
        views.append(env.observation(env.current_seat))
    return views


async def play(client: PolicyClient, views: list[list[dict]], concurrency: int):
    gate = asyncio.Semaphore(concurrency)

    async def one(messages):
        async with gate:
            return await client.generate(messages, prefill="[")

    started = time.perf_counter()
    gens = await asyncio.gather(*(one(v) for v in views))
    return gens, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny-random-vlm")
    parser.add_argument("--turns", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    path = resolve_model(args.model)
    work = Path(tempfile.mkdtemp())
    agent = AgentConfig(name="viewer", base="m", lora_rank=8, lora_alpha=16,
                        lora_targets=["q_proj", "v_proj"], sampling=SAMPLING)
    ppo = PPOConfig(batch_turns=args.turns, minibatch_turns=args.turns, epochs=1, kl_coef=0.0)
    learner = PPOLearner(path, agent, ppo, compute=ComputeConfig(device="cpu", dtype="fp32"))
    cfg = BaseModelConfig(model=args.model, port=free_port(), max_lora_rank=8,
                          max_model_len=1024, dtype="float32")
    url = f"http://127.0.0.1:{cfg.port}"
    svc = Service("vllm", vllm_command(path, cfg, "127.0.0.1"), work / "vllm.log",
                  env=vllm_env(), health=http_ok(f"{url}/health")).start()
    rows = []
    try:
        svc.wait_healthy(600)
        PolicyAdmin(url).load_adapter("viewer", str(learner.save_adapter(work / "v0")))
        client = PolicyClient(url, "viewer", learner.tokenizer, SAMPLING)
        asyncio.run(play(client, positions(4, "image"), 4))  # warm-up, both routes
        asyncio.run(play(client, positions(4, "text"), 4))
        figures = {}
        for mode in ("text", "image"):
            gens, rollout_s = asyncio.run(play(client, positions(args.turns, mode),
                                               args.concurrency))
            samples = [TurnSample(g.prompt_token_ids, g.completion_token_ids, g.logprobs,
                                  reward=float(i % 2), images=g.images)
                       for i, g in enumerate(gens)]
            started = time.perf_counter()
            learner.update(samples)
            update_s = time.perf_counter() - started
            prompt = sum(len(s.prompt_ids) for s in samples) / len(samples)
            figures[mode] = (args.turns / rollout_s, update_s / args.turns, prompt)
        base_rate, base_update, _ = figures["text"]
        for mode, (rate, update, prompt) in figures.items():
            rows.append([mode, f"{prompt:.0f}", f"{rate:.1f}", f"{rate / base_rate:.2f}",
                         f"{update * 1000:.1f}", f"{update / base_update:.2f}"])
    finally:
        svc.stop()
    table = markdown_table(["observation", "prompt tokens", "turns/s (vLLM)", "x text",
                            "update ms/turn", "x text"], rows)
    print(table)
    body = (f"Model `{args.model}`, {args.turns} Tic-Tac-Toe turns per arm, "
            f"{args.concurrency} in flight, fp32 on {torch.get_num_threads()} thread(s); "
            f"ratios against the text arm of the same run.\n\n{table}\n")
    print("appended to", append_section("vlm_turns.py", body))


if __name__ == "__main__":
    main()
