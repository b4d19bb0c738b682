"""What the trainer reports, and where:

* ``runs/<id>/episodes.jsonl``: every trained-on episode;
* ``runs/<id>/metrics.jsonl``: one row per update, sent on to the experiment trackers
  (agora/train/tracking.py) too;
* the trainer's Prometheus ``/metrics``: per-agent gauges (agora/ops/metrics.py) and the
  rollout queue's depth;
* the run's state hash in Redis (``agora:{run}:state``): status and the headline numbers that
  ``agora up``'s progress view shows.

Apart from the loop because none of it feeds back into training: the loop hands over what an
update consumed and produced, and this module turns it into rows, gauges and state.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict, deque
from pathlib import Path

import redis
from prometheus_client import REGISTRY, start_http_server

from agora.config.run import RunConfig
from agora.envs.registry import ENV_METRICS
from agora.ops.metrics import TRAINER_UPDATES, trainer_agent_gauges
from agora.rollout.queue_metrics import RolloutQueueCollector
from agora.rollout.records import EpisodeRecord
from agora.rollout.stream import EpisodeStream
from agora.rollout.worker import QUEUE
from agora.stack.redis_client import fail_fast_redis
from agora.train.feed import Collected
from agora.train.tracking import Trackers

# The trainer's logger: these lines read in logs/trainer.log as they did inside the trainer.
log = logging.getLogger("agora.train.trainer")

# Per-agent gauges (agora/ops/metrics.py), with the per-env metrics (negotiation deal rate, story
# judge score, code pass rate, ...; scorers in agora/rollout/scoring.py report them per episode).
ENV_METRIC_NAMES = [m for metrics in ENV_METRICS.values() for m in metrics]
AGENT_GAUGES = trainer_agent_gauges(
    {name: help_ for metrics in ENV_METRICS.values() for name, help_ in metrics.items()})
# The learner's stats key -> gauge key, where the two names differ.
STAT_GAUGE_KEYS = {"update_s": "update_seconds"}
# The per-agent numbers copied into the run's state hash (as "<agent>:<key>").
STATE_KEYS = ("policy_version", "reward_mean", "win_rate", "legal_rate", "kl", "update_s",
              "accuracy_first", "accuracy_last", "pool_elo", "curriculum_level",
              *ENV_METRIC_NAMES)


def start_metrics_server(cfg: RunConfig, redis_url: str, run_id: str) -> None:
    """Start the trainer's /metrics endpoint, with the rollout queue's depth on it."""
    # Its own fail-fast client: a scrape while Redis restarts gets no sample at once
    # instead of waiting out the trainer's retries.
    scrape_stream = EpisodeStream(fail_fast_redis(redis_url), run_id)
    REGISTRY.register(RolloutQueueCollector(scrape_stream, QUEUE))
    start_http_server(cfg.services.trainer_metrics_port, addr=cfg.services.host)


def hold_metrics_for_final_scrape(cfg: RunConfig, serving: bool, waited_s: float = 0.0) -> None:
    """Stay up ``trainer_final_scrape_s`` with the final values on /metrics: a trainer
    that exits the moment its budget is spent takes the last updates' KL, reward and
    version with it whenever they fall between two Prometheus scrapes. ``waited_s`` already
    spent up since the last update (settling the queue) counts towards it."""
    linger = cfg.services.trainer_final_scrape_s - waited_s
    if serving and linger > 0:
        log.info("finished; metrics stay up %.0f s for a final scrape", linger)
        time.sleep(linger)


class Reporter:
    """The per-update row and the run's state, for one run (the files, trackers, gauges and
    Redis hash above)."""

    def __init__(self, cfg: RunConfig, run_id: str, run_dir: Path, r: redis.Redis,
                 stream: EpisodeStream) -> None:
        self.cfg = cfg
        self.run_id = run_id
        self.run_dir = run_dir
        self.r = r
        self.state_key = stream.keys.state
        self.metrics_path = run_dir / "metrics.jsonl"
        self.episodes_path = run_dir / "episodes.jsonl"
        # Per agent, the last 100 values of each episode-level metric (game results per
        # opponent, discussion accuracy per round).
        self.recent: dict[str, defaultdict[str, deque]] = {
            agent.name: defaultdict(lambda: deque(maxlen=100)) for agent in cfg.agents}
        self.trackers: Trackers | None = None  # tracking.report_to, opened in open_trackers()

    def open_trackers(self) -> None:
        self.trackers = Trackers(self.cfg.tracking, self.run_id, self.run_dir,
                                 params=self.cfg.model_dump(mode="json"))

    def close_trackers(self) -> None:
        if self.trackers is not None:
            self.trackers.close()

    def show_version(self, agent: str, version: int) -> None:
        AGENT_GAUGES["policy_version"].labels(agent).set(version)

    def set_state(self, **fields: object) -> None:
        self.r.hset(self.state_key, mapping={k: str(v) for k, v in fields.items()})

    def keep_episodes(self, records: list[EpisodeRecord]) -> None:
        """Append the episodes to episodes.jsonl and their results to the agents' windows."""
        # Every trained-on episode is also kept on disk (runs/<id>/episodes.jsonl) for offline
        # use after the run's Redis is gone: verifier data, DPO pairs, replays.
        with self.episodes_path.open("a") as fh:
            for record in records:
                fh.write(record.model_dump_json() + "\n")
        for record in records:
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

    def write_row(self, update_index: int, elapsed_s: float, got: Collected,
                  stats: dict[str, dict[str, float]], versions: dict[str, int]) -> None:
        """The update's row: each agent's learner ``stats`` plus its legal rate, version and
        windowed results, to metrics.jsonl, the trackers, the gauges and the state hash."""
        row = {"update": update_index, "elapsed_s": elapsed_s,
               "episodes": len(got.records), "dropped_stale": got.dropped_stale, "agents": {}}
        for name, agent_stats in stats.items():
            turns = [t for r in got.records for t in r.turns if t.agent == name]
            legal = sum(t.legal for t in turns) / max(1, len(turns))
            agent_stats.update(legal_rate=legal, policy_version=float(versions[name]))
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
        flat = {"update": update_index, "elapsed_s": row["elapsed_s"]}
        for name, agent_stats in row["agents"].items():
            for key in STATE_KEYS:
                if key in agent_stats:
                    flat[f"{name}:{key}"] = agent_stats[key]
        self.set_state(**flat)
        log.info("update %d: %s", update_index, json.dumps(row["agents"]))
