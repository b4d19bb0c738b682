"""The rollout Celery task: play one episode, score it, append it to the run's stream once.

Delivery guarantees, and what provides each:
- not lost when a worker dies mid-episode: ``acks_late`` + ``reject_on_worker_lost``; with the
  Redis broker an unacked message returns to the queue after ``visibility_timeout`` seconds.
- not duplicated when it is redelivered: ``EpisodeStream.append_once`` (id set + XADD, atomic),
  and a cheap early exit when the id is already in the stream.
- survives a policy or reward server restart: the clients retry connection errors with backoff
  (tenacity), and wait for the trainer to re-load the agent's adapter into a restarted policy
  server (agora/serving/adapter_keeper.py); past that budget the task retries itself.
- survives a Redis restart: its Redis client retries (agora/stack/redis_client.py), Celery
  reconnects its broker connection, and a task whose ack was lost runs again and is dropped as a
  duplicate.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import time
from collections.abc import Callable

import httpx
import redis
from celery import Celery
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from agora.config.run import RunConfig, parse_config
from agora.data import Task, TaskRef
from agora.envs.registry import REGISTRY
from agora.ops.metrics import (
    ROLLOUT_DUPLICATES,
    ROLLOUT_EPISODE_SECONDS,
    ROLLOUT_EPISODES,
    ROLLOUT_FAILURES,
    ROLLOUT_RETRIES,
)
from agora.ops.service_key import service_headers
from agora.rewards.discussion import DiscussionCredit, discussion_rewards
from agora.rollout.records import EpisodeRecord, RewardParts
from agora.rollout.runner import run_episode
from agora.rollout.scoring import RewardUnavailable, score_episode
from agora.rollout.seating import build_env, build_players, learner_clock
from agora.rollout.settings import WorkerSettings
from agora.rollout.stream import EpisodeStream
from agora.sandbox.remote import SandboxUnavailable, code_runs_at
from agora.serving.client import RETRYABLE, PolicyUnavailable
from agora.stack.redis_client import resilient_redis
from agora.train.curriculum import episode as curriculum

log = logging.getLogger(__name__)

TASK_NAME = "agora.rollout.play_episode"
QUEUE = "rollouts"


def redis_url() -> str:
    return WorkerSettings().redis_url


def make_celery(broker_url: str | None = None, visibility_timeout: int | None = None) -> Celery:
    url = broker_url or redis_url()
    vt = visibility_timeout or WorkerSettings().visibility_timeout
    app = Celery("agora", broker=url)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_default_queue=QUEUE,
        broker_transport_options={
            "visibility_timeout": vt,
            # kombu's defaults scan for abandoned (unacked, expired) messages only every
            # 10 s x 10 calls, under a mutex that a SIGKILLed worker can hold for 300 s:
            # a killed worker's episodes came back minutes late. Scan every vt/4 seconds and
            # let a dead holder's mutex expire after vt.
            "unacked_restore_interval": max(1, vt // 4),
            "unacked_restore_throttle": 1,
            "unacked_mutex_expire": max(10, vt),
        },
        broker_connection_retry_on_startup=True,
        # Sending a task while Redis restarts (agora/stack/supervisor.py): keep trying for ~2
        # minutes (Celery's default gives up after 3 tries in 0.6 s, which crashed the trainer).
        task_publish_retry_policy={"max_retries": 60, "interval_start": 0,
                                   "interval_step": 0.5, "interval_max": 2},
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )
    return app


celery_app = make_celery()


@functools.lru_cache(maxsize=4)
def _config(config_json: str) -> RunConfig:
    return parse_config(json.loads(config_json), "<task payload>")


@functools.lru_cache(maxsize=4)
def _redis(url: str) -> redis.Redis:
    # Rides out a Redis restart mid-episode (agora/stack/redis_client.py) instead of failing it.
    return resilient_redis(url)


def verification_request(cfg: RunConfig, record: EpisodeRecord, payload: dict) -> dict:
    """The reward service's request: replay a game, or check every answer of a discussion."""
    if "task" in payload:  # a discussion: answers checked against the task (math / nli)
        task = Task.model_validate(payload["task"])
        return {
            "kind": task.kind,
            "task": TaskRef.model_validate(task.model_dump(include=set(TaskRef.model_fields)))
            .model_dump(mode="json"),
            "responses": [t.text for t in record.turns],
            "rewards": {"correct": cfg.reward.correct, "wrong": cfg.reward.wrong},
            "mode": cfg.reward.mode,
            **({"blend_weight": cfg.reward.blend_weight} if cfg.reward.mode == "blend" else {}),
            **({"answer": cfg.environment.answer} if cfg.environment.answer != "text" else {}),
        }
    return {
        "task": "game_outcome",
        "env": record.env,
        "actions": [t.text for t in record.turns],
        "seed": record.seed,
        "num_seats": len(record.seats),
        **curriculum.verification_fields(payload),  # an opening to replay first
        "rewards": {
            "win": cfg.reward.win,
            "draw": cfg.reward.draw,
            "loss": cfg.reward.loss,
            "illegal": cfg.environment.illegal_move_penalty,
            "team_credit": cfg.reward.team_credit,
        },
    }


