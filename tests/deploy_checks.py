"""What the code really serves, for checking the deployment files against it.

Shared by tests/integration/test_compose.py and tests/integration/test_k8s.py. The point of these
checks is that a port, a command or a health route in docker-compose.yml or k8s/ can drift from the
code without any other test noticing (nothing here can run an image). So every expectation comes
from the code: ports from the run config (agora/config/run.py), commands from the launcher
(agora/stack/launcher.py), health routes from the FastAPI apps built the way uvicorn builds them,
the vLLM flags from agora/serving/vllm_server.py.
"""

from __future__ import annotations

import importlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI

from agora.config.agents import BaseModelConfig
from agora.config.run import RunConfig, load_config
from agora.serving.vllm_server import SERVED_BASE_NAME, vllm_command
from agora.stack.launcher import Stack

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
DEFAULT_CONFIG = ROOT / "configs" / "tictactoe_selfplay.yaml"
URL = re.compile(r"http://([A-Za-z0-9.-]+):(\d+)(/[A-Za-z0-9/_-]*)")


@dataclass(frozen=True)
class Served:
    """One service as the code serves it."""

    port: int
    health: str  # the GET route a health check should ask
    app: str | None = None  # "module:attr" of a FastAPI service (uvicorn's argument)


def served(cfg: RunConfig) -> dict[str, Served]:
    """Each service's port and health route for ``cfg``, by its name in ``cfg.all_ports()``
    (a policy server per base: ``policy-<models key>``).

    The policy servers are vLLM: /health is its documented route (docs/architecture.md
    "Contracts"). The trainer's metrics server (prometheus_client) answers any path; /metrics
    is what the launcher's health check and Prometheus ask."""
    svc = cfg.services
    return {
        "gateway": Served(svc.gateway_port, "/health", "services.gateway.app:app"),
        "reward": Served(svc.reward_port, "/health", "services.reward.app:app"),
        "judge": Served(svc.judge_port, "/health", "services.judge.app:app"),
        "trainer": Served(svc.trainer_metrics_port, "/metrics"),
        **{f"policy-{key}": Served(model.port, "/health") for key, model in cfg.models.items()},
        "redis": Served(svc.redis_port, ""),
    }


# Run configs the deployments serve only with another model in the policy server: compose takes
# these variables (tests/integration/test_compose.py checks they make it serve the config), k8s
# the overlay k8s/overlays/vlm (tests/integration/test_k8s.py).
MODEL_SWITCHED = {"tictactoe_vlm.yaml": {"AGORA_POLICY_MODEL": "tiny-random-vlm",
                                         "AGORA_MODELS": "tiny-random-vlm"}}


def policy_servers(configs: list[Path]) -> dict[str, list[tuple[str, BaseModelConfig]]]:
    """Each host a shipped run config's policy servers are reached at -> the models it must
    serve, labelled ``<file>: models.<key>``.

    Routed as the containers route them: the caller sets the deployment's AGORA_SERVICES, which
    sends every base to ``policy`` but the one a second server serves (``policy-2``)."""
    by_host: dict[str, list[tuple[str, BaseModelConfig]]] = {}
    for path in configs:
        cfg = load_config(path)
        for key, model in cfg.models.items():
            by_host.setdefault(cfg.service_host(f"policy-{key}"), []).append(
                (f"{path.name}: models.{key}", model))
    return by_host


def launcher_stack(cfg: RunConfig) -> Stack:
    """A Stack that is never started: only its command builders are used."""
    return Stack(cfg=cfg, run_id="check", run_dir=Path("/runs/check"),
                 redis_url="redis://redis:6390/0")


def trainer_flags(cfg: RunConfig) -> list[str]:
    """The option names the launcher starts the trainer with, in order."""
    command = launcher_stack(cfg).trainer_service(resume=True).command
    return [arg for arg in command if arg.startswith("--")]


def worker_args(cfg: RunConfig) -> list[str]:
    """The launcher's Celery worker arguments after the interpreter, minus its per-process
    --hostname (a container's hostname is already unique)."""
    args = launcher_stack(cfg).worker_service(0).command[1:]
    at = args.index("--hostname")
    return args[:at] + args[at + 2:]


def vllm_flags(args: list[str]) -> dict[str, str | bool]:
    """``--flag value`` pairs of a vLLM command line; a flag without a value maps to True."""
    flags: dict[str, str | bool] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else None
            flags[arg] = True if nxt is None or nxt.startswith("--") else nxt
    return flags


def embedded_vllm_flags(model: BaseModelConfig) -> dict[str, str | bool]:
    """The embedded stack's vLLM flags for one base (hardware-dependent dtype and block size
    left out: containers choose their own)."""
    flags = vllm_flags(vllm_command("/model", model, "0.0.0.0")[3:])
    flags.pop("--dtype", None)
    flags.pop("--block-size", None)
    return flags


def check_policy_server(args: list[str], models: list[tuple[str, BaseModelConfig]]) -> None:
    """A policy server command (compose, k8s or a Dockerfile) serves each of ``models``
    (labelled pairs, as policy_servers gives them): the embedded stack's flags, the base's
    port, the served name the clients ask for, and LoRA limits at least as large as each's."""
    flags = vllm_flags(args)
    assert models, "no run config's base is served here"
    for label, model in models:
        for flag in embedded_vllm_flags(model):
            assert flag in flags, f"{label}: policy server lacks {flag}"
        assert flags["--served-model-name"] == SERVED_BASE_NAME
        assert flags["--enable-lora"] is True
        assert int(flags["--port"]) == model.port, label
        assert flags["--model"] == f"/cache/models/{model.model}", label
        for flag, need in (("--max-lora-rank", model.max_lora_rank),
                           ("--max-loras", model.max_loras),
                           ("--max-model-len", model.max_model_len)):
            assert int(flags[flag]) >= need, f"{label}: {flag} {flags[flag]} < {need}"


def build_app(app_path: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> FastAPI:
    """The app ``uvicorn app_path`` builds in a process with ``env``.

    The gateway and the judge build their app on first access from the environment (module
    ``__getattr__``): it is rebuilt here with ``env`` and not left cached for other tests."""
    module_name, attr = app_path.split(":")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    module = importlib.import_module(module_name)
    if "__getattr__" not in vars(module):
        return getattr(module, attr)
    vars(module).pop(attr, None)
    try:
        return getattr(module, attr)
    finally:
        vars(module).pop(attr, None)


def get_routes(app: FastAPI) -> set[str]:
    return {route.path for route in app.routes if "GET" in (getattr(route, "methods", None) or ())}


def health_url(command: list[str] | str) -> tuple[str, int, str]:
    """(host, port, path) of the one http URL in a health check / probe command."""
    text = command if isinstance(command, str) else shlex.join(command)
    found = URL.findall(text)
    assert len(found) == 1, f"expected one URL in {text!r}"
    host, port, path = found[0]
    return host, int(port), path


def uvicorn_command(cfg: RunConfig, app: str, port: int) -> list[str]:
    """How a FastAPI service is started: the launcher's uvicorn arguments after ``python -m``
    (agora/stack/launcher.py), listening on every interface as a container must."""
    args = launcher_stack(cfg)._uvicorn("check", app, port).command[2:]
    args[args.index("--host") + 1] = "0.0.0.0"
    return args
