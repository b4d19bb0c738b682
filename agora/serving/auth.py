"""The policy servers' API key: vLLM's own ``--api-key``, through its ``VLLM_API_KEY``.

With runtime LoRA loading on, anyone who can reach a vLLM server could load, replace or unload
adapters (``/v1/load_lora_adapter``) or read any agent's completions; vLLM guards every ``/v1``
route with a bearer key when it has one. ``agora up`` makes a fresh key per start and puts it in
``AGORA_VLLM_API_KEY`` of its own environment, which every process it starts inherits: the vLLM
servers it starts turn it into ``VLLM_API_KEY`` (agora/serving/vllm_server.py), and every client
of theirs (rollouts, the trainer's adapter loads, the gateway, evaluation, the run's LLM judge)
sends it. Compose and k8s set the variable from a secret. Unset: no key, as before.

Not covered by vLLM's key: ``/health``, ``/metrics`` and the development endpoints a
full-weight server turns on (``/collective_rpc``, ``/reset_prefix_cache``): such a server must
stay reachable by the trainer only (agora binds it to ``services.host``; k8s NetworkPolicies).
"""

from __future__ import annotations

import os

API_KEY_ENV = "AGORA_VLLM_API_KEY"


def vllm_api_key() -> str | None:
    return os.environ.get(API_KEY_ENV) or None


def vllm_headers() -> dict[str, str]:
    """The Authorization header for the run's policy servers (empty without a key)."""
    key = vllm_api_key()
    return {"authorization": f"Bearer {key}"} if key else {}
