"""agora's images in real containers (issue 19): built without a registry by
scripts/local_base_images.sh (podman, Debian stand-ins of the public bases), run with the
settings docker-compose.yml gives them, and the whole cpu profile brought up by docker compose
itself (scripts/compose_podman.sh) to train, hot-swap and serve across containers.

The reward service is the image whose contract depends most on its container: model-written
code runs in its sandbox, which needs namespaces. With compose's settings it must reach full
isolation inside the container; without them it must refuse loudly (503, saying why) rather
than score every program 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
import yaml
from openai import OpenAI

from agora.stack.procs import free_port
from tests.conftest import ROOT
from tests.monitoring_checks import instant, panels_without_data

ENGINE = shutil.which("podman")
pytestmark = [pytest.mark.containers, pytest.mark.skipif(
    ENGINE is None, reason="no container engine (podman) on this machine: `make test-containers` "
                           "installs podman, builds the images and runs these")]

ENV = {**os.environ, "CONTAINERS_CONF": str(ROOT / "scripts" / "containers.conf")}
REWARD = "localhost/agora-reward"

PROBE = """
import os, socket
print("uid", os.getuid())
try:
    socket.create_connection(("10.0.2.2", 80), timeout=2)
    print("network open")
except OSError as err:
    print("network", type(err).__name__)
print("dev", " ".join(sorted(os.listdir("/dev"))))
print("secret", "AGORA_REDIS_URL" in os.environ)
print("app", os.listdir("/app") if os.path.isdir("/app") else None)
"""


def podman(*args: str, check: bool = True, timeout: float = 120, input: str | None = None
           ) -> subprocess.CompletedProcess:
    return subprocess.run([ENGINE or "podman", *args], env=ENV, capture_output=True, text=True,
                          timeout=timeout, check=check, input=input)


def wait_until(check, timeout_s: float, what: str, why=lambda: "") -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} {why()}")


# tests/monitoring_checks.py's traffic, run by the gateway container's Python (agora and httpx
# are there; the judge and reward are reachable by their compose names only from inside).
TRAFFIC = (ROOT / "tests" / "monitoring_checks.py").read_text().replace("{", "{{").replace(
    "}", "}}") + """
import os
send_traffic("http://127.0.0.1:8200", "http://judge:8203", "http://reward:8201", {wave},
             os.environ["AGORA_SERVICE_KEY"], "{key}")
"""


@pytest.fixture(scope="module")
def images() -> None:
    """The images, as the script builds them (minutes the first time, the layer cache after)."""
    subprocess.run(["bash", "scripts/local_base_images.sh"], cwd=ROOT, check=True, timeout=3600,
                   env={**ENV, "AGORA_IMAGES": "all"})


@contextlib.contextmanager
def reward_container(*flags: str) -> Iterator[str]:
    """A reward container on a free 127.0.0.1 port; yields its URL; removed after."""
    name = f"agora-test-reward-{free_port()}"
    port = free_port()
    podman("run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8201",
           "-e", "AGORA_REDIS_URL=redis://:not-for-model-code@redis:6390/0",
           "-e", f"AGORA_SERVICE_KEY={SERVICE_KEY}", *flags, REWARD)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code in (200, 503):
                    break
            time.sleep(0.5)
        else:
            raise AssertionError(f"reward container never answered: {podman('logs', name).stdout}")
        yield url
    finally:
        podman("rm", "-f", name, check=False)


def compose_reward_flags() -> list[str]:
    """The container settings docker-compose.yml gives the reward service, as podman flags."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    reward = compose["services"]["reward"]
    flags = [f"--cap-add={cap}" for cap in reward.get("cap_add", [])]
    flags += [f"--cap-drop={cap}" for cap in reward.get("cap_drop", [])]
    return flags + ([f"--user={reward['user']}"] if "user" in reward else [])


SERVICE_KEY = secrets.token_hex(16)  # what compose gives the reward service (AGORA_SERVICE_KEY)
KEYED = {"authorization": f"Bearer {SERVICE_KEY}"}


