"""Hot-swap latency: adapter saved -> first answer from the new version, via vLLM's runtime LoRA
API (``load_inplace``), vs restarting the vLLM server with the new adapter (the baseline).

    .venv/bin/python bench/hotswap.py [--model smollm2-135m] [--swaps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import torch
from results import append_section

from agora.algos.ppo import PPOLearner
from agora.config.agents import AgentConfig, BaseModelConfig, SamplingConfig
from agora.config.training import PPOConfig
from agora.serving.client import PolicyAdmin, PolicyClient
from agora.serving.model_folders import resolve_model
from agora.serving.vllm_server import vllm_command, vllm_env
from agora.stack.procs import Service, free_port, http_ok

PROMPT = [{"role": "user", "content": "Pick a cell of the Tic-Tac-Toe board."}]


def start_vllm(model_path: str, cfg: BaseModelConfig, log: Path) -> Service:
    svc = Service("vllm", vllm_command(model_path, cfg, "127.0.0.1"), log, env=vllm_env(),
                  health=http_ok(f"http://127.0.0.1:{cfg.port}/health")).start()
    svc.wait_healthy(600)
    return svc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--swaps", type=int, default=5)
    args = parser.parse_args()
    path = resolve_model(args.model)
    work = Path(tempfile.mkdtemp())
    learner = PPOLearner(path, AgentConfig(name="a", base="m", lora_rank=8, lora_alpha=16),
                         PPOConfig())
    versions = []
    for v in range(2):
        with torch.no_grad():
            for name, param in learner.model.named_parameters():
                if "lora_B" in name:
                    param.normal_(0, 0.02)
        versions.append(str(learner.save_adapter(work / f"v{v}")))
    cfg = BaseModelConfig(model=args.model, port=free_port(), max_lora_rank=8)
    url = f"http://127.0.0.1:{cfg.port}"
    admin = PolicyAdmin(url)
    client = PolicyClient(url, "agent", learner.tokenizer,
                          SamplingConfig(max_tokens=4, temperature=0.0, stop=[]))

    svc = start_vllm(path, cfg, work / "vllm.log")
    try:
        admin.load_adapter("agent", versions[0])
        asyncio.run(client.generate(PROMPT))  # warm-up
        swaps = []
        for i in range(args.swaps):
            started = time.perf_counter()
            admin.load_adapter("agent", versions[(i + 1) % 2])
            asyncio.run(client.generate(PROMPT))
            swaps.append(time.perf_counter() - started)
        started = time.perf_counter()
        svc.stop()
        svc = start_vllm(path, cfg, work / "vllm-restart.log")
        admin.load_adapter("agent", versions[0])
        asyncio.run(client.generate(PROMPT))
        restart = time.perf_counter() - started
    finally:
        svc.stop()
    swap = statistics.median(swaps)
    lines = [f"model {args.model}",
             f"hot-swap (load_inplace + first answer), median of {len(swaps)}: {swap:.3f} s",
             f"restart vLLM + load + first answer: {restart:.1f} s",
             f"ratio restart/hot-swap: {restart / swap:.0f}x"]
    print("\n".join(lines))
    append_section("hotswap.py", "\n".join(f"- {line}" for line in lines))


if __name__ == "__main__":
    main()
