"""Errors the judge answers with a status code and a message (never a bare 500)."""

from __future__ import annotations


class JudgeError(Exception):
    """``status`` is the HTTP status the service answers with; ``message`` says what to fix."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class JudgeUpstreamError(JudgeError):
    """The judge model could not give an answer (unreachable, timed out, refused): 502/504."""
