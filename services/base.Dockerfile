# Shared base image for agora's Python services (reward, gateway, rollout, trainer): the
# library and its dependencies, installed once. Each service's Dockerfile starts FROM it.
# Build from the repo root:  docker build -f services/base.Dockerfile -t agora-base .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1

WORKDIR /app

# torch is not in pyproject's dependencies on purpose (a bare `torch` requirement resolves to a
# multi-GB CUDA build). Choose the build at image time: TORCH_SPEC and, for a CPU or specific
# CUDA build, PIP_EXTRA_INDEX_URL pointing at the matching wheel index.
ARG TORCH_SPEC=torch
ARG PIP_EXTRA_INDEX_URL=
RUN pip install "$TORCH_SPEC"

COPY pyproject.toml README.md ./
COPY agora ./agora
COPY services ./services
RUN pip install .
