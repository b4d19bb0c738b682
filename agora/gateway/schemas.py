"""``model`` strings -> what to ask which policy server for.

``alice`` and ``alice@latest`` are the agent's live LoRA name, which the trainer hot-swaps in
place, so "latest" needs no bookkeeping. ``alice@v12`` is version 12's own adapter folder
(``adapters/alice/v12``, which the trainer keeps), loaded into the agent's vLLM server on first
use under its own LoRA name ``alice@v12`` and reused after that. That is the same name the
rollout workers give opponent-pool snapshots (``agora.train.snapshots.snapshot_name``), so a version
loaded by either is reused by both.

A vLLM restart forgets runtime adapters: a pinned request that vLLM answers 404 is reloaded
once and retried (``Route.reload``), rather than trusting the in-memory "loaded" set.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path

import httpx

from agora.config.agents import AgentConfig
from agora.config.run import RunConfig
from agora.gateway.errors import GatewayError
from agora.gateway.proxy import transport_error, upstream_detail
from agora.gateway.run_context import RunContext
from agora.train.snapshots import snapshot_name

MODEL_PATTERN = re.compile(r"^(?P<agent>[^@\s]+)(?:@(?P<version>[^@\s]*))?$")
VERSION_PATTERN = re.compile(r"^v(\d{1,9})$")


@dataclass(frozen=True)
class ModelRef:
    agent: str
    version: int | None  # None = the latest (live) version

    @property
    def served_name(self) -> str:
        """The LoRA name vLLM knows this version by."""
        return self.agent if self.version is None else snapshot_name(self.agent, self.version)


def parse_model(text: str, param: str = "model") -> ModelRef:
    match = MODEL_PATTERN.match(text)
    version = match.group("version") if match else None
    if match is None or (version is not None and version != "latest"
                         and not VERSION_PATTERN.match(version)):
        message = (f"The model '{text}' is not an agent name: use 'agent', 'agent@latest' or "
                   "'agent@v<N>' (e.g. 'alice@v12')")
        raise GatewayError(404, message, "model_not_found", param=param)
    pinned = VERSION_PATTERN.match(version) if version else None
    return ModelRef(match.group("agent"), int(pinned.group(1)) if pinned else None)


@dataclass
class Route:
    """Where one request goes: the agent's server, under which LoRA name, at which version."""

    ref: ModelRef
    agent: AgentConfig
    base_url: str
    version: int | None  # the pinned version, or the live one if known
    adapter_path: Path | None = None  # pinned versions only

    @property
    def served_name(self) -> str:
        return self.ref.served_name

    def headers(self) -> dict[str, str]:
        """Which weights answered, for clients that log it (absent: unknown, no run)."""
        return {} if self.version is None else {"x-agora-policy-version": str(self.version)}


class ModelRouter:
    def __init__(self, cfg: RunConfig, run: RunContext, http: httpx.AsyncClient) -> None:
        self.cfg = cfg
        self.run = run
        self.http = http
        self.loaded: set[tuple[str, str]] = set()  # (server, LoRA name) pinned and loaded
        self.locks: dict[tuple[str, str], asyncio.Lock] = {}
        self.vision: dict[str, bool] = {}  # base model key -> takes images

    def agent(self, name: str, param: str = "model", asked: str | None = None) -> AgentConfig:
        """The agent ``name``; 404 naming what was ``asked`` for and the agents that exist."""
        try:
            return self.cfg.agent(name)
        except KeyError:
            known = [a.name for a in self.cfg.agents]
            message = f"The model '{asked or name}' does not exist; agents: {known}"
            raise GatewayError(404, message, "model_not_found", param=param) from None

    def sees_images(self, agent: AgentConfig) -> bool:
        """Whether the agent's base model takes images; a hub id that cannot be read here
        counts as yes (vLLM then judges)."""
        if agent.base not in self.vision:
            from agora.stack.preflight import sees_images

            self.vision[agent.base] = sees_images(self.cfg.models[agent.base].model) is not False
        return self.vision[agent.base]

    async def resolve(self, model: str, param: str = "model") -> Route:
        """The route of ``model``; a pinned version is loaded into vLLM if it is not yet."""
        ref = parse_model(model, param)
        agent = self.agent(ref.agent, param, asked=model)
        base_url = self.cfg.policy_url(agent.name)
        if ref.version is None:
            return Route(ref, agent, base_url, await self.run.live_version(agent.name))
        path = await self.pinned_path(ref, param)
        route = Route(ref, agent, base_url, ref.version, path)
        await self.ensure_loaded(route)
        return route

    async def pinned_path(self, ref: ModelRef, param: str) -> Path:
        if not self.run.attached:
            message = (f"The model '{ref.served_name}' pins a version, but this gateway serves "
                       "no training run (AGORA_RUN_ID / AGORA_RUN_DIR unset): only "
                       f"'{ref.agent}' is available")
            raise GatewayError(404, message, "model_not_found", param=param)
        path = await self.run.adapter_path(ref.agent, ref.version or 0)
        if path is None:
            versions = await self.run.versions_on_disk(ref.agent)
            shown = (f"versions v{versions[0]}..v{versions[-1]}" if versions
                     else "no saved versions yet")
            message = (f"The model '{ref.served_name}' does not exist: agent '{ref.agent}' has "
                       f"{shown}")
            raise GatewayError(404, message, "model_not_found", param=param)
        return path

    async def ensure_loaded(self, route: Route) -> None:
        key = (route.base_url, route.served_name)
        lock = self.locks.setdefault(key, asyncio.Lock())
        async with lock:  # one load per name, however many requests wait for it
            if key in self.loaded:
                return
            url = route.base_url + "/v1/load_lora_adapter"
            body = {"lora_name": route.served_name, "lora_path": str(route.adapter_path),
                    "load_inplace": True}
            try:
                resp = await self.http.post(url, json=body)
            except httpx.HTTPError as err:
                raise transport_error(err, url) from None
            if resp.status_code != 200:
                detail, _ = upstream_detail(resp)
                message = (f"policy server could not load '{route.served_name}' from "
                           f"{route.adapter_path}: {detail}")
                raise GatewayError(502, message, "adapter_load_failed", "upstream_error")
            self.loaded.add(key)

    async def reload(self, route: Route) -> bool:
        """After vLLM answered 404 for a pinned name: load it again. False for the latest
        name, which only the trainer loads (its 404 means no adapter was published yet)."""
        if route.ref.version is None:
            return False
        self.loaded.discard((route.base_url, route.served_name))
        await self.ensure_loaded(route)
        return True
