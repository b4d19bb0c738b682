"""The training loop driver: enqueue episodes, consume them, update each agent, publish.

One loop iteration (docs/architecture.md "The run's life", steps 1-3):
1. keep ``queue_ahead`` rollout tasks outstanding on the Celery queue (and send again the ones
   the broker lost: agora/rollout/delivery.py);
2. read finished episodes from the run's stream (consumer group), drop turns more than
   ``max_staleness`` versions old, until every trainable agent has ``batch_turns`` turns;
3. one PPO update per trainable agent (each its own model, critic and optimizer);
4. every ``checkpoint_every`` updates: checkpoint, then XACK the entries it consumed;
5. save each adapter as version v+1 and hot-swap it into the policy server.

Several processes per learner (``trainer.processes``, agora/algos/distributed.py): this class
runs on rank 0 only; the other ranks build the same learners and ``follow`` (``run_follower``).

Crash safety: stream entries are acked only once a checkpoint containing their effect is on
disk, so a trainer killed mid-update re-reads them on ``--resume``; versions never go backwards
(if Redis is ahead of the checkpoint, the checkpoint's weights are republished under a new,
higher version number). A policy server that restarts gets every agent's current adapter back
(agora/serving/adapter_keeper.py); a Redis restart is ridden out by retries
(agora/stack/redis_client.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import shutil
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

import torch
from prometheus_client import REGISTRY, start_http_server

from agora.algos import distributed
from agora.algos.compute import Placement, resolve
from agora.algos.distributed import DataParallel, Lockstep
from agora.algos.ppo import PPOLearner, TurnSample
from agora.config.run import RunConfig
from agora.data import Task, load_tasks
from agora.envs.registry import ENV_METRICS
from agora.ops.metrics import (
    TRAINER_EPISODES_CONSUMED,
    TRAINER_TURNS_DROPPED,
    TRAINER_UPDATES,
    trainer_agent_gauges,
)
from agora.rollout.delivery import Delivery
from agora.rollout.queue_metrics import RolloutQueueCollector
from agora.rollout.records import EpisodeRecord
from agora.rollout.stream import EpisodeStream
from agora.rollout.worker import QUEUE, TASK_NAME, episode_payload, make_celery
from agora.serving.adapter_keeper import AdapterKeeper
from agora.serving.client import PolicyAdmin
from agora.serving.model_folders import resolve_model
from agora.serving.weights import adapter_dir, live_weights_dir, policy_dir
from agora.stack.hardware import pin_to_last_cpus
from agora.stack.redis_client import fail_fast_redis, resilient_redis
from agora.train.curriculum.tracker import CurriculumTracker
from agora.train.snapshots import SnapshotPool
from agora.train.tracking import Trackers

log = logging.getLogger("agora.train.trainer")

# Per-agent gauges (agora/ops/metrics.py), with the per-env metrics (negotiation deal rate, story
# judge score, code pass rate, ...; scorers in agora/rollout/scoring.py report them per episode).
ENV_METRIC_NAMES = [m for metrics in ENV_METRICS.values() for m in metrics]
AGENT_GAUGES = trainer_agent_gauges(
    {name: help_ for metrics in ENV_METRICS.values() for name, help_ in metrics.items()})
# The learner's stats key -> gauge key, where the two names differ.
STAT_GAUGE_KEYS = {"update_s": "update_seconds"}


def learner_placements(cfg: RunConfig, parallel: DataParallel) -> dict[str, Placement]:
    """Each agent's learner placement; sharded, every learner sits on this process's device
    (``cuda:LOCAL_RANK``, or the CPU), and the process group is joined here."""
    placements = {a.name: resolve(cfg.trainer, a.device) for a in cfg.agents}
    if parallel.sharded:
        device = distributed.start(parallel, next(iter(placements.values())).device)
        placements = {name: dataclasses.replace(p, device=device)
                      for name, p in placements.items()}
    return placements


def build_learners(cfg: RunConfig, placements: dict[str, Placement],
                   parallel: DataParallel) -> dict[str, PPOLearner]:
    """One learner per agent, in config order (every rank builds them in the same order).
    Frozen agents get a learner too (zero-initialised LoRA = the base model) so that every
    agent is an adapter name on its server; it is just never updated."""
    if all(p.on_cpu for p in placements.values()):
        torch.set_num_threads(cfg.trainer.torch_threads)
    return {agent.name: PPOLearner(resolve_model(cfg.models[agent.base].model), agent, cfg.ppo,
                                   seed=cfg.seed, placement=placements[agent.name],
                                   parallel=parallel)
            for agent in cfg.agents}


def run_follower(cfg: RunConfig, parallel: DataParallel) -> None:
    """A rank other than 0: the same learners, driven by rank 0's broadcast calls."""
    learners = build_learners(cfg, learner_placements(cfg, parallel), parallel)
    calls = distributed.follow(learners, parallel)
    log.info("rank %d: rank 0 finished after %d learner calls", parallel.rank, calls)


