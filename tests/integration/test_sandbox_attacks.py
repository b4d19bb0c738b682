"""Attacks on the sandbox, run for real as root and as an unprivileged user (issue 18).

The reward service runs the sandbox as root in our images, but the same code must hold where
it is not root (a locked-down pod, a laptop). The development and CI machines are root, so the
unprivileged runs drop to ``nobody`` for real: a small probe (the stdlib-only sandbox modules
copied beside it, run by an interpreter that ``nobody`` may execute) calls ``run_python`` and
prints the result as JSON. Each attack runs under three profiles:

- ``root``: the suite's own process (a private uid per run, namespaces unshared directly);
- ``nobody``: unprivileged, isolation from an unprivileged user namespace;
- ``nobody-no-userns``: unprivileged with user namespaces turned off: the run must be refused
  (default ``min_isolation="full"``), never run half-isolated.

A victim process of the same uid, a path socket, an abstract socket and a secret environment
variable are set up outside the sandbox for the attacks to aim at.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

import agora.sandbox.cgroup as cgroup_module
import agora.sandbox.runner as runner_module
from agora.sandbox.cgroup import create_run_cgroup
from agora.sandbox.runner import SandboxLimits, run_python

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="dropping to nobody needs root")

NOBODY = 65534
PROFILES = ("root", "nobody", "nobody-no-userns")
LIMITS = {"wall_seconds": 20.0, "cpu_seconds": 5, "memory_mb": 256, "max_processes": 16}

PROBE = """
import json, sys
from dataclasses import asdict
from agora.sandbox.runner import SandboxLimits, run_python
request = json.loads(sys.stdin.read())
result = run_python(request["code"], limits=SandboxLimits(**request["limits"]))
print(json.dumps(asdict(result)))
"""


def _interpreter_nobody_can_run() -> str:
    """The suite's interpreter lives under /root here (mode 700): find one ``nobody`` can run."""
    for candidate in (os.path.realpath(sys.executable), "/usr/bin/python3",
                      "/usr/local/bin/python3"):
        try:
            probe = subprocess.run([candidate, "-I", "-c", "import ctypes, json"], user=NOBODY,
                                   group=NOBODY, extra_groups=[], capture_output=True, cwd="/",
                                   check=False)
        except OSError:  # not there, or not executable by nobody
            continue
        if probe.returncode == 0:
            return candidate
    raise AssertionError("no Python interpreter that the user nobody may execute")


@pytest.fixture(scope="module")
def probe_dir() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="agora-probe-"))
    package = folder / "agora" / "sandbox"
    package.mkdir(parents=True)
    (folder / "agora" / "__init__.py").write_text("")
    # The sandbox package alone (stdlib only), as a pod without the rest of agora would hold it.
    shutil.copytree(Path(runner_module.__file__).parent, package, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "probe.py").write_text(PROBE)
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def interpreter() -> str:
    return _interpreter_nobody_can_run()


class Target:
    """What the attacks aim at: a same-uid victim, sockets, a secret in the environment."""

    def __init__(self, folder: Path, uid: int | None) -> None:
        self.secret = secrets.token_hex(8)
        self.mark = str(30000 + secrets.randbelow(9000))  # a sleep length no one else uses
        self.folder = folder
        self.victim = subprocess.Popen(["sleep", "300"], user=uid, group=uid,
                                       extra_groups=[] if uid is not None else None)
        self.path_socket = folder / f"listen-{self.secret}.sock"
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(self.path_socket))
        self.path_socket.chmod(0o777)
        self.listener.listen()
        self.abstract = f"agora-attack-{self.secret}"
        self.abstract_listener = socket.socket(socket.AF_UNIX)
        self.abstract_listener.bind("\0" + self.abstract)
        self.abstract_listener.listen()
        self.writable = folder / f"runs-{self.secret}"
        self.writable.mkdir(mode=0o777)
        self.writable.chmod(0o777)

    def close(self) -> None:
        self.victim.kill()
        self.victim.wait()
        self.listener.close()
        self.abstract_listener.close()
        self.path_socket.unlink(missing_ok=True)
        shutil.rmtree(self.writable, ignore_errors=True)
        subprocess.run(["pkill", "-KILL", "-f", f"sleep {self.mark}"], check=False)