def verify(cfg: RunConfig, body: dict) -> dict:
    """Ask the reward service for the verdict, retrying while it is unreachable."""
    url = cfg.service_url("reward") + "/v1/verify"
    try:
        for attempt in Retrying(
            retry=retry_if_exception_type(RETRYABLE),
            wait=wait_exponential(multiplier=0.5, max=5),
            stop=stop_after_delay(30),
            reraise=True,
        ):
            with attempt:
                resp = httpx.post(url, json=body, timeout=60, headers=service_headers())
    except RETRYABLE as err:
        raise RewardUnavailable(f"reward service unreachable at {url}: {err}") from err
    resp.raise_for_status()
    return resp.json()


def apply_verdict(record: EpisodeRecord, verdict: dict, cooperation: float = 0.0,
                  credit: DiscussionCredit = "future") -> None:
    if "results" in verdict and verdict.get("kind") in ("math", "nli"):
        apply_discussion_verdict(record, verdict, cooperation, credit)
        return
    record.results = verdict["results"]
    for turn, reward in zip(record.turns, verdict["turn_rewards"], strict=True):
        turn.reward = float(reward)
    totals: dict[str, float] = {}
    for seat, agent in enumerate(record.seats):
        if agent.startswith("bot:"):
            continue
        totals[agent] = totals.get(agent, 0.0) + float(verdict["seat_rewards"][seat])
    record.rewards = totals
    record.reward_parts = {a: RewardParts(verifier=v) for a, v in totals.items()}
    spec = REGISTRY.get(record.env)
    if "score" in record.info and spec is not None and spec.cooperative and spec.metrics:
        # The team's score (Hanabi's fireworks, 0-25): the first metric a cooperative game's
        # spec names is the one it is judged by (agora/envs/hanabi.py SPEC).
        metric = next(iter(spec.metrics))
        record.info["metrics"] = {agent: {metric: float(record.info["score"])}
                                  for agent in totals}


