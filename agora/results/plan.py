"""The results plan: which learning experiments ``agora results`` runs, and what each must show.

A plan is a YAML file (``configs/results.yaml`` is the README's): a list of experiments, each a
recipe's config, a budget and the targets its figures are held to. An experiment is one of four
kinds, each the commands a user would type by hand (``commands.py`` builds them):

| kind | commands | before | after |
|---|---|---|---|
| demo | [warm-start], demo | the run's v0 | its latest adapter |
| compare | compare | each arm's v0 | each arm's latest |
| train_eval | [warm-start], up, eval | the run's v0 | its latest |
| reflect | reflect all | the base model | the DPO stage |

A target is ``"FIGURE OP BOUND"`` (OP: ``>=``, ``<=``, ``>``, ``<``, with spaces around it) and
is held against the figure's *after* value. BOUND is a number (``"wins vs random >= 0.70"``),
another figure's after value (``"multi-agent: last turn > single-agent: last turn"``) or
``before``, the figure's own before value (``"deal_rate > before"``).
"""

from __future__ import annotations

import operator
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from agora.config.base import ConfigError
from agora.config.warm_start import WarmStartConfig

NAME = r"^[a-z0-9][a-z0-9\-]{0,40}$"  # also a run id and a file name: no paths
OPERATORS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
TARGET = re.compile(r"^\s*(.+?)\s+(>=|<=|>|<)\s+(.+?)\s*$")


class Target(BaseModel):
    """``figure OP bound``: bound is a number or another figure of the same experiment."""

    model_config = ConfigDict(frozen=True)
    figure: str
    op: Literal[">=", "<=", ">", "<"]
    number: float | None = None
    other: str | None = None

    @classmethod
    def parse(cls, text: str) -> Target:
        match = TARGET.match(str(text))
        if match is None:
            raise ValueError(f"'{text}' is not 'FIGURE OP BOUND' (OP: >=, <=, >, < with "
                             "spaces around it; BOUND: a number, a figure or 'before')")
        figure, op, bound = match.groups()
        try:
            return cls(figure=figure, op=op, number=float(bound))
        except ValueError:
            return cls(figure=figure, op=op, other=bound)

    @property
    def higher_is_better(self) -> bool:
        return self.op in (">=", ">")

    def holds(self, value: float, bound: float) -> bool:
        return OPERATORS[self.op](value, bound)

    def describe(self) -> str:
        bound = f"{self.number:g}" if self.number is not None else self.other
        return f"{self.op} {bound}"


class WarmStart(WarmStartConfig):
    """``agora warm-start`` before PPO: SFT on the env's demonstrators (its options; a run
    config's ``agents[].warm_start`` takes the same, and the trainer runs it)."""

    episodes: int = Field(100, ge=1)
    # A team of several learners: whom the SFT trains (a pretrained teammate that cannot yet
    # write the answer format, say). The others start from their bases.
    agent: str | None = Field(None, description="the agent to warm-start (default: the "
                              "config's learner)")
    # The SFT's own settings, after the experiment's overrides; PPO never sees them. Why:
    # `environment.seats=[researcher,researcher]` has the learner demonstrate every seat, so
    # the learning peer a compare puts in the scripted writer's seat (a copy of the learner,
    # its warm start included) starts out able to write the answer it replaces.
    overrides: list[str] = Field(default_factory=list, description="`key=value` settings "
                                 "for the SFT only (e.g. seat the agent in every seat)")


