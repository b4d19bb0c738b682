"""The trainer's episode feed: keep rollout tasks queued ahead of the trainer, and read the
finished episodes from the run's stream into one batch of turns per trainable agent.

Apart from the loop because it is the trainer's whole contact with the rollout side: the Celery
queue, the resends of tasks the broker lost (agora/rollout/delivery.py) and the stream's
consumer group (agora/rollout/stream.py). The loop only asks it for the next batch.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import redis

from agora.algos.advantages import informative_turns
from agora.algos.ppo import TurnSample
from agora.config.run import RunConfig
from agora.data import Task, load_tasks
from agora.ops.metrics import TRAINER_EPISODES_CONSUMED, TRAINER_TURNS_DROPPED
from agora.rollout.delivery import Delivery
from agora.rollout.records import EpisodeRecord
from agora.rollout.stream import EpisodeStream
from agora.rollout.worker import QUEUE, TASK_NAME, episode_payload, make_celery

# The trainer's logger: these lines read in logs/trainer.log as they did inside the trainer.
log = logging.getLogger("agora.train.trainer")


@dataclass
class Collected:
    """One update's input: each trainable agent's turns, the stream entries they came from
    (acked once a checkpoint holds their effect) and their episodes (reported)."""

    turns: dict[str, list[TurnSample]]
    entry_ids: list[str] = field(default_factory=list)
    records: list[EpisodeRecord] = field(default_factory=list)
    dropped_stale: int = 0
    # Per agent: turns of groups that all scored alike, left out (ppo.filter_groups).
    filtered: dict[str, int] = field(default_factory=dict)


class EpisodeFeed:
    """Rank 0's end of one run's rollout queue and episode stream."""

    def __init__(self, cfg: RunConfig, run_id: str, redis_url: str, r: redis.Redis,
                 stream: EpisodeStream) -> None:
        self.cfg = cfg
        self.run_id = run_id
        self.redis_url = redis_url
        self.r = r
        self.stream = stream
        self.celery = make_celery(redis_url, cfg.workers.visibility_timeout)
        self.delivery = Delivery(stream, self.celery, TASK_NAME, QUEUE)
        # Entries already delivered to this trainer but in no batch yet: the rest of a read
        # past a full batch, or (on --resume) what a killed trainer read but never checkpointed.
        self.backlog: list[tuple[str, EpisodeRecord]] = []
        self.rng = random.Random(cfg.seed)
        self.tasks: list[Task] = []
        # Draws a pool opponent for an episode (opponents: {pool: w}); set once the pool exists.
        # (rng, the live learner's seat) -> the snapshot of every other seat.
        self.draw_snapshots: Callable[[random.Random, int], dict] | None = None
        # Episodes of a group (ppo.group_size) waiting for the rest of it: grpo / rloo compare
        # a group's samples within one batch, so a group joins a batch whole. Held entries stay
        # pending in the stream (unacked), so a --resume reads them again.
        self.held: dict[str, list[tuple[str, EpisodeRecord]]] = {}
        self.held_since: dict[str, float] = {}
        # The last episode index handed out, kept here and written to Redis only with the
        # episodes it numbers (a re-sent INCR would skip an index); read back on (re)start.
        self.last_index: int | None = None

    def load_training_tasks(self) -> None:
        if self.cfg.environment.task is not None:
            # Training draws from the train split only; evaluation uses the held-out test split.
            self.tasks = load_tasks(self.cfg.environment.task, split="train")
            log.info("loaded %d training tasks", len(self.tasks))

    def reread_pending(self) -> int:
        """On --resume: the entries delivered before the crash and never acked come first
        (returns how many), and episodes the dead trainer recorded but never published are
        published now."""
        self.backlog = self.stream.read_pending()
        self.delivery.send_unpublished()
        return len(self.backlog)

    def top_up(self) -> None:
        """Keep ``queue_ahead`` episodes in flight or finished-but-unread, no more: episodes
        produced faster than the trainer reads them would only grow stale."""
        self.delivery.resend_lost()
        ahead = self.cfg.workers.queue_ahead
        ready = len(self.backlog) + self.stream.undelivered(limit=ahead)
        want = ahead - self.stream.outstanding() - ready
        size = self.cfg.ppo.group_size
        while want > 0:
            # A group of ``group_size`` episodes (1 without grouping), sent together so they
            # land in one batch: the same seed, task, opponent and seat, each its own id.
            if self.last_index is None:
                self.last_index = self.stream.last_episode_index()
            first = self.last_index + 1
            task = self.rng.choice(self.tasks) if self.tasks else None
            payload = episode_payload(self.cfg, self.run_id, first, self.rng, self.redis_url,
                                      task, self.draw_snapshots)
            group = [dict(payload)] if size == 1 else [
                {**payload, "episode_id": f"{self.run_id}-{first + member:08d}",
                 "group": f"{first}"} for member in range(size)]
            self.delivery.send_new(group, last_index=first + size - 1)
            self.last_index = first + size - 1
            want -= size

    def collect(self, versions: Mapping[str, int],
                budget_spent: Callable[[], bool]) -> Collected | None:
        """Read episodes until the batch is complete (``ppo.batch_fill``: every trainable
        agent has ``batch_turns`` turns, or any has and each has one), dropping turns more
        than ``max_staleness`` versions behind ``versions``; None if the budget ran out. An
        episode of a group (``ppo.group_size``) joins the batch with the rest of its group."""
        trainable = [a.name for a in self.cfg.trainable_agents]
        got = Collected(turns={a: [] for a in trainable}, filtered=dict.fromkeys(trainable, 0))
        while not self._complete(got):
            if budget_spent():
                return None
            self.top_up()
            if self.backlog:
                entries, self.backlog = self.backlog, []
            else:
                entries = self.stream.read_new(count=64, block_ms=1000)
            for position, (entry_id, record) in enumerate(entries):
                if self._complete(got):
                    # Batch full: keep the rest (already delivered to us, still pending in
                    # the stream) for the next batch. Updates stay ``batch_turns`` big (with
                    # ``batch_fill: any``, the busiest learner's) however fast rollouts run, so
                    # the policy changes as often as the trainer can.
                    self.backlog = entries[position:]
                    break
                self._add(got, self._whole_groups(entry_id, record), versions)
            for late in self._overdue_groups():
                self._add(got, late, versions)
        return got

    def _complete(self, got: Collected) -> bool:
        """Whether ``got`` is a whole batch under ``ppo.batch_fill``."""
        sizes = [len(samples) for samples in got.turns.values()]
        if not sizes:
            return True
        full = self.cfg.ppo.batch_turns
        if self.cfg.ppo.batch_fill == "any":
            return max(sizes) >= full and min(sizes) >= 1
        return min(sizes) >= full

    def _whole_groups(self, entry_id: str, record: EpisodeRecord
                      ) -> list[tuple[str, EpisodeRecord]]:
        """The episodes ready for a batch once ``record`` arrived: itself (no group), nothing
        (its group is incomplete), or its whole group."""
        group = record.info.get("group")
        if group is None or self.cfg.ppo.group_size < 2:
            return [(entry_id, record)]
        key = str(group)
        members = self.held.setdefault(key, [])
        self.held_since.setdefault(key, time.monotonic())
        members.append((entry_id, record))
        if len(members) < self.cfg.ppo.group_size:
            return []
        self.held_since.pop(key, None)
        return self.held.pop(key)

    def _overdue_groups(self) -> list[list[tuple[str, EpisodeRecord]]]:
        """Groups still incomplete after three visibility timeouts (a member failed for good,
        or is being retried): released as they are, so nothing waits forever; a turn without
        group-mates then gets no advantage."""
        limit = 3 * self.cfg.workers.visibility_timeout
        now = time.monotonic()
        late = [k for k, since in self.held_since.items() if now - since > limit]
        out: list[list[tuple[str, EpisodeRecord]]] = []
        for key in late:
            self.held_since.pop(key)
            out.append(self.held.pop(key))
        return out

    def _add(self, got: Collected, members: list[tuple[str, EpisodeRecord]],
             versions: Mapping[str, int]) -> None:
        """Episodes that join the batch together (a group, or one episode): their trainable
        agents' turns, less the stale ones and, with ``ppo.filter_groups``, less the groups
        that scored alike."""
        ppo = self.cfg.ppo
        turns: dict[str, list[TurnSample]] = {agent: [] for agent in got.turns}
        for entry_id, record in members:
            got.entry_ids.append(entry_id)
            got.records.append(record)
            TRAINER_EPISODES_CONSUMED.inc()
            for agent, sample in self._fresh_turns(got, record, versions):
                turns[agent].append(sample)
        for agent, samples in turns.items():
            if ppo.filter_groups:
                if len(got.turns[agent]) >= ppo.batch_turns:
                    continue  # this agent's batch is full; another agent's is still filling
                cap = ppo.max_filtered_batches * ppo.batch_turns
                if got.filtered[agent] < cap:
                    keep = informative_turns([s.reward for s in samples],
                                             [s.group for s in samples])
                    got.filtered[agent] += keep.count(False)
                    samples = [s for s, kept in zip(samples, keep, strict=True) if kept]
                    if got.filtered[agent] >= cap:
                        log.info("filter_groups: %d of %s's turns left out of this update "
                                 "(ppo.max_filtered_batches x batch_turns); the rest join "
                                 "as they come", got.filtered[agent], agent)
            got.turns[agent].extend(samples)

    def _fresh_turns(self, got: Collected, record: EpisodeRecord, versions: Mapping[str, int]
                     ) -> list[tuple[str, TurnSample]]:
        """One episode's trainable turns as samples, less those more than ``max_staleness``
        versions behind (counted in ``got.dropped_stale``)."""
        ppo = self.cfg.ppo
        out: list[tuple[str, TurnSample]] = []
        group = record.info.get("group")
        ordinal: dict[tuple[str, str], int] = {}  # each seat's turn number
        for turn in record.turns:
            key = (turn.agent, turn.role)
            ordinal[key] = ordinal.get(key, 0) + 1
            if turn.agent not in got.turns or not turn.completion_token_ids:
                continue
            age = versions[turn.agent] - (turn.policy_version or 0)
            if age > ppo.max_staleness:
                got.dropped_stale += 1
                TRAINER_TURNS_DROPPED.inc()
                continue
            out.append((turn.agent, TurnSample(
                prompt_ids=turn.prompt_token_ids,
                completion_ids=turn.completion_token_ids,
                behaviour_logprobs=turn.behaviour_logprobs,
                reward=turn.reward,
                version=turn.policy_version or 0,
                role=turn.role,
                choices=turn.choices,
                images=turn.images,
                # The same prompt: the group's episode, role and turn number.
                group=(f"{group}/{turn.role}/{ordinal[key]}" if group is not None
                       else None),
            )))
        return out
