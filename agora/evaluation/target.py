"""What ``agora eval PATH`` evaluates: a whole run folder, or one adapter checkpoint.

A *run folder* is what ``agora up`` writes (``runs/<id>/``): ``config.yaml``, every published
adapter version under ``adapters/<agent>/v<N>`` (``weight_sync.adapter_dir``),
``metrics.jsonl`` and ``checkpoints/``. Its players are the run's own versions.

A *checkpoint* is any one of:

- an adapter folder (``adapter_config.json`` inside): ``adapters/<agent>/v<N>``, the
  ``adapter/`` of a trainer checkpoint, or any PEFT LoRA folder;
- a trainer checkpoint's agent folder (``checkpoints/ckpt-N/<agent>``, with ``adapter/``);
- a whole trainer checkpoint (``checkpoints/ckpt-N``: one ``<agent>/adapter`` per agent).

Its config is ``--config`` or the first ``config.yaml`` found in the folders above it (a
checkpoint inside a run folder finds the run's). With no earlier version to compare with, a
checkpoint is compared with the base model (the adapter switched off, vLLM's ``base``).

Every problem with the input is an ``EvalInputError`` whose message names the path or field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from agora.config.base import ConfigError
from agora.config.run import RunConfig, load_config
from agora.serving.vllm_server import SERVED_BASE_NAME

ADAPTER_FILE = "adapter_config.json"
CONFIG_FILE = "config.yaml"
CONFIG_SEARCH_DEPTH = 5  # adapters/<agent>/v<N> sits 3 below its run; ckpt-N/<agent>/adapter 4


class EvalInputError(ValueError):
    """The path, config or an option cannot be evaluated; the message says which and why."""


@dataclass(frozen=True)
class Version:
    """One evaluable policy of an agent: an adapter folder, or the base model (path None)."""

    agent: str
    label: str  # as tables show it: "player@v3", "player@ckpt-000005", "base"
    path: Path | None
    number: int | None = None  # the run's version number, when it has one

    @property
    def is_base(self) -> bool:
        return self.path is None


@dataclass
class EvalTarget:
    cfg: RunConfig
    kind: str  # "run" | "checkpoint"
    source: Path
    run_dir: Path | None  # the run folder (for metrics.jsonl), if there is one
    # Per agent, the versions to compare, oldest first; the last one is "the" evaluated policy
    # and the first one its baseline (v0, or the base model for a checkpoint).
    versions: dict[str, list[Version]] = field(default_factory=dict)

    def latest(self, agent: str) -> Version:
        return self.versions[agent][-1]

    def baseline(self, agent: str) -> Version:
        return self.versions[agent][0]

    def default_output(self) -> Path:
        if self.kind == "run":
            return self.source / "eval"
        if self.run_dir is not None:  # a checkpoint of a run: beside the run's own eval
            return self.run_dir / "eval" / self.source.name
        return self.source / "eval"


def base_version(agent: str) -> Version:
    return Version(agent=agent, label=SERVED_BASE_NAME, path=None)


def _load(config: Path) -> RunConfig:
    try:
        return load_config(config)
    except ConfigError as err:
        raise EvalInputError(f"config {config}: {err}") from None


def run_versions(run_dir: Path, agent: str) -> list[Version]:
    """Every published version of ``agent`` in the run, oldest first."""
    root = run_dir / "adapters" / agent
    found = []
    for child in root.iterdir() if root.is_dir() else []:
        match = re.fullmatch(r"v(\d+)", child.name)
        if match and (child / ADAPTER_FILE).is_file():
            found.append(int(match.group(1)))
    return [Version(agent, f"{agent}@v{n}", root / f"v{n}", n) for n in sorted(found)]


def find_config(start: Path) -> Path | None:
    for folder in [start, *start.parents][:CONFIG_SEARCH_DEPTH + 1]:
        if (folder / CONFIG_FILE).is_file():
            return folder / CONFIG_FILE
    return None


def is_run_dir(path: Path) -> bool:
    return (path / "adapters").is_dir() or (path / "metrics.jsonl").is_file()


def checkpoint_adapters(path: Path) -> dict[str | None, Path]:
    """Agent (None = unknown from the layout) -> adapter folder, for a checkpoint path."""
    if (path / ADAPTER_FILE).is_file():
        if path.name == "adapter":  # checkpoints/ckpt-N/<agent>/adapter
            return {path.parent.name: path}
        if path.parent.parent.name == "adapters":  # adapters/<agent>/v<N>
            return {path.parent.name: path}
        return {None: path}
    if (path / "adapter" / ADAPTER_FILE).is_file():  # checkpoints/ckpt-N/<agent>
        return {path.name: path / "adapter"}
    agents = {c.name: c / "adapter" for c in sorted(path.iterdir())
              if (c / "adapter" / ADAPTER_FILE).is_file()}
    return dict(agents)  # checkpoints/ckpt-N (maybe empty)


def resolve_target(path: Path, config: Path | None = None, agent: str | None = None
                   ) -> EvalTarget:
    """Read ``path`` as a run folder or a checkpoint (see the module docstring)."""
    path = Path(path)
    if not path.exists():
        raise EvalInputError(f"{path}: no such file or folder (give a run folder runs/<id> or "
                             "an adapter checkpoint folder)")
    if not path.is_dir():
        raise EvalInputError(f"{path}: not a folder (give a run folder runs/<id> or an adapter "
                             "checkpoint folder)")
    path = path.resolve()
    if config is not None and not Path(config).is_file():
        raise EvalInputError(f"--config {config}: no such file")
    if is_run_dir(path) and not (path / ADAPTER_FILE).is_file():
        return _run_target(path, config, agent)
    adapters = checkpoint_adapters(path)
    if not adapters:
        raise EvalInputError(
            f"{path}: neither a run folder (no adapters/ or metrics.jsonl) nor an adapter "
            f"checkpoint (no {ADAPTER_FILE}, adapter/{ADAPTER_FILE} or <agent>/adapter/)")
    return _checkpoint_target(path, adapters, config, agent)


def _run_target(run_dir: Path, config: Path | None, agent: str | None) -> EvalTarget:
    config = config or (run_dir / CONFIG_FILE)
    if not Path(config).is_file():
        raise EvalInputError(f"{run_dir}: run folder without {CONFIG_FILE}; pass --config")
    cfg = _load(Path(config))
    agents = [a.name for a in cfg.agents]
    if agent is not None and agent not in agents:
        raise EvalInputError(f"--agent {agent}: not an agent of the run ({agents})")
    full = [a.name for a in cfg.agents if a.finetune == "full"]
    if full:  # evaluation serves versions as adapters on one base server
        raise EvalInputError(f"agents.{full[0]}.finetune: full-weight agents are not evaluated "
                             "by `agora eval` yet (it serves versions as LoRA adapters); "
                             "`agora export` the live weights and evaluate the folder as a "
                             "model, or play it through the run's gateway")
    target = EvalTarget(cfg=cfg, kind="run", source=run_dir, run_dir=run_dir)
    for name in agents:
        versions = run_versions(run_dir, name)
        if versions:
            target.versions[name] = versions
    if not target.versions:
        raise EvalInputError(f"{run_dir}: no adapters under {run_dir / 'adapters'} (has the "
                             "run published a version yet?)")
    return target


def _checkpoint_target(path: Path, adapters: dict[str | None, Path], config: Path | None,
                       agent: str | None) -> EvalTarget:
    config = config or find_config(path)
    if config is None:
        raise EvalInputError(f"{path}: no {CONFIG_FILE} next to the checkpoint or above it; "
                             "pass --config RUN_CONFIG.yaml")
    cfg = _load(Path(config))
    agents = [a.name for a in cfg.agents]
    if agent is not None and agent not in agents:
        raise EvalInputError(f"--agent {agent}: not an agent of {config} ({agents})")
    if None in adapters:  # a bare adapter folder: whose is it?
        owner = agent or cfg.learner or agents[0]
        adapters = {owner: adapters[None]}
    elif agent is not None:
        if agent not in adapters:
            raise EvalInputError(f"--agent {agent}: {path} holds adapters of "
                                 f"{sorted(a for a in adapters if a)}")
        adapters = {agent: adapters[agent]}
    unknown = sorted(str(a) for a in adapters if a not in agents)
    if unknown:
        raise EvalInputError(f"{path}: adapters of {unknown}, which are not agents of {config} "
                             f"({agents}); pass --config of the run it came from")
    run_root = Path(config).parent
    target = EvalTarget(cfg=cfg, kind="checkpoint", source=path,
                        run_dir=run_root if is_run_dir(run_root) else None)
    for name, adapter in adapters.items():
        assert name is not None
        tag = adapter.name
        if tag == "adapter":  # checkpoints/ckpt-N/<agent>/adapter: named by the checkpoint
            tag = adapter.parent.parent.name if adapter.parent.name == name else (
                adapter.parent.name)
        target.versions[name] = [base_version(name), Version(name, f"{name}@{tag}", adapter)]
    return target
