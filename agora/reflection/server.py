"""The policy server a reflection command talks to, and the adapters it serves.

``policy_url`` set: a vLLM server someone else runs (tests share the session's); we only check
it answers. Unset: the command starts vLLM on ``policy.port`` exactly as ``agora up`` does
(``agora.serving.vllm_server``) and stops it when done, so one command = one self-contained job.
Adapters are loaded at runtime (``/v1/load_lora_adapter``) under names unique to the run and
stage, and unloaded afterwards so a shared server does not keep them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from agora.reflection.config import ROLES, ReflectionConfig
from agora.reflection.records import DataError
from agora.serving.client import PolicyAdmin, PolicyServerError
from agora.serving.model_folders import resolve_model
from agora.serving.vllm_server import SERVED_BASE_NAME, vllm_service
from agora.stack.procs import ServiceFailed, port_in_use

START_TIMEOUT_S = 900.0  # vLLM CPU start-up is ~40-65 s on an idle machine; much more when busy


class ServerError(RuntimeError):
    """The policy server cannot be used (unreachable, port taken, died on start-up)."""


@contextlib.contextmanager
def policy_server(cfg: ReflectionConfig, log: Callable[[str], None] = print) -> Iterator[str]:
    """Yield the base URL (``http://host:port``) of a healthy policy server."""
    if cfg.policy_url:
        url = cfg.policy_url.rstrip("/")
        if not PolicyAdmin(url).healthy():
            raise ServerError(f"policy_url: no healthy vLLM server at {url} (GET /health)")
        yield url
        return
    host, port = "127.0.0.1", cfg.policy.port
    if port_in_use(port, host):
        raise ServerError(f"policy.port: {port} is already in use (set another port, or "
                          "policy_url to use the server that runs there)")
    log_path = cfg.run_dir / "logs" / "vllm.log"
    svc = vllm_service(resolve_model(cfg.policy.model), cfg.policy, host, log_path)
    log(f"starting vLLM on {cfg.policy.model} (port {port}, log {log_path})")
    svc.start()
    try:
        try:
            svc.wait_healthy(START_TIMEOUT_S)
        except ServiceFailed as err:
            raise ServerError(f"vLLM failed to start: {err}\n{err.log_tail}") from None
        yield f"http://{host}:{port}"
    finally:
        svc.stop()


def adapter_names(cfg: ReflectionConfig, stage: str) -> dict[str, str]:
    """The served model name of each role at a stage ('base' = no adapter)."""
    if stage == "base":
        return dict.fromkeys(ROLES, SERVED_BASE_NAME)
    return {role: f"{cfg.name}-{stage}-{role}" for role in ROLES}


def stage_adapter_dir(cfg: ReflectionConfig, stage: str, role: str) -> Path:
    return cfg.run_dir / stage / role


def require_adapters(cfg: ReflectionConfig, stage: str) -> None:
    """Fail before any server starts (a minute of vLLM start-up) when a stage's adapters are
    missing."""
    if stage == "base":
        return
    for role in ROLES:
        path = stage_adapter_dir(cfg, stage, role)
        if not (path / "adapter_config.json").is_file():
            raise DataError(f"{path}: no {stage} adapter for the {role}; run "
                            f"`agora reflect {stage} CONFIG` first")


@contextlib.contextmanager
def served_adapters(cfg: ReflectionConfig, url: str, stage: str) -> Iterator[dict[str, str]]:
    """Load the stage's actor and critic adapters into the server for the duration."""
    names = adapter_names(cfg, stage)
    if stage == "base":
        yield names
        return
    require_adapters(cfg, stage)
    admin = PolicyAdmin(url)
    loaded = []
    try:
        for role, name in names.items():
            path = stage_adapter_dir(cfg, stage, role)
            try:
                admin.load_adapter(name, str(path.resolve()))
            except PolicyServerError as err:
                raise ServerError(f"vLLM refused the {stage} {role} adapter: {err}") from None
            loaded.append(name)
        yield names
    finally:
        for name in loaded:
            with contextlib.suppress(PolicyServerError, httpx.HTTPError):
                admin.unload_adapter(name)
