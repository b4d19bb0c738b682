"""Thin FastAPI/Celery apps over the agora library, one folder (and Dockerfile) each."""
