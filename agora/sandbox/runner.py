"""Run untrusted, model-written Python in a separate, locked-down process.

Policies under RL learn to exploit whatever the reward checker lets them do, so code they write is
treated as hostile: it may loop forever, fork-bomb, allocate 10 GB, print gigabytes, read secrets,
or phone home. `run_python` contains each of those and reports it as a status; it never raises
because of anything the code does.

Layers, outermost first (each one covers a hole the others leave):

* The parent (`run_python`) enforces a hard wall-clock timeout and an output cap while reading the
  pipes, and on exit always SIGKILLs the process group and, when a private uid is in use, every
  process of that uid. Output beyond the cap is discarded, never buffered.
* A supervisor (this file run as a script with an isolated interpreter: stdlib only, so it
  cannot pick up anything from the service's environment) does the privileged set-up, forks the
  sandboxed process, waits for it and reports its exit status and CPU time on a private pipe.
  It is a fresh single-threaded process, so unlike `preexec_fn` in a multi-threaded service
  (uvicorn, Celery) nothing can deadlock between fork and exec.
* It unshares network, mount, PID and IPC namespaces: directly as root, inside a fresh user
  namespace (mapping only its own uid, the way bubblewrap runs unprivileged) otherwise. The
  network namespace has only a downed loopback: no TCP/UDP anywhere, not even 127.0.0.1 (the
  Redis broker, vLLM), and no abstract unix socket of the host. In the mount namespace
  `SandboxLimits.hidden_paths` (/root, /tmp, /var/lib, ...) and every top-level directory that
  is not part of the OS (/work, /check, /data: wherever a checkout or a user's files may live;
  an allow-list, because a deny-list misses the folder nobody thought of) are covered by empty
  tmpfs and only the interpreter's own prefix is bound back read-only; /dev is a tmpfs with
  null, zero, full, random and urandom only (no GPU, disk or kmsg node), /sys is empty, and the
  working directory is a fresh size-capped tmpfs. In the PID namespace the sandboxed process is
  init with a fresh /proc, so it sees no process outside and when it dies the kernel kills
  every process it left behind, even ones that called setsid().
* As root, the sandboxed process then drops to a fresh uid/gid chosen per run (no
  supplementary groups), because RLIMIT_NPROC is not enforced for root and root can read every
  file. A private uid makes the process limit count this run only and lets the parent kill
  "everything of that uid".
* rlimits: CPU, address space, file size, process count, open files, no core dumps.
* no_new_privs (no set-uid binaries) and a seccomp allow-list through libseccomp (about 200
  syscalls: files, memory, threads, processes, pipes, AF_UNIX sockets, polling); ptrace,
  keyctl, bpf, perf_event_open, io_uring, mount, new namespaces and the rest fail with EPERM.
  Where libseccomp is missing, a hand-written deny-list of the dangerous ones instead.
* The supervisor follows its caller: when the service that asked for the run dies, even by
  SIGKILL, it kills the run (`_wait_or_follow_caller`).

What a run reached is `SandboxResult.level` (`ISOLATION_LEVELS`: full, network, seccomp), with
the measures listed in `SandboxResult.isolation`. Below `SandboxLimits.min_isolation` (default
full) the code is not run: a SANDBOX_ERROR says why. The weaker levels exist for hosts that
allow neither root nor user namespaces (e.g. a container runtime whose seccomp profile blocks
unshare): there files are protected only by their permissions and cleanup is by process
group, so they must be asked for explicitly. tests/integration/test_sandbox_attacks.py runs
the attacks as root and, for real, as an unprivileged user.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import errno
import json
import os
import platform
import pwd
import resource
import secrets
import select
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:  # the supervisor (this file as a script) imports nothing of agora
    from agora.sandbox.cgroup import RunCgroup

DEFAULT_HIDDEN_PATHS: tuple[str, ...] = (
    "/root",
    "/home",
    "/work",
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    "/run",
    "/mnt",
    "/media",
    "/srv",
    "/opt",
    "/var/lib",
    "/var/log",
    "/var/cache",
    "/var/spool",
    "/var/mail",
)
# Top-level directories the OS itself lives in; every other one is hidden when
# `SandboxLimits.hide_non_system_dirs` is set (the default).
SYSTEM_TOP_LEVEL_DIRS = frozenset(
    {
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/usr",
        "/etc",
        "/var",
        "/proc",
        "/dev",
        "/sys",
        "/boot",
    }
)
# World-writable dirs get a writable (but size-capped) tmpfs, the rest a read-only-for-others one.
_STICKY_DIRS = frozenset({"/tmp", "/var/tmp", "/dev/shm"})
# Private uids are drawn from a range far above any real account, and checked to be unused.
_UID_BASE = 10_000_000
_UID_SPAN = 1 << 24
_MAIN = "main.py"
_SETUP_FAILED = 125
# What a run can get, strongest first:
#  full     network + mount + PID + IPC namespaces: no network, only the OS and the interpreter
#           visible (read-only), a private /dev and /proc, no /sys, nothing outlives the run.
#           As root, or as any user where unprivileged user namespaces are allowed.
#  network  a network namespace only: files readable per their permissions, /proc shows the
#           host, cleanup by process group (a setsid() child of a non-root run can survive).
#  seccomp  no namespace at all: the syscall filter is the only network barrier.
ISOLATION_LEVELS: tuple[str, ...] = ("full", "network", "seccomp")


class SandboxStatus(enum.StrEnum):
    OK = "ok"
    ERROR = "error"  # non-zero exit, e.g. an uncaught exception
    TIMEOUT = "timeout"  # wall-clock limit
    CPU_LIMIT = "cpu_limit"
    MEMORY_LIMIT = "memory_limit"
    FILE_LIMIT = "file_limit"  # file-size or disk-quota limit
    PROCESS_LIMIT = "process_limit"
    OUTPUT_LIMIT = "output_limit"
    KILLED = "killed"  # died from a signal not explained by a limit
    SANDBOX_ERROR = "sandbox_error"  # our set-up failed; the code may not have run


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits and isolation knobs. Small defaults: verifier snippets need little.

    The wall clock includes interpreter start-up (0.1-0.5 s on a busy 2-core machine). CPU,
    memory and file limits are per process; where the host gives the service a cgroup, the
    run's processes together also get ``run_memory_mb`` and ``max_processes`` (cgroup.py),
    else a run may use up to max_processes times the per-process memory.
    """

    cpu_seconds: int = 5
    wall_seconds: float = 10.0
    memory_mb: int = 512  # address space per process (RLIMIT_AS)
    file_size_mb: int = 16  # largest file the code may write
    disk_mb: int = 64  # size of the private tmpfs working dir (and of a writable /tmp)
    max_processes: int = 32
    max_open_files: int = 64
    max_output_bytes: int = 64 * 1024  # per stream (stdout, stderr)
    seccomp_filter: bool = True  # a syscall allow-list (libseccomp), else a deny-list
    require_network_isolation: bool = True  # refuse to run if no network barrier can be set up
    # The weakest isolation the code may run under (ISOLATION_LEVELS); below it the run is
    # refused with a SANDBOX_ERROR that says why, never run half-isolated.
    min_isolation: str = "full"
    # Without root, isolation comes from an unprivileged user namespace. Some operators turn
    # those off (they widen the kernel surface); then only min_isolation="seccomp" runs code.
    user_namespaces: bool = True
    hidden_paths: tuple[str, ...] = DEFAULT_HIDDEN_PATHS
    hide_non_system_dirs: bool = True  # also hide every top-level dir outside SYSTEM_TOP_LEVEL_DIRS
    # Memory of all the run's processes together, in a cgroup per run where the host has one
    # (None: twice memory_mb, i.e. two processes at their limit); run_cgroup=False: no cgroup.
    run_memory_mb: int | None = None
    run_cgroup: bool = True

    def __post_init__(self) -> None:
        for name in (
            "cpu_seconds",
            "wall_seconds",
            "memory_mb",
            "file_size_mb",
            "disk_mb",
            "max_processes",
            "max_open_files",
            "max_output_bytes",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive")
        if self.run_memory_mb is not None and self.run_memory_mb <= 0:
            raise ValueError("SandboxLimits.run_memory_mb must be positive")
        if self.min_isolation not in ISOLATION_LEVELS:
            raise ValueError(f"SandboxLimits.min_isolation must be one of {ISOLATION_LEVELS}, "
                             f"not {self.min_isolation!r}")


@dataclass(frozen=True)
class SandboxResult:
    status: SandboxStatus
    exit_code: int | None  # negative: killed by that signal (subprocess convention)
    stdout: str
    stderr: str
    truncated: bool  # stdout or stderr was cut at max_output_bytes
    duration_s: float
    reason: str
    cpu_s: float | None = None
    isolation: tuple[str, ...] = ()  # the measures actually applied, for logs and audits
    sandbox_uid: int | None = None
    level: str | None = None  # the ISOLATION_LEVELS entry reached (None: set-up never got there)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is SandboxStatus.OK


def run_memory_mb(limits: SandboxLimits) -> int:
    """The memory of a whole run (its cgroup's limit)."""
    return limits.run_memory_mb or 2 * limits.memory_mb


def run_python(
    code: str,
    *,
    stdin: str = "",
    limits: SandboxLimits | None = None,
    files: dict[str, str] | None = None,
) -> SandboxResult:
    """Run `code` as a script in the sandbox; `files` (relative paths) are placed beside it."""
    limits = limits or SandboxLimits()
    files = dict(files or {})
    for name in files:
        parts = name.split("/")
        if name.startswith("/") or ".." in parts or name == _MAIN or "" in parts:
            raise ValueError(f"bad sandbox file name: {name!r}")
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="agora-sbx-")
    try:
        for name, text in {**files, _MAIN: code}.items():
            path = os.path.join(workdir, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        return _run(workdir, stdin, limits, started)
    finally:
        _remove_tree(workdir)


# --------------------------------------------------------------------------- parent side


def _interpreter() -> str:
    # The venv's python is only a link/launcher; the base interpreter is what we can expose.
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _exposed_prefixes(interp: str) -> list[str]:
    """Directories the interpreter needs inside the mount namespace (binary, stdlib, libpython)."""
    paths = sorted(
        {
            os.path.realpath(p)
            for p in (sys.base_prefix, sys.base_exec_prefix, os.path.dirname(interp))
        }
    )
    kept: list[str] = []
    for path in paths:
        if not any(path == k or path.startswith(k + "/") for k in kept):
            kept.append(path)
    return kept


def _hidden_paths(limits: SandboxLimits) -> list[str]:
    """The configured hidden paths plus, by default, every non-OS top-level directory."""
    hidden = [os.path.realpath(p) for p in limits.hidden_paths]
    if limits.hide_non_system_dirs:
        for entry in sorted(os.listdir("/")):
            path = "/" + entry
            if (
                path not in SYSTEM_TOP_LEVEL_DIRS
                and not os.path.islink(path)
                and os.path.isdir(path)
            ):
                hidden.append(path)
    return list(dict.fromkeys(hidden))


def _live_pids_of_uid(uid: int) -> list[int]:
    """Processes (not zombies) whose real, effective or saved uid is `uid`."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            continue
        state, uids = "", []
        for line in text.splitlines():
            if line.startswith("State:"):
                state = line.split()[1]
            elif line.startswith("Uid:"):
                uids = [int(x) for x in line.split()[1:4]]
        if uid in uids and state != "Z":
            found.append(int(entry))
    return found


def _pick_uid() -> int:
    for _ in range(100):
        uid = _UID_BASE + secrets.randbelow(_UID_SPAN)
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if not _live_pids_of_uid(uid):
                return uid
    raise RuntimeError("could not find an unused uid for the sandbox")


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: kill(-1) sent *as* that uid reaches exactly those.

    The kernel walks the task list under a lock that fork() also takes, so a fork bomb cannot
    slip a new child past it. The `kill` binary is used instead of os.fork() so a threaded
    service never forks itself.
    """
    kill_bin = shutil.which("kill", path="/usr/bin:/bin")
    if kill_bin:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [kill_bin, "-s", "KILL", "--", "-1"],
                user=uid,
                group=uid,
                extra_groups=[],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
                env={"PATH": "/usr/bin:/bin"},
                timeout=5,
            )
    for pid in _live_pids_of_uid(uid):  # fallback / stragglers
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _remove_tree(path: str) -> None:
    def fix_and_retry(func: Any, target: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
            func(target)

    shutil.rmtree(path, onerror=fix_and_retry)
    shutil.rmtree(path, ignore_errors=True)


class _Capped:
    """A stream buffer that keeps at most `cap` bytes and remembers that it dropped some."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.overflowed = False

    def add(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.overflowed = True
        self.data += chunk[: max(room, 0)]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _run(workdir: str, stdin: str, limits: SandboxLimits, started: float) -> SandboxResult:
    # Parent side only: the supervisor (this file as a script) imports nothing of agora.
    from agora.sandbox.cgroup import create_run_cgroup

    cgroup: RunCgroup | None = None
    cgroup_note = "no cgroup per run (SandboxLimits.run_cgroup off): limits are per process only"
    if limits.run_cgroup:
        # +1 task: the supervisor joins the cgroup too (it forks the run from inside it).
        cgroup, cgroup_note = create_run_cgroup(run_memory_mb(limits), limits.max_processes + 1)
    try:
        return _run_in(workdir, stdin, limits, started, cgroup,
                       cgroup.note() if cgroup else cgroup_note)
    finally:
        if cgroup is not None:
            cgroup.remove()


def _run_in(workdir: str, stdin: str, limits: SandboxLimits, started: float,
            cgroup: RunCgroup | None, cgroup_note: str) -> SandboxResult:
    interp = _interpreter()
    privileged = os.geteuid() == 0
    uid = _pick_uid() if privileged else None
    status_r, status_w = os.pipe()
    # The lifeline: the supervisor holds its read end and kills the run when it reads EOF, i.e.
    # when this process is gone (even by SIGKILL), so no run outlives the service that started it.
    life_r, life_w = os.pipe()
    config = {
        "workdir": workdir,
        "uid": uid,
        "interp": interp,
        "argv": [interp, "-E", "-s", "-B", "-u", _MAIN],
        "env": {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "USER": "sandbox",
            "LOGNAME": "sandbox",
        },
        "expose": _exposed_prefixes(interp),
        "hidden": _hidden_paths(limits),
        "status_fd": status_w,
        "lifeline_fd": life_r,
        "limits": {
            "cpu": int(limits.cpu_seconds),
            "as_mb": limits.memory_mb,
            "fsize_mb": limits.file_size_mb,
            "disk_mb": limits.disk_mb,
            "nproc": limits.max_processes,
            "nofile": limits.max_open_files,
        },
        "seccomp": limits.seccomp_filter,
        "require_net": limits.require_network_isolation,
        "min_level": limits.min_isolation,
        "userns": limits.user_namespaces,
        "cgroup_procs": cgroup.procs_files() if cgroup is not None else [],
        "cgroup_note": cgroup_note,
    }
    with tempfile.TemporaryFile() as stdin_file:
        # A file, not a pipe: a child that never reads stdin cannot stall the parent.
        stdin_file.write(stdin.encode("utf-8"))
        stdin_file.seek(0)
        try:
            proc = subprocess.Popen(
                [interp, "-I", "-S", "-B", os.path.abspath(__file__), json.dumps(config)],
                stdin=stdin_file,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(status_w, life_r),
                start_new_session=True,
                cwd=workdir,
                env={"PATH": "/usr/bin:/bin"},
            )
        except OSError as exc:
            for fd in (status_r, status_w, life_r, life_w):
                os.close(fd)
            return SandboxResult(
                SandboxStatus.SANDBOX_ERROR,
                None,
                "",
                "",
                False,
                time.monotonic() - started,
                f"could not start sandbox: {exc}",
            )
        os.close(status_w)
        os.close(life_r)
        try:
            return _supervise(proc, status_r, limits, uid, started, cgroup)
        finally:
            os.close(life_w)


def _supervise(
    proc: subprocess.Popen[bytes],
    status_r: int,
    limits: SandboxLimits,
    uid: int | None,
    started: float,
    cgroup: RunCgroup | None = None,
) -> SandboxResult:
    assert proc.stdout is not None and proc.stderr is not None
    out, err = _Capped(limits.max_output_bytes), _Capped(limits.max_output_bytes)
    status_buf = bytearray()
    sel = selectors.DefaultSelector()
    for fd, sink in ((proc.stdout.fileno(), out), (proc.stderr.fileno(), err), (status_r, None)):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, sink)
    deadline = started + limits.wall_seconds
    killed_for: SandboxStatus | None = None
    drain_until: float | None = None

    def kill_all() -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if uid is not None and _live_pids_of_uid(uid):
            _kill_uid(uid)

    try:
        while sel.get_map():
            now = time.monotonic()
            if killed_for is None and now >= deadline:
                killed_for = SandboxStatus.TIMEOUT
                kill_all()
            if drain_until is None and (killed_for is not None or proc.poll() is not None):
                # The supervisor is gone (or we killed it); stragglers get killed and the pipes
                # drained for a bounded time only.
                if proc.poll() is not None:
                    kill_all()
                drain_until = now + 2.0
            if drain_until is not None and now >= drain_until:
                break
            limit = (drain_until if drain_until is not None else deadline) - now
            for key, _ in sel.select(timeout=max(0.0, min(limit, 0.05))):
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                if key.data is None:
                    status_buf += chunk[: max(0, 65536 - len(status_buf))]
                    continue
                key.data.add(chunk)
                if key.data.overflowed and killed_for is None:
                    killed_for = SandboxStatus.OUTPUT_LIMIT
                    kill_all()
    finally:
        sel.close()
        os.close(status_r)
        kill_all()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        if uid is not None:
            _wait_uid_gone(uid)
    events, notes = _parse_events(bytes(status_buf))
    return _classify(
        out,
        err,
        events,
        notes,
        killed_for,
        limits,
        uid,
        proc.returncode,
        time.monotonic() - started,
        cgroup.oom_kills() if cgroup is not None else 0,
    )


def _wait_uid_gone(uid: int, timeout: float = 3.0) -> None:
    end = time.monotonic() + timeout
    while _live_pids_of_uid(uid) and time.monotonic() < end:
        _kill_uid(uid)
        time.sleep(0.02)


def _parse_events(raw: bytes) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The supervisor's JSON lines: first event of each kind, plus all isolation notes."""
    events: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and isinstance(event.get("event"), str):
                events.setdefault(event["event"], event)
                if event["event"] == "isolation":
                    notes.extend(str(n) for n in event.get("notes", ()))
                    if "level" in event:
                        events["level"] = event
    return events, notes


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def _classify(
    out: _Capped,
    err: _Capped,
    events: dict[str, dict[str, Any]],
    notes: list[str],
    killed_for: SandboxStatus | None,
    limits: SandboxLimits,
    uid: int | None,
    supervisor_rc: int | None,
    duration: float,
    oom_kills: int = 0,
) -> SandboxResult:
    exit_event = events.get("exit")
    exit_code: int | None = None
    cpu_s: float | None = None
    if exit_event is not None:
        wait_status = int(exit_event["wait_status"])
        exit_code = (
            -os.WTERMSIG(wait_status)
            if os.WIFSIGNALED(wait_status)
            else os.WEXITSTATUS(wait_status)
        )
        cpu_s = float(exit_event["cpu_s"])
    stderr = err.text()
    tail = stderr[-2000:]
    last = _last_line(stderr)

    status: SandboxStatus
    if "error" in events:
        status, reason = SandboxStatus.SANDBOX_ERROR, str(events["error"].get("reason", ""))
    elif killed_for is SandboxStatus.OUTPUT_LIMIT:
        status = killed_for
        reason = f"output exceeded {limits.max_output_bytes} bytes; process killed"
    elif killed_for is SandboxStatus.TIMEOUT:
        status, reason = killed_for, f"killed after the {limits.wall_seconds:g} s wall-clock limit"
    elif exit_code is None:
        status = SandboxStatus.SANDBOX_ERROR
        reason = f"sandbox supervisor ended without a report (exit code {supervisor_rc})"
    elif oom_kills and exit_code != 0:
        # The run's cgroup hit its memory limit: the kernel stopped a process inside it.
        status = SandboxStatus.MEMORY_LIMIT
        reason = (f"memory limit of the run ({run_memory_mb(limits)} MB over all its processes)"
                  f" hit: the kernel stopped {oom_kills} process(es)")
    elif exit_code == -signal.SIGXCPU or (
        # The sandboxed process is a PID-namespace init, which ignores SIGXCPU, so the CPU limit
        # arrives as SIGKILL. Nothing else of ours sends it, but the kernel's RLIMIT_CPU clock
        # was measured up to ~25% ahead of rusage on this VM, hence the slack.
        exit_code == -signal.SIGKILL and cpu_s is not None and cpu_s >= 0.5 * limits.cpu_seconds
    ):
        status, reason = SandboxStatus.CPU_LIMIT, f"CPU time limit of {limits.cpu_seconds} s hit"
    elif exit_code == 0:
        status, reason = SandboxStatus.OK, "exited normally"
    elif exit_code == -signal.SIGXFSZ or (
        exit_code > 0 and ("File too large" in tail or "No space left on device" in tail)
    ):
        status = SandboxStatus.FILE_LIMIT
        reason = f"file-size ({limits.file_size_mb} MB) or disk ({limits.disk_mb} MB) limit hit" + (
            f": {last}" if last else ""
        )
    elif exit_code > 0 and "MemoryError" in tail:
        status = SandboxStatus.MEMORY_LIMIT
        reason = f"memory limit of {limits.memory_mb} MB hit: {last}"
    elif (
        exit_code > 0
        and "Resource temporarily unavailable" in tail
        and ("fork" in tail or "BlockingIOError" in tail)
    ):
        status = SandboxStatus.PROCESS_LIMIT
        reason = f"process limit of {limits.max_processes} hit: {last}"
    elif exit_code < 0:
        status = SandboxStatus.KILLED
        reason = f"killed by {signal.Signals(-exit_code).name}"
    else:
        status = SandboxStatus.ERROR
        reason = f"exited with code {exit_code}" + (f": {last}" if last else "")
    return SandboxResult(
        status=status,
        exit_code=exit_code,
        stdout=out.text(),
        stderr=stderr,
        truncated=out.overflowed or err.overflowed,
        duration_s=round(duration, 3),
        reason=reason,
        cpu_s=cpu_s,
        isolation=tuple(notes),
        sandbox_uid=uid,
        level=str(events["level"]["level"]) if "level" in events else None,
        extra={"maxrss_kb": exit_event.get("maxrss_kb")} if exit_event else {},
    )


# --------------------------------------------------------------------------- supervisor side
# Everything below runs in the supervisor process (`python -I -S sandbox.py CONFIG`), as root
# when the service is root. Only the standard library may be used.

_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 2, 4, 8, 32
_MS_RDONLY, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 4096, 16384, 1 << 18
_PR_SET_PDEATHSIG, _PR_SET_SECCOMP, _PR_SET_NO_NEW_PRIVS = 1, 22, 38
_SECCOMP_MODE_FILTER = 2
# AUDIT_ARCH_* and the syscall numbers (socket, clone, unshare) per architecture; io_uring_setup
# and clone3 have the same number everywhere.
_SECCOMP_ARCHES = {
    "x86_64": (0xC000003E, {"socket": 41, "clone": 56, "unshare": 272}),
    "aarch64": (0xC00000B7, {"socket": 198, "clone": 220, "unshare": 97}),
}
# The deny-list's EPERM syscalls: ptrace, process_vm_readv/writev, add_key, request_key, keyctl,
# perf_event_open, bpf, userfaultfd, mount, setns.
_DENIED = {
    "x86_64": (101, 310, 311, 248, 249, 250, 298, 321, 323, 165, 308),
    "aarch64": (117, 270, 271, 217, 218, 219, 241, 280, 282, 40, 268),
}
_NR_IO_URING_SETUP, _NR_CLONE3 = 425, 435
_CLONE_NAMESPACE_FLAGS = 0x7E020000  # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _unshare(flags: int) -> None:
    _check(_libc().unshare(ctypes.c_int(flags)), "unshare")


def _mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else s.encode()

    result = _libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))
    _check(result, f"mount {target}")


