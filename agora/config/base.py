"""What every config section shares: strict parsing and the error type the CLI prints."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A run config that cannot be used; the message names each bad field."""


class StrictModel(BaseModel):
    # No NaN/inf: YAML's .nan passes no range check and would poison rewards or the loss.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

