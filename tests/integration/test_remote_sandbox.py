"""Model-written code leaves the rollout worker for the reward service's sandbox (issue 18).

A real reward service (uvicorn) runs the code; the client side is the one the rollout worker
uses (``code_runs_at`` + the ``python`` tool, program answers). A second reward service, started
where its sandbox cannot isolate (inside a user namespace that maps no uid, so neither root
nor a nested user namespace is available to it), must refuse code loudly, never score it 0.
"""

from __future__ import annotations

import shutil

import httpx
import pytest

from agora.rewards.verifiers.program import run_program
from agora.sandbox.remote import SandboxUnavailable, code_runs_at, run_untrusted
from agora.sandbox.runner import SandboxLimits
from agora.stack.procs import free_port
from agora.tools import REGISTRY
from tests.conftest import uvicorn_service

TIMEOUT = 60.0


def run(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/sandbox/run", json=body, timeout=TIMEOUT)


def test_the_service_runs_code_with_stdin_and_files_at_full_isolation(reward_url):
    code = ("import sys, os\nprint(open('data/x.txt').read().strip(), sys.stdin.read())\n"
            "print(sorted(os.environ))")
    resp = run(reward_url, {"code": code, "stdin": "from stdin",
                            "files": {"data/x.txt": "from a file"},
                            "limits": {"cpu_seconds": 2, "wall_seconds": 10}})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["status"] == "ok"
    assert out["level"] == "full"
    first, env = out["stdout"].splitlines()
    assert first == "from a file from stdin"
    assert "REDIS_URL" not in env and "AGORA" not in env


def test_the_services_limits_hold_for_remote_code(reward_url):
    out = run(reward_url, {"code": "while True: pass",
                           "limits": {"cpu_seconds": 1, "wall_seconds": 5}}).json()
    assert out["status"] in ("cpu_limit", "timeout"), out
    out = run(reward_url, {"code": "import socket; socket.create_connection(('127.0.0.1', 6379))"
                           }).json()
    assert out["status"] == "error" and "PermissionError" in out["stderr"], out


BAD_RUNS = {
    "no code": ({"code": ""}, "at least 1 character"),
    "isolation is the service's": ({"code": "print(1)", "limits": {"min_isolation": "seccomp"}},
                                   "min_isolation"),
    "seccomp is the service's": ({"code": "print(1)", "limits": {"seccomp_filter": False}},
                                 "seccomp_filter"),
    "file outside the sandbox": ({"code": "print(1)", "files": {"../etc/x": "y"}},
                                 "relative path"),
    "file replacing the script": ({"code": "print(1)", "files": {"main.py": "y"}},
                                  "not main.py"),
    "too generous": ({"code": "print(1)", "limits": {"wall_seconds": 3600}},
                     "less than or equal to 60"),
    "unknown field": ({"code": "print(1)", "cwd": "/"}, "cwd"),
}


@pytest.mark.parametrize("case", BAD_RUNS)
def test_bad_sandbox_requests_get_a_422_naming_the_field(reward_url, case):
    body, fragment = BAD_RUNS[case]
    resp = run(reward_url, body)
    assert resp.status_code == 422, resp.text
    assert fragment in resp.text


def test_the_python_tool_and_program_answers_run_in_the_service(reward_url):
    with code_runs_at(reward_url):
        assert REGISTRY.call("python", "19*12").output == "228"
        result = run_untrusted("print(6*7)", limits=SandboxLimits())
        program = run_program("print(40+2)", SandboxLimits())
    assert result.stdout.strip() == "42" and result.level == "full"
    assert result.extra["remote"] == f"{reward_url}/v1/sandbox/run"
    assert program.printed == "42"
    # Outside the block, code runs in this process's own sandbox (a library user's default).
    assert "remote" not in run_untrusted("print(1)", limits=SandboxLimits()).extra


@pytest.fixture(scope="module")
def unisolated_reward_url(logs_dir):
    """A reward service in a user namespace with no uid mapped: not root there, and no nested
    user namespace can map its uid, so its sandbox reaches only the 'seccomp' level."""
    unshare = shutil.which("unshare")
    assert unshare, "util-linux's unshare is needed to start a service that cannot isolate"
    port = free_port()
    svc = uvicorn_service("reward-unisolated", "services.reward.app:app", port,
                          logs_dir / "reward-unisolated.log",
                          env={"AGORA_SANDBOX_URL": "http://127.0.0.1:9/never-used"},
                          prefix=(unshare, "--user"),
                          health_path="/metrics").start()  # /health is 503 by design
    try:
        svc.wait_healthy(60)
        yield f"http://127.0.0.1:{port}"
    finally:
        svc.stop()


def test_a_service_whose_sandbox_cannot_isolate_refuses_code_and_says_why(
        unisolated_reward_url):
    url = unisolated_reward_url
    health = httpx.get(f"{url}/health", timeout=TIMEOUT)
    assert health.status_code == 503
    detail = health.json()["detail"]
    assert "AGORA_SANDBOX_ISOLATION" in detail and "below the required 'full'" in detail
    assert run(url, {"code": "print(1)"}).status_code == 503
    code = httpx.post(f"{url}/v1/verify", json={
        "kind": "code", "code": "def f():\n    return 1\n",
        "tests": "def test_f():\n    assert f() == 1\n"}, timeout=TIMEOUT)
    assert code.status_code == 503 and "AGORA_SANDBOX_ISOLATION" in code.json()["detail"]
    game = httpx.post(f"{url}/v1/verify", json={"env": "tictactoe", "actions": ["4"]},
                      timeout=TIMEOUT)
    assert game.status_code == 200, game.text  # replaying a game runs no model code
    # The worker's side: the episode fails (and is retried), the agent is not told "error".
    with code_runs_at(url), pytest.raises(SandboxUnavailable, match="503"):
        REGISTRY.call("python", "print(1)")
