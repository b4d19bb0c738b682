"""The sandbox for model-written code, attacked for real: every test spawns real processes.

Each hostile program (fork bomb, infinite loop, 10 GB allocation, reading secrets, sockets, huge
output, huge file) must be contained, reported with the right status, and leave no process and
no temp dir behind.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from agora.rewards.verifiers.code import MARKER, expected_test_names, extract_code, verify_code
from agora.sandbox.runner import SandboxLimits, SandboxResult, SandboxStatus, run_python

ROOT = Path(__file__).resolve().parents[2]
ROOTED = os.geteuid() == 0
# Generous wall limits: the CI machine may be busy, and startup counts against the wall clock.
FAST = SandboxLimits(cpu_seconds=2, wall_seconds=8)
# After a kill the parent drains the pipes (<= 2 s), waits for the supervisor (<= 5 s) and for
# the sandbox uid's stragglers (<= 3 s); on a 2-core machine busy with the rest of the suite that
# took 12.8 s once. The hostile programs below would run for 1000 s (or forever), so a bound of
# the wall limit plus this slack still fails loudly when a limit does not stop them.
CLEANUP_SLACK_S = 30


def processes_of_uid(uid: int) -> list[int]:
    """Every process (zombies included) whose real, effective or saved uid is `uid`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            uids = next(line for line in status.splitlines() if line.startswith("Uid:"))
            if uid in [int(x) for x in uids.split()[1:4]]:
                found.append(int(entry))
    return found


def assert_nothing_left(result: SandboxResult) -> None:
    if result.sandbox_uid is None:
        return
    deadline = time.monotonic() + 2
    while processes_of_uid(result.sandbox_uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_of_uid(result.sandbox_uid) == []


def test_runs_code_with_stdin_and_files():
    code = "import helper, sys\nprint(helper.double(int(sys.stdin.read())))\n"
    result = run_python(
        code, stdin="21", files={"helper.py": "def double(x):\n    return 2 * x\n"}, limits=FAST
    )
    assert result.status is SandboxStatus.OK, result
    assert result.ok and result.exit_code == 0
    assert result.stdout == "42\n" and result.stderr == "" and not result.truncated
    assert result.duration_s < FAST.wall_seconds
    if ROOTED:  # on this machine the full isolation must be in place, not a fallback
        assert result.sandbox_uid is not None and result.sandbox_uid >= 10_000_000
        notes = " ".join(result.isolation)
        for measure in ("network namespace", "pid + ipc namespaces", "mount namespace", "seccomp"):
            assert measure in notes, result.isolation
    assert_nothing_left(result)


def test_runs_unprivileged_in_a_private_tmpfs_dir_that_is_removed():
    code = (
        "import os\n"
        "print(os.getuid(), os.getgid(), os.getgroups())\n"
        "print(os.getcwd())\n"
        "print(sorted(os.listdir('/proc')))\n"
    )
    result = run_python(code, limits=FAST)
    assert result.status is SandboxStatus.OK, result
    ids, cwd, procs = result.stdout.splitlines()
    workdir = Path(cwd)
    assert workdir.name.startswith("agora-sbx-")
    assert not workdir.exists()  # removed afterwards
    if ROOTED:
        uid = result.sandbox_uid
        assert ids == f"{uid} {uid} []"
        assert "'1'" in procs and "'2'" not in procs  # its own PID namespace: it is pid 1


def test_exception_is_an_error_with_traceback():
    result = run_python("def f():\n    return 1 / 0\nf()\n", limits=FAST)
    assert result.status is SandboxStatus.ERROR
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr
    assert "ZeroDivisionError" in result.reason


def test_infinite_loop_is_stopped_by_the_cpu_limit_or_the_clock():
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=6)
    start = time.monotonic()
    result = run_python("while True:\n    pass\n", limits=limits)
    assert result.status in (SandboxStatus.CPU_LIMIT, SandboxStatus.TIMEOUT), result
    assert time.monotonic() - start < limits.wall_seconds + CLEANUP_SLACK_S
    assert_nothing_left(result)