def _prctl(option: int, arg2: int = 0, arg3: ctypes.c_void_p | None = None) -> None:
    zero = ctypes.c_ulong(0)
    third = arg3 if arg3 is not None else zero
    result = _libc().prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), third, zero, zero)
    _check(result, f"prctl({option})")


def _install_seccomp_filter() -> None:
    """The fallback deny-list: sockets only for AF_UNIX, no new namespaces, no io_uring, and
    `_DENIED`. Written by hand (raw BPF) because it must work where libseccomp is missing.

    * socket(): anything but AF_UNIX gets EACCES. The network namespace already has no route;
      this also covers machines where namespaces are unavailable.
    * io_uring_setup: ENOSYS, because IORING_OP_SOCKET creates sockets without socket().
    * unshare, clone with namespace flags: EPERM; clone3 (flags out of reach of the filter):
      ENOSYS, so libc falls back to clone. Unprivileged user namespaces cannot undo the mounts
      (they are locked) but would expose much more of the kernel to the code.
    * Foreign-ABI syscalls (x32) kill the process, since they would dodge the number checks.
    """
    arch = platform.machine()
    if arch not in _SECCOMP_ARCHES:
        raise OSError(errno.ENOSYS, f"no seccomp filter for architecture {arch}")
    audit_arch, nr = _SECCOMP_ARCHES[arch]
    # BPF opcodes: LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, JMP|JSET|K, RET|K
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill, err = 0x7FFF0000, 0x80000000, 0x00050000  # SECCOMP_RET_*; ERRNO | errno
    arg0 = 16  # offsetof(seccomp_data, args[0]); its low 32 bits on little-endian machines
    program = [
        (ld, 0, 0, 4),  # A = seccomp_data.arch
        (jeq, 1, 0, audit_arch),
        (ret, 0, 0, kill),
        (ld, 0, 0, 0),  # A = seccomp_data.nr
        (jge, 0, 1, 0x40000000),  # x32 ABI
        (ret, 0, 0, kill),
        (jeq, 0, 1, _NR_IO_URING_SETUP),
        (ret, 0, 0, err | errno.ENOSYS),
        (jeq, 0, 1, _NR_CLONE3),
        (ret, 0, 0, err | errno.ENOSYS),
        (jeq, 0, 1, nr["unshare"]),
        (ret, 0, 0, err | errno.EPERM),
        *[insn for denied in _DENIED[arch]
          for insn in ((jeq, 0, 1, denied), (ret, 0, 0, err | errno.EPERM))],
        (jeq, 0, 4, nr["clone"]),
        (ld, 0, 0, arg0),  # clone flags
        (jset, 0, 1, _CLONE_NAMESPACE_FLAGS),
        (ret, 0, 0, err | errno.EPERM),
        (ret, 0, 0, allow),
        (jeq, 0, 4, nr["socket"]),
        (ld, 0, 0, arg0),  # address family
        (jeq, 1, 0, 1),  # AF_UNIX
        (ret, 0, 0, err | errno.EACCES),
        (ret, 0, 0, allow),
        (ret, 0, 0, allow),
    ]
    raw = b"".join(struct.pack("=HBBI", *insn) for insn in program)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(program), ctypes.addressof(buf))
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.c_void_p(ctypes.addressof(prog)))


