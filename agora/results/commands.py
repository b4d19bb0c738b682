"""The commands behind an experiment: exactly what a user would type, so every row of
results.md names the commands that reproduce it.

Every run lands under ``<results>/runs/`` with the experiment's name as its run id (``--set
output_dir=...``), so the figures are read from known places and a rerun replaces them.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from agora.config.base import ConfigError
from agora.config.environment import EnvironmentConfig
from agora.config.run import load_config
from agora.reflection.config import load_reflection_config
from agora.results.plan import Experiment
from agora.train.run_warm_start import warm_start_dir


@dataclass(frozen=True)
class Step:
    label: str
    args: list[str]  # after ``agora``
    # The folder the step makes for later steps (a warm start's adapter): a rerun of the
    # experiment reuses it when it holds the record of this same command (runner.py).
    product: Path | None = None

    def shell(self) -> str:
        return "agora " + shlex.join(self.args)


@dataclass(frozen=True)
class Outputs:
    """Where an experiment's commands leave what the report reads."""

    figures: Path  # the JSON its figures come from
    metrics: dict[str, Path]  # label -> a training run's metrics.jsonl (none for reflect)
    run: Path | None = None  # the trained run (train_eval): its episodes show partner switches


def check_configs(experiments: list[Experiment]) -> None:
    """Load each experiment's config with its overrides before anything runs: a misspelt
    field in the tenth experiment is refused now, naming it, not hours into the plan."""
    for exp in experiments:
        load = load_reflection_config if exp.kind == "reflect" else load_config
        try:
            cfg = load(exp.config, list(exp.overrides))
        except ConfigError as err:
            raise ConfigError(f"experiment {exp.name}: {err}") from None
        if exp.warm_agent is not None:
            warm_agent_index(exp)  # names a missing agent now, not after the SFT
        if exp.inherits_trainer_warm_start and not any(a.warm_start for a in cfg.agents):
            raise ConfigError(f"experiment {exp.name}: warm_start_from: "
                              f"'{exp.warm_start_from}' is no earlier experiment with a "
                              f"warm_start (none in the plan, no agents[].warm_start in "
                              f"{exp.config})")
        ws = exp.warm_start
        if ws is not None and ws.overrides:
            _check_sft_config(exp)
        if ws is not None and ws.demonstrator is not None:
            _check_demonstrator(exp, cfg.environment)
        if ws is not None and ws.every_position and not cfg.environment.spec.enumerable:
            raise ConfigError(f"experiment {exp.name}: warm_start.every_position: "
                              f"{cfg.environment.name} is not a small game without chance "
                              "(EnvSpec.enumerable)")


def steps(exp: Experiment, runs: Path) -> list[Step]:
    config = str(exp.config)
    sets = [f"output_dir={runs}", *exp.overrides]
    if exp.kind == "reflect":
        return [Step("reflect", ["reflect", "all", config,
                                 *_sets([*sets, f"name={exp.name}"])])]
    budget = ([f"trainer.max_updates={exp.updates}", "trainer.max_minutes=null"]
              if exp.updates else [])
    out: list[Step] = []
    if exp.warm_start is not None:  # SFT first; PPO (a compare's both arms) starts from it
        adapter = runs / f"{exp.name}-sft"
        out.append(_warm_start_step(exp, adapter, sets))
        sets = [*sets, f"agents.{warm_agent_index(exp)}.init_adapter={adapter}"]
    elif exp.inherits_trainer_warm_start:  # the SFT an earlier run's trainer made
        sets = [*sets, *_trainer_warm_starts(exp, runs / str(exp.warm_start_from))]
    elif exp.warm_start_from is not None:  # an earlier experiment's SFT (plan order)
        adapter = runs / f"{exp.warm_start_from}-sft"
        sets = [*sets, f"agents.{warm_agent_index(exp)}.init_adapter={adapter}"]
    if exp.kind == "demo":
        out.append(Step("train + evaluate", [
            "demo", config, "--run-id", exp.name,
            *(["--minutes", f"{exp.minutes:g}"] if exp.minutes else []),
            *(["--games", str(exp.games)] if exp.games else []), *_sets([*sets, *budget])]))
        return out
    if exp.kind == "compare":
        return [*out, Step("two arms", [
            "compare", config, "--run-id", exp.name,
            *(["--minutes", f"{exp.minutes:g}"] if exp.minutes else []),
            *(["--updates", str(exp.updates)] if exp.updates else []),
            *(["--tasks", str(exp.tasks)] if exp.tasks else []),
            *(["--games", str(exp.games)] if exp.games else []), *_sets(sets)])]
    minutes = [f"trainer.max_minutes={exp.minutes:g}"] if exp.minutes else []
    return [
        *out,
        Step("train", ["up", config, "--run-id", exp.name, *_sets([*sets, *minutes, *budget])]),
        Step("evaluate", ["eval", str(runs / exp.name),
                          *(["--games", str(exp.games)] if exp.games else []),
                          *(["--tasks", str(exp.tasks)] if exp.tasks else []),
                          *(["--k", str(exp.eval_k)] if exp.eval_k else [])]),
    ]


