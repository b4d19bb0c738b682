"""Faults of the servers under a running embedded stack (tiny-random): the vLLM policy server
and the embedded Redis are SIGKILLed mid-run and the launcher's supervisor starts them again.

After each fault: training goes on (the policy version rises past where it was), no completed
episode is lost and none is appended or trained on twice, the live version never goes
backwards, the stack's supervisor restarted exactly the killed service, and no process outlives
the stack. The vLLM test also checks that the trainer put the agent's *current* adapter back
into the new server; the Redis test that Redis ran with AOF in runs/<run-id>/redis and came
back with everything written before the kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
import redis
from prometheus_client import generate_latest

from agora.config.agents import SamplingConfig
from agora.rollout.stream import EpisodeStream, RunKeys
from agora.serving.adapter_keeper import AdapterKeeper, Reload
from agora.serving.client import AdapterMissing, PolicyAdmin, PolicyClient, load_tokenizer
from agora.stack.launcher import Stack, make_stack
from agora.stack.procs import Service, ServiceFailed, free_port
from agora.stack.redis_client import resilient_redis
from tests.conftest import ROOT
from tests.integration.test_gateway import make_adapter
from tests.stack_helpers import (
    process_tree,
    processes_of_run,
    tiny_config,
    wait_for,
    write_config,
)


def in_flight(log_text: str) -> int:
    received = len(re.findall(r"play_episode\[[^\]]+\] received", log_text))
    finished = len(re.findall(r"play_episode\[[^\]]+\] (succeeded|raised|retry)", log_text))
    return received - finished


def live_children() -> set[int]:
    """This test process's descendants that are still running (zombies excluded)."""
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                pids.add(child.pid)
        except psutil.NoSuchProcess:
            continue
    return pids


def ports(base: int) -> dict:
    """Config sections with this test's own ports (base .. base+6)."""
    return {"services": {"redis_port": base + 1, "reward_port": base + 2,
                         "gateway_port": base + 3, "trainer_metrics_port": base + 4,
                         "judge_port": base + 5, "health_timeout_s": 300, "restarts": 1},
            "workers": {"count": 1, "concurrency": 4, "queue_ahead": 8, "visibility_timeout": 8,
                        "metrics_port": base + 6}}