@dataclass
class Collected:
    turns: dict[str, list[TurnSample]]
    entry_ids: list[str] = field(default_factory=list)
    records: list[EpisodeRecord] = field(default_factory=list)
    dropped_stale: int = 0


class Trainer:
    def __init__(self, cfg: RunConfig, run_id: str, run_dir: Path, redis_url: str,
                 resume: bool = False, serve_metrics: bool = True,
                 parallel: DataParallel = distributed.SINGLE) -> None:
        self.cfg = cfg
        self.parallel = parallel
        self.run_id = run_id
        self.run_dir = run_dir
        self.redis_url = redis_url
        self.resume = resume
        self.serve_metrics = serve_metrics
        self.r = resilient_redis(redis_url)  # rides out a Redis restart (AOF keeps the state)
        self.stream = EpisodeStream(self.r, run_id)
        # Publishes every new adapter, and loads the current ones again into a policy server
        # that restarted and lost them (its thread runs during run(), after setup's v0).
        self.keeper = AdapterKeeper(
            self.stream, {a.name: self.admin_for(a.name) for a in cfg.agents},
            live_weights={a.name: live_weights_dir(run_dir, a.name) for a in cfg.agents
                          if a.finetune == "full"})
        self.celery = make_celery(redis_url, cfg.workers.visibility_timeout)
        self.delivery = Delivery(self.stream, self.celery, TASK_NAME, QUEUE)
        self.learners: dict[str, Lockstep] = {}  # each a PPOLearner behind its Lockstep
        self.versions: dict[str, int] = {}
        self.update_index = 0
        self.unacked: list[str] = []  # consumed since the last checkpoint
        self.backlog: list[tuple[str, EpisodeRecord]] = []
        self.rng = random.Random(cfg.seed)
        # Per agent, the last 100 values of each episode-level metric (game results per
        # opponent, discussion accuracy per round).
        self.recent: dict[str, defaultdict[str, deque]] = {}
        self.started = time.monotonic()
        self.metrics_path = run_dir / "metrics.jsonl"
        self.episodes_path = run_dir / "episodes.jsonl"
        self.tasks: list[Task] = []
        self.snapshots: SnapshotPool | None = None  # opponents: {pool: w}
        self.curriculum: CurriculumTracker | None = None  # curriculum.enabled
        self.trackers: Trackers | None = None  # tracking.report_to, opened in setup()

    # --- set-up ---------------------------------------------------------------------------
    def admin_for(self, agent: str) -> PolicyAdmin:
        # A restarting policy server is waited for as long as the launcher waits for one to
        # start: publishing blocks until it is back instead of failing the run.
        return PolicyAdmin(self.cfg.policy_url(agent),
                           retry_for_s=self.cfg.services.health_timeout_s)

    def setup(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.trackers = Trackers(self.cfg.tracking, self.run_id, self.run_dir,
                                 params=self.cfg.model_dump(mode="json"))
        placements = learner_placements(self.cfg, self.parallel)
        log.info("learners on %s", {n: f"{p.device} {p.dtype} {p.attn_implementation}"
                                    for n, p in placements.items()})
        # CPU pinning and niceness keep a CPU learner out of vLLM's way on a shared machine; a
        # learner on a GPU needs its host thread to feed the GPU at full speed instead. (Several
        # CPU processes would all pin to the same last CPUs: they are left to the scheduler.)
        if all(p.on_cpu for p in placements.values()) and not self.parallel.sharded:
            if self.cfg.trainer.pin_cpus:
                pinned = pin_to_last_cpus(self.cfg.trainer.torch_threads)
                log.info("trainer pinned to CPUs %s", pinned)
            if self.cfg.trainer.nice:
                os.nice(self.cfg.trainer.nice)
        if self.serve_metrics:
            # Its own fail-fast client: a scrape while Redis restarts gets no sample at once
            # instead of waiting out the trainer's retries.
            scrape_stream = EpisodeStream(fail_fast_redis(self.redis_url), self.run_id)
            REGISTRY.register(RolloutQueueCollector(scrape_stream, QUEUE))
            start_http_server(self.cfg.services.trainer_metrics_port, addr=self.cfg.services.host)
        self.stream.ensure_group()
        if self.cfg.environment.task is not None:
            # Training draws from the train split only; evaluation uses the held-out test split.
            self.tasks = load_tasks(self.cfg.environment.task, split="train")
            log.info("loaded %d training tasks", len(self.tasks))
        learners = build_learners(self.cfg, placements, self.parallel)
        # Sharded: each call that touches a model is first sent to the other ranks.
        self.learners = {name: Lockstep(name, learner, self.parallel)
                         for name, learner in learners.items()}
        for agent in self.cfg.agents:
            self.recent[agent.name] = defaultdict(lambda: deque(maxlen=100))
        checkpoint = self.latest_checkpoint() if self.resume else None
        if checkpoint is not None:
            meta = {}
            for name, learner in self.learners.items():
                meta = learner.load_checkpoint(checkpoint / name)
            self.update_index = int(meta["update_index"])
            ckpt_versions = {k: int(v) for k, v in meta["versions"].items()}
            self.backlog = self.stream.read_pending()
            log.info("resumed from %s (update %d, %d pending entries)", checkpoint,
                     self.update_index, len(self.backlog))
        else:
            ckpt_versions = {a.name: 0 for a in self.cfg.agents}
        for name, learner in self.learners.items():
            live = self.stream.get_version(name) if checkpoint is not None else 0
            version = ckpt_versions.get(name, 0)
            if live > version:
                version = live + 1  # never go backwards: republish under a higher number
            self.versions[name] = version
            path = learner.save_policy(self.policy_dir(name, version))
            self.keeper.publish(name, version, path)
            AGENT_GAUGES["policy_version"].labels(name).set(version)
        self.snapshots = SnapshotPool.for_run(self.cfg, self.run_dir)
        # Levels live in Redis: a fresh run starts them over, --resume carries them on.
        self.curriculum = CurriculumTracker.for_run(self.cfg, self.r, self.run_id, self.resume)
        self.add_snapshot()
        self.set_state(status="training")

    def policy_dir(self, agent: str, version: int) -> Path:
        """Where ``agent``'s ``version`` is saved: its adapter folder (kept: pinned versions
        and snapshots serve it), or a full-weight agent's staged model folder (moved into the
        served folder on publish)."""
        return policy_dir(self.run_dir, agent, version,
                          self.cfg.agent(agent).finetune == "full")

    def add_snapshot(self) -> None:
        """Freeze the learner's live version into the opponent pool when it is due."""
        if self.snapshots is not None:
            name = self.snapshots.agent
            self.snapshots.maybe_add(self.update_index, self.versions[name],
                                     adapter_dir(self.run_dir, name, self.versions[name]))

    def latest_checkpoint(self) -> Path | None:
        pointer = self.run_dir / "checkpoints" / "latest"
        if not pointer.is_file():
            return None
        path = self.run_dir / "checkpoints" / pointer.read_text().strip()
        return path if path.is_dir() else None

    # --- the loop -------------------------------------------------------------------------
    def run(self) -> None:
        self.setup()
        self.keeper.start()  # here, not in setup(): tests drive setup() and step() by hand
        try:
            while not self.budget_spent():
                collected = self.collect()
                if collected is None:
                    break
                self.step(collected)
            if self.unacked:
                self.checkpoint()
        finally:
            self.keeper.stop()
            self.set_state(status="stopping")
            distributed.release_followers(self.parallel)
            if self.trackers is not None:
                self.trackers.close()
        self.set_state(status="finished")
        self.hold_metrics_for_final_scrape()

    def hold_metrics_for_final_scrape(self) -> None:
        """Stay up ``trainer_final_scrape_s`` with the final values on /metrics: a trainer
        that exits the moment its budget is spent takes the last updates' KL, reward and
        version with it whenever they fall between two Prometheus scrapes."""
        linger = self.cfg.services.trainer_final_scrape_s
        if self.serve_metrics and linger > 0:
            log.info("finished; metrics stay up %.0f s for a final scrape", linger)
            time.sleep(linger)

    def budget_progress(self) -> float:
        """How far through the budget the run is, 0..1 (the further of updates and minutes)."""
        budget = self.cfg.trainer
        progress = 0.0
        if budget.max_updates is not None:
            progress = max(progress, self.update_index / budget.max_updates)
        if budget.max_minutes is not None:
            minutes = (time.monotonic() - self.started) / 60
            progress = max(progress, minutes / budget.max_minutes)
        return min(1.0, progress)

    def budget_spent(self) -> bool:
        budget = self.cfg.trainer
        if budget.max_updates is None and budget.max_minutes is None:
            return False
        return self.budget_progress() >= 1.0

    def top_up_queue(self) -> None:
        """Keep ``queue_ahead`` episodes in flight or finished-but-unread, no more: episodes
        produced faster than the trainer reads them would only grow stale."""
        self.delivery.resend_lost()
        ahead = self.cfg.workers.queue_ahead
        ready = len(self.backlog) + self.stream.undelivered(limit=ahead)
        want = ahead - self.stream.outstanding() - ready
        for _ in range(max(0, want)):
            index = int(self.r.incr(self.stream.keys.episode_index))
            task = self.rng.choice(self.tasks) if self.tasks else None
            payload = episode_payload(self.cfg, self.run_id, index, self.rng, self.redis_url,
                                      task, self.snapshots.draw if self.snapshots else None)
            self.delivery.send(payload)
            self.r.incr(self.stream.keys.episodes_enqueued)

    def collect(self) -> Collected | None:
        """Read episodes until every trainable agent has a batch; None if the budget ran out."""
        trainable = [a.name for a in self.cfg.trainable_agents]
        got = Collected(turns={a: [] for a in trainable})
        ppo = self.cfg.ppo
        while any(len(got.turns[a]) < ppo.batch_turns for a in trainable):
            if self.budget_spent():
                return None
            self.top_up_queue()
            if self.backlog:
                entries, self.backlog = self.backlog, []
            else:
                entries = self.stream.read_new(count=64, block_ms=1000)
            for position, (entry_id, record) in enumerate(entries):
                if all(len(got.turns[a]) >= ppo.batch_turns for a in trainable):
                    # Batch full: keep the rest (already delivered to us, still pending in
                    # the stream) for the next batch. Updates stay ``batch_turns`` big however
                    # fast rollouts run, so the policy changes as often as the trainer can.
                    self.backlog = entries[position:]
                    break
                got.entry_ids.append(entry_id)
                got.records.append(record)
                TRAINER_EPISODES_CONSUMED.inc()
                for turn in record.turns:
                    if turn.agent not in got.turns or not turn.completion_token_ids:
                        continue
                    age = self.versions[turn.agent] - (turn.policy_version or 0)
                    if age > ppo.max_staleness:
                        got.dropped_stale += 1
                        TRAINER_TURNS_DROPPED.inc()
                        continue
                    got.turns[turn.agent].append(TurnSample(
                        prompt_ids=turn.prompt_token_ids,
                        completion_ids=turn.completion_token_ids,
                        behaviour_logprobs=turn.behaviour_logprobs,
                        reward=turn.reward,
                        version=turn.policy_version or 0,
                        role=turn.role,
                        choices=turn.choices,
                    ))
        return got

    def step(self, got: Collected) -> None:
        self.unacked.extend(got.entry_ids)
        stats: dict[str, dict[str, float]] = {}
        for name, samples in got.turns.items():
            self.learners[name].set_budget_progress(self.budget_progress())
            stats[name] = self.learners[name].update(samples)
            stats[name]["staleness"] = sum(self.versions[name] - s.version for s in samples) / max(
                1, len(samples))
        self.update_index += 1
        new_paths = {}
        for name in got.turns:
            self.versions[name] += 1
            new_paths[name] = self.learners[name].save_policy(
                self.policy_dir(name, self.versions[name]))
        if self.update_index % self.cfg.trainer.checkpoint_every == 0:
            self.checkpoint()
        for name, path in new_paths.items():
            stats[name]["hotswap_seconds"] = self.keeper.publish(
                name, self.versions[name], path)
        self.add_snapshot()
        self.report(got, stats)

    # --- checkpoints ----------------------------------------------------------------------
    def checkpoint(self) -> Path:
        root = self.run_dir / "checkpoints"
        name = f"ckpt-{self.update_index:06d}"
        tmp = root / (name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        meta = {"update_index": self.update_index, "versions": self.versions,
                "run_id": self.run_id}
        for agent, learner in self.learners.items():
            learner.save_checkpoint(tmp / agent, meta)
        final = root / name
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        pointer_tmp = root / "latest.tmp"
        pointer_tmp.write_text(name)
        pointer_tmp.rename(root / "latest")
        # Only now are the consumed entries safe to forget.
        self.stream.ack(self.unacked)
        self.unacked = []
        for old in sorted(root.glob("ckpt-*"))[:-2]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    # --- reporting ------------------------------------------------------------------------
    def report(self, got: Collected, stats: dict[str, dict[str, float]]) -> None:
        # Every trained-on episode is also kept on disk (runs/<id>/episodes.jsonl) for offline
        # use after the run's Redis is gone: verifier data, DPO pairs, replays.
        with self.episodes_path.open("a") as fh:
            for record in got.records:
                fh.write(record.model_dump_json() + "\n")
        for record in got.records:
            scores = record.info.get("scores")  # discussions: [round][seat] verifier scores
            for seat, agent in enumerate(record.seats):
                if agent not in self.recent:
                    continue
                if isinstance(scores, list) and scores:
                    self.recent[agent]["first"].append(float(scores[0][seat]))
                    self.recent[agent]["last"].append(float(scores[-1][seat]))
                elif seat < len(record.results):
                    self.recent[agent][record.opponent].append(record.results[seat] == "win")
            for agent, values in dict(record.info.get("metrics") or {}).items():
                if agent in self.recent:  # env metrics (agora/envs/registry.py), per agent
                    for key, value in values.items():
                        self.recent[agent]["metric:" + key].append(float(value))
        if self.snapshots is not None:
            self.snapshots.record(got.records)
            stats[self.snapshots.agent]["pool_elo"] = self.snapshots.learner_rating
        if self.curriculum is not None:  # levels move on the episodes just consumed
            for name, levels in self.curriculum.observe(got.records).items():
                stats.setdefault(name, {}).update(levels)
        row = {"update": self.update_index, "elapsed_s": round(time.monotonic() - self.started, 1),
               "episodes": len(got.records), "dropped_stale": got.dropped_stale, "agents": {}}
        for name, agent_stats in stats.items():
            turns = [t for r in got.records for t in r.turns if t.agent == name]
            legal = sum(t.legal for t in turns) / max(1, len(turns))
            agent_stats.update(legal_rate=legal, policy_version=float(self.versions[name]))
            for key, source in (("win_rate", "random"), ("accuracy_first", "first"),
                                ("accuracy_last", "last")):
                values = self.recent[name].get(source)
                if values:
                    agent_stats[key] = sum(values) / len(values)
            for key in ENV_METRIC_NAMES:
                values = self.recent[name].get("metric:" + key)
                if values:
                    agent_stats[key] = sum(values) / len(values)
            for key, value in agent_stats.items():
                gauge = AGENT_GAUGES.get(STAT_GAUGE_KEYS.get(key, key))
                if gauge is not None:
                    gauge.labels(name).set(value)
            TRAINER_UPDATES.labels(name).inc()
            row["agents"][name] = {k: round(v, 4) for k, v in agent_stats.items()}
        with self.metrics_path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        if self.trackers is not None:
            self.trackers.log(row)
        flat = {"update": self.update_index, "elapsed_s": row["elapsed_s"]}
        for name, agent_stats in row["agents"].items():
            for key in ("policy_version", "reward_mean", "win_rate", "legal_rate", "kl",
                        "update_s", "accuracy_first", "accuracy_last", "pool_elo",
                        "curriculum_level", *ENV_METRIC_NAMES):
                if key in agent_stats:
                    flat[f"{name}:{key}"] = agent_stats[key]
        self.set_state(**flat)
        log.info("update %d: %s", self.update_index, json.dumps(row["agents"]))

    def set_state(self, **fields: object) -> None:
        self.r.hset(self.stream.keys.state, mapping={k: str(v) for k, v in fields.items()})
