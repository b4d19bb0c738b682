"""Play an episode against trained agents, turn by turn, over HTTP (``/v1/episodes``).

A user takes one or more seats (``"user"``) of a game (Tic-Tac-Toe, Hanabi) or a discussion;
the other seats hold agents (``alice``, ``alice@v12``) or scripted bots (``bot:minimax``). Each
request plays the user's move, then every agent and bot turn up to the user's next turn or the
end, and answers with the new state.

State lives in Redis as the episode's spec plus the list of actions so far, with a TTL that each
move renews: the env is rebuilt by replaying the actions (every env here is deterministic given
its seed; the reward service replays episodes the same way). That keeps any gateway replica able
to serve any episode and no pickled env in Redis.

A user's illegal move is refused with 422 and changes nothing (a person gets to try again); an
agent's illegal move forfeits the game, as in training. Agents play as they do in rollouts: the
same observation, prefill (the assistant turn starts with ``[``) and sampling settings as their
run config (per-env defaults when the episode's env is not the run's), through vLLM's chat API
(``continue_final_message`` continues the prefill, so the gateway needs no tokenizer). A request
is all or nothing: if an agent's server fails, nothing of that request is saved (retry it).
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import secrets
import time
from functools import lru_cache
from typing import Literal

import httpx
import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from redis.exceptions import LockError

from agora.config.agents import SamplingConfig
from agora.config.run import RunConfig
from agora.envs.base import TurnBasedEnv, legal_completions
from agora.envs.images import ObservationMode
from agora.envs.registry import DRAWN_ENVS, GAME_BOTS, REGISTRY, SPECS, make_bot, make_env
from agora.gateway.errors import GatewayError, validation_error
from agora.gateway.proxy import parse_json_object, post_json
from agora.gateway.schemas import ModelRouter, Route
from agora.serving.requests import chat_request

USER = "user"
BOT_PREFIX = "bot:"
# The envs it plays: those whose spec says how (EnvSpec.play), plugins' included.
SEAT_COUNTS: dict[str, tuple[int, int]] = {s.name: s.seats for s in SPECS if s.play is not None}
# How an agent plays an env its run did not train on: (prefill, sampling). For the run's own
# env, the run config's prefill and the agent's sampling are used instead.
DEFAULT_PLAY: dict[str, tuple[str, SamplingConfig]] = {
    s.name: (s.play.prefill, SamplingConfig(max_tokens=s.play.max_tokens, stop=list(s.play.stop)))
    for s in SPECS if s.play is not None}
MAX_TURNS_PER_REQUEST = 256  # a safety bound: every env here ends far sooner
KEY = "agora:gateway:episode:{}"


class TaskIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str = Field(..., min_length=1, max_length=8000)
    kind: Literal["math", "nli"] = "math"
    task_id: str = Field("user", max_length=200)


class EpisodeCreate(BaseModel):
    """POST /v1/episodes."""

    model_config = ConfigDict(extra="forbid")
    env: str = Field(..., description=f"one of {sorted(SEAT_COUNTS)}")
    seats: list[str] = Field(..., min_length=1, max_length=5)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    task: TaskIn | None = Field(None, description="discussion: the question (default: one "
                                                  "from the run's held-out tasks)")
    rounds: int = Field(2, ge=1, le=10, description="discussion rounds")
    temperature: float | None = Field(None, ge=0.0, le=5.0,
                                      description="override the agents' sampling temperature")
    observation: ObservationMode = Field(
        "text", description="what every seat sees: the board as text, as an image part (for "
        "vision-language agents; docs/vlm.md) or both")

    @field_validator("env")
    @classmethod
    def _playable(cls, env: str) -> str:
        if env not in SEAT_COUNTS:
            raise ValueError(f"'{env}' cannot be played here; playable envs: "
                             f"{sorted(SEAT_COUNTS)}")
        return env

    @model_validator(mode="after")
    def _seats(self) -> EpisodeCreate:
        low, high = SEAT_COUNTS[self.env]
        if not low <= len(self.seats) <= high:
            size = str(low) if low == high else f"{low}-{high}"
            raise ValueError(f"seats: {self.env} has {size} seats, got {len(self.seats)}")
        if self.observation != "text" and not REGISTRY[self.env].images:
            raise ValueError(f"observation: {self.env} is shown as text only; envs drawn as "
                             f"images: {list(DRAWN_ENVS)}")
        if USER not in self.seats:
            raise ValueError(f"seats: at least one seat must be '{USER}' (you)")
        bots = GAME_BOTS.get(self.env, ())
        for index, seat in enumerate(self.seats):
            if seat.startswith(BOT_PREFIX) and seat.removeprefix(BOT_PREFIX) not in bots:
                raise ValueError(f"seats.{index}: '{seat}' is not a {self.env} bot "
                                 f"({[BOT_PREFIX + b for b in bots] or 'none exist'})")
        return self


class MoveIn(BaseModel):
    """POST /v1/episodes/{id}/moves."""

    model_config = ConfigDict(extra="forbid")
    move: str = Field(..., min_length=1, max_length=8000)


class EpisodeState(BaseModel):
    """What Redis keeps: enough to rebuild the env, plus the transcript."""

    id: str
    spec: EpisodeCreate
    actions: list[str] = Field(default_factory=list)
    turns: list[dict] = Field(default_factory=list)
    created: float
    owner: str | None = None  # the key that made it; only that key may see or play it


def build_env(spec: EpisodeCreate) -> TurnBasedEnv:
    """The episode's env: a fresh game, or (a discussion) built by its spec from the episode's
    seats, rounds and task, which is filled in at creation (``with_task``)."""
    env_spec = REGISTRY[spec.env]
    if spec.observation != "text":  # a game that draws itself (checked on creation)
        assert env_spec.build is not None
        return env_spec.build(spec, {"seed": spec.seed})
    if env_spec.make is not None:
        return make_env(spec.env, num_seats=len(spec.seats))
    assert env_spec.build is not None and spec.task is not None
    task = {**spec.task.model_dump(), "answer": ""}  # nobody checks a user's question
    return env_spec.build(spec, {"task": task, "seed": spec.seed})


def replay(state: EpisodeState) -> TurnBasedEnv:
    env = build_env(state.spec)
    env.reset(state.spec.seed)
    for action in state.actions:
        env.step(action)
    return env


@lru_cache(maxsize=4)
def held_out_tasks(spec_json: str) -> list:
    """The run's test-split tasks (cached: reasoning-gym generates them on each load)."""
    from agora.data import load_tasks

    return load_tasks(json.loads(spec_json), split="test", limit=200)