# The device nodes a program may need; everything else of /dev (disks, GPUs, kmsg, mem) is gone.
_DEVICES = ("null", "zero", "full", "random", "urandom")
# statvfs flags that a mount in a user namespace locks: a remount must repeat them (EPERM else).
_LOCKED_STATVFS_TO_MS = ((os.ST_NOEXEC, _MS_NOEXEC), (os.ST_NOATIME, 1024),
                         (os.ST_NODIRATIME, 2048), (os.ST_RELATIME, 1 << 21))


def _locked_flags(path: str) -> int:
    flags = os.statvfs(path).f_flag
    return sum(ms for st, ms in _LOCKED_STATVFS_TO_MS if flags & st)


def _minimal_dev(devices: dict[str, int], size_mb: int) -> None:
    """/dev as a fresh tmpfs with only `_DEVICES` bound in (bind mounts of the host's nodes:
    creating nodes needs CAP_MKNOD, which a user namespace lacks), the usual links, and a
    size-capped /dev/shm for multiprocessing's semaphores."""
    _mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=755,size=64k,nr_inodes=64")
    for name, fd in devices.items():
        open(f"/dev/{name}", "w").close()
        _mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, _MS_BIND)
        os.close(fd)
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{link}")
    os.mkdir("/dev/shm")
    _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
           f"mode=1777,size={size_mb}m,nr_inodes=256")


