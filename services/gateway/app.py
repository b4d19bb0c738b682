"""Gateway: the public, OpenAI-compatible door to the run's agents (logic in ``agora.gateway``).

- ``/v1/chat/completions`` (streaming too) and ``/v1/models``: ``model`` is an agent name,
  ``agent@latest`` or ``agent@v12`` (a pinned version, loaded into vLLM on demand); the request
  is forwarded to the vLLM server of the agent's base model under the LoRA name of that version.
- ``/v1/agents``: base model, live version, saved versions and latest training metrics.
- ``/v1/episodes``: play a game or a discussion against agents, turn by turn.
- ``/v1/runs``: start a run from a posted config, read its status and metrics, stop it.
- API keys (``agora keys create``) with per-key rate limits, body size limits, upstream
  timeouts; every error in OpenAI's shape; ``/health`` and ``/metrics`` stay open, the API
  docs (``/docs``, ``/openapi.json``) are behind the keys; requests a web page could forge
  (bodies not declared JSON, other sites' ``Origin``) are refused
  (``agora.gateway.browser_guard``).

Configuration: ``create_app(cfg, settings)`` builds an app for a RunConfig (tests, tools).
``uvicorn services.gateway.app:app`` needs a module attribute, which is built on first access
from the YAML file named by ``AGORA_CONFIG`` and ``agora.gateway.settings`` (PEP 562 module
``__getattr__``). Why lazily: the module stays importable without a config, while a server
started without one still fails at once, before binding its port, with a message naming the
variable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import redis.asyncio as aioredis
from fastapi import Depends, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse, Response

from agora.config.agents import AgentConfig
from agora.config.base import ConfigError
from agora.config.run import RunConfig, load_config
from agora.gateway.agents import agents_view
from agora.gateway.auth import Authorizer, requester
from agora.gateway.browser_guard import guard_against_browsers
from agora.gateway.episodes import EpisodeService
from agora.gateway.errors import GatewayError, add_error_handlers
from agora.gateway.images import check_image_parts
from agora.gateway.observe import observe_gateway
from agora.gateway.proxy import forward, forward_stream, parse_chat_body, read_body
from agora.gateway.run_context import RunContext
from agora.gateway.runs import RunManager
from agora.gateway.schemas import ModelRouter
from agora.gateway.settings import CONFIG_ENV, GatewaySettings
from agora.gateway.upstream import upstream_client
from agora.ops.http import app_on_first_access
from agora.ops.metrics import instrument

CONNECT_TIMEOUT_S = 5.0


def model_entry(agent: AgentConfig, created: int) -> dict:
    return {
        "id": agent.name,
        "object": "model",
        "created": created,
        "owned_by": "agora",
        "base": agent.base,
        "trainable": agent.trainable,
    }


def needs_redis(service: object, what: str) -> None:
    if service is None:
        raise GatewayError(503, f"{what} need Redis: start the gateway with AGORA_REDIS_URL "
                           "(or REDIS_URL) set", "redis_unavailable", "server_error")


def create_app(cfg: RunConfig, settings: GatewaySettings | None = None,
               timeout_s: float | None = None) -> FastAPI:
    """The gateway for one run config. ``settings.timeout_s`` bounds each upstream read (a
    generation longer than this answers 504); connecting gets a short budget so a dead server
    is a fast 502."""
    settings = settings or GatewaySettings.from_env({})  # the defaults: app_from_env reads env
    if timeout_s is not None:
        settings = GatewaySettings(**{**settings.model_dump(), "timeout_s": timeout_s})
    redis = (aioredis.from_url(settings.redis_url, decode_responses=True)
             if settings.redis_url else None)
    run = RunContext(settings.run_id, settings.run_dir, redis)
    authorize = Authorizer(redis, settings.redis_url, require=settings.require_keys,
                           default_rate=settings.default_rate, pepper=settings.key_pepper)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with upstream_client(settings.timeout_s, CONNECT_TIMEOUT_S) as http:
            app.state.http = http
            app.state.router = ModelRouter(cfg, run, http)
            app.state.episodes = app.state.runs = None
            reaper = None
            if redis is not None:
                app.state.episodes = EpisodeService(
                    cfg, app.state.router, redis, http, settings.episode_ttl_s,
                    lock_s=settings.timeout_s * 4 + 30)
                app.state.runs = RunManager(redis, settings.runs_dir, settings.redis_url or "",
                                            run, settings.stop_grace_s)
                reaper = asyncio.create_task(app.state.runs.reap_forever())
            try:
                yield
            finally:
                if reaper is not None:
                    reaper.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await reaper
                if redis is not None:
                    await redis.aclose()

    # The API docs are routes of their own below, so that they sit behind the keys too.
    app = FastAPI(title="agora gateway", version="0.2.0", lifespan=lifespan,
                  dependencies=[Depends(authorize)], docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.cfg = cfg
    instrument(app, "gateway")
    guard_against_browsers(app, settings.origins())
    observe_gateway(app)
    add_error_handlers(app)
    created = int(time.time())
    limit = settings.max_body_bytes

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/openapi.json", include_in_schema=False)
    def openapi_spec() -> dict:
        return app.openapi()

    @app.get("/docs", include_in_schema=False)
    def api_docs() -> Response:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="agora gateway")

    @app.get("/v1/models")
    def list_models() -> dict:
        return {"object": "list", "data": [model_entry(a, created) for a in cfg.agents]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = parse_chat_body(await read_body(request, limit))
        router: ModelRouter = request.app.state.router
        route = await router.resolve(body["model"])
        check_image_parts(body["messages"], route.agent.name, router.sees_images(route.agent),
                          settings.max_image_bytes, settings.max_image_side)
        body["model"] = route.served_name
        url = route.base_url + "/v1/chat/completions"
        send = forward_stream if body.get("stream") else forward
        http: httpx.AsyncClient = request.app.state.http
        try:
            return await send(http, url, body, route.served_name, route.headers())
        except GatewayError as err:
            if err.status == 404 and await router.reload(route):  # vLLM forgot a pinned one
                return await send(http, url, body, route.served_name, route.headers())
            raise

    @app.get("/v1/agents")
    async def list_agents() -> dict:
        return {"object": "list", "data": await agents_view(cfg, run)}

    @app.get("/v1/agents/{name}")
    async def get_agent(name: str, request: Request) -> dict:
        request.app.state.router.agent(name)  # 404 naming the agents
        return next(a for a in await agents_view(cfg, run) if a["id"] == name)

    @app.post("/v1/episodes", status_code=201)
    async def create_episode(request: Request) -> dict:
        needs_redis(request.app.state.episodes, "episodes")
        return await request.app.state.episodes.create(await read_body(request, limit),
                                                       requester(request))

    @app.get("/v1/episodes/{episode_id}")
    async def get_episode(episode_id: str, request: Request) -> dict:
        needs_redis(request.app.state.episodes, "episodes")
        return await request.app.state.episodes.get(episode_id, requester(request))

    @app.post("/v1/episodes/{episode_id}/moves")
    async def move(episode_id: str, request: Request) -> dict:
        needs_redis(request.app.state.episodes, "episodes")
        return await request.app.state.episodes.move(episode_id, await read_body(request, limit),
                                                     requester(request))

    @app.post("/v1/runs", status_code=201)
    async def start_run(request: Request) -> dict:
        needs_redis(request.app.state.runs, "runs")
        return await request.app.state.runs.start(await read_body(request, limit))

    @app.get("/v1/runs")
    async def list_runs(request: Request) -> dict:
        needs_redis(request.app.state.runs, "runs")
        return {"object": "list", "data": await request.app.state.runs.list()}

    @app.get("/v1/runs/{run_id}")
    async def get_run(run_id: str, request: Request, last: int = 5) -> JSONResponse:
        needs_redis(request.app.state.runs, "runs")
        runs: RunManager = request.app.state.runs
        return JSONResponse(await runs.describe(await runs.record(run_id), max(0, last)))

    @app.post("/v1/runs/{run_id}/stop")
    async def stop_run(run_id: str, request: Request) -> dict:
        needs_redis(request.app.state.runs, "runs")
        return await request.app.state.runs.stop(run_id)

    return app


def app_from_env() -> FastAPI:
    settings = GatewaySettings.from_env()
    if settings.config is None:
        raise ConfigError(
            f"{CONFIG_ENV} is not set: point it at the run config YAML, e.g. "
            f"{CONFIG_ENV}=configs/tictactoe_selfplay.yaml uvicorn services.gateway.app:app"
        )
    return create_app(load_config(settings.config), settings)


__getattr__ = app_on_first_access(globals(), app_from_env)