def run_probe(url: str, headers: dict[str, str] = KEYED) -> httpx.Response:
    return httpx.post(url + "/v1/sandbox/run", json={"code": PROBE}, timeout=60,
                      headers=headers)


def test_reward_container_with_compose_settings_runs_model_code_fully_isolated(images):
    flags = compose_reward_flags()
    assert "--cap-add=SYS_ADMIN" in flags  # what the sandbox's namespaces need as root
    with reward_container(*flags) as url:
        health = httpx.get(url + "/health", timeout=5).json()
        assert health["status"] == "ok", health
        # a cgroup per run where the container's cgroup file system is writable, else per
        # process limits; either way the service says which
        assert health["sandbox_run_limits"].startswith(("cgroup v", "no cgroup per run")), health
        assert run_probe(url, headers={}).status_code == 401  # only agora's services run code
        resp = run_probe(url)
        assert resp.status_code == 200, resp.text
        result = resp.json()
        assert result["status"] == "ok" and result["level"] == "full", result
        lines = dict(line.split(" ", 1) for line in result["stdout"].splitlines())
        assert lines["uid"] != "0"  # a fresh private uid per run
        assert lines["network"] in ("PermissionError", "OSError")  # no route, no socket
        devices = set(lines["dev"].split()) - {"fd", "stdin", "stdout", "stderr", "shm"}
        assert devices == {"full", "null", "random", "urandom", "zero"}  # no GPU, no disk
        assert lines["secret"] == "False"  # the service's environment stays outside
        assert lines["app"] == "[]"  # agora's code and data hidden behind an empty tmpfs


def test_reward_container_that_cannot_isolate_refuses_instead_of_scoring_zero(images):
    # Root without CAP_SYS_ADMIN (and no user namespace as root): the probe finds only the
    # syscall filter, below the default 'full'.
    with reward_container("--cap-drop=SYS_ADMIN") as url:
        health = httpx.get(url + "/health", timeout=5)
        assert health.status_code == 503
        assert "below the required 'full'" in health.json()["detail"]
        resp = run_probe(url)
        assert resp.status_code == 503 and "the code was not run" in resp.json()["detail"]
        verdict = httpx.post(url + "/v1/verify", json={
            "kind": "code", "code": "def f():\n    return 1\n",
            "tests": "assert f() == 1"}, timeout=30, headers=KEYED)
        assert verdict.status_code == 503, verdict.text  # never a silent 0


# The stand-ins of the public images compose names (scripts/local_base_images.sh).
LOCAL_IMAGES = {"AGORA_REDIS_IMAGE": "localhost/redis:7-debian",
                "AGORA_PROMETHEUS_IMAGE": "localhost/prometheus:debian",
                "AGORA_VLLM_CPU_IMAGE": "localhost/vllm-openai-cpu:v0.32.0"}


def compose(project: str, env: dict[str, str], *args: str, timeout: float
            ) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/compose_podman.sh", "-p", project, *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def compose_run(config: str, run_id: str) -> tuple[str, dict[str, str], str]:
    """A fresh compose project for ``configs/<config>``: its name, environment (local images,
    fresh secrets, a free gateway port) and the gateway's URL."""
    project = f"agora-e2e-{free_port()}"
    gateway = f"http://127.0.0.1:{free_port()}"
    env = {**ENV, **LOCAL_IMAGES, "COMPOSE_PROFILES": "cpu",
           "AGORA_RUN_CONFIG": config, "AGORA_RUN_ID": run_id,
           "AGORA_MODELS": "smollm2-135m", "AGORA_GATEWAY_PORT": gateway.rsplit(":", 1)[1],
           "AGORA_REDIS_PASSWORD": secrets.token_hex(24),
           "AGORA_VLLM_API_KEY": secrets.token_hex(24),
           "AGORA_SERVICE_KEY": secrets.token_hex(24),
           "AGORA_GATEWAY_KEY_PEPPER": secrets.token_hex(32),
           "GRAFANA_ADMIN_PASSWORD": secrets.token_hex(8),
           "PROMETHEUS_PORT": str(free_port())}
    return project, env, gateway


