"""Where the services of a run live, as the deployment (compose, Kubernetes) says.

A run config says *what* to train; where each service runs is the deployment's business. The
embedded stack puts everything on ``services.host`` (127.0.0.1); compose and Kubernetes give every
service its own DNS name (``reward``, ``policy``, ...) and need the trainer to bind 0.0.0.0. So the
containers get ``AGORA_SERVICES``, a YAML/JSON mapping merged over the config's ``services``
section (``hosts`` merged key by key), and the same run config file runs in all three places:

    AGORA_SERVICES='{host: 0.0.0.0, hosts: {reward: reward, judge: judge, policy: policy}}'

It is applied by ``agora.config.run.parse_config``, so the trainer, the gateway and the workers
(which parse the trainer's config from each task) all see the same addresses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import yaml

SERVICES_ENV = "AGORA_SERVICES"


def services_override(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The parsed ``AGORA_SERVICES`` mapping ({} when unset or empty).

    Raises ValueError naming the variable when it is not a mapping."""
    raw = (os.environ if env is None else env).get(SERVICES_ENV, "").strip()
    if not raw:
        return {}
    try:
        parsed = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise ValueError(f"{SERVICES_ENV} is not valid YAML/JSON: {err}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"{SERVICES_ENV} must be a mapping like '{{hosts: {{reward: reward}}}}', "
                         f"got {type(parsed).__name__}")
    hosts = parsed.get("hosts", {})
    if not isinstance(hosts, dict):
        raise ValueError(f"{SERVICES_ENV}: 'hosts' must be a mapping of service name to host, "
                         f"got {type(hosts).__name__}")
    return parsed


def apply_services_override(data: dict[str, Any],
                            env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``data`` (a raw run config mapping) with ``AGORA_SERVICES`` merged into ``services``.

    Idempotent: the workers re-parse a config the trainer already overrode."""
    override = services_override(env)
    if not override:
        return data
    services = data.get("services") or {}
    if not isinstance(services, dict) or not isinstance(services.get("hosts") or {}, dict):
        return data  # let pydantic name the bad field
    hosts = {**(services.get("hosts") or {}), **_routes_for(data, override.get("hosts", {}))}
    merged = {**services, **override}
    if hosts:
        merged["hosts"] = hosts
    return {**data, "services": merged}


def _routes_for(data: dict[str, Any], hosts: dict[str, Any]) -> dict[str, Any]:
    """The deployment's routes that apply to this config.

    A deployment routes the policy servers of every config it may run (compose's second server
    answers ``policy-<AGORA_POLICY2_BASE>``): a ``policy-<key>`` route for a base this config
    does not have is not for it, and is dropped rather than rejected as an unknown service."""
    models = data.get("models")
    keys = set(models) if isinstance(models, dict) else set()
    return {name: host for name, host in hosts.items()
            if not (isinstance(name, str) and name.startswith("policy-")
                    and name.removeprefix("policy-") not in keys)}