def apply_discussion_verdict(record: EpisodeRecord, verdict: dict, cooperation: float,
                             credit: DiscussionCredit = "future") -> None:
    """Turn rewards from per-answer verdicts, mixed across rounds and teammates (MAPoRL)."""
    seats = len(record.seats)
    results = verdict["results"]
    if len(results) != len(record.turns) or len(results) % seats:
        raise ValueError(f"verdict has {len(results)} results for {len(record.turns)} turns")
    rounds = len(results) // seats
    grid = [results[r * seats:(r + 1) * seats] for r in range(rounds)]
    rewards = discussion_rewards([[float(x["reward"]) for x in row] for row in grid], cooperation,
                                 credit)
    for index, turn in enumerate(record.turns):
        r, seat = divmod(index, seats)
        turn.reward = rewards[r][seat]
        turn.legal = bool(grid[r][seat]["parsable"])
    correct = [[1.0 if x["correct"] else 0.0 for x in row] for row in grid]
    record.results = ["correct" if c else "wrong" for c in correct[-1]]
    record.info["scores"] = correct
    totals: dict[str, list[float]] = {}
    for turn in record.turns:
        totals.setdefault(turn.agent, []).append(turn.reward)
    record.rewards = {a: sum(v) / len(v) for a, v in totals.items()}
    record.reward_parts = {a: RewardParts(verifier=v) for a, v in record.rewards.items()}
    if verdict.get("answer", "text") != "text":
        record.info["metrics"] = program_counts(record, results)


def program_counts(record: EpisodeRecord, results: list[dict]) -> dict[str, dict[str, float]]:
    """Per agent, this episode's answers given as programs: run, failed (crashed, timed out,
    printed nothing) and right (ran and printed the right answer)."""
    counts: dict[str, dict[str, float]] = {}
    for turn, result in zip(record.turns, results, strict=True):
        mine = counts.setdefault(turn.agent, {"programs_run": 0.0, "programs_failed": 0.0,
                                              "programs_right": 0.0})
        status = result.get("program")
        if status is None:
            continue
        mine["programs_run"] += 1
        mine["programs_failed"] += status != "ok"
        mine["programs_right"] += status == "ok" and bool(result["correct"])
    return counts


def record_stats(stream: EpisodeStream, record: EpisodeRecord) -> None:
    """Counters the progress view and metrics read (per learner seat vs each opponent)."""
    pipe = stream.r.pipeline(transaction=False)
    key = stream.keys.stats
    pipe.hincrby(key, "episodes", 1)
    pipe.hincrby(key, f"episodes:{record.opponent}", 1)
    for turn in record.turns:
        if turn.is_llm:
            pipe.hincrby(key, "llm_turns", 1)
            pipe.hincrby(key, "illegal_turns", 0 if turn.legal else 1)
    for seat, agent in enumerate(record.seats):
        if not agent.startswith("bot:") and seat < len(record.results):
            pipe.hincrby(key, f"result:{record.opponent}:{record.results[seat]}", 1)
    judged = record.info.get("judge")
    if isinstance(judged, dict):
        pipe.hincrby(key, "judge_requests", int(judged.get("requests", 0)))
        pipe.hincrby(key, "judge_malformed", int(judged.get("malformed", 0)))
        pipe.hincrby(key, "judge_position_bias", int(judged.get("position_bias", 0)))
    pipe.execute()


def play(payload: dict) -> str:
    """The task body, callable without Celery (tests, benchmarks)."""
    cfg = _config(payload["config"])
    stream = _stream(payload)
    episode_id = payload["episode_id"]
    if stream.has_episode(episode_id):
        ROLLOUT_DUPLICATES.inc()
        return "duplicate"
    started = time.perf_counter()
    payload = curriculum.prepare(cfg, payload, stream.r)  # the level: an opening, a question
    clock = learner_clock(cfg, stream) if cfg.context_agents else None
    players = build_players(cfg, payload, stream, clock=clock)
    seed = int(payload["seed"])
    with code_runs_at(cfg.service_url("reward")):  # tool code runs in the reward's sandbox
        record = asyncio.run(
            run_episode(
                curriculum.shape_env(cfg, build_env(cfg, payload), payload),
                players,
                run_id=payload["run_id"],
                episode_id=episode_id,
                seed=seed,
                opponent=payload.get("opponent", "self"),
            )
        )
    if "task" in payload:
        record.task_id = payload["task"]["task_id"]
    if cfg.context_agents:
        record.info["clock"] = clock  # the update index the scheduled context agents saw
    if "snapshots" in payload:
        record.info["snapshots"] = payload["snapshots"]
    if "group" in payload:  # one of ppo.group_size episodes of this seed (grpo / rloo)
        record.info["group"] = payload["group"]
    curriculum.label(record, payload)  # info["curriculum"]: the level it was played at
    if not score_episode(cfg, record):  # negotiation, story, code_debug: agora/rollout/scoring
        apply_verdict(record, verify(cfg, verification_request(cfg, record, payload)),
                      cfg.reward.cooperation, cfg.reward.discussion_credit)
    if not stream.append_once(record):
        ROLLOUT_DUPLICATES.inc()
        return "duplicate"
    record_stats(stream, record)
    ROLLOUT_EPISODES.labels(record.env, record.opponent).inc()
    ROLLOUT_EPISODE_SECONDS.labels(record.env).observe(time.perf_counter() - started)
    return "added"