class Experiment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME, description="its run id prefix and file name")
    recipe: str = Field(description="the README's name for it")
    kind: Literal["demo", "compare", "train_eval", "reflect"]
    config: Path
    minutes: float | None = Field(None, gt=0, description="training budget (wall clock)")
    updates: int | None = Field(None, ge=1, description="training budget (PPO updates)")
    games: int | None = Field(None, ge=1, description="evaluation games / episodes")
    tasks: int | None = Field(None, ge=1, description="held-out tasks (compare; a "
                              "discussion's train_eval evaluation)")
    # agora eval's samples per held-out task (its --k, default 4): a discussion on two real
    # bases takes ~2 h to evaluate at k = 4 on 2 cores, ~25 min at k = 1 over 100 tasks.
    eval_k: int | None = Field(None, ge=1, description="train_eval: discussions sampled per "
                               "held-out task (agora eval --k)")
    warm_start: WarmStart | None = None
    # Start PPO from an earlier experiment's warm start (its SFT adapter: the plan's
    # `warm_start`, or the one its trainer ran from the config's `agents[].warm_start`) instead
    # of making one: variants of one recipe (another advantage, no KL term) then differ in PPO only,
    # and skip the SFT (17 minutes for negotiation on 2 cores). In a compare both arms start
    # from it (the multi-agent arm's learning peer is a copy of the learner), as from a
    # compare's own warm_start.
    warm_start_from: str | None = Field(None, pattern=NAME)
    overrides: list[str] = Field(default_factory=list, description="--set KEY=VALUE")
    targets: list[str] = Field(default_factory=list, description="'FIGURE OP BOUND'")
    # warm_start_from's source's agent, filled in by Plan (steps() sees one experiment)
    _inherited_agent: str | None = PrivateAttr(None)
    # warm_start_from names a source without a plan warm_start: its config's
    # agents[].warm_start ran in its trainer (check_configs makes sure there is one)
    _inherits_trainer_warm_start: bool = PrivateAttr(False)

    @field_validator("targets")
    @classmethod
    def _targets_parse(cls, targets: list[str]) -> list[str]:
        for text in targets:
            Target.parse(text)  # raises ValueError naming the text
        return targets

    def parsed_targets(self) -> list[Target]:
        return [Target.parse(text) for text in self.targets]

    @property
    def inherits_trainer_warm_start(self) -> bool:
        """warm_start_from's SFT ran in the source's trainer (``agents[].warm_start``)."""
        return self._inherits_trainer_warm_start

    @property
    def warm_agent(self) -> str | None:
        """The agent whose init_adapter the warm start sets (None: the config's learner)."""
        if self.warm_start is not None:
            return self.warm_start.agent
        return self._inherited_agent

    @model_validator(mode="after")
    def _consistent(self) -> Experiment:
        if self.minutes is not None and self.updates is not None:
            raise ValueError("give minutes or updates, not both")
        if self.kind == "reflect" and (self.minutes or self.updates or self.warm_start):
            raise ValueError("reflect runs its config's stages: no minutes, updates or "
                             "warm_start")
        if self.eval_k is not None and self.kind != "train_eval":
            raise ValueError("eval_k: only a train_eval experiment runs agora eval (a "
                             "compare scores one discussion per task)")
        if self.warm_start_from is not None:
            if self.warm_start is not None:
                raise ValueError("warm_start_from: give warm_start or warm_start_from, not both")
            if self.kind == "reflect":
                raise ValueError("warm_start_from: reflect runs its config's own stages")
        return self


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    experiments: list[Experiment] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Plan:
        names = [e.name for e in self.experiments]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"experiment names must be unique: {twice}")
        for index, exp in enumerate(self.experiments):
            if exp.warm_start_from is None:
                continue
            source = next((e for e in self.experiments[:index]
                           if e.name == exp.warm_start_from), None)
            if source is None:
                raise ValueError(f"experiments.{index}.warm_start_from: "
                                 f"'{exp.warm_start_from}' is no earlier experiment with a "
                                 "warm_start")
            if source.config != exp.config:
                raise ValueError(f"experiments.{index}.warm_start_from: "
                                 f"'{exp.warm_start_from}' trains {source.config}, this "
                                 f"experiment {exp.config}: an adapter fits its own config")
            if source.warm_start is not None:
                exp._inherited_agent = source.warm_start.agent
            else:  # its trainer's (agents[].warm_start): check_configs loads the config
                exp._inherits_trainer_warm_start = True
        return self

    def select(self, only: list[str]) -> list[Experiment]:
        """The experiments named in ``only`` (all when empty), in plan order."""
        unknown = sorted(set(only) - {e.name for e in self.experiments})
        if unknown:
            raise ConfigError(f"--only: no experiment {unknown} in the plan "
                              f"({[e.name for e in self.experiments]})")
        return [e for e in self.experiments if not only or e.name in only]


def load_plan(path: Path) -> Plan:
    """Read and check a plan; a bad field is a ConfigError naming it (``experiments.0.kind``)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise ConfigError(f"{path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not YAML ({err})") from None
    try:
        plan = Plan.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "plan"
        raise ConfigError(f"{path}: {where}: {first['msg']}") from None
    base = Path(path).resolve().parent
    for experiment in plan.experiments:  # configs relative to the plan, or to the cwd
        if not experiment.config.is_file() and (base / experiment.config).is_file():
            experiment.config = base / experiment.config
        if not experiment.config.is_file():
            raise ConfigError(f"{path}: experiments.{experiment.name}.config: no file "
                              f"'{experiment.config}'")
    return plan
