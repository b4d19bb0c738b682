"""scripts/compose_podman.sh replaces a podman API service that runs with other settings than
this checkout's containers.conf, and leaves one that runs with them alone.

A podman service outlives the call that started it; one started under another checkout's file
(deleted since) or under an older version of this one (the CNI network backend, without DNS
between containers) broke every compose test that followed. podman itself is not installed
here (CI has none): the services are stand-in processes with podman's command line and the
environment the script gives its own, and `podman` / `docker compose` are stand-in commands
that record their calls, so what is tested is the script's side only.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compose_podman.sh"


# The stand-in's parent: reaps it as soon as it is killed (a killed process nobody waits for
# stays a zombie that `kill -0` still finds). Its own command line must not look like the
# service's, so the stand-in's comes through the environment.
PARENT = ("import os, subprocess, sys; child = subprocess.Popen(['bash', '-c', "
          "os.environ['STAND_IN']]); print(child.pid, flush=True); child.wait()")


def _stand_in_service(socket: Path, conf: Path, sha: str | None) -> tuple[int, subprocess.Popen]:
    """A process whose command line is the service's (`pgrep -f` finds it by that) and whose
    environment carries the containers.conf it was started with: its pid, and its parent."""
    env = {"PATH": os.environ["PATH"], "CONTAINERS_CONF": str(conf),
           "STAND_IN": f'exec -a "podman system service --time=0 unix://{socket}" sleep 300'}
    if sha is not None:
        env["AGORA_CONTAINERS_CONF_SHA"] = sha
    parent = subprocess.Popen([sys.executable, "-c", PARENT], env=env, stdout=subprocess.PIPE,
                              text=True)
    return int(parent.stdout.readline()), parent


# The stand-in podman service: answers one HTTP request on its unix socket (the script's ping).
PING_ONCE = """
import http.server, socketserver, sys

class Ping(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"OK")

    def address_string(self):
        return "unix"

    def log_message(self, *args):
        pass

server = socketserver.UnixStreamServer(sys.argv[1].removeprefix("unix://"), Ping)
server.timeout = 30
server.handle_request()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_service_started_under_other_settings_is_replaced_and_a_current_one_kept(tmp_path):
    conf = tmp_path / "containers.conf"
    conf.write_text('[network]\nnetwork_backend = "netavark"\n')
    current = hashlib.sha256(conf.read_bytes()).hexdigest()
    socket = tmp_path / "podman.sock"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    ping_once = bin_dir / "ping_once.py"  # the script starts its service with a clean env
    ping_once.write_text(PING_ONCE)
    # podman: records what it was asked and lists no containers; as `system service` it
    # answers the script's one ping on the socket, then exits.
    (bin_dir / "podman").write_text(
        f'#!/bin/sh\necho "podman $* (conf sha $AGORA_CONTAINERS_CONF_SHA)" >> {calls}\n'
        f'[ "$1 $2" = "system service" ] && exec {sys.executable} {ping_once} "$4"\n'
        'exit 0\n')
    compose = bin_dir / "compose"
    compose.write_text(f'#!/bin/sh\necho "compose $*" >> {calls}\n')
    for tool in (bin_dir / "podman", compose):
        tool.chmod(0o755)

    # Same file, contents changed since it started (no hash: started by an older script, or
    # the hash of other contents), another checkout's file, and one started with this file.
    services = [_stand_in_service(socket, conf, None),
                _stand_in_service(socket, conf, "0" * 64),
                _stand_in_service(socket, tmp_path / "gone" / "containers.conf", current),
                _stand_in_service(socket, conf, current)]
    *stale, kept = [pid for pid, _ in services]
    try:
        time.sleep(0.3)  # every stand-in has exec'd: its command line is the service's
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
               "CONTAINERS_CONF": str(conf), "AGORA_PODMAN_SOCKET": str(socket),
               "COMPOSE": str(compose)}
        proc = subprocess.run(["bash", str(SCRIPT), "version"], env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert [pid for pid in stale if _alive(pid)] == []  # killed by the script
        assert _alive(kept)  # the service with this file's settings still runs
        log = calls.read_text()
        assert "compose version" in log
        # Nothing answered on the socket (the stand-ins serve nothing): the script started a
        # service of its own, tagged with this file's contents, and went on once it answered.
        assert f"podman system service --time=0 unix://{socket} (conf sha {current})" in log
    finally:
        for pid, parent in services:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
            parent.wait(timeout=10)
