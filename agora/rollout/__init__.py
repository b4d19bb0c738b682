"""Rollout workers: the Celery task that plays an episode and the stream it appends to."""