def test_sleeping_forever_hits_the_wall_clock_and_keeps_earlier_output():
    code = "import time\nprint('started', flush=True)\ntime.sleep(1000)\n"
    start = time.monotonic()
    limits = SandboxLimits(wall_seconds=2)
    result = run_python(code, limits=limits)
    assert result.status is SandboxStatus.TIMEOUT, result
    assert result.stdout == "started\n"
    assert time.monotonic() - start < limits.wall_seconds + CLEANUP_SLACK_S
    assert_nothing_left(result)


def test_fork_bomb_is_contained():
    bomb = "import os\nwhile True:\n    os.fork()\n"
    start = time.monotonic()
    limits = SandboxLimits(max_processes=16, wall_seconds=4)
    result = run_python(bomb, limits=limits)
    assert result.status in (SandboxStatus.PROCESS_LIMIT, SandboxStatus.TIMEOUT), result
    assert time.monotonic() - start < limits.wall_seconds + CLEANUP_SLACK_S
    assert_nothing_left(result)


def test_escaped_background_processes_die_with_the_run():
    # Children that leave the process group (setsid) and outlive the main process.
    code = (
        "import os, time\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        time.sleep(1000)\n"
        "print('main done')\n"
    )
    result = run_python(code, limits=FAST)
    assert result.status is SandboxStatus.OK, result
    assert result.stdout == "main done\n"
    assert result.duration_s < CLEANUP_SLACK_S  # it did not wait for the 1000 s sleepers
    assert_nothing_left(result)


def test_ten_gigabyte_allocation_hits_the_memory_limit():
    result = run_python("data = bytearray(10 * 1024**3)\n", limits=FAST)
    assert result.status is SandboxStatus.MEMORY_LIMIT, result
    assert "MemoryError" in result.stderr


def test_growing_allocation_hits_the_memory_limit():
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024**2))\n"
    result = run_python(code, limits=SandboxLimits(memory_mb=256, wall_seconds=8))
    assert result.status is SandboxStatus.MEMORY_LIMIT, result


def test_files_outside_the_sandbox_cannot_be_read(tmp_path):
    secret_dir = tmp_path / "private"
    secret_dir.mkdir(mode=0o700)
    secret = secret_dir / "secret.txt"
    secret.write_text("TOP-SECRET-7f3a9c")
    secret.chmod(0o600)
    targets = [
        str(secret),
        "/etc/shadow",
        str(ROOT / "README.md"),
        str(ROOT / "pyproject.toml"),
        str(Path.home() / ".bash_history"),
    ]
    code = (
        "import json, sys\n"
        "outcome = {}\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        outcome[path] = open(path).read()\n"
        "    except OSError as exc:\n"
        "        outcome[path] = type(exc).__name__\n"
        "print(json.dumps(outcome))\n"
    )
    result = run_python(code, limits=FAST)
    assert result.status is SandboxStatus.OK, result
    assert "TOP-SECRET" not in result.stdout + result.stderr
    outcome = json.loads(result.stdout)
    # Nothing of the repo's files (the paths themselves may contain "agora": check contents).
    assert not any("Post-train LLM agents" in v for v in outcome.values())
    assert all(v in ("PermissionError", "FileNotFoundError") for v in outcome.values()), outcome
    if ROOTED:
        assert outcome["/etc/shadow"] == "PermissionError"


@pytest.mark.skipif(not ROOTED, reason="creating a top-level directory needs root")
def test_unknown_top_level_directories_are_hidden_too():
    """A checkout may live anywhere (CI clones under /check): an allow-list hides it all."""
    folder = Path(f"/agora-sbx-probe-{os.getpid()}")
    folder.mkdir()
    try:
        (folder / "data.txt").write_text("PRIVATE-CHECKOUT-FILE")
        result = run_python(f"print(open({str(folder / 'data.txt')!r}).read())", limits=FAST)
        assert result.status is SandboxStatus.ERROR, result
        assert "FileNotFoundError" in result.stderr
        assert "PRIVATE-CHECKOUT-FILE" not in result.stdout
        opt_out = SandboxLimits(wall_seconds=8, hide_non_system_dirs=False)
        visible = run_python(f"print(open({str(folder / 'data.txt')!r}).read())", limits=opt_out)
        assert "PRIVATE-CHECKOUT-FILE" in visible.stdout, visible
    finally:
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()


