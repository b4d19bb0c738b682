"""Faults on the real embedded stack (tiny-random): SIGKILL a rollout worker mid-episode, then
SIGKILL the trainer mid-run and resume it. Afterwards: no episode lost or duplicated, every
entry the dead trainer had consumed but not checkpointed is trained on by the resumed one, the
live version never went backwards, and no process outlives the stack."""

from __future__ import annotations

import re
import threading

import redis

from agora.rollout.stream import GROUP, RunKeys
from agora.stack.launcher import make_stack
from tests.stack_helpers import processes_of_run, tiny_config, wait_for


def in_flight(log_text: str) -> int:
    received = len(re.findall(r"play_episode\[[^\]]+\] received", log_text))
    finished = len(re.findall(r"play_episode\[[^\]]+\] (succeeded|raised|retry)", log_text))
    return received - finished


class VersionWatcher(threading.Thread):
    """Samples the live version every 100 ms; records any step backwards."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        super().__init__(daemon=True)
        self.client, self.key = client, key
        self.seen: list[int] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(0.1):
            value = self.client.get(self.key)
            if value is not None and (not self.seen or int(value) != self.seen[-1]):
                self.seen.append(int(value))


def test_worker_and_trainer_sigkill(tmp_path, vllm_tiny):
    _url, policy = vllm_tiny  # the session's vLLM: these faults do not touch the policy server
    cfg = tiny_config(
        models={"tiny": policy.model_dump(mode="json")},
        trainer={"max_updates": 6},
        # Longer generations make episodes slow enough to kill a worker in the middle of one.
        agents=[{"name": "player", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"temperature": 1.0, "max_tokens": 24, "stop": ["]"]}}],
        workers={"count": 1, "concurrency": 4, "queue_ahead": 8, "visibility_timeout": 6},
    )
    run_id = "faults"
    stack = make_stack(cfg, run_id, False, runs_root=tmp_path)
    try:
        stack.start(policy_running=True)
        client = redis.Redis.from_url(stack.redis_url)
        keys = RunKeys(run_id)
        watcher = VersionWatcher(client, keys.version("player"))
        watcher.start()

        # 1. SIGKILL the worker while episodes are in flight; a fresh worker takes over.
        worker = stack.service("worker-0")
        wait_for(lambda: client.xlen(keys.stream) >= 2 and in_flight(
            worker.log_path.read_text()) > 0, 240, "episodes in flight on worker-0")
        worker.kill()
        stack.replace(worker, stack.worker_service(1))

        # 2. SIGKILL the trainer once it has updated, and resume it from its checkpoint.
        wait_for(lambda: int(client.get(keys.version("player")) or 0) >= 2, 300,
                 "two trainer updates")
        trainer = stack.service("trainer")
        trainer.kill()
        live_at_kill = int(client.get(keys.version("player")))
        pending_at_kill = {e["message_id"] for e in
                           client.xpending_range(keys.stream, GROUP, "-", "+", 1000)}
        resumed = stack.replace(trainer, stack.trainer_service(resume=True))
        wait_for(lambda: not resumed.alive(), 400, "the resumed trainer to finish")
        assert resumed.process.returncode == 0, resumed.log_path.read_text()[-3000:]

        # 3. Let the workers drain the queue: every enqueued episode lands exactly once.
        def counts() -> str:
            return (f"enqueued={client.get(keys.episodes_enqueued)} "
                    f"done={client.get(keys.episodes_done)} "
                    f"failed={client.get(keys.episodes_failed)} queue={client.llen('rollouts')} "
                    f"unacked={client.hlen('unacked')}")

        wait_for(lambda: (int(client.get(keys.episodes_done) or 0)
                          + int(client.get(keys.episodes_failed) or 0))
                 >= int(client.get(keys.episodes_enqueued)), 300,
                 lambda: f"the queue to drain ({counts()})")
        watcher.stop_event.set()
        watcher.join()

        enqueued = int(client.get(keys.episodes_enqueued))
        ids = [f[b"episode_id"].decode() for _, f in client.xrange(keys.stream)]
        assert len(ids) == len(set(ids)), "an episode was appended twice"
        assert int(client.get(keys.episodes_failed) or 0) == 0
        # Every enqueued episode reached the stream, and the ids have no gap: the trainer
        # records, counts and numbers episodes in one step before publishing them, so one
        # killed before publishing leaves them for its resumed self to send.
        reserved = int(client.get(keys.episode_index))
        assert sorted(ids) == [f"{run_id}-{i:08d}" for i in range(1, reserved + 1)], \
            "an enqueued episode never reached the stream"
        assert enqueued == reserved

        # Entries the dead trainer held unacked were consumed (and acked) after resume.
        still_pending = {e["message_id"] for e in
                         client.xpending_range(keys.stream, GROUP, "-", "+", 1000)}
        assert not (pending_at_kill & still_pending)
        assert watcher.seen == sorted(watcher.seen), f"version went backwards: {watcher.seen}"
        final = int(client.get(keys.version("player")))
        assert final >= live_at_kill and final >= 6
    finally:
        stack.stop()
    wait_for(lambda: not processes_of_run(run_id), 30, "no process left behind")