def _run(profile: str, code: str, probe_dir: Path, interpreter: str, target: Target,
         **limits: object) -> dict:
    merged = {**LIMITS, **limits}
    if profile == "root":
        return asdict(run_python(code, limits=SandboxLimits(**merged)))  # type: ignore[arg-type]
    if profile == "nobody-no-userns":
        merged["user_namespaces"] = False
    done = subprocess.run(
        [interpreter, "-E", "-s", "probe.py"], input=json.dumps({"code": code, "limits": merged}),
        user=NOBODY, group=NOBODY, extra_groups=[], cwd=probe_dir, capture_output=True,
        text=True, timeout=90, env={"PATH": "/usr/bin:/bin", "REDIS_URL": target.secret},
        check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(params=PROFILES)
def attack(request, probe_dir: Path, interpreter: str, monkeypatch) -> Iterator:
    profile = request.param
    # The secret sits in the environment of whatever calls the sandbox (the service).
    target = Target(probe_dir, None if profile == "root" else NOBODY)
    monkeypatch.setenv("REDIS_URL", target.secret)

    def run(code: str, **limits: object) -> dict:
        return _run(profile, code, probe_dir, interpreter, target, **limits)

    run.profile, run.target = profile, target  # type: ignore[attr-defined]
    yield run
    target.close()


def _outcome(run, result: dict) -> dict | None:
    """The code's printed JSON verdict; for the no-userns profile, the refusal is the outcome."""
    if run.profile == "nobody-no-userns":
        assert result["status"] == "sandbox_error", result
        assert "below the required 'full'" in result["reason"], result["reason"]
        assert result["stdout"] == ""
        return None
    assert result["status"] == "ok", result
    assert result["level"] == "full", result["isolation"]
    return json.loads(result["stdout"].strip().splitlines()[-1])


def test_a_same_uid_process_outside_cannot_be_killed_or_read(attack):
    victim = attack.target.victim.pid
    code = f"""
import json, os, signal
seen = {{}}
try:
    os.kill({victim}, signal.SIGKILL); seen["kill"] = "sent"
except OSError as err:
    seen["kill"] = type(err).__name__
try:
    seen["environ"] = open("/proc/{victim}/environ").read()[:50]
except OSError as err:
    seen["environ"] = type(err).__name__
seen["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
seen["env"] = dict(os.environ)
print(json.dumps(seen))
"""
    seen = _outcome(attack, attack(code))
    time.sleep(0.2)
    assert attack.target.victim.poll() is None, "the victim outside the sandbox was killed"
    if seen is None:
        return
    assert seen["kill"] == "ProcessLookupError"
    assert seen["environ"] in ("FileNotFoundError", "PermissionError")
    assert max(seen["pids"]) < 100, seen["pids"]  # a fresh PID namespace: the host is not there
    assert attack.target.secret not in json.dumps(seen["env"])


def test_a_setsid_grandchild_does_not_outlive_the_run(attack):
    mark = attack.target.mark
    code = f"""
import json, subprocess
subprocess.Popen(["sleep", "{mark}"], start_new_session=True)
subprocess.Popen(["sh", "-c", "setsid sleep {mark} &"])
print(json.dumps({{"started": True}}))
"""
    seen = _outcome(attack, attack(code))
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", f"sleep {mark}"], capture_output=True, text=True,
                          check=False).stdout.split()
    assert left == [], f"processes outlived the run: {left}"
    if seen is not None:
        assert seen["started"]


def test_ptrace_keyctl_bpf_and_perf_are_refused(attack):
    victim = attack.target.victim.pid
    code = f"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(nr, *args)
    return "ok" if rc >= 0 else os.strerror(ctypes.get_errno())
# x86_64 numbers: ptrace 101 (PTRACE_ATTACH 16), keyctl 250 (JOIN_SESSION_KEYRING 1),
# add_key 248, bpf 321, perf_event_open 298, process_vm_readv 310
seen = {{
    "ptrace_victim": call(101, 16, {victim}, 0, 0),
    "ptrace_parent": call(101, 16, os.getppid(), 0, 0),
    "keyctl": call(250, 1, 0),
    "add_key": call(248, b"user", b"k", b"v", 1, -3),
    "bpf": call(321, 0, 0, 0),
    "perf_event_open": call(298, 0, 0, -1, -1, 0),
    "process_vm_readv": call(310, {victim}, 0, 0, 0, 0, 0),
}}
print(json.dumps(seen))
"""
    if os.uname().machine != "x86_64":
        pytest.fail("this attack uses x86_64 syscall numbers; add this machine's")
    seen = _outcome(attack, attack(code))
    if seen is not None:
        assert set(seen.values()) == {"Operation not permitted"}, seen


def test_sockets_of_the_host_cannot_be_reached(attack):
    target = attack.target
    code = f"""