@celery_app.task(
    name=TASK_NAME,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    retry_backoff=True,
    retry_backoff_max=60,
)
def play_episode(self, payload: dict) -> str:
    try:
        return play(payload)
    except (PolicyUnavailable, RewardUnavailable, SandboxUnavailable) as err:
        # Servers restarting: wait and retry for as long as it takes (bounded by max_retries).
        ROLLOUT_RETRIES.labels("unavailable").inc()
        # An explicit countdown: without one Celery waits its default_retry_delay, 3 minutes.
        raise self.retry(exc=err, max_retries=30,
                         countdown=min(60, 2 ** self.request.retries)) from err
    except Exception as err:
        # Anything else may be transient too, but a poison task must not loop forever: retry a
        # few times, then count it as failed so the trainer stops waiting for it.
        if self.request.retries >= 3:
            _stream(payload).mark_failed(payload.get("episode_id"))
            ROLLOUT_FAILURES.inc()
            log.error("episode %s failed for good: %r", payload.get("episode_id"), err)
            raise
        log.warning("episode %s failed (%s); retrying", payload.get("episode_id"), err)
        ROLLOUT_RETRIES.labels("error").inc()
        raise self.retry(exc=err, countdown=2 ** self.request.retries) from err


def _stream(payload: dict) -> EpisodeStream:
    return EpisodeStream(_redis(payload.get("redis_url") or redis_url()), payload["run_id"])


def episode_payload(cfg: RunConfig, run_id: str, index: int, rng: random.Random,
                    redis_url_: str, task: Task | None = None,
                    draw_snapshots: Callable[[random.Random, int], dict] | None = None
                    ) -> dict:
    """One task's arguments: which opponent (drawn from the config's mix) and seat, for a
    discussion the question to discuss, and for a pool episode the snapshot in every seat but
    the learner's (``draw_snapshots``, the trainer's pool: seat -> name, agent, adapter path,
    version)."""
    names = list(cfg.environment.opponents)
    weights = [cfg.environment.opponents[n] for n in names]
    opponent = rng.choices(names, weights=weights)[0]
    extra: dict = {"task": task.model_dump(mode="json")} if task is not None else {}
    seats = cfg.environment.seats
    if opponent == "self":
        learner_seat = rng.randrange(len(seats))  # unused; drawn to keep the rng sequence
    else:
        # Against a bot or a snapshot the learner keeps one of its own seats (never a context
        # agent's or a frozen agent's).
        trainable = {a.name for a in cfg.trainable_agents}
        own = [i for i, s in enumerate(seats) if s in trainable] or list(range(len(seats)))
        learner_seat = own[rng.randrange(len(own))]
    if opponent == "pool":
        if draw_snapshots is None:
            raise ValueError("a pool episode needs its snapshots (draw_snapshots)")
        extra["snapshots"] = draw_snapshots(rng, learner_seat)
    return {
        **extra,
        "run_id": run_id,
        "episode_id": f"{run_id}-{index:08d}",
        "seed": cfg.seed * 1_000_003 + index,
        "opponent": opponent,
        "learner_seat": learner_seat,
        "config": cfg.model_dump_json(),
        "redis_url": redis_url_,
    }
