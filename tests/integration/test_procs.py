"""Process helpers: ports handed to services and test configs; a stack's stop and watch."""

from __future__ import annotations

import signal
import socket
import threading
import time

import psutil
import pytest

from agora.config.run import parse_config
from agora.stack.launcher import LaunchError, make_stack
from agora.stack.procs import PORT_SHARD_ENV, Service, free_port, in_port_shard
from tests.stack_helpers import tiny_config


def test_free_port_never_hands_out_the_same_port_twice():
    # The OS picks a random free port for each bind to 0; among 500 draws a repeat is all but
    # certain (the birthday bound over ~28k ephemeral ports), and one made a test config put
    # two services on one port.
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    for port in ports[:20]:  # and each really is free to listen on
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_processes_of_different_port_shards_never_hand_out_the_same_port(monkeypatch):
    # make test runs two pytest workers, each handing out ports for servers it starts later;
    # AGORA_PORT_SHARD=i/2 keeps their ports apart (the OS alone could give both the same).
    drawn = {}
    for index in (0, 1):
        monkeypatch.setenv(PORT_SHARD_ENV, f"{index}/2")
        drawn[index] = {free_port() for _ in range(200)}
        assert all(in_port_shard(port, index, 2) for port in drawn[index])
    assert len(drawn[0]) == len(drawn[1]) == 200 and not drawn[0] & drawn[1]
    monkeypatch.setenv(PORT_SHARD_ENV, "2/2")
    with pytest.raises(ValueError, match="AGORA_PORT_SHARD='2/2'"):
        free_port()
    monkeypatch.setenv(PORT_SHARD_ENV, "half")
    with pytest.raises(ValueError, match="expected INDEX/COUNT"):
        free_port()


def test_a_stack_being_stopped_starts_nothing_again(tmp_path):
    # `stack.watch()` on one thread restarts a policy server that died; `stack.stop()` on
    # another kills them all. A watch that took stop()'s kill for a crash started the server
    # again and it outlived the stack (a fault test's teardown found it 30 s later).
    stack = make_stack(tiny_config(), "stopping", False, runs_root=tmp_path)
    policy = Service("policy-tiny", ["sleep", "600"], tmp_path / "policy.log").start()
    stack.services = [policy]
    errors: list[BaseException] = []

    def watch() -> None:
        try:
            stack.watch(period_s=0.05)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(0.3)  # the watch is looping over a live policy server
    stack.stop(grace_s=2.0)
    watcher.join(timeout=10)
    assert not watcher.is_alive() and errors == []
    assert stack.services == [] and not policy.alive()
    assert stack.supervisor is not None and stack.supervisor.history == []
    # and a restart asked for after the stop hands back the dead service, starting nothing
    assert stack.restart(policy) is policy and not policy.alive()
    assert [p for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] == ["sleep", "600"] and p.status() != psutil.STATUS_ZOMBIE] == []


def test_a_service_killed_by_sigkill_is_reported_as_such_without_a_traceback(tmp_path):
    # The kernel's OOM killer ends a service with SIGKILL. The tether passes the death on as
    # its own; it used to try to reset SIGKILL's handler first, which raises, so the service's
    # log ended in a tether traceback instead of the kill (a trainer killed for memory).
    log = tmp_path / "victim.log"
    svc = Service("victim", ["sh", "-c", "echo started; kill -9 $$"], log).start()
    assert svc.process is not None
    assert svc.process.wait(timeout=30) == -signal.SIGKILL
    text = log.read_text()
    assert "started" in text and "Traceback" not in text


def _sleeper(name: str, tmp_path) -> Service:
    return Service(name, ["sleep", "600"], tmp_path / f"{name}.log").start()


def test_a_stack_takes_over_the_policy_servers_it_can_share(tmp_path):
    # `agora compare` runs its arms one after the other on one base: the second arm uses the
    # first's vLLM as it runs instead of starting its own (~30 s of CPU each on two cores).
    first_cfg = tiny_config()
    first = make_stack(first_cfg, "arm-a", False, runs_root=tmp_path)
    policy, reward = _sleeper("policy-tiny", tmp_path), _sleeper("reward", tmp_path)
    first.services = [policy, reward]
    same_models = first_cfg.model_copy(update={"name": "second"})
    second = make_stack(same_models, "arm-b", False, runs_root=tmp_path)
    second.vllm_api_key = "the second arm's own key"

    assert second.take_policies(first) == ["policy-tiny"]
    assert second.adopted == [policy] and policy.alive()
    assert second.vllm_api_key == first.vllm_api_key  # the server checks the key it started with
    assert first.services == [] and not reward.alive()  # the rest of the first arm is stopped
    second.stop(grace_s=2.0)  # never started, and still it stops what it took over
    assert not policy.alive() and second.adopted == [] and second.services == []


def test_a_policy_server_set_up_otherwise_is_not_shared(tmp_path):
    first_cfg = tiny_config()
    for models in ({"tiny": {**first_cfg.models["tiny"].model_dump(), "max_model_len": 256}},
                   {"tiny": {**first_cfg.models["tiny"].model_dump(), "port": free_port()}}):
        first = make_stack(first_cfg, "arm-a", False, runs_root=tmp_path)
        policy = _sleeper("policy-tiny", tmp_path)
        first.services = [policy]
        other = parse_config({**first_cfg.model_dump(mode="json"), "models": models})
        second = make_stack(other, "arm-b", False, runs_root=tmp_path)
        assert second.take_policies(first) == []
        assert second.adopted == [] and not policy.alive()  # stopped with the first arm


def test_a_failed_start_stops_the_policy_servers_it_took_over(tmp_path):
    cfg = tiny_config()
    first = make_stack(cfg, "arm-a", False, runs_root=tmp_path)
    policy = _sleeper("policy-tiny", tmp_path)
    first.services = [policy]
    second = make_stack(cfg, "arm-b", False, runs_root=tmp_path)
    assert second.take_policies(first) == ["policy-tiny"]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", cfg.services.reward_port))
        holder.listen()
        with pytest.raises(LaunchError, match=f"reward port {cfg.services.reward_port}"):
            second.start()
    assert not policy.alive() and second.adopted == [] and second.services == []
