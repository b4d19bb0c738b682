#!/usr/bin/env bash
# Build agora's images with podman where no image registry can be reached (issue 19).
#
# Every Dockerfile takes its base image as a build argument whose default is the public image a
# user on the internet gets (python:3.11-slim, vllm/vllm-openai). This script makes local
# stand-ins of those bases from Debian's own packages, then builds our images FROM them:
#   localhost/debian:bookworm     debootstrap --variant=minbase, imported (once)
#   localhost/python:3.11-slim    Debian's Python 3.11 in a venv (scripts/images/python.Dockerfile)
#   localhost/agora-base          services/base.Dockerfile FROM the stand-in
#   localhost/agora-<service>     services/<service>/Dockerfile FROM agora-base, for each
#                                 service named in $AGORA_IMAGES (default: reward; `all`: every
#                                 image of compose's cpu profile but Grafana, which Debian
#                                 does not package)
#   redis                         localhost/redis:7-debian (scripts/images/redis.Dockerfile)
#   prometheus                    localhost/prometheus:debian (scripts/images/prometheus.Dockerfile)
#   policy                        localhost/vllm-openai-cpu:v0.32.0 (scripts/images/
#                                 vllm-cpu.Dockerfile), then agora-policy:cpu and
#                                 agora-judge-model:cpu FROM it
# pip inside the builds uses the host's own package set-up (its pip config, CA bundle, local
# wheels and index mirrors are mounted read-only into each build step), so a build installs
# exactly what `make setup` installs here, the CPU torch included.
#
# Idempotent: the Debian and Python bases are made only when missing; the rest is podman's
# layer cache (a code change rebuilds from `COPY agora` on). Needs root (apt, debootstrap,
# rootful podman). CONTAINERS_CONF points podman at scripts/containers.conf (runc, limits).
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/scripts/containers.conf}"
IMAGES="${AGORA_IMAGES:-reward}"
[ "$IMAGES" = all ] && IMAGES="redis prometheus policy reward judge gateway rollout trainer"

# netavark and aardvark-dns: the network stack with DNS between containers (scripts/
# containers.conf); without Recommends, Debian's podman would have neither.
missing=()
for tool in podman runc debootstrap; do
    command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || missing+=("$tool")
done
for helper in netavark aardvark-dns; do
    [ -x "/usr/lib/podman/$helper" ] || [ -x "/usr/libexec/podman/$helper" ] || missing+=("$helper")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "local_base_images: installing ${missing[*]} from Debian's packages" >&2
    apt-get install -y --no-install-recommends podman runc debootstrap netavark aardvark-dns \
        >/dev/null
fi
export PATH="$PATH:/usr/sbin"

if ! podman image exists localhost/debian:bookworm; then
    # The mirror apt already uses here (deb822 or the classic list), else Debian's own.
    mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
    mirror="${mirror:-$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)}"
    mirror="${mirror:-http://deb.debian.org/debian}"
    rootfs="$(mktemp -d)"
    trap 'rm -rf "$rootfs"' EXIT
    echo "local_base_images: debootstrap bookworm from $mirror" >&2
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >/dev/null
    tar -C "$rootfs" -c . | podman import - localhost/debian:bookworm >/dev/null
fi

if ! podman image exists localhost/python:3.11-slim; then
    podman build --quiet --network host -f scripts/images/python.Dockerfile \
        -t localhost/python:3.11-slim scripts/images >/dev/null
fi

# The host's pip set-up, read-only inside every RUN step of the builds below.
host_pip=()
for path in /etc/pip.conf /etc/xdg/pip /etc/ssl/certs/ca-certificates.crt /opt/wheels \
            /opt/pypi /opt/pypi-more; do
    [ -e "$path" ] && host_pip+=(-v "$path:$path:ro")
done

# The CPU torch wheel the host installs (PIP_FIND_LINKS), else the Dockerfile's default.
torch=()
for wheel in ${PIP_FIND_LINKS:-/opt/wheels}/torch-2.13.0+cpu-cp311-*.whl; do
    [ -f "$wheel" ] && torch=(--build-arg "TORCH_SPEC=$wheel")
done

# --format docker: OCI images drop HEALTHCHECK, which compose waits on. --network host: the
# RUN steps reach the package mirrors as the host does (its resolver and /etc/hosts: under
# netavark a build container resolves through neither, and apt-get update failed, "Temporary
# failure resolving 'deb.debian.org'", where the host maps that name in /etc/hosts).
build() {  # podman build, quiet, keeping HEALTHCHECK, on the host's network
    podman build --quiet --format docker --network host "$@" >/dev/null
}
build -f services/base.Dockerfile -t localhost/agora-base \
    --build-arg PYTHON_IMAGE=localhost/python:3.11-slim "${torch[@]}" "${host_pip[@]}" .
for image in $IMAGES; do
    case "$image" in
        redis)
            build -f scripts/images/redis.Dockerfile -t localhost/redis:7-debian scripts/images ;;
        prometheus)
            build -f scripts/images/prometheus.Dockerfile -t localhost/prometheus:debian \
                scripts/images ;;
        policy)
            build -f scripts/images/vllm-cpu.Dockerfile -t localhost/vllm-openai-cpu:v0.32.0 \
                "${torch[@]}" "${host_pip[@]}" .
            build -f services/policy/Dockerfile -t localhost/agora-policy:cpu \
                --build-arg VLLM_IMAGE=localhost/vllm-openai-cpu:v0.32.0 services/policy
            podman tag localhost/agora-policy:cpu localhost/agora-judge-model:cpu ;;
        *)
            build -f "services/$image/Dockerfile" -t "localhost/agora-$image" \
                --build-arg BASE_IMAGE=localhost/agora-base . ;;
    esac
done
podman images --filter reference='localhost/*' --format '{{.Repository}}:{{.Tag}} {{.Size}}'
