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

from agora.reflection.config import ReflectionConfig
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


def role_stages(stage: str, critic_stage: str | None = None) -> dict[str, str]:
    """The stage whose adapter each role plays: ``stage`` for both unless ``critic_stage`` is
    given. Mixing them is an ablation (the DPO actor beside the SFT critic tells whose DPO
    moved the figures); the pipeline itself always pairs a stage's own two adapters."""
    return {"actor": stage, "critic": critic_stage or stage}


def evaluation_name(stage: str, critic_stage: str | None = None) -> str:
    """``eval/<name>.json``: the stage, or ``<stage>-critic-<critic_stage>`` when mixed."""
    return stage if critic_stage in (None, stage) else f"{stage}-critic-{critic_stage}"


def adapter_names(cfg: ReflectionConfig, stage: str,
                  critic_stage: str | None = None) -> dict[str, str]:
    """The served model name of each role ('base' = no adapter)."""
    return {role: SERVED_BASE_NAME if role_stage == "base" else f"{cfg.name}-{role_stage}-{role}"
            for role, role_stage in role_stages(stage, critic_stage).items()}


def stage_adapter_dir(cfg: ReflectionConfig, stage: str, role: str) -> Path:
    return cfg.run_dir / stage / role


def require_adapters(cfg: ReflectionConfig, stage: str, critic_stage: str | None = None) -> None:
    """Fail before any server starts (a minute of vLLM start-up) when a stage's adapters are
    missing."""
    for role, role_stage in role_stages(stage, critic_stage).items():
        if role_stage == "base":
            continue
        path = stage_adapter_dir(cfg, role_stage, role)
        if not (path / "adapter_config.json").is_file():
            raise DataError(f"{path}: no {role_stage} adapter for the {role}; run "
                            f"`agora reflect {role_stage} CONFIG` first")


@contextlib.contextmanager
def served_adapters(cfg: ReflectionConfig, url: str, stage: str,
                    critic_stage: str | None = None) -> Iterator[dict[str, str]]:
    """Load the actor's and the critic's adapters into the server for the duration."""
    names = adapter_names(cfg, stage, critic_stage)
    require_adapters(cfg, stage, critic_stage)
    admin = PolicyAdmin(url)
    loaded = []
    try:
        for role, role_stage in role_stages(stage, critic_stage).items():
            if role_stage == "base":
                continue
            path = stage_adapter_dir(cfg, role_stage, role)
            try:
                admin.load_adapter(names[role], str(path.resolve()))
            except PolicyServerError as err:
                raise ServerError(f"vLLM refused the {role_stage} {role} adapter: "
                                  f"{err}") from None
            loaded.append(names[role])
        yield names
    finally:
        for name in loaded:
            with contextlib.suppress(PolicyServerError, httpx.HTTPError):
                admin.unload_adapter(name)