import json, socket
seen = {{}}
for name, address in (("path", {str(target.path_socket)!r}),
                      ("abstract", "\\0" + {target.abstract!r})):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(address); seen[name] = "connected"
    except OSError as err:
        seen[name] = type(err).__name__
for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK):
    try:
        socket.socket(family); seen[str(family)] = "created"
    except OSError as err:
        seen[str(family)] = type(err).__name__
print(json.dumps(seen))
"""
    seen = _outcome(attack, attack(code))
    if seen is not None:
        assert seen["path"] == "FileNotFoundError"  # the folder is hidden
        assert seen["abstract"] == "ConnectionRefusedError"  # another network namespace
        assert {v for k, v in seen.items() if k not in ("path", "abstract")} == {
            "PermissionError"}, seen


def test_dev_sys_and_the_hosts_files_are_out_of_sight(attack):
    target = attack.target
    code = f"""
import json, os
seen = {{"dev": sorted(os.listdir("/dev")), "sys": os.listdir("/sys")}}
for name, path in (("kmsg", "/dev/kmsg"), ("mem", "/dev/mem"), ("cgroup", "/sys/fs/cgroup"),
                   ("probe", {str(target.folder / 'probe.py')!r}), ("shadow", "/etc/shadow")):
    try:
        open(path, "rb").read(1); seen[name] = "read"
    except OSError as err:
        seen[name] = type(err).__name__
try:
    open({str(target.writable / 'planted')!r}, "w").write("x"); seen["write"] = "written"
except OSError as err:
    seen["write"] = type(err).__name__
seen["urandom"] = len(open("/dev/urandom", "rb").read(8))
print(json.dumps(seen))
"""
    seen = _outcome(attack, attack(code))
    assert not (target.writable / "planted").exists(), "the sandbox wrote outside itself"
    if seen is None:
        return
    assert seen["dev"] == ["fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout",
                           "urandom", "zero"]
    assert seen["sys"] == []
    assert seen["kmsg"] == seen["mem"] == seen["cgroup"] == seen["probe"] == "FileNotFoundError"
    assert seen["shadow"] == "PermissionError"
    assert seen["write"] == "FileNotFoundError"
    assert seen["urandom"] == 8


def test_a_multi_process_memory_bomb_is_held_to_its_limits(attack):
    code = """
import json, os
pids = []
for _ in range(12):
    pid = os.fork()
    if pid == 0:
        try:
            block = bytearray(400 * 1024 * 1024)
            os._exit(0)
        except MemoryError:
            os._exit(3)
    pids.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]
print(json.dumps({"codes": codes}))
"""
    seen = _outcome(attack, attack(code, memory_mb=128))
    if seen is not None:
        assert seen["codes"] == [3] * 12  # every child hit its 128 MB address-space limit


def test_without_user_namespaces_a_seccomp_only_run_still_has_no_network(probe_dir, interpreter):
    """The explicit opt-in to the weakest level: runs, says so, and still cannot open a
    socket; this is the path where files and same-uid processes are NOT protected."""
    target = Target(probe_dir, NOBODY)
    try:
        code = ("import socket\ntry:\n    socket.socket(socket.AF_INET)\n"
                "except PermissionError:\n    print('blocked')\n")
        result = _run("nobody-no-userns", code, probe_dir, interpreter, target,
                      min_isolation="seccomp")
    finally:
        target.close()
    assert result["status"] == "ok", result
    assert result["level"] == "seccomp"
    assert result["stdout"].strip() == "blocked"
    assert any("user namespaces turned off" in n for n in result["isolation"])


def test_a_killed_service_takes_its_sandboxed_run_with_it(probe_dir, interpreter):
    """The caller of run_python dies mid-run (SIGKILL, no clean-up): the run dies too."""
    target = Target(probe_dir, NOBODY)
    mark = target.mark
    request = json.dumps({"code": f"import subprocess\nsubprocess.run(['sleep', '{mark}'])",
                          "limits": LIMITS})
    caller = subprocess.Popen([interpreter, "-E", "-s", "probe.py"], stdin=subprocess.PIPE,
                              user=NOBODY, group=NOBODY, extra_groups=[], cwd=probe_dir,
                              stdout=subprocess.DEVNULL, text=True)
    try:
        caller.stdin.write(request)
        caller.stdin.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not subprocess.run(
                ["pgrep", "-f", f"sleep {mark}"], capture_output=True, check=False).stdout:
            time.sleep(0.1)
        assert subprocess.run(["pgrep", "-f", f"sleep {mark}"], capture_output=True,
                              check=False).stdout, "the sandboxed run never started"
        os.kill(caller.pid, signal.SIGKILL)
        caller.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and subprocess.run(
                ["pgrep", "-f", f"sleep {mark}"], capture_output=True, check=False).stdout:
            time.sleep(0.1)
        left = subprocess.run(["pgrep", "-f", f"sleep {mark}"], capture_output=True,
                              text=True, check=False).stdout.split()
        assert left == [], f"the run outlived its caller: {left}"
    finally:
        caller.kill()
        target.close()


def test_a_runs_processes_share_one_memory_limit_where_the_host_gives_a_cgroup(attack):
    """Six processes of 100 MB each stay under their own 160 MB limit; together they pass the
    run's 256 MB. As root the run's cgroup stops them (the kernel's OOM killer, inside the run
    only); as nobody no cgroup can be made here, and the run says its limits are per process."""
    code = """
