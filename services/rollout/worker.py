"""Rollout worker entry point: ``celery -A services.rollout.worker worker -Q rollouts``.

All logic lives in ``agora.rollout.worker``; this module exposes the Celery app and, once the
worker starts, serves its Prometheus metrics (``agora_rollout_*``) on
``AGORA_WORKER_METRICS_PORT`` (unset: none; bind address ``AGORA_WORKER_METRICS_ADDR``, default
all interfaces). The counters live in this process, so the pool must be ``threads`` (as the
launcher and the Dockerfile start it): prefork children would count in registries nobody serves.
"""

from celery.signals import worker_init

from agora.rollout.settings import serve_worker_metrics
from agora.rollout.worker import celery_app as app  # noqa: F401  (celery -A looks for `app`)


@worker_init.connect
def _serve_metrics(**_kwargs) -> None:
    serve_worker_metrics()