@pytest.mark.parametrize("seccomp", [True, False], ids=["seccomp+netns", "netns-only"])
def test_sockets_cannot_reach_localhost_or_the_internet(seccomp):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = (
            "import socket\n"
            f"for address in [('127.0.0.1', {port}), ('1.1.1.1', 53), ('8.8.8.8', 443)]:\n"
            "    try:\n"
            "        s = socket.create_connection(address, timeout=2)\n"
            "        print(address, 'CONNECTED')\n"
            "    except OSError as exc:\n"
            "        print(address, type(exc).__name__, exc.errno)\n"
            "a, b = socket.socketpair()\n"
            "a.sendall(b'unix ok')\n"
            "print(b.recv(16).decode())\n"
        )
        result = run_python(code, limits=SandboxLimits(seccomp_filter=seccomp, wall_seconds=10))
        assert result.status is SandboxStatus.OK, result
        assert "CONNECTED" not in result.stdout
        assert "unix ok" in result.stdout  # AF_UNIX socket pairs still work
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever reached the listener
    if ROOTED:
        # seccomp refuses socket() itself (EACCES); without it the namespace has no route.
        expected = "PermissionError 13" if seccomp else f"OSError {errno.ENETUNREACH}"
        lines = result.stdout.splitlines()[:3]
        assert all(line.endswith(expected) for line in lines), lines


def test_threads_and_subprocesses_work_but_new_namespaces_are_refused():
    code = (
        "import ctypes, subprocess, threading\n"
        "box = []\n"
        "t = threading.Thread(target=box.append, args=('thread ok',))\n"
        "t.start(); t.join(); print(box[0])\n"
        "child = subprocess.run(['echo', 'child ok'], capture_output=True, text=True)\n"
        "print(child.stdout.strip())\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000\n"
        "print('unshare', libc.unshare(CLONE_NEWUSER | CLONE_NEWNET), ctypes.get_errno())\n"
    )
    result = run_python(code, limits=FAST)
    assert result.status is SandboxStatus.OK, result
    assert result.stdout.splitlines()[:2] == ["thread ok", "child ok"]
    assert result.stdout.splitlines()[2] == f"unshare -1 {errno.EPERM}"


def test_endless_output_is_cut_at_the_cap():
    limits = SandboxLimits(max_output_bytes=4096, wall_seconds=8)
    result = run_python("while True:\n    print('x' * 1000)\n", limits=limits)
    assert result.status is SandboxStatus.OUTPUT_LIMIT, result
    assert result.truncated
    assert 0 < len(result.stdout.encode()) <= limits.max_output_bytes
    assert_nothing_left(result)


def test_one_huge_write_is_cut_at_the_cap():
    result = run_python("import sys\nsys.stdout.write('y' * 10**8)\n", limits=FAST)
    assert result.status is SandboxStatus.OUTPUT_LIMIT, result
    assert len(result.stdout.encode()) <= FAST.max_output_bytes


def test_hundred_megabyte_file_hits_the_file_size_limit():
    code = "with open('big.bin', 'wb') as fh:\n    fh.write(b'x' * 100 * 1024**2)\n"
    result = run_python(code, limits=FAST)
    assert result.status is SandboxStatus.FILE_LIMIT, result
    assert "File too large" in result.stderr


def test_concurrent_runs_do_not_interfere():
    results: list[SandboxResult] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        r = run_python(f"print({i} * 2)", limits=FAST)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.stdout for r in results) == ["0\n", "2\n", "4\n"]
    assert all(r.ok for r in results)
    if ROOTED:
        assert len({r.sandbox_uid for r in results}) == 3


# ----------------------------------------------------------------------------- code verifier

TESTS = """
def test_small():
    assert add(1, 2) == 3

def test_negative():
    assert add(-5, 2) == -3

def test_large():
    from solution import add as imported
    assert imported(10**12, 1) == 10**12 + 1
"""


def test_correct_solution_passes():
    verdict = verify_code("def add(a, b):\n    return a + b\n", TESTS, limits=FAST)
    assert verdict.passed, verdict
    assert (verdict.tests_passed, verdict.tests_total) == (3, 3)
    assert verdict.status == "ok" and verdict.failures == {}


