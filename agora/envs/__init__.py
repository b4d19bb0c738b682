"""Environments: the turn-based protocol (``base``), one module per env ending with its
``SPEC``, and the registry of every env by name (``registry``: ``spec``, ``make_env``)."""

from __future__ import annotations

from agora.envs.base import ChatMessage, Outcome, StepResult, TurnBasedEnv

__all__ = ["ChatMessage", "Outcome", "StepResult", "TurnBasedEnv"]