# The syscalls a Python program (threads, subprocesses, files, pipes, AF_UNIX sockets, select/
# epoll, multiprocessing) needs; the rest fail with EPERM. Left out on purpose, among others:
# ptrace, process_vm_*, keyctl/add_key/request_key, bpf, perf_event_open, userfaultfd,
# io_uring_*, mount/umount2/pivot_root/chroot, setns/unshare, kexec_*, *_module, personality,
# syslog, swapon, reboot, setuid/setgid and friends, rt_sigqueueinfo/rt_tgsigqueueinfo.
_ALLOWED_SYSCALLS = (
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
    "pwritev2", "open", "openat", "openat2", "close", "close_range", "creat", "lseek", "stat",
    "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat",
    "faccessat2", "readlink", "readlinkat", "getdents", "getdents64", "getcwd", "chdir", "fchdir",
    "mkdir", "mkdirat", "rmdir", "rename", "renameat", "renameat2", "link", "linkat", "unlink",
    "unlinkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "fchown", "lchown",
    "fchownat", "chown", "umask", "truncate", "ftruncate", "fallocate", "fsync", "fdatasync",
    "sync_file_range", "flock", "fcntl", "ioctl", "dup", "dup2", "dup3", "pipe", "pipe2",
    "sendfile", "copy_file_range", "splice", "tee", "fadvise64", "readahead", "utime", "utimes",
    "utimensat", "futimesat", "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr",
    "flistxattr", "mmap", "munmap", "mprotect", "mremap", "msync", "mincore", "madvise", "brk",
    "memfd_create", "membarrier", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn",
    "rt_sigpending", "rt_sigtimedwait", "rt_sigsuspend", "sigaltstack", "kill", "tgkill", "tkill",
    "pause", "alarm", "getitimer", "setitimer", "nanosleep", "clock_nanosleep", "clock_gettime",
    "clock_getres", "gettimeofday", "time", "times", "clone", "fork", "vfork", "execve",
    "execveat", "exit", "exit_group", "wait4", "waitid", "pidfd_open", "set_tid_address",
    "set_robust_list", "get_robust_list", "futex", "futex_waitv", "rseq", "arch_prctl", "prctl",
    "sched_yield", "sched_getaffinity", "sched_getparam", "sched_getscheduler",
    "sched_get_priority_max", "sched_get_priority_min", "getpid", "getppid", "gettid", "getuid",
    "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "getpgrp", "getpgid",
    "setpgid", "getsid", "setsid", "getrlimit", "prlimit64", "getrusage", "getpriority", "sysinfo",
    "uname", "capget", "getrandom", "poll", "ppoll", "select", "pselect6", "epoll_create",
    "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd",
    "eventfd2", "timerfd_create", "timerfd_settime", "timerfd_gettime", "signalfd", "signalfd4",
    "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "socketpair",
    "connect", "accept", "accept4", "bind", "listen", "shutdown", "getsockname", "getpeername",
    "setsockopt", "getsockopt", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
    "restart_syscall"
)
_SCMP_ACT_ALLOW, _SCMP_CMP_NE, _SCMP_CMP_EQ, _SCMP_CMP_MASKED_EQ = 0x7FFF0000, 1, 4, 7


