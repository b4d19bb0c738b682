"""Who sits where in an episode, and in which environment: the worker's side of the run config.

Kept apart from the Celery task (``tasks.py``) so that the scorers (``scoring.py``), which
replay an episode's env, and the task share one definition of each env.

A seat holds one of:
- an LLM agent of the config (an ``LLMPlayer`` asking the agent's adapter on its vLLM server);
- a scripted bot (``bot:random``, Tic-Tac-Toe episodes against a bot);
- a context agent (``context:<name>``, a key of the config's ``context_agents``): a scripted
  strategy in a ``BotPlayer``; a scheduled one is set to the strategy of the clock, which is
  the learner's live policy version, read from Redis once per episode;
- a frozen snapshot of a learner (``opponent == "pool"``: the one the trainer drew for that
  seat): an ``LLMPlayer`` asking the snapshot's own LoRA name on its agent's server, loaded
  there first if it is not (a vLLM restart forgets runtime adapters, so the worker checks every
  time instead of trusting the trainer to have loaded it).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

import httpx

from agora.agents.context import ContextAgent, ScheduledAgent, make_context_agent
from agora.config.agents import CONTEXT_PREFIX
from agora.config.run import RunConfig
from agora.envs.base import TurnBasedEnv
from agora.envs.registry import make_bot, make_env
from agora.rollout.runner import BotPlayer, LLMPlayer, Player
from agora.rollout.stream import EpisodeStream
from agora.serving.client import PolicyAdmin, PolicyClient, PolicyUnavailable, load_tokenizer
from agora.serving.model_folders import resolve_model


@dataclass
class ContextSeat:
    """A context agent behind a ``BotPlayer``: records name it ``context:<key>/<strategy>``, so
    an episode shows which strategy a scheduled seat played."""

    key: str
    agent: ContextAgent

    @property
    def strategy(self) -> str:
        return self.agent.active if isinstance(self.agent, ScheduledAgent) else self.agent.name

    @property
    def name(self) -> str:
        return f"{CONTEXT_PREFIX}{self.key}/{self.strategy}"

    def act(self, env, rng: random.Random) -> str:
        return self.agent.act(env, rng)


def make_context_seat(cfg: RunConfig, key: str, clock: int) -> ContextSeat:
    """The context agent ``key`` of the config, on the strategy its schedule gives at ``clock``
    (a fixed strategy ignores the clock)."""
    spec = cfg.context_agents[key]
    schedule = spec.make_schedule()
    if schedule is None:
        return ContextSeat(key, make_context_agent(spec.strategy))
    agent = ScheduledAgent.from_names(schedule, clock="update")
    agent.set_time(clock)
    return ContextSeat(key, agent)


def build_env(cfg: RunConfig, payload: dict) -> TurnBasedEnv:
    """The episode's environment, built by its env's spec from the config's section and the
    trainer's payload (a discussion's task, a support level by seed)."""
    section = cfg.environment
    spec = section.spec
    if spec.build is not None:
        return spec.build(section, payload)
    return make_env(section.name, num_seats=len(section.seats))


def seat_names(cfg: RunConfig, payload: dict) -> list[str]:
    """The episode's seats: the config's, or the learner's seat kept and every other seat
    given to the bot (``bot:<name>``) or to its pool snapshot (``snapshot``)."""
    opponent = payload.get("opponent", "self")
    seats = list(cfg.environment.seats)
    if opponent == "self":
        return seats
    learner_seat = int(payload.get("learner_seat", 0))
    other = "snapshot" if opponent == "pool" else "bot:" + opponent
    return [seats[s] if s == learner_seat else other for s in range(len(seats))]


def learner_clock(cfg: RunConfig, stream: EpisodeStream) -> int:
    """The context agents' clock: the live policy version of ``cfg.clock_agent`` (the learner:
    its version = the trainer's update index)."""
    return stream.get_version(cfg.clock_agent)


def build_players(cfg: RunConfig, payload: dict, stream: EpisodeStream,
                  clock: int | None = None) -> list[Player]:
    """One player per seat (see the module docstring)."""
    if clock is None and any(s.startswith(CONTEXT_PREFIX) for s in cfg.environment.seats):
        clock = learner_clock(cfg, stream)
    players: list[Player] = []
    for seat, name in enumerate(seat_names(cfg, payload)):
        if name.startswith("bot:"):
            players.append(BotPlayer(make_bot(name.removeprefix("bot:"))))
        elif name.startswith(CONTEXT_PREFIX):
            players.append(BotPlayer(make_context_seat(cfg, name.removeprefix(CONTEXT_PREFIX),
                                                       clock or 0)))
        elif name == "snapshot":
            players.append(snapshot_player(cfg, payload["snapshots"][str(seat)]))
        else:
            players.append(LLMPlayer(
                agent=name,
                client=_client(cfg, name, name),
                prefill=cfg.environment.prefill,
                version=functools.partial(stream.get_version, name),
            ))
    return players


def snapshot_player(cfg: RunConfig, snap: dict) -> LLMPlayer:
    """A frozen learner snapshot the trainer drew for a seat, as its own adapter on its
    agent's policy server."""
    agent, name, version = str(snap["agent"]), str(snap["name"]), int(snap["version"])
    ensure_adapter(cfg.policy_url(agent), name, str(snap["path"]))
    return LLMPlayer(agent=name, client=_client(cfg, agent, name),
                     prefill=cfg.environment.prefill, version=lambda: version)


def ensure_adapter(policy_url: str, name: str, path: str) -> None:
    admin = PolicyAdmin(policy_url)
    try:
        served = admin.models()
    except httpx.TransportError as err:  # restarting: the task waits and retries the episode
        raise PolicyUnavailable(f"policy server {policy_url} unreachable: {err}") from err
    if name not in served:
        admin.load_adapter(name, path)


def _client(cfg: RunConfig, agent_name: str, served_name: str) -> PolicyClient:
    """A client asking ``served_name`` with the sampling settings of ``agent_name``."""
    agent = cfg.agent(agent_name)
    model_path = resolve_model(cfg.models[agent.base].model)
    # A policy server that restarts (agora/stack/supervisor.py) is waited for as long as the
    # launcher waits for one to start, and so is the trainer re-loading the agents' adapters into it
    # (agora/serving/adapter_keeper.py). A snapshot's adapter is not the trainer's to re-load:
    # its 404 fails the turn at once, and the retried episode loads it (ensure_adapter).
    wait_s = cfg.services.health_timeout_s
    return PolicyClient(cfg.policy_url(agent_name), served_name, load_tokenizer(model_path),
                        agent.sampling, retry_for_s=wait_s,
                        adapter_wait_s=wait_s if served_name == agent_name else 0.0)