import json, os, time
pids = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        block = bytearray(100 * 1024 * 1024)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(2)
        os._exit(0)
    pids.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]
print(json.dumps({"codes": codes}))
raise SystemExit(1 if any(codes) else 0)
"""
    result = attack(code, memory_mb=160, run_memory_mb=256, wall_seconds=40.0)
    if attack.profile == "nobody-no-userns":
        _outcome(attack, result)
        return
    notes = " | ".join(result["isolation"])
    if attack.profile == "root":
        _skip_without_cgroups()
        assert "per run: memory 256 MB and 17 tasks" in notes, notes
        assert result["status"] == "memory_limit", result
        assert "memory limit of the run (256 MB" in result["reason"]
        codes = json.loads(result["stdout"].strip().splitlines()[-1])["codes"]
        assert -signal.SIGKILL in codes and 0 in codes, codes  # stopped inside, some finished
    else:
        assert "no cgroup per run" in notes, notes
        assert result["status"] == "ok", result
        assert json.loads(result["stdout"])["codes"] == [0] * 6


def _skip_without_cgroups() -> None:
    cgroup, why = create_run_cgroup(64, 4)
    if cgroup is None:
        pytest.skip(f"this host gives root no writable memory+pids cgroup: {why}")
    assert cgroup.remove()


def test_run_cgroups_are_removed_after_each_run():
    cgroup, why = create_run_cgroup(64, 4)
    if cgroup is None:
        pytest.skip(f"this host gives root no writable memory+pids cgroup: {why}")
    assert (cgroup.memory_dir / "memory.limit_in_bytes").read_text().strip() == str(64 << 20) \
        if cgroup.version == 1 else (cgroup.memory_dir / "memory.max").read_text().strip() == \
        str(64 << 20)
    assert (cgroup.pids_dir / "pids.max").read_text().strip() == "4"
    assert cgroup.remove()
    assert not any(d.exists() for d in cgroup.dirs)
    result = run_python("import os\nos.fork() or os.fork()\nprint('ok')",
                        limits=SandboxLimits(**LIMITS))
    assert result.ok, result
    # Other services on this machine may have runs of their own in the same parent: only this
    # process's (named run-<pid>-...) count. One still exiting is retried by the next run.
    ours = f"run-{os.getpid()}-"
    for _ in range(50):
        cgroup_module.sweep_leftovers()
        leftover = [d for folder in cgroup.dirs if folder.parent.exists()
                    for d in folder.parent.glob(ours + "*")]
        if not leftover:
            break
        time.sleep(0.1)
    assert leftover == []


def test_a_run_cgroup_still_busy_is_removed_by_the_next_run():
    """A run whose last processes are still exiting when it ends (a loaded machine) leaves its
    cgroup busy: it is kept for a retry, and the next run's set-up removes it."""
    cgroup, why = create_run_cgroup(64, 4)
    if cgroup is None:
        pytest.skip(f"this host gives root no writable memory+pids cgroup: {why}")
    inside = subprocess.Popen(["sleep", "300"])
    try:
        for procs in cgroup.procs_files():
            Path(procs).write_text(str(inside.pid))
        assert cgroup.remove(timeout_s=0) is False  # busy: kept, not leaked
        assert all(d.exists() for d in cgroup.dirs)
    finally:
        inside.kill()
        inside.wait()
    result = run_python("print('ok')", limits=SandboxLimits(**LIMITS))  # the next run
    assert result.ok, result
    assert not any(d.exists() for d in cgroup.dirs)
