"""A cgroup per sandbox run: memory and process count for the run as a whole.

rlimits bound each process (RLIMIT_AS) or the sandbox uid (RLIMIT_NPROC), so a run of 32
processes may still take 32 x its memory limit. A cgroup bounds the sum: every process of the
run lives in one cgroup whose memory limit the kernel enforces over all of them (the OOM killer
stops the run inside it, never the service outside) and whose `pids.max` caps its tasks.

Both hierarchies are used where the host has them, because hosts differ:

* cgroup v2 (the unified hierarchy): `memory.max`, `memory.swap.max = 0`, `pids.max`, in a
  child of ``AGORA_SANDBOX_CGROUP`` (a delegated cgroup the operator gives the service, e.g.
  systemd's ``Delegate=yes``), else of ``/sys/fs/cgroup/agora-sandbox`` when the service may
  write the host's root cgroup. v2 forbids processes in a cgroup whose children get
  controllers, so the service's own cgroup is never used as the parent.
* cgroup v1: ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where swap is
  accounted) in the memory hierarchy, ``pids.max`` in the pids hierarchy, each in
  ``<the service's own cgroup>/agora-sandbox/<run>``.

Neither is there (no write access, a container whose cgroup file system is read-only): the run
goes on with the per-process limits, and the sandbox's isolation notes say so. The supervisor
joins the run's cgroup before it forks the sandboxed process (``procs_files``), so the code is
inside from its first instruction. Nothing here needs a library: the cgroup interface is files.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ENV = "AGORA_SANDBOX_CGROUP"
GROUP = "agora-sandbox"
_V2_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class RunCgroup:
    """The cgroup(s) of one run: one directory on v2, a memory and a pids directory on v1."""

    version: int
    memory_dir: Path
    pids_dir: Path
    memory_mb: int
    max_tasks: int

    @property
    def dirs(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys((self.memory_dir, self.pids_dir)))

    def procs_files(self) -> list[str]:
        """Where the supervisor writes its pid to join (its children inherit the cgroup)."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def note(self) -> str:
        return (f"cgroup v{self.version} per run: memory {self.memory_mb} MB and {self.max_tasks}"
                " tasks over all its processes")

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer stopped inside this run (the memory limit hit)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return _counter(self.memory_dir / name, "oom_kill")

    def remove(self, timeout_s: float = 3.0) -> bool:
        """Kill whatever is left in the cgroup and remove it. One whose last processes are
        still exiting after ``timeout_s`` (a loaded machine, a run that filled its memory) is
        left for the next run's clean-up (``sweep_leftovers``); False then."""
        end = time.monotonic() + timeout_s
        removed = True
        for directory in self.dirs:
            while directory.exists():
                try:
                    directory.rmdir()
                except OSError:
                    if time.monotonic() > end:
                        _LEFTOVERS.add(directory)
                        removed = False
                        break
                    _kill_members(directory, self.version)
                    time.sleep(0.02)
            if self.version == 1 and directory.parent.name == GROUP:
                # Empty now unless another run is in it: a parent cgroup (the service's own,
                # on v1) cannot be removed by whoever owns it while our folder is left inside.
                with contextlib.suppress(OSError):
                    directory.parent.rmdir()
        return removed


# Run cgroups of this process that could not be removed at once: retried at every new run.
_LEFTOVERS: set[Path] = set()


def sweep_leftovers() -> None:
    for directory in list(_LEFTOVERS):
        with contextlib.suppress(OSError):
            if directory.exists():
                directory.rmdir()
        if not directory.exists():
            _LEFTOVERS.discard(directory)