def up_cpu_profile(project: str, env: dict[str, str], *more: str) -> None:
    up = compose(project, env, "up", "-d", "--no-build", "--wait", "--wait-timeout", "1200",
                 "trainer-cpu", "gateway", "rollout", *more, timeout=1500)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:] + health_logs(project)


def health_logs(project: str) -> str:
    """Each unhealthy container's last health check outputs (why compose gave up on it)."""
    names = podman("ps", "-a", "--format", "{{.Names}}", "--filter", "health=unhealthy",
                   "--filter", f"label=com.docker.compose.project={project}", check=False)
    return "".join(f"\n{name}: " + podman("inspect", "-f", "{{json .State.Health.Log}}", name,
                                           check=False).stdout[-2000:]
                   for name in names.stdout.split())


def served_models(container: str, port: int) -> list[dict]:
    """A vLLM container's /v1/models (the base and every adapter loaded, each with the path it
    was loaded from as ``root``), asked from inside it with its own API key."""
    listed = podman("exec", container, "python3", "-c",
                    "import json, os, urllib.request; print(json.dumps(json.load(urllib.request."
                    f"urlopen(urllib.request.Request('http://127.0.0.1:{port}/v1/models', "
                    "headers={'Authorization': 'Bearer ' + os.environ['VLLM_API_KEY']})))))")
    return json.loads(listed.stdout)["data"]


def down_leaves_nothing(project: str, env: dict[str, str]) -> None:
    down = compose(project, env, "down", "-v", timeout=600)
    left = podman("ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={project}")
    assert down.returncode == 0 and left.stdout.strip() == "", down.stderr


@pytest.mark.timeout(2400)
def test_compose_cpu_profile_trains_hot_swaps_and_serves_across_containers(images):
    """`docker compose --profile cpu up` for real: Redis, the models step, both vLLM servers,
    reward, judge, gateway, a rollout worker, the trainer and Prometheus, each waited on by its
    health check; Prometheus scrapes every target by its compose DNS name and every Grafana
    panel's query returns data; three PPO updates of compose_smoke.yaml with each new adapter
    hot-swapped into the policy container; an answer through the gateway; `down` leaves
    nothing behind. (Grafana itself is not run: no registry here, and Debian has no package.)"""
    project, env, gateway = compose_run("compose_smoke.yaml", "smoke")
    container = f"{project}-{{}}-1".format
    try:
        up_cpu_profile(project, env, "prometheus")
        # A key made in the gateway's container (the OpenAI client uses it below).
        made = podman("exec", container("gateway"), "agora", "keys", "create", "tester")
        key = re.search(r"agora-[A-Za-z0-9_-]{20,}", made.stdout).group(0)

        # Monitoring: users' traffic while the trainer runs (the judge and reward answer only
        # inside the compose network: sent from the gateway's container), then Prometheus.
        wait_until(lambda: "update 1:" in podman("logs", container("trainer-cpu")).stderr,
                   900, "update 1")
        for wave in (1, 2):
            traffic = podman("exec", "-i", container("gateway"), "python", "-", check=False,
                             input=TRAFFIC.format(wave=wave, key=key))
            assert traffic.returncode == 0, traffic.stderr[-2000:]
            time.sleep(6)  # a scrape apart: series born in wave 1 have grown by wave 2
        prom = f"http://127.0.0.1:{env['PROMETHEUS_PORT']}"
        empty: list[str] = []

        def every_panel_has_data() -> bool:
            empty[:] = panels_without_data(prom, ["player"])
            return not empty

        wait_until(every_panel_has_data, 120, "data for every dashboard panel",
                   lambda: f"none for: {empty}")
        up = {(s["metric"]["job"], s["metric"]["instance"]): s["value"][1]
              for s in instant(prom, "up")}
        assert {job for job, _ in up} == {"agora-trainer", "agora-rollout", "agora-reward",
                                          "agora-judge", "agora-gateway", "vllm"}, up
        assert set(up.values()) == {"1"}, up  # found by DNS name, scraped through the network

        # The trainer runs its budget (3 updates) and exits 0.
        waited = podman("wait", container("trainer-cpu"), check=False, timeout=1200)
        assert waited.stdout.strip() == "0", podman("logs", container("trainer-cpu")).stderr
        logs = podman("logs", container("trainer-cpu")).stderr
        assert all(f"update {n}:" in logs for n in (1, 2, 3)), logs[-3000:]

        # Each version crossed from the trainer's container to the policy server's: vLLM
        # serves v3 from the shared runs volume.
        models = served_models(container("policy-cpu"), 8100)
        assert "/runs/smoke/adapters/player/v3" in {m["root"] for m in models}, models

        # The key made above, from outside through the OpenAI client.
        agents = httpx.get(gateway + "/v1/agents", timeout=30,
                           headers={"authorization": f"Bearer {key}"}).json()["data"]
        assert [(a["id"], a["version"], a["versions"]) for a in agents] == [
            ("player", 3, [0, 1, 2, 3])]
        reply = OpenAI(base_url=gateway + "/v1", api_key=key).chat.completions.create(
            model="player", max_tokens=8, messages=[{"role": "user", "content": "Your move?"}])
        assert reply.choices[0].message.content

        failed = podman("exec", "-e", f"REDISCLI_AUTH={env['AGORA_REDIS_PASSWORD']}",
                        container("redis"), "redis-cli", "-p", "6390", "get",
                        "agora:smoke:episodes_failed")
        assert failed.stdout.strip() in ("", "0"), failed.stdout  # no episode given up on
    finally:
        down_leaves_nothing(project, env)


