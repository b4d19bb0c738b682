"""The training loop driver: enqueue episodes, consume them, update each agent, publish.

One loop iteration (docs/architecture.md "The run's life", steps 1-3):
1. keep ``queue_ahead`` rollout tasks outstanding on the Celery queue (and send again the ones
   the broker lost: agora/rollout/delivery.py);
2. read finished episodes from the run's stream (consumer group), drop turns more than
   ``max_staleness`` versions old, until the batch is complete (``ppo.batch_fill``);
3. one PPO update per trainable agent (each its own model, critic and optimizer);
4. every ``checkpoint_every`` updates: checkpoint, then XACK the entries it consumed;
5. save each adapter as version v+1 and hot-swap it into the policy server;
6. report the update (metrics.jsonl, trackers, Prometheus, the run's state in Redis).

This module is the loop itself; each concern it drives has its own module in agora/train/:
``feed.py`` (steps 1-2), ``learners.py`` (building the learners), ``checkpoints.py`` (step 4
and ``--resume``), ``reporting.py`` (step 6).

Several processes per learner (``trainer.processes``, agora/algos/distributed.py): this class
runs on rank 0 only; the other ranks build the same learners and ``follow``
(``learners.run_follower``).

Crash safety: stream entries are acked only once a checkpoint containing their effect is on
disk, so a trainer killed mid-update re-reads them on ``--resume`` (and one killed after the
checkpoint, before the XACK, does not: the checkpoint names them); versions never go backwards
(if Redis is ahead of the checkpoint, the checkpoint's weights are republished under a new,
higher version number). A policy server that restarts gets every agent's current adapter back
(agora/serving/adapter_keeper.py); a Redis restart is ridden out by retries
(agora/stack/redis_client.py).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from agora.algos import distributed
from agora.algos.distributed import DataParallel, Lockstep
from agora.config.run import RunConfig
from agora.rollout.stream import EpisodeStream
from agora.serving.adapter_keeper import AdapterKeeper
from agora.serving.client import PolicyAdmin
from agora.serving.weights import adapter_dir, live_weights_dir, policy_dir
from agora.stack.redis_client import resilient_redis
from agora.train.checkpoints import Checkpoints, first_version
from agora.train.curriculum.tracker import CurriculumTracker
from agora.train.feed import Collected, EpisodeFeed
from agora.train.learners import build_learners, learner_placements, pin_cpu_learners
from agora.train.reporting import Reporter, hold_metrics_for_final_scrape, start_metrics_server
from agora.train.run_warm_start import warm_start_agents
from agora.train.snapshots import SnapshotPool

log = logging.getLogger("agora.train.trainer")


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
        self.feed = EpisodeFeed(cfg, run_id, redis_url, self.r, self.stream)
        self.checkpoints = Checkpoints(run_dir, run_id, self.stream)
        self.reporter = Reporter(cfg, run_id, run_dir, self.r, self.stream)
        self.learners: dict[str, Lockstep] = {}  # each a PPOLearner behind its Lockstep
        self.versions: dict[str, int] = {}
        self.update_index = 0
        self.started = time.monotonic()
        self.warm_start_s = 0.0  # the warm start's seconds: not PPO's budget (setup)
        self.snapshots: SnapshotPool | None = None  # opponents: {pool: w}
        self.curriculum: CurriculumTracker | None = None  # curriculum.enabled

    @property
    def metrics_path(self) -> Path:
        """runs/<id>/metrics.jsonl, one row per update."""
        return self.reporter.metrics_path

    # --- set-up ---------------------------------------------------------------------------
    def admin_for(self, agent: str) -> PolicyAdmin:
        # A restarting policy server is waited for as long as the launcher waits for one to
        # start: publishing blocks until it is back instead of failing the run.
        return PolicyAdmin(self.cfg.policy_url(agent),
                           retry_for_s=self.cfg.services.health_timeout_s)

    def setup(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.reporter.open_trackers()
        if self.serve_metrics:  # first: the launcher waits for /metrics to call us healthy
            start_metrics_server(self.cfg, self.redis_url, self.run_id)
        self.warm_start()
        placements = learner_placements(self.cfg, self.parallel)
        log.info("learners on %s", {n: f"{p.device} {p.dtype} {p.attn_implementation}"
                                    for n, p in placements.items()})
        pin_cpu_learners(self.cfg, placements, self.parallel)
        self.stream.ensure_group()
        self.feed.load_training_tasks()
        learners = build_learners(self.cfg, placements, self.parallel)
        # Sharded: each call that touches a model is first sent to the other ranks.
        self.learners = {name: Lockstep(name, learner, self.parallel)
                         for name, learner in learners.items()}
        resumed = self.checkpoints.resume(self.learners) if self.resume else None
        if resumed is not None:
            self.update_index = resumed.update_index
            # What the checkpoint holds is done, acked or not (a kill between its rename and
            # the XACK): never trained twice.
            self.stream.ack(resumed.consumed)
        if self.resume:
            # Delivered to the dead trainer and not in a checkpoint (also when it died before
            # its first): read again, first.
            pending = self.feed.reread_pending()
            log.info("resumed from %s (update %d, %d pending entries)",
                     resumed.path if resumed else "no checkpoint (fresh learners)",
                     self.update_index, pending)
        for name, learner in self.learners.items():
            version = first_version(name, resumed, self.stream)
            self.versions[name] = version
            path = learner.save_policy(self.policy_dir(name, version))
            self.keeper.publish(name, version, path)
            self.reporter.show_version(name, version)
        self.snapshots = SnapshotPool.for_run(self.cfg, self.run_dir)
        self.feed.draw_snapshots = self.snapshots.draw if self.snapshots else None
        # Levels live in Redis: a fresh run starts them over, --resume carries them on.
        self.curriculum = CurriculumTracker.for_run(self.cfg, self.r, self.run_id, self.resume)
        self.add_snapshot()
        self.reporter.set_state(status="training")

    def warm_start(self) -> None:
        """``agents[].warm_start``: the SFT before PPO (agora/train/run_warm_start.py), on every
        core before the learners pin theirs. Its time is its own (epochs / max_steps bound
        it): ``trainer.max_minutes`` starts counting after it."""
        if not any(a.warm_start is not None for a in self.cfg.agents):
            return
        began = time.monotonic()
        warm_start_agents(self.cfg, self.run_dir, log=log.info,
                          status=lambda line: self.reporter.set_state(status=line))
        self.warm_start_s = time.monotonic() - began
        log.info("warm start took %.1f min; PPO's budget starts now", self.warm_start_s / 60)

    def policy_dir(self, agent: str, version: int) -> Path:
        """Where ``agent``'s ``version`` is saved: its adapter folder (kept: pinned versions
        and snapshots serve it), or a full-weight agent's staged model folder (moved into the
        served folder on publish)."""
        return policy_dir(self.run_dir, agent, version,
                          self.cfg.agent(agent).finetune == "full")

    def add_snapshot(self) -> None:
        """Freeze each seated learner's live version into the opponent pool when it is due."""
        if self.snapshots is not None:
            for name in self.snapshots.agents:
                self.snapshots.maybe_add(self.update_index, name, self.versions[name],
                                         adapter_dir(self.run_dir, name, self.versions[name]))

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
            if self.checkpoints.unacked:
                self.checkpoint()
        finally:
            self.keeper.stop()
            self.reporter.set_state(status="stopping")
            distributed.release_followers(self.parallel)
            self.reporter.close_trackers()
        settle_started = time.monotonic()
        left = self.feed.delivery.settle(self.cfg.workers.settle_s)
        if left:
            log.warning("%d episode(s) still in flight after %.0f s (workers.settle_s): left "
                        "to the workers, not trained on", left, self.cfg.workers.settle_s)
        self.reporter.set_state(status="finished")
        hold_metrics_for_final_scrape(self.cfg, self.serve_metrics,
                                      waited_s=time.monotonic() - settle_started)

    def budget_progress(self) -> float:
        """How far through the budget the run is, 0..1 (the further of updates and minutes).
        The minutes are PPO's: a warm start (bounded by its own epochs / max_steps) is not
        counted, so ``max_minutes: 15`` is 15 minutes of PPO with or without an SFT first."""
        budget = self.cfg.trainer
        progress = 0.0
        if budget.max_updates is not None:
            progress = max(progress, self.update_index / budget.max_updates)
        if budget.max_minutes is not None:
            minutes = (time.monotonic() - self.started - self.warm_start_s) / 60
            progress = max(progress, minutes / budget.max_minutes)
        return min(1.0, progress)

    def budget_spent(self) -> bool:
        budget = self.cfg.trainer
        if budget.max_updates is None and budget.max_minutes is None:
            return False
        return self.budget_progress() >= 1.0

    def collect(self) -> Collected | None:
        """The next batch: the feed tops up the queue while it reads; None if the budget ran
        out first."""
        return self.feed.collect(self.versions, self.budget_spent)

    def step(self, got: Collected) -> None:
        self.checkpoints.unacked.extend(got.entry_ids)
        stats: dict[str, dict[str, float]] = {}
        for name, samples in got.turns.items():
            self.learners[name].set_budget_progress(self.budget_progress())
            stats[name] = self.learners[name].update(samples)
            stats[name]["staleness"] = sum(self.versions[name] - s.version for s in samples) / max(
                1, len(samples))
            if self.cfg.ppo.filter_groups:
                stats[name]["filtered_turns"] = float(got.filtered.get(name, 0))
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

    def checkpoint(self) -> Path:
        return self.checkpoints.save(self.update_index, self.versions, self.learners)

    def report(self, got: Collected, stats: dict[str, dict[str, float]]) -> None:
        """Keep the batch's episodes, let the opponent pool and the curriculum learn from
        them (their numbers join ``stats``), then write the update's row."""
        self.reporter.keep_episodes(got.records)
        if self.snapshots is not None:
            self.snapshots.record(got.records)
            for name in self.snapshots.agents:
                stats.setdefault(name, {})["pool_elo"] = self.snapshots.learner_rating(name)
        if self.curriculum is not None:  # levels move on the episodes just consumed
            for name, levels in self.curriculum.observe(got.records).items():
                stats.setdefault(name, {}).update(levels)
        self.reporter.write_row(self.update_index, round(time.monotonic() - self.started, 1),
                                got, stats, self.versions)
