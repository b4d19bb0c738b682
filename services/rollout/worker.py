"""Rollout worker entry point: ``celery -A services.rollout.worker worker -Q rollouts``.

All logic lives in ``agora.rollout.tasks``; this module only exposes the Celery app.
"""

from agora.rollout.tasks import celery_app as app  # noqa: F401  (celery -A looks for `app`)
