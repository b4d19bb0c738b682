"""The base of every service's settings: pydantic-settings, plus what the services need of it.

The services (judge, reward, gateway) take their settings only from the environment, so that one
image runs in the embedded stack, compose and k8s. pydantic-settings reads and types the
variables; ``EnvSettings`` adds the three behaviours the services rely on:

- an empty value counts as unset: compose writes an unset variable as ``VAR=``
  (``env_ignore_empty``);
- a bad value raises ``ConfigError`` naming the full variable and the value, e.g.
  ``AGORA_JUDGE_MAX_TOKENS must be a number, not 'abc'``: the callers turn ConfigError into a
  one-line startup message, where pydantic's ValidationError would be a traceback naming Python
  field names that nobody sets;
- ``from_env(env)`` reads a given mapping instead of ``os.environ``, so tests can check the
  environment that a compose file or k8s manifest gives a container against the real settings.

Nothing else is a source: no ``.env`` file, no secrets folder (the environment is the contract).
A subclass names its prefix (``model_config = SettingsConfigDict(env_prefix="AGORA_JUDGE_")``);
a field read from a variable outside that prefix says so with ``validation_alias``.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Self

from pydantic import AliasChoices, ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from agora.config.base import ConfigError

__all__ = ["EnvSettings"]

# The mapping ``from_env(env)`` reads, for the duration of that one construction (a ContextVar,
# not a class attribute: two threads or tasks may build settings from different mappings).
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("agora_settings_environ",
                                                            default=None)


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {(name if self.case_sensitive else name.lower()): value
                for name, value in self._environ.items()
                if value or not self.env_ignore_empty}


class EnvSettings(BaseSettings):
    """Settings read from the environment, failing with ConfigError messages that name variables.

    ``Cls()`` and ``Cls.from_env()`` read ``os.environ``; ``Cls.from_env({...})`` reads only the
    mapping; keyword arguments (``Cls(timeout_s=5)``) win over both.
    """

    model_config = SettingsConfigDict(env_ignore_empty=True, frozen=True,
                                      validate_by_name=True, validate_by_alias=True)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as err:
            raise ConfigError(type(self).explain(err)) from None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        """The settings from ``env`` (default: ``os.environ``) and the defaults."""
        if env is None:
            return cls()
        token = _ENVIRON.set(env)
        try:
            return cls()
        finally:
            _ENVIRON.reset(token)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        environ = _ENVIRON.get()
        return (init_settings,
                env_settings if environ is None else _MappingEnvSource(settings_cls, environ))

    @classmethod
    def variable(cls, field: str) -> str:
        """The environment variable(s) of a field, as a user writes them."""
        info = cls.model_fields.get(field)
        alias = info.validation_alias if info is not None else None
        if isinstance(alias, str):
            return alias
        if isinstance(alias, AliasChoices):
            return " or ".join(str(choice) for choice in alias.choices)
        prefix = str(cls.model_config.get("env_prefix", ""))
        return f"{prefix}{field}".upper()

    @classmethod
    def explain(cls, err: ValidationError) -> str:
        """One line per problem, each naming the variable and the value it had."""
        return "; ".join(cls._explain_one(detail) for detail in err.errors())

    @classmethod
    def _explain_one(cls, detail: ErrorDetails) -> str:
        ctx = detail.get("ctx") or {}
        if not detail["loc"]:  # a check over several settings: its message names them
            return str(ctx.get("error", detail["msg"]))
        name = str(detail["loc"][0])
        by_alias = {alias.lower(): field for field, info in cls.model_fields.items()
                    for alias in _aliases(info.validation_alias)}
        variable = cls.variable(by_alias.get(name.lower(), name))
        kind = detail["type"]
        if kind == "missing":
            return f"{variable} must be set"
        if kind == "extra_forbidden":  # only keyword arguments can be extra: name it as given
            return f"'{name}' is not a setting of {cls.__name__}"
        reasons = {
            "int_parsing": "must be a number",
            "int_type": "must be a number",
            "float_parsing": "must be a number",
            "float_type": "must be a number",
            "int_from_float": "must be a whole number",
            "finite_number": "must be a finite number",
            "greater_than": f"must be greater than {_number(ctx.get('gt'))}",
            "greater_than_equal": f"must be at least {_number(ctx.get('ge'))}",
            "less_than": f"must be less than {_number(ctx.get('lt'))}",
            "less_than_equal": f"must be at most {_number(ctx.get('le'))}",
            "literal_error": f"must be {ctx.get('expected')}",
            "value_error": str(ctx.get("error", detail["msg"])),
        }
        reason = reasons.get(kind, detail["msg"])
        return f"{variable} {reason}, not '{detail['input']}'"


def _number(bound: object) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def _aliases(alias: object) -> list[str]:
    if isinstance(alias, str):
        return [alias]
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    return []
