"""Verifiers: turn what happened in an episode into rewards, checking it independently."""