def _scmp_errno(err: int) -> int:
    return 0x00050000 | err


class _ScmpArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def _install_seccomp() -> str:
    """The allow-list through libseccomp (it knows each architecture's numbers and rejects
    foreign ABIs); where the library is missing, the hand-written deny-list below. Returns the
    isolation note."""
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError:
        _install_seccomp_filter()
        return ("seccomp deny-list (libseccomp missing): only AF_UNIX sockets, no new "
                "namespaces, no io_uring, ptrace, keyctl, bpf or perf_event_open")
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ScmpArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(_scmp_errno(errno.EPERM))
    if not ctx:
        raise OSError(errno.ENOMEM, "seccomp_init failed")

    def rule(action: int, name: str, *conditions: tuple[int, int, int, int]) -> None:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:  # not a syscall of this architecture (e.g. open on aarch64)
            return
        array = (_ScmpArgCmp * max(1, len(conditions)))(*[_ScmpArgCmp(*c) for c in conditions])
        result = lib.seccomp_rule_add_array(ctx, action, nr, len(conditions), array)
        if result != 0:
            raise OSError(-result, f"seccomp rule for {name}: {os.strerror(-result)}")

    for name in _ALLOWED_SYSCALLS:
        if name not in ("clone", "socketpair"):
            rule(_SCMP_ACT_ALLOW, name)
    # Threads and processes, but no new namespaces; clone3's flags are out of the filter's
    # reach, so it reports ENOSYS and libc falls back to clone.
    rule(_SCMP_ACT_ALLOW, "clone", (0, _SCMP_CMP_MASKED_EQ, _CLONE_NAMESPACE_FLAGS, 0))
    rule(_scmp_errno(errno.ENOSYS), "clone3")
    for name in ("socket", "socketpair"):  # AF_UNIX only (a path or abstract name)
        rule(_SCMP_ACT_ALLOW, name, (0, _SCMP_CMP_EQ, 1, 0))
        rule(_scmp_errno(errno.EACCES), name, (0, _SCMP_CMP_NE, 1, 0))
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    result = lib.seccomp_load(ctx)
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_release(ctx)
    if result != 0:
        raise OSError(-result, f"seccomp_load: {os.strerror(-result)}")
    return (f"seccomp allow-list of {len(_ALLOWED_SYSCALLS)} syscalls (libseccomp): only AF_UNIX "
            "sockets, no new namespaces; ptrace, keyctl, bpf, perf_event_open, io_uring, mount "
            "and the rest fail with EPERM")


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _chown_tree(path: str, uid: int) -> None:
    os.chown(path, uid, uid)
    for root, dirs, names in os.walk(path):
        for name in dirs + names:
            os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)