def test_buggy_solution_fails_with_counts():
    buggy = "def add(a, b):\n    return abs(a) + b if a < 0 else a + b\n"
    verdict = verify_code(buggy, TESTS, limits=FAST)
    assert not verdict.passed
    assert (verdict.tests_passed, verdict.tests_total) == (2, 3)
    assert list(verdict.failures) == ["test_negative"]
    assert "AssertionError" in verdict.failures["test_negative"]


def test_plain_assert_tests_count_as_one():
    assert expected_test_names("assert f(2) == 4\n") == ["<module>"]
    good = verify_code("def f(x):\n    return x * x\n", "assert f(2) == 4\n", limits=FAST)
    bad = verify_code("def f(x):\n    return x + 3\n", "assert f(2) == 4\n", limits=FAST)
    assert good.passed and (good.tests_passed, good.tests_total) == (1, 1)
    assert not bad.passed and bad.tests_passed == 0 and "AssertionError" in bad.reason


def test_unloadable_or_hanging_solutions_fail():
    broken = verify_code("def add(a, b) return a\n", TESTS, limits=FAST)
    assert not broken.passed and "SyntaxError" in broken.reason
    reads_input = verify_code("n = int(input())\n", TESTS, limits=FAST)
    assert not reads_input.passed and "EOFError" in reads_input.reason
    hangs = verify_code(
        "def add(a, b):\n    while True:\n        pass\n",
        TESTS,
        limits=SandboxLimits(cpu_seconds=1, wall_seconds=4),
    )
    assert not hangs.passed and hangs.status in ("cpu_limit", "timeout")


def test_forged_reports_do_not_pass():
    forgeries = {
        "fake nonce": (
            "import json, os\n"
            f"for name in ['test_small', 'test_negative', 'test_large']:\n"
            f"    print('{MARKER}' + '0' * 32 + ' ' + json.dumps({{'test': name, 'ok': True}}))\n"
            f"print('{MARKER}' + '0' * 32 + ' ' + json.dumps({{'done': True}}))\n"
            "os._exit(0)\n"
        ),
        "exit before tests": "import os\nos._exit(0)\n",
        "steal stdin": (
            "import sys, os\n"
            "nonce = sys.stdin.read().split()\n"
            "print('stdin was', nonce)\n"
            "os._exit(0)\n"
        ),
        "read the test file": (
            "import os\nprint(os.listdir('.'))\nprint(open('tests.py').read())\n"
        ),
    }
    for name, code in forgeries.items():
        verdict = verify_code(code, TESTS, limits=FAST)
        assert not verdict.passed, (name, verdict)
        assert verdict.tests_passed == 0, (name, verdict)


def test_replayed_reports_with_a_stolen_nonce_are_detected():
    # A solution that found the nonce (here: by walking the harness's stack) and repeats a
    # report: duplicate reports are treated as tampering. (One that reports only the missing
    # tests perfectly would win; see the module docstring on residual risk.)
    code = (
        "import sys, json\n"
        "frame = sys._getframe(1)\n"
        "marker = frame.f_locals['marker']\n"
        "print(marker + json.dumps({'test': 'test_small', 'ok': True}))\n"
        "print(marker + json.dumps({'test': 'test_small', 'ok': True}))\n"
        "def add(a, b):\n    return 0\n"
    )
    verdict = verify_code(code, TESTS, limits=FAST)
    assert not verdict.passed
    assert verdict.status == "invalid_report"


def test_extract_code():
    answer = "Here:\n```python\ndef f():\n    return 1\n```\nand finally\n```py\nprint(2)\n```\n"
    assert extract_code(answer) == "print(2)"
    assert extract_code("text\n```\nx = 1\n```") == "x = 1"
    assert extract_code("```bash\nls\n```\n```python\ny = 2\n```") == "y = 2"
    assert extract_code("x = 3\nprint(x)\n") == "x = 3\nprint(x)"
    assert extract_code("cut off:\n```python\nz = 4\n") == "z = 4"  # unclosed fence