@pytest.mark.timeout(2400)
def test_compose_two_base_profiles_train_each_agent_on_its_own_base_server(images):
    """MAPoRL's heterogeneous pair in containers (configs/compose_two_base.yaml): `--profile cpu
    --profile two-base-cpu` runs a second vLLM container for Gemma 3 beside SmolLM2's; each
    agent's turns are sampled from its own base's server (the learner's first ratio is 1 only
    if the server that sampled a turn is the model that learns from it: the two bases share no
    tokenizer), and each agent's new adapters are hot-swapped into that server and no other."""
    project, env, _ = compose_run("compose_two_base.yaml", "pair")
    env.update(COMPOSE_PROFILES="cpu,two-base-cpu", AGORA_MODELS="smollm2-135m gemma3-270m")
    container = f"{project}-{{}}-1".format
    trainer = container("trainer-cpu")
    try:
        up_cpu_profile(project, env)
        waited = podman("wait", trainer, check=False, timeout=1500)
        logs = podman("logs", trainer).stderr
        assert waited.stdout.strip() == "0", logs[-3000:]
        assert "update 1:" in logs and "update 2:" in logs, logs[-3000:]

        # Each server runs its own base and serves only its own agent's versions.
        roots = {server: {m["root"] for m in served_models(container(server), port)}
                 for server, port in (("policy-cpu", 8100), ("policy-2-cpu", 8101))}
        for server, base, agent in (("policy-cpu", "smollm2-135m", "alice"),
                                    ("policy-2-cpu", "gemma3-270m", "bob")):
            adapters = roots[server] - {f"/cache/models/{base}"}
            assert len(adapters) < len(roots[server]), roots  # the base it was started with
            assert f"/runs/pair/adapters/{agent}/v2" in adapters, roots
            assert all(a.startswith(f"/runs/pair/adapters/{agent}/") for a in adapters), roots

        # Both learners trained on turns their own base sampled: ratio 1 at the first (and
        # only) minibatch of every update, for each.
        metrics = podman("exec", container("gateway"), "cat", "/runs/pair/metrics.jsonl")
        rows = [json.loads(line) for line in metrics.stdout.splitlines()]
        assert [row["update"] for row in rows] == [1, 2], metrics.stdout[-2000:]
        for row in rows:
            assert set(row["agents"]) == {"alice", "bob"}, row
            for agent, stats in row["agents"].items():
                assert stats["turns"] >= 4, (agent, stats)
                assert stats["ratio"] == pytest.approx(1.0, abs=0.05), (agent, stats)
    finally:
        down_leaves_nothing(project, env)