def outcome_view(env: TurnBasedEnv) -> dict | None:
    if not env.done:
        return None
    outcome = env.outcome()
    view = {"winner": outcome.winner, "draw": outcome.draw, "illegal_seat": outcome.illegal_seat,
            "reason": outcome.reason, "info": outcome.info}
    env_spec = REGISTRY[env.name]
    if env_spec.is_game and not env_spec.cooperative:  # a winner and losers
        view["results"] = [outcome.result_for(seat) for seat in range(env.num_seats)]
    if hasattr(env, "answers"):  # a discussion's final answers
        view["answers"] = env.answers
    return view


class EpisodeService:
    def __init__(self, cfg: RunConfig, router: ModelRouter, redis: aioredis.Redis,
                 http: httpx.AsyncClient, ttl_s: int, lock_s: float) -> None:
        self.cfg = cfg
        self.router = router
        self.redis = redis
        self.http = http
        self.ttl_s = ttl_s
        self.lock_s = lock_s

    # --- routes --------------------------------------------------------------------------

    async def create(self, raw: bytes, owner: str | None = None) -> dict:
        try:
            spec = EpisodeCreate.model_validate(parse_json_object(raw))
        except ValidationError as err:
            raise validation_error(err) from None
        spec = self.with_task(spec)
        for index, seat in enumerate(spec.seats):  # unknown agents/versions fail before play
            if seat != USER and not seat.startswith(BOT_PREFIX):
                route = await self.router.resolve(seat, param=f"seats.{index}")
                if spec.observation != "text" and not self.router.sees_images(route.agent):
                    raise GatewayError(422, f"seats.{index}: agent '{route.agent.name}' reads "
                                       "text only; observation 'image' or 'both' needs "
                                       "vision-language agents", "image_not_supported",
                                       param=f"seats.{index}")
        state = EpisodeState(id="ep-" + secrets.token_hex(8), spec=spec, created=time.time(),
                             owner=owner)
        env = build_env(spec)
        env.reset(spec.seed)
        new = await self.advance(state, env)
        await self.save(state)
        return self.view(state, env, new)

    async def get(self, episode_id: str, requester: str | None = None) -> dict:
        state = await self.load(episode_id, requester)
        return self.view(state, replay(state), [])

    async def move(self, episode_id: str, raw: bytes, requester: str | None = None) -> dict:
        try:
            move = MoveIn.model_validate(parse_json_object(raw)).move
        except ValidationError as err:
            raise validation_error(err) from None
        lock = self.redis.lock(KEY.format(episode_id) + ":lock", timeout=self.lock_s)
        if not await lock.acquire(blocking=False):
            raise GatewayError(409, f"episode '{episode_id}' is busy with another move; retry "
                               "when it has answered", "episode_busy")
        try:
            state = await self.load(episode_id, requester)
            env = replay(state)
            if env.done:
                raise GatewayError(409, f"episode '{episode_id}' is finished", "episode_finished")
            seat = env.current_seat
            if state.spec.seats[seat] != USER:  # cannot happen: requests are all or nothing
                raise GatewayError(409, f"it is seat {seat}'s turn, not yours", "not_your_turn")
            trial = copy.deepcopy(env)
            result = trial.step(move)
            if not result.legal:
                raise GatewayError(422, f"illegal move {move!r}: {result.reason}; legal moves: "
                                   f"{env.legal_actions()}", "illegal_move", param="move")
            env.step(move)
            state.actions.append(move)
            turn = {"seat": seat, "player": USER, "role": env.role(seat), "text": move,
                    "legal": True}
            state.turns.append(turn)
            new = [turn, *await self.advance(state, env)]
            await self.save(state)
            return self.view(state, env, new)
        finally:
            with contextlib.suppress(LockError):  # expired mid-move: nothing left to release
                await lock.release()

    # --- play ----------------------------------------------------------------------------

    def with_task(self, spec: EpisodeCreate) -> EpisodeCreate:
        """A discussion without a question gets one of the run's held-out tasks (by seed)."""
        if REGISTRY[spec.env].make is not None or spec.task is not None:
            return spec
        source = self.cfg.environment.task
        if source is None:
            raise GatewayError(422, "task: a discussion needs a task ({'question': ..., 'kind': "
                               "'math'|'nli'}); this run has no task source to draw one from",
                               "invalid_body", param="task")
        tasks = held_out_tasks(json.dumps(source.model_dump(mode="json"), sort_keys=True))
        task = tasks[spec.seed % len(tasks)]
        return spec.model_copy(update={"task": TaskIn(question=task.question, kind=task.kind,
                                                      task_id=task.task_id)})

    async def advance(self, state: EpisodeState, env: TurnBasedEnv) -> list[dict]:
        """Play every non-user turn until a user's turn or the end; returns the new turns."""
        new: list[dict] = []
        routes: dict[int, Route] = {}
        rng = random.Random(f"{state.spec.seed}:{len(state.actions)}")
        for _ in range(MAX_TURNS_PER_REQUEST):
            if env.done:
                break
            seat = env.current_seat
            player = state.spec.seats[seat]
            if player == USER:
                break
            if player.startswith(BOT_PREFIX):
                text = make_bot(player.removeprefix(BOT_PREFIX)).act(env, rng)
                version = None
            else:
                if seat not in routes:
                    routes[seat] = await self.router.resolve(player, param=f"seats.{seat}")
                text = await self.agent_turn(routes[seat], env, seat, state.spec)
                version = routes[seat].version
            role = env.role(seat)
            result = env.step(text)
            state.actions.append(text)
            turn = {"seat": seat, "player": player, "role": role, "text": text,
                    "legal": result.legal}
            if version is not None:
                turn["version"] = version
            if not result.legal:
                turn["reason"] = result.reason
            state.turns.append(turn)
            new.append(turn)
        return new

    def play_settings(self, route: Route, spec: EpisodeCreate) -> tuple[str, SamplingConfig]:
        if spec.env == self.cfg.environment.name:
            prefill, sampling = self.cfg.environment.prefill, route.agent.sampling
        else:
            prefill, sampling = DEFAULT_PLAY[spec.env]
            sampling = sampling.model_copy(update={"temperature": route.agent.sampling.temperature})
        if spec.temperature is not None:
            sampling = sampling.model_copy(update={"temperature": spec.temperature})
        return prefill, sampling

    async def agent_turn(self, route: Route, env: TurnBasedEnv, seat: int,
                         spec: EpisodeCreate) -> str:
        prefill, sampling = self.play_settings(route, spec)
        messages = env.observation(seat)
        choices = legal_completions(env, prefill) if sampling.legal_actions_only else None
        body = chat_request(route.served_name, messages, sampling, prefill, choices)
        url = route.base_url + "/v1/chat/completions"
        try:
            data = await post_json(self.http, url, body, route.served_name)
        except GatewayError as err:
            if err.status != 404 or not await self.router.reload(route):
                raise
            data = await post_json(self.http, url, body, route.served_name)
        content = data["choices"][0]["message"].get("content") or ""
        return prefill + content

    # --- storage -------------------------------------------------------------------------

    async def load(self, episode_id: str, requester: str | None = None) -> EpisodeState:
        """The episode, if ``requester`` (a key name, None on an open gateway) may see it:
        another key's episode answers the same 404 as a missing one, so ids cannot be probed."""
        raw = await self.redis.get(KEY.format(episode_id))
        state = EpisodeState.model_validate_json(raw) if raw is not None else None
        if state is None or state.owner not in (None, requester):
            raise GatewayError(404, f"no episode '{episode_id}' (it may have expired after "
                               f"{self.ttl_s} s without a move)", "episode_not_found")
        return state

    async def save(self, state: EpisodeState) -> None:
        await self.redis.set(KEY.format(state.id), state.model_dump_json(), ex=self.ttl_s)

    def view(self, state: EpisodeState, env: TurnBasedEnv, new: list[dict]) -> dict:
        spec = state.spec
        to_move = None if env.done else env.current_seat
        yours = to_move is not None and spec.seats[to_move] == USER
        return {
            "id": state.id,
            "object": "episode",
            "env": spec.env,
            "seed": spec.seed,
            "seats": [{"seat": i, "player": p, "role": env.role(i)}
                      for i, p in enumerate(spec.seats)],
            "status": "finished" if env.done else "your_turn",
            "current_seat": to_move,
            "observation": env.observation(to_move) if yours else None,
            "legal_actions": env.legal_actions() if yours else [],
            "turns": state.turns,
            "new_turns": new,
            "outcome": outcome_view(env),
            "task": spec.task.model_dump() if spec.task else None,
            "expires_in_s": self.ttl_s,
        }
