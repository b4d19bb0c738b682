"""Run one service so that it dies with whoever started it, even if that starter is SIGKILLed.

``python tether.py LIFELINE_FD -- COMMAND...``: the launcher (``agora up``, ``agora eval``, a
test) keeps the write end of a pipe whose read end is LIFELINE_FD; this process starts COMMAND
and watches both. COMMAND exits: this exits with its status (a signal death is passed on as
the same signal). The pipe reads EOF, i.e. the starter is gone: COMMAND's process group gets
SIGTERM, then SIGKILL after a grace period, so no vLLM, Redis or worker is left orphaned.

Why not ``PR_SET_PDEATHSIG`` on the service itself: it fires when the *thread* that started
the process exits, and the stack starts and restarts services from whatever thread runs its
watch loop. Here it is used only between this single-threaded process and COMMAND, so killing
this process (a fault test's ``kill(service.pid)``) still kills COMMAND at once.

Standard library only, run with an isolated interpreter (``-I``): nothing of the service's
environment can change what it does.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import time

_PR_SET_PDEATHSIG = 1
GRACE_S = 10.0


def _exec_child(command: list[str], tether_pid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != tether_pid:  # the tether died before prctl took effect
        os._exit(1)
    try:
        os.execvp(command[0], command)
    except OSError as err:
        os.write(2, f"tether: cannot run {command[0]!r}: {err}\n".encode())
        os._exit(127)


def _exit_like(status: int) -> None:
    """Leave with the child's exit status: its code, or death by the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be handled at all
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not end a process (e.g. SIGCHLD)
    os._exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    lifeline = int(argv[1])
    if argv[2] != "--" or len(argv) < 4:
        sys.exit("usage: tether.py LIFELINE_FD -- COMMAND...")
    command = argv[3:]
    # A stop (SIGTERM/SIGINT to the whole group) is for the service: this process waits for it
    # to finish and reports its status. A handler, not SIG_IGN: ignored signals would be
    # inherited by the service through exec, handled ones are reset.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    me = os.getpid()
    child = os.fork()
    if child == 0:
        os.close(lifeline)
        _exec_child(command, me)
    try:
        watch = os.pidfd_open(child)
    except (AttributeError, OSError):
        watch = None
    while True:
        try:
            ready, _, _ = select.select([lifeline] + ([watch] if watch is not None else []),
                                        [], [], None if watch is not None else 0.2)
        except InterruptedError:
            continue
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            _exit_like(status)
        if lifeline in ready and not os.read(lifeline, 1):
            break  # the starter is gone
    with_grace = time.monotonic() + GRACE_S
    try:
        os.killpg(os.getpgid(child), signal.SIGTERM)
    except OSError:
        os.kill(child, signal.SIGTERM)
    while time.monotonic() < with_grace:
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    os.killpg(os.getpgrp(), signal.SIGKILL)  # what is left of the group, this process too


if __name__ == "__main__":
    main(sys.argv)
