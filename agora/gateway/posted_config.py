"""What a run config posted through the gateway may say.

A config file on disk is its author's; one posted to ``/v1/runs`` comes from whoever holds a
key, and the gateway runs it on its own machine. So before the config is even validated
(validating ``support.tool_modules`` imports those modules) it is read for what only the
machine's owner may choose:

- code: ``tool_modules`` anywhere (imported by the gateway and the workers);
- where things are: ``services.host`` / ``services.hosts`` (the embedded Redis on 0.0.0.0,
  clients sent elsewhere), ``judge.base_url``, extra vLLM flags (``models.*.extra_args``);
- files on the server: ``init_adapter``, ``learned_model``, a JSONL task's ``path`` outside
  the repository's ``data/`` (its shipped samples stay postable), and any string that is a
  path (``/...``, ``./``, ``../``, ``~``) or a URL (``scheme://``).

Each is a 422 naming the field. Everything else (agents, environment, PPO, budgets, sampling)
is the poster's to choose; built-in model names and Hub ids (``org/name``) still load.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from agora.gateway.errors import GatewayError

FORBIDDEN_KEYS = {
    "tool_modules": "imports Python modules",
    "extra_args": "passes flags to vLLM",
    "init_adapter": "names a folder on the server",
    "learned_model": "names a folder on the server",
    "path": "names a file on the server",
    "base_url": "sends the judge's requests to a server of the poster's choice",
}
FORBIDDEN_IN_SECTION = {"services": {"host": "chooses the address services listen on",
                                     "hosts": "sends the run's clients to other hosts"}}
PATH_OR_URL = re.compile(r"^(/|\./|\.\./|~)|(^|/)\.\.(/|$)|^[A-Za-z][A-Za-z0-9+.-]*://")


def refuse_server_choices(data: object, field: str = "") -> None:
    """Raise a 422 naming the first field of a posted config that only the server's owner may
    set (see the module docstring); return if there is none."""
    if isinstance(data, dict):
        section = field.split(".", 1)[0] if field else None
        for key, value in data.items():
            name = f"{field}.{key}" if field else str(key)
            why = FORBIDDEN_KEYS.get(str(key))
            if why is None and field == section:
                why = FORBIDDEN_IN_SECTION.get(section or "", {}).get(str(key))
            if key == "path" and shipped_data(value):
                why = None
            if why is not None and value not in (None, [], {}, ""):
                raise _refused(name, why)
            refuse_server_choices(value, name)
    elif isinstance(data, list):
        for index, item in enumerate(data):
            refuse_server_choices(item, f"{field}.{index}")
    elif isinstance(data, str) and PATH_OR_URL.search(data.strip()):
        raise _refused(field, f"is a path or URL ({data[:80]!r})")


def shipped_data(value: object) -> bool:
    """A relative path inside the repository's data/ folder (the shipped task samples)."""
    if not isinstance(value, str):
        return False
    path = PurePosixPath(value)
    return (not path.is_absolute() and len(path.parts) > 1 and path.parts[0] == "data"
            and ".." not in path.parts)


def _refused(field: str, why: str) -> GatewayError:
    return GatewayError(422, f"{field}: {why}; a run posted through the gateway may not choose "
                        "it (put it in a config file on the server and start the run there)",
                        "field_not_allowed", param=field)
