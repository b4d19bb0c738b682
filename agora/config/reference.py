"""The configuration reference (docs/configuration.md), generated from the pydantic models.

Why generated: the models are the truth (they validate every config), and a hand-kept reference
drifts. The meaning of a field comes from its ``Field(description=...)`` or, where the code
explains it in a comment right above the field (most of agora's fields), from that comment;
pydantic does not keep comments, so they are read from the source with ``ast``. A test keeps
the committed page equal to ``render()``: ``agora config reference > docs/configuration.md``.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from agora.config.environment import EnvironmentConfig, environment_json_schema
from agora.config.run import RunConfig
from agora.envs.registry import BUILTIN


def field_comments(model: type[BaseModel]) -> dict[str, str]:
    """``{field: the comment lines right above its definition}`` for one class (not its bases)."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    comments = {}
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above, row = [], node.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#"):
                above.insert(0, lines[row].strip().lstrip("#").strip())
                row -= 1
            if above:
                comments[node.target.id] = " ".join(above)
    return comments


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (``X``, ``list[X]``, ``dict[str, X]``, unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found = []
    for arg in typing.get_args(annotation):
        found.extend(_models_in(arg))
    return found


def type_name(annotation: Any) -> str:
    """A short, readable type: ``a | b`` for literals, ``list[AgentConfig]``, ``int``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Annotated:
        return type_name(typing.get_args(annotation)[0])
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def default_text(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return "(section defaults)"
        return f"`{json.dumps(value)}`" if len(json.dumps(value)) < 60 else "(see code)"
    if field.default is PydanticUndefined:
        return "**required**"
    return f"`{json.dumps(field.default, default=str)}`"


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("|", "\\|")).strip()


def render() -> str:
    """The whole reference: one table per section, in the order a config is read."""
    out = ["# Configuration reference", "",
           "Generated from the pydantic models in `agora/` by `agora config reference` (a test "
           "keeps this page current); `agora config schema` prints the JSON schema. Any field can "
           "be overridden on the command line: `agora up CONFIG --set ppo.learning_rate=1e-4 "
           "--set agents.0.lora_rank=8`.", ""]
    seen: set[type[BaseModel]] = set()
    queue: list[tuple[str, type[BaseModel], bool]] = [("", RunConfig, False)]
    while queue:
        path, model, one_of = queue.pop(0)
        if model in seen:
            continue
        seen.add(model)
        title = f"`{path}`" if path else "The run config (top level)"
        if one_of:  # a field that takes one of several sections
            title += f": {model.__name__}"
        out += [f"## {title}", ""]
        doc = model.__dict__.get("__doc__")  # its own docstring, not BaseModel's
        if doc:
            out += [_cell(inspect.cleandoc(doc)), ""]
        out += [f"Model: `{model.__module__}.{model.__name__}`.", "",
                "| field | type | default | meaning |", "|---|---|---|---|"]
        comments: dict[str, str] = {}
        for klass in reversed(model.__mro__):
            if isinstance(klass, type) and issubclass(klass, BaseModel):
                comments.update(field_comments(klass))
        for name, field in model.model_fields.items():
            meaning = field.description or comments.get(name, "")
            out.append(f"| `{name}` | {_cell(type_name(field.annotation))} | "
                       f"{_cell(default_text(field))} | {_cell(meaning)} |")
            subs = _models_in(field.annotation)
            for sub in subs:
                suffix = "[]" if typing.get_origin(field.annotation) is list else ""
                if typing.get_origin(field.annotation) is dict:
                    suffix = ".*"
                queue.append((f"{path}.{name}{suffix}".lstrip("."), sub, len(subs) > 1))
        if model is EnvironmentConfig:  # + each built-in env's own section, named after it
            queue += [(f"{path}.{spec.name}", spec.options, False) for spec in BUILTIN
                      if spec.options is not None]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def schema() -> str:
    """RunConfig's JSON schema, its ``environment`` the union over the registered envs."""
    full = RunConfig.model_json_schema()
    union = environment_json_schema()
    for variant in union["oneOf"]:  # their shared sections, once, under the run's $defs
        full["$defs"].update(variant.pop("$defs", {}))
    full["properties"]["environment"] = union
    return json.dumps(full, indent=2)