def _check_demonstrator(exp: Experiment, env: EnvironmentConfig) -> None:
    """The warm start's demonstrator is one its env (the experiment's, loaded) has."""
    ws = exp.warm_start
    assert ws is not None and ws.demonstrator is not None
    if ws.demonstrator not in env.spec.demonstrators:
        raise ConfigError(f"experiment {exp.name}: warm_start.demonstrator: "
                          f"'{ws.demonstrator}' is not one of {env.name}'s demonstrators "
                          f"({list(env.spec.demonstrators)})")


def _check_sft_config(exp: Experiment) -> None:
    """The SFT's own overrides make a valid config (which seats every trainable agent)."""
    ws = exp.warm_start
    assert ws is not None
    try:
        load_config(exp.config, [*exp.overrides, *ws.overrides])
    except ConfigError as err:
        raise ConfigError(f"experiment {exp.name}: warm_start.overrides: {err}") from None


def _warm_start_step(exp: Experiment, adapter: Path, sets: list[str]) -> Step:
    ws = exp.warm_start
    assert ws is not None
    sets = [*sets, *ws.overrides]  # the SFT's own, last: they win over the experiment's
    return Step("warm start", [
        "warm-start", str(exp.config), "--out", str(adapter),
        *(["--every-position"] if ws.every_position else ["--episodes", str(ws.episodes)]),
        "--epochs", f"{ws.epochs:g}", "--learning-rate", f"{ws.learning_rate:g}",
        "--batch-size", str(ws.batch_size), *([] if ws.opponents else ["--no-opponents"]),
        *(["--agent", ws.agent] if ws.agent else []),
        *(["--demonstrator", ws.demonstrator] if ws.demonstrator else []),
        *(["--max-steps", str(ws.max_steps)] if ws.max_steps else []),
        *(["--threads", str(ws.threads)] if ws.threads else []), *_sets(sets)],
        product=adapter)


def outputs(exp: Experiment, runs: Path) -> Outputs:
    run = runs / exp.name
    if exp.kind == "demo":
        return Outputs(run / "eval.json", {exp.name: run / "metrics.jsonl"})
    if exp.kind == "compare":
        arms = {arm: runs / f"{exp.name}-{arm}" for arm in ("single", "multi")}
        return Outputs(arms["multi"] / "compare.json",
                       {f"{exp.name} ({arm})": d / "metrics.jsonl" for arm, d in arms.items()})
    if exp.kind == "train_eval":
        return Outputs(run / "eval" / "eval.json", {exp.name: run / "metrics.jsonl"}, run)
    return Outputs(run / "eval", {})  # reflect all: eval/base.json ... eval/dpo.json


def warm_agent_index(exp: Experiment) -> int:
    """The index in ``agents`` of the agent a warm start trains (``warm_start.agent``, else the
    config's learner)."""
    cfg = load_config(exp.config, exp.overrides)
    name = exp.warm_agent or cfg.learner or cfg.agents[0].name
    names = [a.name for a in cfg.agents]
    if name not in names:
        raise ConfigError(f"experiment {exp.name}: warm_start.agent: no agent '{name}' in "
                          f"{exp.config} ({names})")
    return names.index(name)


def _trainer_warm_starts(exp: Experiment, source_run: Path) -> list[str]:
    """``init_adapter`` for each agent whose config warm-starts it: the adapter the source
    run's trainer saved. The trainer then skips the SFT (a given init_adapter wins), so the
    variant differs from its source in PPO only, and not by 20 minutes of SFT."""
    cfg = load_config(exp.config, exp.overrides)
    return [f"agents.{index}.init_adapter={warm_start_dir(source_run, agent.name)}"
            for index, agent in enumerate(cfg.agents) if agent.warm_start is not None]


def _sets(pairs: list[str]) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]
