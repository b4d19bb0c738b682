"""The policy servers' API key: vLLM's own ``--api-key``, through its ``VLLM_API_KEY``.

With runtime LoRA loading on, anyone who can reach a vLLM server could load, replace or unload
adapters (``/v1/load_lora_adapter``) or read any agent's completions; vLLM guards every ``/v1``
route with a bearer key when it has one. ``agora up`` makes a fresh key per start and puts it in
``AGORA_VLLM_API_KEY`` of its own environment, which every process it starts inherits: the vLLM
servers it starts turn it into ``VLLM_API_KEY`` (agora/serving/vllm_server.py), and every client
of theirs (rollouts, the trainer's adapter loads, the gateway, evaluation, the run's LLM judge)
sends it. Compose and k8s set the variable from a secret. Unset: no key, as before.

vLLM's key covers ``/v1`` only. A full-weight agent's server runs in development mode, whose
endpoints (``/collective_rpc`` runs any worker method, ``/reset_prefix_cache``, ``/sleep``...)
sit outside ``/v1``: agora starts it with ``RequireKeyOffV1`` as a vLLM ``--middleware``
(vLLM's own extension point), which wants the same key on every route but ``/health``,
``/metrics``, ``/ping`` and ``/version``.
"""

from __future__ import annotations

import os

from starlette.types import ASGIApp

from agora.ops.service_key import RequireServiceKey

API_KEY_ENV = "AGORA_VLLM_API_KEY"
# What orchestrators and Prometheus probe without a secret; they reveal nothing to use.
OPEN_PATHS = frozenset({"/health", "/metrics", "/ping", "/version"})


def vllm_api_key() -> str | None:
    return os.environ.get(API_KEY_ENV) or None


def vllm_headers() -> dict[str, str]:
    """The Authorization header for the run's policy servers (empty without a key)."""
    key = vllm_api_key()
    return {"authorization": f"Bearer {key}"} if key else {}


class RequireKeyOffV1(RequireServiceKey):
    """vLLM ``--middleware agora.serving.auth.RequireKeyOffV1``: vLLM's API key
    (``VLLM_API_KEY``, set from ``AGORA_VLLM_API_KEY``) on every route but OPEN_PATHS, the
    development endpoints included. vLLM adds a middleware class without arguments, hence the
    key from the environment; without one the server stays open, as vLLM itself would."""

    key_env = API_KEY_ENV

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app, os.environ.get("VLLM_API_KEY") or None)

    def guarded(self, path: str) -> bool:
        return path not in OPEN_PATHS