def _counter(path: Path, key: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


def _kill_members(directory: Path, version: int) -> None:
    if version == 2 and (directory / "cgroup.kill").exists():
        with contextlib.suppress(OSError):
            (directory / "cgroup.kill").write_text("1")
            return
    with contextlib.suppress(OSError):
        for pid in (directory / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) of every cgroup file system we can see."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                found.append((fields[4].replace("\\040", " "), tail[0], set(tail[2].split(","))))
    return found


def _own_v1_path(controller: str) -> str:
    """This process's cgroup in the v1 hierarchy of ``controller`` (from /proc/self/cgroup)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                return path
    return "/"


def _make_dir(run: Path) -> Path:
    """The run's folder, and its ``agora-sandbox`` parent if another run just removed it."""
    for _ in range(3):
        try:
            run.mkdir(parents=True)
            return run
        except FileNotFoundError:  # the parent went between the two mkdirs: again
            continue
    run.mkdir(parents=True)
    return run


def _enable_v2_controllers(parent: Path) -> None:
    wanted = {"memory", "pids"}
    enabled = set((parent / "cgroup.subtree_control").read_text().split())
    if not wanted <= enabled:
        (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))


def _v2_parent() -> Path | None:
    given = os.environ.get(CGROUP_ENV)
    if given:
        return Path(given)
    mounts = _mounts()
    if not any(point == str(_V2_ROOT) and kind == "cgroup2" for point, kind, _ in mounts):
        return None
    if not os.access(_V2_ROOT / "cgroup.subtree_control", os.W_OK):
        return None
    # The root cgroup may hold processes and give its children controllers; below it, ours.
    _enable_v2_controllers(_V2_ROOT)
    group = _V2_ROOT / GROUP
    group.mkdir(exist_ok=True)  # kept between runs (v2's own root cgroup blocks nobody)
    return group


def _create_v2(parent: Path, name: str, memory_mb: int, max_tasks: int) -> RunCgroup:
    available = set((parent / "cgroup.controllers").read_text().split())
    if not {"memory", "pids"} <= available:
        raise OSError(f"{parent} lacks the memory or pids controller (has: "
                      f"{' '.join(sorted(available)) or 'none'})")
    _enable_v2_controllers(parent)
    run = _make_dir(parent / name)
    cgroup = RunCgroup(2, run, run, memory_mb, max_tasks)
    try:
        (run / "memory.max").write_text(str(memory_mb << 20))
        if (run / "memory.swap.max").exists():
            (run / "memory.swap.max").write_text("0")
        (run / "pids.max").write_text(str(max_tasks))
    except OSError:
        cgroup.remove()
        raise
    return cgroup


def _create_v1(name: str, memory_mb: int, max_tasks: int) -> RunCgroup | None:
    points = {}
    for point, kind, options in _mounts():
        if kind == "cgroup":
            for controller in ("memory", "pids"):
                if controller in options:
                    points[controller] = point
    if set(points) != {"memory", "pids"}:
        return None
    dirs: dict[str, Path] = {}
    try:
        for controller, point in points.items():
            group = Path(point + _own_v1_path(controller).rstrip("/")) / GROUP
            dirs[controller] = _make_dir(group / name)
    except OSError:
        for made in dirs.values():  # the memory folder of a run whose pids folder failed
            with contextlib.suppress(OSError):
                made.rmdir()
        raise
    cgroup = RunCgroup(1, dirs["memory"], dirs["pids"], memory_mb, max_tasks)
    try:
        limit = str(memory_mb << 20)
        (cgroup.memory_dir / "memory.limit_in_bytes").write_text(limit)
        if (cgroup.memory_dir / "memory.memsw.limit_in_bytes").exists():
            (cgroup.memory_dir / "memory.memsw.limit_in_bytes").write_text(limit)
        (cgroup.pids_dir / "pids.max").write_text(str(max_tasks))
    except OSError:
        cgroup.remove()
        raise
    return cgroup


def create_run_cgroup(memory_mb: int, max_tasks: int) -> tuple[RunCgroup | None, str]:
    """A fresh cgroup for one run with these limits, or None and the reason there is none."""
    sweep_leftovers()
    name = f"run-{os.getpid()}-{secrets.token_hex(6)}"
    try:
        parent = _v2_parent()
        if parent is not None:
            return _create_v2(parent, name, memory_mb, max_tasks), ""
        cgroup = _create_v1(name, memory_mb, max_tasks)
    except OSError as exc:
        return None, f"no cgroup per run ({exc.strerror or exc}): limits are per process only"
    if cgroup is None:
        return None, "no cgroup per run (no writable memory and pids cgroups): limits are per " \
                     "process only"
    return cgroup, ""
