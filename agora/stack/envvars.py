"""Reading a service's settings from environment variables, the one way every service does it.

The services (judge, gateway) take their settings only from the environment so that one image
runs in the embedded stack, compose and k8s; compose writes an unset variable as ``VAR=``, so
an empty value counts as unset.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from agora.config.run import ConfigError


class EnvReader:
    """Typed reads of ``PREFIX + name`` variables, with errors that name the variable."""

    def __init__(self, prefix: str, env: Mapping[str, str] | None = None) -> None:
        self.prefix = prefix
        self.env = os.environ if env is None else env

    def raw(self, full_name: str) -> str | None:
        """A variable by its full name; empty counts as unset."""
        return self.env.get(full_name) or None

    def get(self, name: str) -> str | None:
        return self.raw(self.prefix + name)

    def number(self, name: str, kind: type, default: float | None) -> float | None:
        raw = self.get(name)
        if raw is None:
            return default
        try:
            return kind(raw)
        except ValueError:
            raise ConfigError(f"{self.prefix}{name} must be a number, not '{raw}'") from None
