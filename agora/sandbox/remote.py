"""Model-written code, sent to the reward service's sandbox instead of run where it was written.

The rollout workers (and in-process evaluation) hold what a run must protect: the Redis URL in
their environment, the adapters and checkpoints under the runs folder, the policy server next
door. So code the policies write (the support desks' ``python`` tool, program answers) leaves
them: ``run_untrusted`` posts it to ``POST /v1/sandbox/run`` of the run's reward service, which
runs it under its sandbox (agora/sandbox/runner.py) with the isolation it refuses to start
without. The reward service itself, and a library user with no service, run it locally.

Where code goes is set per episode with ``code_runs_at(url)`` (a ContextVar, so concurrent
episodes of one process each use their own run's service) or for a whole process with
``AGORA_SANDBOX_URL``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import asdict

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from agora.ops.service_key import service_headers
from agora.sandbox.runner import SandboxLimits, SandboxResult, SandboxStatus, run_python

ENV_VAR = "AGORA_SANDBOX_URL"
RUN_PATH = "/v1/sandbox/run"
# The limits a client may set; the isolation knobs (seccomp, hidden paths, min_isolation, user
# namespaces) are the service's alone.
CLIENT_LIMITS = ("cpu_seconds", "wall_seconds", "memory_mb", "file_size_mb", "disk_mb",
                 "max_processes", "max_open_files", "max_output_bytes")
_RETRYABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError,
              httpx.ReadError)
_service_url: ContextVar[str | None] = ContextVar("agora_sandbox_url", default=None)


class SandboxUnavailable(RuntimeError):
    """The reward service's sandbox could not run the code (unreachable, or it refuses for want
    of isolation). Not a verdict on the code: the caller retries the episode later."""


@contextlib.contextmanager
def code_runs_at(base_url: str | None) -> Iterator[None]:
    """Within this block (and the tasks and threads it starts with a copied context), untrusted
    code goes to the sandbox of the service at ``base_url`` (None: run it locally)."""
    token = _service_url.set(base_url.rstrip("/") if base_url else None)
    try:
        yield
    finally:
        _service_url.reset(token)


def sandbox_url() -> str | None:
    """Where untrusted code runs now: the block's service, else AGORA_SANDBOX_URL, else here."""
    return _service_url.get() or os.environ.get(ENV_VAR) or None


def run_untrusted(code: str, *, limits: SandboxLimits, stdin: str = "",
                  files: dict[str, str] | None = None) -> SandboxResult:
    """``run_python``, in the reward service's sandbox when one is set (``sandbox_url()``)."""
    url = sandbox_url()
    if url is None:
        return run_python(code, stdin=stdin, limits=limits, files=files)
    return run_remote(url, code, limits=limits, stdin=stdin, files=files)


def run_remote(base_url: str, code: str, *, limits: SandboxLimits, stdin: str = "",
               files: dict[str, str] | None = None) -> SandboxResult:
    """POST the code to ``base_url``'s sandbox; retries while the service restarts.

    Raises SandboxUnavailable when it stays unreachable (30 s) or answers 503 (its sandbox
    cannot isolate): never a made-up result that would score the code as failing."""
    body = {"code": code, "stdin": stdin, "files": files or {},
            "limits": {k: v for k, v in asdict(limits).items() if k in CLIENT_LIMITS}}
    url = base_url.rstrip("/") + RUN_PATH
    try:
        for attempt in Retrying(retry=retry_if_exception_type(_RETRYABLE),
                                wait=wait_exponential(multiplier=0.5, max=5),
                                stop=stop_after_delay(30), reraise=True):
            with attempt:
                resp = httpx.post(url, json=body, timeout=limits.wall_seconds + 60.0,
                                  headers=service_headers())
    except _RETRYABLE as err:
        raise SandboxUnavailable(f"sandbox unreachable at {url}: {err}") from err
    if resp.status_code >= 500:
        raise SandboxUnavailable(f"sandbox at {url} answered {resp.status_code}: "
                                 f"{resp.text[:300]}")
    if resp.status_code >= 400:  # our request was wrong: a bug here, not the code's fault
        raise ValueError(f"sandbox at {url} refused the request ({resp.status_code}): "
                         f"{resp.text[:300]}")
    data = resp.json()
    return SandboxResult(
        status=SandboxStatus(data["status"]), exit_code=data["exit_code"],
        stdout=data["stdout"], stderr=data["stderr"], truncated=data["truncated"],
        duration_s=data["duration_s"], reason=data["reason"], cpu_s=data["cpu_s"],
        isolation=tuple(data["isolation"]), level=data["level"],
        extra={"remote": url})
