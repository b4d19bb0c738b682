"""Unit tests start no process: no server fixture, no subprocess, no fork. A test that needs one
belongs in tests/integration; this guard fails it instead of letting ``make test-fast`` grow."""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess

import pytest

SERVER_FIXTURES = {"redis_url", "reward_url", "vllm_tiny", "judge_url"}


@pytest.fixture(autouse=True)
def no_processes(request, monkeypatch) -> None:
    servers = SERVER_FIXTURES & set(request.fixturenames)
    assert not servers, f"a unit test uses {sorted(servers)}: move it to tests/integration"

    def refuse(*args, **kwargs):
        raise AssertionError("a unit test started a process: move it to tests/integration")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    monkeypatch.setattr(os, "fork", refuse)
    monkeypatch.setattr(os, "posix_spawn", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