def _private_filesystem(cfg: dict[str, Any]) -> str:
    """In the new mount namespace: hide paths, re-expose the interpreter, tmpfs working dir."""
    workdir, uid, lim = cfg["workdir"], cfg["uid"], cfg["limits"]
    inputs: list[tuple[str, bytes]] = []
    for root, _dirs, names in os.walk(workdir):
        for name in names:
            full = os.path.join(root, name)
            with open(full, "rb") as fh:
                inputs.append((os.path.relpath(full, workdir), fh.read()))
    hidden = [p for p in dict.fromkeys(cfg["hidden"]) if p != "/" and os.path.isdir(p)]
    # O_PATH handles keep the interpreter reachable after its parents are covered.
    handles = {p: os.open(p, os.O_PATH) for p in cfg["expose"] if _under(p, hidden)}
    devices = {name: os.open(f"/dev/{name}", os.O_PATH) for name in _DEVICES
               if os.path.exists(f"/dev/{name}")}

    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing below may propagate to the host
    for path in hidden:
        mode = "1777" if path in _STICKY_DIRS else "755"
        _mount(
            "tmpfs",
            path,
            "tmpfs",
            _MS_NOSUID | _MS_NODEV,
            f"mode={mode},size={lim['disk_mb']}m,nr_inodes=4096",
        )
    for path, fd in handles.items():
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
               | _locked_flags(path))
        os.close(fd)
    _minimal_dev(devices, lim["disk_mb"])
    _mount("tmpfs", "/sys", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RDONLY,
           "mode=555,size=1k,nr_inodes=16")
    os.makedirs(workdir, exist_ok=True)
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    _mount(
        "tmpfs",
        workdir,
        "tmpfs",
        _MS_NOSUID | _MS_NODEV,
        f"mode=700,size={lim['disk_mb']}m,nr_inodes=4096{owner}",
    )
    for rel, data in inputs:
        full = os.path.join(workdir, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as fh:
            fh.write(data)
    if uid is not None:
        _chown_tree(workdir, uid)
    return (f"mount namespace: hid {' '.join(hidden)}; workdir is a {lim['disk_mb']} MB tmpfs; "
            f"/dev holds only {' '.join(sorted(devices))}; /sys is empty")


def _isolate(cfg: dict[str, Any]) -> tuple[list[str], bool, bool, str]:
    """Namespaces for the about-to-be-forked child.

    Returns (notes, pid_ns, net_isolated, level): root unshares them directly; any other user
    gets the same set inside a fresh user namespace (what bubblewrap does unprivileged), mapped
    to its own uid only, so it gains no power over anything outside.
    """
    notes: list[str] = []
    uid = cfg["uid"]
    if os.geteuid() == 0:
        try:
            _unshare(_CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWPID)
        except OSError as exc:
            notes.append(f"mount/pid namespaces unavailable ({exc.strerror})")
        else:
            notes.append("network namespace: loopback down, no routes")
            notes.append("pid + ipc namespaces")
            notes.append(_private_filesystem(cfg))
            return notes, True, True, "full"
        if uid is not None:
            _chown_tree(cfg["workdir"], uid)
        try:
            _unshare(_CLONE_NEWNET)
            notes.append("network namespace: loopback down, no routes")
            return notes, False, True, "network"
        except OSError as exc:
            notes.append(f"network namespace unavailable ({exc.strerror})")
            return notes, False, False, "seccomp"
    full = _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWPID
    tries = (full, _CLONE_NEWUSER | _CLONE_NEWNET | _CLONE_NEWIPC) if cfg["userns"] else ()
    if not cfg["userns"]:
        notes.append("user namespaces turned off (SandboxLimits.user_namespaces)")
    for flags in tries:
        try:
            _enter_user_namespace(flags)
        except OSError as exc:
            notes.append(f"user namespace ({'full' if flags == full else 'network'}) "
                         f"unavailable: {exc.strerror or exc}")
            continue
        if flags == full:
            notes.append("unprivileged user namespace (own uid only)")
            notes.append("network namespace: loopback down, no routes")
            notes.append("pid + ipc namespaces")
            notes.append(_private_filesystem(cfg))
            return notes, True, True, "full"
        notes.append("unprivileged user + network namespace; files readable per their permissions")
        return notes, False, True, "network"
    notes.append("not root and no user namespaces: files readable per their permissions, "
                 "cleanup by process group only")
    return notes, False, False, "seccomp"


def _enter_user_namespace(flags: int) -> None:
    """unshare(flags) with a new user namespace mapping only our own uid and gid to themselves.

    Used only by the ``os.fork()``-free supervisor; a failed unshare leaves the process as it
    was, so the caller can try a smaller set."""
    real_uid, real_gid = os.getuid(), os.getgid()
    _unshare(flags)
    with open("/proc/self/setgroups", "w") as fh:
        fh.write("deny")
    with open("/proc/self/uid_map", "w") as fh:
        fh.write(f"{real_uid} {real_uid} 1")
    with open("/proc/self/gid_map", "w") as fh:
        fh.write(f"{real_gid} {real_gid} 1")


def _become_sandboxed(
    cfg: dict[str, Any], pid_ns: bool, net_isolated: bool, report: Any
) -> NoReturn:
    """In the forked child: limits, drop privileges, seccomp, then exec the untrusted script."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # supervisor killed => this dies => the ns dies
    if pid_ns:
        try:
            _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        except OSError:  # e.g. a container that masks parts of /proc: show no /proc at all
            _mount("tmpfs", "/proc", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RDONLY,
                   "mode=555,size=1k,nr_inodes=16")
            report(event="isolation", notes=["/proc: empty (a new procfs was refused)"])
    lim, uid = cfg["limits"], cfg["uid"]
    nproc = lim["nproc"]
    if uid is None:  # shared uid: the limit counts the service's own processes too
        nproc += len(_live_pids_of_uid(os.getuid()))
    mb = 1024 * 1024
    for res, value in (
        (resource.RLIMIT_CPU, (lim["cpu"], lim["cpu"])),  # SIGKILL (init ignores SIGXCPU)
        (resource.RLIMIT_AS, (lim["as_mb"] * mb,) * 2),
        (resource.RLIMIT_FSIZE, (lim["fsize_mb"] * mb,) * 2),
        (resource.RLIMIT_NPROC, (nproc, nproc)),
        (resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"])),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_MEMLOCK, (0, 0)),
    ):
        resource.setrlimit(res, value)
    os.chdir(cfg["workdir"])
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    if cfg["seccomp"] or not net_isolated:
        try:
            report(event="isolation", notes=[_install_seccomp()])
        except OSError as exc:
            if not net_isolated and cfg["require_net"]:
                raise OSError(exc.errno, f"no network isolation possible: {exc}") from exc
            report(event="isolation", notes=[f"seccomp filter unavailable: {exc}"])
    os.umask(0o077)
    os.execve(cfg["interp"], cfg["argv"], cfg["env"])


def _wait_or_follow_caller(pid: int, lifeline: int) -> tuple[int, Any]:
    """wait4(pid), but SIGKILL the run as soon as the caller is gone (EOF on the lifeline).

    Not PR_SET_PDEATHSIG: that fires when the *thread* that started us exits, and the services
    start runs from worker threads that come and go. The run is a PID-namespace init (its
    death ends every process inside) or, without one, is in this supervisor's process group."""
    try:
        child = os.pidfd_open(pid)
    except (AttributeError, OSError):
        child = None
    while True:
        ready, _, _ = select.select([lifeline] + ([child] if child is not None else []), [], [],
                                    None if child is not None else 0.1)
        done, wait_status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return wait_status, usage
        if lifeline in ready and not os.read(lifeline, 1):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            os.killpg(os.getpgrp(), signal.SIGKILL)  # the run's group, this supervisor included


def _supervisor_main(config_json: str) -> NoReturn:
    cfg = json.loads(config_json)
    status_fd = int(cfg["status_fd"])
    os.set_inheritable(status_fd, False)  # closed in the child by its exec

    def report(**event: Any) -> None:
        with contextlib.suppress(OSError):
            os.write(status_fd, (json.dumps(event) + "\n").encode())

    os.umask(0o022)
    try:
        # Into the run's cgroup first (the host's view, before any namespace): the sandboxed
        # process is forked from here, so it is inside from its first instruction.
        for procs in cfg.get("cgroup_procs", ()):
            with open(procs, "w") as fh:
                fh.write(str(os.getpid()))
        notes, pid_ns, net_isolated, level = _isolate(cfg)
    except Exception as exc:  # fail closed: never run the code half-isolated
        report(event="error", reason=f"sandbox set-up failed: {exc}")
        os._exit(_SETUP_FAILED)
    notes.append(str(cfg.get("cgroup_note", "")))
    report(event="isolation", notes=notes, level=level)
    wanted = cfg.get("min_level", "full")
    if ISOLATION_LEVELS.index(level) > ISOLATION_LEVELS.index(wanted):
        report(event="error", reason=f"sandbox isolation is {level!r}, below the required "
               f"{wanted!r} ({'; '.join(notes)}); the code was not run")
        os._exit(_SETUP_FAILED)
    pid = os.fork()
    if pid == 0:
        try:
            _become_sandboxed(cfg, pid_ns, net_isolated, report)
        except BaseException as exc:
            report(event="error", reason=f"sandbox set-up failed: {exc}")
        os._exit(_SETUP_FAILED)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # only the sandboxed process should hold the output pipes
        os.dup2(devnull, fd)
    wait_status, usage = _wait_or_follow_caller(pid, int(cfg["lifeline_fd"]))
    report(
        event="exit",
        wait_status=wait_status,
        cpu_s=usage.ru_utime + usage.ru_stime,
        maxrss_kb=usage.ru_maxrss,
    )
    os._exit(0)


if __name__ == "__main__":
    _supervisor_main(sys.argv[1])
