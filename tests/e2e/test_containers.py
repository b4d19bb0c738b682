"""agora's images in real containers (issue 19): built without a registry by
scripts/local_base_images.sh (podman, Debian stand-ins of the public bases), run with the
settings docker-compose.yml gives them.

The reward service is the image whose contract depends most on its container: model-written
code runs in its sandbox, which needs namespaces. With compose's settings it must reach full
isolation inside the container; without them it must refuse loudly (503, saying why) rather
than score every program 0.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
import yaml

from agora.stack.procs import free_port
from tests.conftest import ROOT

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


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([ENGINE or "podman", *args], env=ENV, capture_output=True, text=True,
                          timeout=120, check=check)


@pytest.fixture(scope="module")
def images() -> None:
    """The images, as the script builds them (minutes the first time, the layer cache after)."""
    subprocess.run(["bash", "scripts/local_base_images.sh"], cwd=ROOT, check=True, timeout=3600,
                   env={**ENV, "AGORA_IMAGES": "reward"})


@contextlib.contextmanager
def reward_container(*flags: str) -> Iterator[str]:
    """A reward container on a free 127.0.0.1 port; yields its URL; removed after."""
    name = f"agora-test-reward-{free_port()}"
    port = free_port()
    podman("run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8201",
           "-e", "AGORA_REDIS_URL=redis://:not-for-model-code@redis:6390/0", *flags, REWARD)
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


def run_probe(url: str) -> httpx.Response:
    return httpx.post(url + "/v1/sandbox/run", json={"code": PROBE}, timeout=60)


def test_reward_container_with_compose_settings_runs_model_code_fully_isolated(images):
    flags = compose_reward_flags()
    assert "--cap-add=SYS_ADMIN" in flags  # what the sandbox's namespaces need as root
    with reward_container(*flags) as url:
        assert httpx.get(url + "/health", timeout=5).json() == {"status": "ok"}
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
            "tests": "assert f() == 1"}, timeout=30)
        assert verdict.status_code == 503, verdict.text  # never a silent 0
