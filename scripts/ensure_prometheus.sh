#!/usr/bin/env bash
# Make sure a Prometheus server binary is on PATH: tests/e2e/test_monitoring.py starts a real one
# against the embedded stack. Idempotent: does nothing when `prometheus` is already installed.
# Installs Debian's package (no service is started: the package's init scripts are not run
# without systemd, and the test starts its own server on a free port anyway).
set -euo pipefail

if command -v prometheus >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_prometheus: no 'prometheus' on PATH and no apt-get to install it;" \
         "install Prometheus (>= 2.x) yourself" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
echo "ensure_prometheus: installing Debian's prometheus package" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# --no-install-recommends: the server alone, not the node exporter and its friends.
$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v prometheus >/dev/null