class VersionWatcher(threading.Thread):
    """Samples the live version every 100 ms, through Redis restarts; records every change."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self.key = key
        self.seen: list[int] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(0.1):
            try:
                value = self.client.get(self.key)
            except redis.RedisError:  # Redis is down: that is the fault under test
                continue
            if value is not None and (not self.seen or int(value) != self.seen[-1]):
                self.seen.append(int(value))


@dataclass
class Watched:
    """``stack.watch()`` (the launcher's supervisor loop, as ``agora up`` runs it) on a thread."""

    stack: Stack
    error: BaseException | None = None
    events: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None

    def start(self) -> Watched:
        def run() -> None:
            try:
                self.stack.watch(period_s=1.0, on_event=self.events.append)
            except BaseException as err:  # noqa: BLE001 - reported by the test
                self.error = err

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        return self

    def finished(self) -> bool:
        return self.thread is not None and not self.thread.is_alive()


def version(client: redis.Redis, keys: RunKeys) -> int:
    return int(client.get(keys.version("player")) or 0)


def drain_and_check(client: redis.Redis, stack: Stack, watched: Watched,
                    watcher: VersionWatcher, after_fault: int) -> dict:
    """Shared end of both tests: the trainer finished its budget past ``after_fault``, every
    enqueued episode reached the stream exactly once, none was trained on twice."""
    keys = RunKeys(stack.run_id)
    wait_for(watched.finished, 300, lambda: f"the trainer to finish ({watched.events})")
    assert watched.error is None, (f"the stack failed: {watched.error!r} {watched.events}\n"
                                   f"{getattr(watched.error, 'log_tail', '')}")
    assert stack.service("trainer").process.returncode == 0

    def counts() -> tuple[int, int, int]:
        enq, done, failed = client.mget(keys.episodes_enqueued, keys.episodes_done,
                                        keys.episodes_failed)
        return int(enq or 0), int(done or 0), int(failed or 0)

    wait_for(lambda: counts()[1] + counts()[2] >= counts()[0], 120,
             lambda: f"the queue to drain (enqueued, done, failed = {counts()})")
    watcher.stop_event.set()
    watcher.join()
    enqueued, done, failed = counts()
    ids = [f[b"episode_id"].decode() for _, f in client.xrange(keys.stream)]
    assert failed == 0, "an episode was given up on"
    assert len(ids) == len(set(ids)), "an episode was appended twice"
    assert sorted(ids) == [f"{stack.run_id}-{i:08d}" for i in range(1, enqueued + 1)], \
        "an enqueued episode never reached the stream"
    trained = [json.loads(line)["episode_id"] for line in
               (stack.run_dir / "episodes.jsonl").read_text().splitlines()]
    assert len(trained) == len(set(trained)), "an episode was trained on twice"
    assert set(trained) <= set(ids)
    assert watcher.seen == sorted(watcher.seen), f"version went backwards: {watcher.seen}"
    final = version(client, keys)
    assert final == stack.cfg.trainer.max_updates and final > after_fault, \
        f"training did not go on past the fault: version {final}, {after_fault} at the fault"
    return {"enqueued": enqueued, "appended": len(ids), "trained": len(trained),
            "failed": failed, "final_version": final}


def watch_until_in_flight(stack: Stack, keys: RunKeys
                          ) -> tuple[redis.Redis, VersionWatcher, Watched, Path]:
    """The watchers every fault test runs beside the stack; returns once an update is done
    and the worker has episodes in flight (the moment to strike)."""
    client = resilient_redis(stack.redis_url, retry_for_s=30)
    watcher = VersionWatcher(stack.redis_url, keys.version("player"))
    watcher.start()
    watched = Watched(stack).start()
    worker_log = stack.service("worker-0").log_path
    wait_for(lambda: version(client, keys) >= 1 and in_flight(worker_log.read_text()) > 0,
             240, "an update and episodes in flight")
    return client, watcher, watched, worker_log


def stop_and_check_no_orphans(stack: Stack, before: set[int]) -> None:
    stack.stop()
    wait_for(lambda: not processes_of_run(stack.run_id), 30, "no process of the run left")
    wait_for(lambda: live_children() <= before, 30,
             lambda: f"no child process left: {sorted(live_children() - before)}")


@pytest.mark.slow  # two vLLM start-ups: 1-2 minutes each on a busy 2-core machine
def test_policy_server_sigkill_restart_reloads_current_adapter(tmp_path, monkeypatch):
    base = 8460
    # vLLM in two processes instead of three (API server + engine core with the worker in
    # it): each start-up costs ~40% less, and a killed server still leaves a child behind.
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    cfg = tiny_config(models={"tiny": {"port": base, "max_model_len": 384, "extra_args": [
                          "--distributed-executor-backend", "uni"]}},
                      trainer={"max_updates": 4}, **ports(base))
    stack = make_stack(cfg, "fault-vllm", False, runs_root=tmp_path)
    before = live_children()
    keys = RunKeys(stack.run_id)
    try:
        stack.start()
        # SIGKILL the server process (not its group: its engine core is left for the
        # supervisor to clean up) while the worker has episodes waiting on it.
        client, watcher, watched, worker_log = watch_until_in_flight(stack, keys)
        policy = stack.service("policy-tiny")
        old_tree = process_tree(policy.pid)
        at_kill = version(client, keys)
        appended_at_kill = client.xlen(keys.stream)
        killed_at = time.monotonic()
        os.kill(policy.pid, signal.SIGKILL)

        wait_for(lambda: stack.supervisor is not None and any(
            r.healthy_after_s is not None for r in stack.supervisor.history), 240,
            lambda: f"the supervisor to restart vLLM ({watched.events}, {watched.error!r})")
        restarted = stack.service("policy-tiny")
        back_after = time.monotonic() - killed_at
        assert restarted.pid != policy.pid
        assert [p for p in old_tree if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE] == []

        # The new server gets the agent's current adapter: the folder of the version Redis
        # calls live. Either the trainer's keeper re-loaded it (the usual case), or the
        # trainer was publishing a new version when the server died and that load landed.
        models_url = f"http://127.0.0.1:{base}/v1/models"

        def served_is_live() -> bool:
            data = httpx.get(models_url, timeout=10, headers={
                "authorization": f"Bearer {stack.vllm_api_key}"}).json()["data"]
            served = next((m["root"] for m in data if m["id"] == "player"), None)
            return served is not None and served == client.get(
                keys.adapter_path("player")).decode()

        wait_for(served_is_live, 60, "the live adapter of 'player' in the restarted vLLM")
        reloaded_after = time.monotonic() - killed_at

        # vLLM lists the adapter before its load request returns to the keeper, which then
        # counts and logs it: read the log and the metric until the two agree.
        def reloads_logged() -> list[int]:
            return [int(v) for v in re.findall(r"lost adapter player: re-loaded v(\d+)",
                                               stack.service("trainer").log_path.read_text())]

        def counted_as_logged() -> bool:
            scrape = httpx.get(f"http://127.0.0.1:{base + 4}/metrics", timeout=10).text
            logged = reloads_logged()
            line = f'agora_trainer_adapter_reloads_total{{agent="player"}} {len(logged)}.0'
            return line in scrape and (bool(logged) or version(client, keys) > at_kill)

        wait_for(counted_as_logged, 30, lambda: "the keeper's reload count to match its log "
                 f"(or a newer version than v{at_kill}): {reloads_logged()}")
        reloads = reloads_logged()
        trainer_log = stack.service("trainer").log_path.read_text()
        assert len(reloads) <= 1 and all(v >= at_kill for v in reloads), trainer_log[-2000:]
        served_again = reloads[0] if reloads else version(client, keys)

        # Rollouts continue on the new server: episodes are appended after the restart.
        wait_for(lambda: client.xlen(keys.stream) > appended_at_kill, 120,
                 "an episode appended after the restart")
        result = drain_and_check(client, stack, watched, watcher, after_fault=served_again)
        assert [(r.service, r.attempt) for r in stack.supervisor.history] == [("policy-tiny", 1)]
        retried = len(re.findall(r"play_episode\[[^\]]+\] retry", worker_log.read_text()))
        how = "re-loaded by the keeper" if reloads else "published by the trainer"
        print(f"\nFAULT vllm-sigkill: back {back_after:.1f}s, adapter v{served_again} {how} "
              f"{reloaded_after:.1f}s after the kill; {result}; celery retries {retried}; "
              f"lost 0, duplicated 0")
    finally:
        stop_and_check_no_orphans(stack, before)


def test_redis_sigkill_restart_keeps_aof_state(tmp_path, vllm_tiny):
    base = 8470
    _url, policy = vllm_tiny  # the session's vLLM: this fault does not touch the policy server
    cfg = tiny_config(models={"tiny": policy.model_dump(mode="json")}, trainer={"max_updates": 4},
                      **ports(base))
    stack = make_stack(cfg, "fault-redis", False, runs_root=tmp_path)
    before = live_children()
    keys = RunKeys(stack.run_id)
    try:
        stack.start(policy_running=True)
        data_dir = stack.run_dir / "redis"
        settings = redis.Redis.from_url(stack.redis_url, decode_responses=True).config_get()
        assert settings["appendonly"] == "yes" and settings["dir"] == str(data_dir)
        client, watcher, watched, worker_log = watch_until_in_flight(stack, keys)
        old = stack.service("redis")
        at_kill = version(client, keys)
        ids_at_kill = {f[b"episode_id"] for _, f in client.xrange(keys.stream)}
        killed_at = time.monotonic()
        os.kill(old.pid, signal.SIGKILL)

        wait_for(lambda: stack.supervisor is not None and any(
            r.healthy_after_s is not None for r in stack.supervisor.history), 60,
            lambda: f"the supervisor to restart Redis ({watched.events}, {watched.error!r})")
        back_after = time.monotonic() - killed_at
        assert stack.service("redis").pid != old.pid
        # Same port and folder; the AOF brought back what was there before the kill.
        assert (data_dir / "appendonly.aof").is_file()
        assert ids_at_kill <= {f[b"episode_id"] for _, f in client.xrange(keys.stream)}
        assert version(client, keys) >= at_kill

        result = drain_and_check(client, stack, watched, watcher, after_fault=at_kill)
        assert [(r.service, r.attempt) for r in stack.supervisor.history] == [("redis", 1)]
        retried = len(re.findall(r"play_episode\[[^\]]+\] retry", worker_log.read_text()))
        print(f"\nFAULT redis-sigkill: back {back_after:.1f}s, version {at_kill} at the kill; "
              f"{result}; celery retries {retried}; lost 0, duplicated 0")
    finally:
        stop_and_check_no_orphans(stack, before)


def test_adapter_keeper_puts_back_exactly_the_live_adapter(vllm_tiny, tiny_model, redis_url,
                                                          tmp_path):
    # What a restart does to vLLM's adapters (forgets them), done with vLLM's own unload call
    # on the session server, so the keeper's re-load is checked deterministically.
    url, _ = vllm_tiny
    name = "keeper-agent"
    make_adapter(tiny_model, tmp_path / "v3")
    stream = EpisodeStream(redis.Redis.from_url(redis_url), "keeper-test")
    admin = PolicyAdmin(url)
    keeper = AdapterKeeper(stream, {name: admin}, period_s=0.2)
    # Exported at 0 before any reload (a missing series is not a 0 to a dashboard or alert).
    assert f'agora_trainer_adapter_reloads_total{{agent="{name}"}} 0.0' in \
        generate_latest().decode()

    def served() -> str | None:
        data = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
        return next((m["root"] for m in data if m["id"] == name), None)

    try:
        keeper.publish(name, 3, tmp_path / "v3")
        assert served() == str(tmp_path / "v3") and stream.get_version(name) == 3
        assert keeper.restore_missing() == []  # nothing lost, nothing re-loaded
        admin.unload_adapter(name)
        assert served() is None
        keeper.start()
        wait_for(lambda: served() is not None, 30, "the keeper to re-load the adapter")
        keeper.stop()
        assert served() == str(tmp_path / "v3")
        assert keeper.reloads == [Reload(name, 3, url)]
        assert stream.get_version(name) == 3  # a re-load never moves the version

        # A rollout's request for the lost adapter waits (adapter_wait_s) until it is back,
        # instead of failing the episode; without the wait it fails at once, as before.
        admin.unload_adapter(name)
        tokenizer = load_tokenizer(tiny_model)
        messages = [{"role": "user", "content": "Your move?"}]
        with pytest.raises(AdapterMissing):
            asyncio.run(PolicyClient(url, name, tokenizer, SamplingConfig()).generate(messages))
        waiting = PolicyClient(url, name, tokenizer, SamplingConfig(), adapter_wait_s=60)
        timer = threading.Timer(1.5, keeper.restore_missing)
        started = time.monotonic()
        timer.start()
        generation = asyncio.run(waiting.generate(messages))
        timer.join()
        assert generation.completion_token_ids and time.monotonic() - started >= 1.5
        assert [r.version for r in keeper.reloads] == [3, 3]

        # A server that is down is skipped (the next pass tries again), never an error.
        down = AdapterKeeper(stream, {name: PolicyAdmin(f"http://127.0.0.1:{free_port()}",
                                                        retry_for_s=1)})
        down.live[name] = keeper.live[name]
        assert down.restore_missing() == []
    finally:
        keeper.stop()
        if served() is not None:
            admin.unload_adapter(name)


def python_service(tmp_path, name: str, code: str) -> Service:
    return Service(name=name, command=[sys.executable, "-c", code],
                   log_path=tmp_path / f"{name}.log", health=lambda: True)


CRASH = "import sys, time; time.sleep(0.3); print('boom'); sys.exit(3)"


def test_supervisor_restarts_policy_server_within_budget_and_nothing_else(tmp_path):
    cfg = tiny_config(services={"restarts": 2})
    # A policy server that crashes 0.3 s after every start: two restarts, then the stack fails
    # with its log (as before the supervisor existed for any service).
    stack = Stack(cfg=cfg, run_id="sup", run_dir=tmp_path / "a")
    stack.services = [python_service(tmp_path, "policy-tiny", CRASH).start(),
                      python_service(tmp_path, "trainer", "import time; time.sleep(60)").start()]
    events: list[str] = []
    try:
        with pytest.raises(ServiceFailed) as failed:
            stack.watch(period_s=0.1, on_event=events.append)
        assert failed.value.name == "policy-tiny"
        assert "exited with code 3 (restarted 2 times, budget 2)" in str(failed.value)
        assert "boom" in failed.value.log_tail
        assert [(r.service, r.attempt, r.exit_code) for r in stack.supervisor.history] == [
            ("policy-tiny", 1, 3), ("policy-tiny", 2, 3)]
        assert len(events) >= 2 and "restarted (1/2)" in events[0]
        assert "restarted (2/2)" in (stack.run_dir / "logs" / "supervisor.log").read_text()
    finally:
        stack.stop(grace_s=2)

    # Any other service that dies stops everything at once, restarts left or not.
    stack = Stack(cfg=cfg, run_id="sup", run_dir=tmp_path / "b")
    stack.services = [python_service(tmp_path, "worker-0", CRASH).start(),
                      python_service(tmp_path, "trainer", "import time; time.sleep(60)").start()]
    try:
        with pytest.raises(ServiceFailed) as failed:
            stack.watch(period_s=0.1)
        assert failed.value.name == "worker-0"
        assert str(failed.value) == "worker-0: exited with code 3"
        assert stack.supervisor.history == []
    finally:
        stack.stop(grace_s=2)

    # Redis crashing once comes back (same command), and the run finishes normally.
    marker = tmp_path / "started-once"
    once = (f"import pathlib, sys, time; p = pathlib.Path({str(marker)!r}); first = not "
            "p.exists(); p.touch(); time.sleep(0.3 if first else 60); sys.exit(3)")
    stack = Stack(cfg=cfg, run_id="sup", run_dir=tmp_path / "c")
    stack.services = [python_service(tmp_path, "redis", once).start(),
                      python_service(tmp_path, "trainer", "import time; time.sleep(2)").start()]
    try:
        first_pid = stack.service("redis").pid
        stack.watch(period_s=0.1)  # returns: the trainer exited 0
        restarted = stack.service("redis")
        assert restarted.pid != first_pid and restarted.alive()
        [record] = stack.supervisor.history
        assert (record.service, record.old_pid, record.new_pid) == ("redis", first_pid,
                                                                     restarted.pid)
        assert record.healthy_after_s is not None
    finally:
        stack.stop(grace_s=2)


def test_reward_judge_and_gateway_sigkill_restart_lose_nothing(tmp_path, vllm_tiny):
    """The stateless services die one after another mid-run; the supervisor starts each again
    (they keep nothing of their own), workers retry the verdicts they were waiting for, and
    the run ends with every episode appended and trained on exactly once."""
    base = 8480
    _url, policy = vllm_tiny
    cfg = tiny_config(models={"tiny": policy.model_dump(mode="json")}, trainer={"max_updates": 4},
                      **ports(base))
    stack = make_stack(cfg, "fault-stateless", False, runs_root=tmp_path, open_gateway=True)
    before = live_children()
    keys = RunKeys(stack.run_id)
    try:
        stack.start(policy_running=True)
        client, watcher, watched, worker_log = watch_until_in_flight(stack, keys)
        at_kill = version(client, keys)
        for number, name in enumerate(("reward", "judge", "gateway"), start=1):
            old = stack.service(name)
            os.kill(old.pid, signal.SIGKILL)
            # Restarted, then healthy: asked of the service itself, since the trainer may
            # finish its 4 updates (and the supervisor stop watching) before the last one is.
            wait_for(lambda n=number: stack.supervisor is not None and len(
                stack.supervisor.history) >= n,
                120, lambda name=name: f"the supervisor to restart {name} ({watched.events})")
            assert stack.service(name).pid != old.pid
            wait_for(stack.service(name).health, 120, f"the restarted {name} to be healthy")
        gateway = f"http://127.0.0.1:{cfg.services.gateway_port}"
        assert httpx.get(gateway + "/v1/models", timeout=10).status_code == 200
        result = drain_and_check(client, stack, watched, watcher, after_fault=at_kill)
        assert [(r.service, r.attempt) for r in stack.supervisor.history] == [
            ("reward", 1), ("judge", 1), ("gateway", 1)]
        retried = len(re.findall(r"play_episode\[[^\]]+\] retry", worker_log.read_text()))
        backs = {r.service: round(r.healthy_after_s, 1) for r in stack.supervisor.history
                 if r.healthy_after_s is not None}
        print(f"\nFAULT reward/judge/gateway-sigkill: back after {backs} s; version {at_kill} "
              f"at the first kill; {result}; celery retries {retried}; lost 0, duplicated 0")
    finally:
        stop_and_check_no_orphans(stack, before)


def test_sigkill_of_agora_up_takes_every_service_with_it(tmp_path):
    """`kill -9` of the launcher gives it no chance to stop anything: the tethers
    (agora/stack/tether.py) must. Killed while vLLM is still starting (its engine core
    forked), with Redis, reward, judge and gateway up."""
    base = 8490
    cfg = tiny_config(models={"tiny": {"port": base}}, **ports(base))
    config = write_config(cfg, tmp_path / "run.yaml")
    run_id = "fault-launcher"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "agora.cli", "up", str(config), "--run-id", run_id, "--open"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        gateway = f"http://127.0.0.1:{cfg.services.gateway_port}/health"

        def services_up() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(gateway, timeout=2).status_code == 200
            return False

        def launcher_state() -> str:
            if launcher.poll() is None:
                return "the gateway of the launched stack (agora up still running)"
            return f"the gateway; agora up exited {launcher.returncode}: {launcher.stdout.read()}"

        wait_for(lambda: services_up() or launcher.poll() is not None, 180, launcher_state)
        assert launcher.poll() is None, launcher_state()
        time.sleep(3)  # vLLM is loading beside it
        running = processes_of_run(run_id)
        names = " ".join(" ".join(psutil.Process(p).cmdline()) for p in running
                         if psutil.pid_exists(p))
        assert "redis-server" in names and "vllm" in names and "services.reward" in names
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)
        wait_for(lambda: not processes_of_run(run_id), 60,
                 lambda: f"every service to die with agora up: {processes_of_run(run_id)}")
    finally:
        launcher.kill()
        launcher.wait(timeout=30)
        for pid in processes_of_run(run_id):
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