# What the run's Redis holds about its episodes, read in the gateway's container (it has the
# run's Redis URL and password in its environment): ids appended to the stream, counters.
EPISODE_LEDGER = """
import json, os, redis
from agora.rollout.stream import RunKeys
client, keys = redis.Redis.from_url(os.environ["AGORA_REDIS_URL"]), RunKeys("drill")
print(json.dumps({
    "ids": [f[b"episode_id"].decode() for _, f in client.xrange(keys.stream)],
    "reserved": int(client.get(keys.episode_index) or 0),
    "enqueued": int(client.get(keys.episodes_enqueued) or 0),
    "failed": int(client.get(keys.episodes_failed) or 0)}))
"""


def crash(name: str) -> None:
    """SIGKILL a container's main process from the host, as a crash would (``docker stop`` or
    ``kill`` would count as a deliberate stop, which restart policies respect)."""
    pid = int(podman("inspect", "-f", "{{.State.Pid}}", name).stdout.strip())
    os.kill(pid, signal.SIGKILL)




def restarted_and_healthy(name: str) -> bool:
    state = podman("inspect", "-f", "{{.RestartCount}} {{.State.Status}}", name,
                   check=False).stdout.split()
    if len(state) != 2 or int(state[0]) < 1 or state[1] != "running":
        return False
    # podman schedules health checks with systemd timers, absent here (compose_podman.sh runs
    # them only while compose runs): run the container's own check.
    return podman("healthcheck", "run", name, check=False, timeout=90).returncode == 0


def state_of(name: str) -> str:
    return podman("inspect", "-f", "restarts={{.RestartCount}} status={{.State.Status}} "
                  "exit={{.State.ExitCode}} health={{.State.Health.Status}}", name,
                  check=False).stdout.strip()


@pytest.mark.timeout(3600)
def test_compose_training_survives_crashed_rollout_and_policy_containers(images):
    """Faults in containers: the rollout worker's and then the policy server's main process
    SIGKILLed mid-run; compose's restart policy (unless-stopped) brings each back, the workers'
    and trainer's retries carry the run over the gap, and the trainer spends its budget with
    every enqueued episode appended once, none given up on (the embedded fault tests' checks)."""
    project, env, _ = compose_run("compose_faults.yaml", "drill")
    container = f"{project}-{{}}-1".format
    trainer = container("trainer-cpu")

    def trainer_reached(update: int) -> bool:
        return f"update {update}:" in podman("logs", trainer, check=False).stderr

    try:
        up_cpu_profile(project, env)
        wait_until(lambda: trainer_reached(2), 900, "update 2")
        crash(container("rollout"))
        wait_until(lambda: restarted_and_healthy(container("rollout")), 600,
                   "the rollout container to come back", lambda: state_of(container("rollout")))
        wait_until(lambda: trainer_reached(4), 900, "update 4 after the rollout crash")
        crash(container("policy-cpu"))
        wait_until(lambda: restarted_and_healthy(container("policy-cpu")), 900,
                   "the policy container to come back", lambda: state_of(container("policy-cpu")))
        waited = podman("wait", trainer, check=False, timeout=1800)
        logs = podman("logs", trainer).stderr
        assert waited.stdout.strip() == "0", logs[-3000:]
        assert all(f"update {n}:" in logs for n in range(1, 9)), logs[-3000:]

        ledger = json.loads(podman("exec", container("gateway"), "python", "-c",
                                   EPISODE_LEDGER).stdout)
        ids = ledger["ids"]
        assert len(ids) == len(set(ids)), "an episode was appended twice"
        assert sorted(ids) == [f"drill-{i:08d}" for i in range(1, ledger["reserved"] + 1)], \
            "an enqueued episode never reached the stream"
        assert ledger["enqueued"] == ledger["reserved"] and ledger["failed"] == 0, ledger
    finally:
        down_leaves_nothing(project, env)
