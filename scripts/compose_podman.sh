#!/usr/bin/env bash
# `docker compose` (the real v2 binary that scripts/ensure_deploy_tools.sh installs) driving
# podman, for hosts without a Docker engine (issue 19). Arguments go to docker compose as is:
#   AGORA_REDIS_IMAGE=localhost/redis:7-debian \
#   AGORA_VLLM_CPU_IMAGE=localhost/vllm-openai-cpu:v0.32.0 COMPOSE_PROFILES=cpu \
#   scripts/compose_podman.sh up -d --no-build --wait trainer-cpu gateway rollout
# (images from scripts/local_base_images.sh with AGORA_IMAGES=all). It
#  - starts podman's Docker-compatible API on $AGORA_PODMAN_SOCKET if nothing answers there;
#  - runs the containers' health checks every 3 s while compose runs: podman schedules them
#    with systemd timers, and on a host without systemd (a container, a CI machine) they never
#    run, so compose's `depends_on: condition: service_healthy` would wait forever.
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/scripts/containers.conf}"
SOCKET="${AGORA_PODMAN_SOCKET:-/run/podman/podman.sock}"
export DOCKER_HOST="unix://$SOCKET"
COMPOSE="${COMPOSE:-.venv/bin/docker-compose}"

# A service this script started for another checkout runs with that checkout's containers.conf
# (runtime, ulimits); once that file is gone every container start fails ("write child: broken
# pipe", seen after a CI clone was deleted). One started before the file changed keeps the old
# settings (seen: the CNI network backend, no DNS between containers, after netavark became the
# backend). Such a service is replaced: it is tagged with the file's path and content hash.
CONF_SHA=$(sha256sum "$CONTAINERS_CONF" 2>/dev/null | cut -d' ' -f1 || true)
for pid in $(pgrep -f "podman system service --time=0 $DOCKER_HOST" || true); do
    environ=$(tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null || true)
    theirs=$(sed -n 's/^CONTAINERS_CONF=//p' <<< "$environ")
    their_sha=$(sed -n 's/^AGORA_CONTAINERS_CONF_SHA=//p' <<< "$environ")
    if [ "$theirs" != "$CONTAINERS_CONF" ] || [ "$their_sha" != "$CONF_SHA" ]; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    fi
done

if ! curl -sf --unix-socket "$SOCKET" http://podman/_ping >/dev/null 2>&1; then
    mkdir -p "$(dirname "$SOCKET")"
    # A clean environment: the service outlives this call, and must carry neither the caller's
    # secrets (AGORA_REDIS_PASSWORD, ...) nor its run's tags (AGORA_RUN_ID) into later runs.
    env -i PATH="$PATH" HOME="${HOME:-/root}" CONTAINERS_CONF="$CONTAINERS_CONF" \
        AGORA_CONTAINERS_CONF_SHA="$CONF_SHA" nohup podman system service --time=0 "$DOCKER_HOST" >/dev/null 2>&1 &
    for _ in $(seq 50); do
        curl -sf --unix-socket "$SOCKET" http://podman/_ping >/dev/null 2>&1 && break
        sleep 0.2
    done
fi

pump_health() {
    while true; do
        for container in $(podman ps -q); do
            podman healthcheck run "$container" >/dev/null 2>&1 || true
        done
        sleep 3
    done
}
pump_health &
pump=$!
trap 'kill $pump 2>/dev/null || true' EXIT
"$COMPOSE" "$@"
