"""A training run is one YAML file, validated here.

Every section forbids unknown keys so a typo (``learning_rte``) fails loudly instead of silently
using a default. ``load_config`` turns pydantic's errors into one message per bad field, naming
the dotted path (``ppo.clip_range: Input should be less than 1``), which is what the CLI prints.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import Field, SerializeAsAny, ValidationError, field_validator, model_validator

from agora.config.agents import (
    CONTEXT_PREFIX,
    AgentConfig,
    BaseModelConfig,
    ContextAgentConfig,
)
from agora.config.base import ConfigError, StrictModel
from agora.config.environment import EnvironmentConfig, environment_of
from agora.config.reward import RewardConfig
from agora.config.services import EvalConfig, JudgeConfig, ServicesConfig, WorkersConfig
from agora.config.training import MOVED_TO_TRAINER, PPOConfig, TrainerConfig
from agora.envs.registry import CONTEXT_ENVS, COOPERATIVE_GAMES, ENV_VERIFIERS, GAME_BOTS
from agora.stack.deployment import apply_services_override
from agora.train.curriculum.settings import CurriculumConfig, fit_problem
from agora.train.tracking import TrackingConfig


class RunConfig(StrictModel):
    name: str = Field("run", pattern=r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,62}$")
    # 0-998: episode i of a run plays seed x 1,000,003 + i, so a million episodes stay below
    # the seeds evaluation holds out (1,000,000,000 on: agora eval never replays a training one).
    seed: int = Field(0, ge=0, le=998)
    output_dir: str = "runs"
    models: dict[str, BaseModelConfig]
    agents: list[AgentConfig] = Field(..., min_length=1)
    # Which env, who sits where; its options under its name. Parsed into the env's own model
    # (agora/config/environment.py) and written back out as that model, options included.
    environment: Annotated[EnvironmentConfig, SerializeAsAny()]
    reward: RewardConfig = Field(default_factory=RewardConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    # The budget, checkpoints, and where and in what precision learners train.
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    workers: WorkersConfig = Field(default_factory=WorkersConfig)
    services: ServicesConfig = Field(default_factory=ServicesConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    # Scripted seats, by name (seated as ``context:<name>`` in environment.seats).
    context_agents: dict[str, ContextAgentConfig] = Field(default_factory=dict)
    # Difficulty levels, promoted/demoted on the success rate (agora/train/curriculum/).
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    # Experiment trackers each update's metrics go to (agora/train/tracking.py).
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)

    @field_validator("environment", mode="before")
    @classmethod
    def _environment_of_its_env(cls, data: object) -> object:
        return environment_of(data)

    @model_validator(mode="before")
    @classmethod
    def _ppo_fields_moved(cls, data):
        """Old run folders name the budget and CPU knobs under ``ppo:``: read them from there
        (both places at once is an error)."""
        if not isinstance(data, dict) or not isinstance(data.get("ppo"), dict):
            return data
        moved = [k for k in MOVED_TO_TRAINER if k in data["ppo"]]
        if not moved:
            return data
        trainer = data.get("trainer") or {}
        if not isinstance(trainer, dict):
            return data
        twice = [k for k in moved if k in trainer]
        if twice:
            raise ValueError(f"ppo.{twice[0]}: set it under trainer: only (it moved there)")
        data = {**data, "ppo": {k: v for k, v in data["ppo"].items() if k not in moved},
                "trainer": {**trainer, **{k: data["ppo"][k] for k in moved}}}
        return data

    @model_validator(mode="after")
    def _curriculum_fits(self) -> RunConfig:
        task = self.environment.task
        problem = fit_problem(self.curriculum, self.environment.name,
                              task.source if task is not None else None)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _cross_references(self) -> RunConfig:
        names = [a.name for a in self.agents]
        if self.judge.backend == "llm" and not (self.judge.base_url or self.judge.model):
            raise ValueError("judge: backend 'llm' needs judge.model (a key of models) or "
                             "judge.base_url")
        if self.judge.model is not None and self.judge.model not in self.models:
            raise ValueError(f"judge.model: '{self.judge.model}' is not a key of models "
                             f"({sorted(self.models)})")
        if len(set(names)) != len(names):
            raise ValueError(f"agents: duplicate agent names in {names}")
        for agent in (a for a in self.agents if a.finetune == "full"):
            _check_full_weights(self, agent)
        for agent in (a for a in self.agents if a.warm_start is not None):
            _check_warm_start(self, agent)
        placed = [a.name for a in self.agents if a.device]
        if self.trainer.processes > 1 and placed:
            raise ValueError(f"agents.{placed[0]}.device: with trainer.processes > 1 every "
                             "learner is sharded over all the processes' devices; leave "
                             "agents[].device unset")
        if self.trainer.processes > self.ppo.batch_turns:
            raise ValueError(f"trainer.processes: {self.trainer.processes} processes need "
                             f"ppo.batch_turns >= {self.trainer.processes} (a turn each)")
        for agent in self.agents:
            if agent.base not in self.models:
                raise ValueError(
                    f"agents.{agent.name}.base: '{agent.base}' is not a key of models "
                    f"({sorted(self.models)})"
                )
            if agent.lora_rank > self.models[agent.base].max_lora_rank:
                raise ValueError(
                    f"agents.{agent.name}.lora_rank: {agent.lora_rank} exceeds "
                    f"models.{agent.base}.max_lora_rank={self.models[agent.base].max_lora_rank}"
                )
        env = self.environment.name
        for agent in self.agents:
            if agent.sampling.legal_actions_only and env not in GAME_BOTS:
                raise ValueError(
                    f"agents.{agent.name}.sampling.legal_actions_only: '{env}' takes free text; "
                    f"only games list their legal actions ({sorted(GAME_BOTS)})")
            if agent.trainable and agent.sampling.top_p < 1.0:
                raise ValueError(
                    f"agents.{agent.name}.sampling.top_p: a trainable agent samples with top_p "
                    "1.0 (temperature is fine): PPO scores each token under the distribution "
                    "it was sampled from, and the learner does not reproduce top-p's cut")
        if self.reward.team_credit == "to_go" and env not in COOPERATIVE_GAMES:
            raise ValueError(f"reward.team_credit: 'to_go' needs a cooperative game with a team "
                             f"score ({sorted(COOPERATIVE_GAMES)}), not '{env}'")
        scorers = ENV_VERIFIERS[env]
        if self.reward.verifier is None and len(scorers) == 1:
            self.reward.verifier = scorers[0]
        if self.reward.verifier not in scorers:
            raise ValueError(f"reward.verifier: '{self.reward.verifier}' does not score a "
                             f"'{env}' environment (use {' or '.join(scorers)})")
        if self.environment.answer != "text" and (env != "discussion"
                                                  or self.reward.verifier != "math"):
            raise ValueError(f"environment.answer: '{self.environment.answer}' answers are "
                             "programs printing a number: math discussions only "
                             "(reward.verifier: math)")
        self._check_seats(names)
        if env in GAME_BOTS:
            allowed = {"self", *GAME_BOTS[env]}
            wrong = [o for o in self.eval.opponents if o not in allowed]
            if "eval" not in self.model_fields_set and env != "tictactoe":
                self.eval.opponents = list(GAME_BOTS[env])
            elif wrong:
                raise ValueError(f"eval.opponents: {wrong} cannot play {env} (choose from "
                                 f"{sorted(allowed)})")
        if "pool" in self.environment.opponents and self.learner is None:
            raise ValueError("environment.opponents: 'pool' plays snapshots of the trainable "
                             "agents, and no trainable agent has a seat")
        unknown_hosts = sorted(set(self.services.hosts) - {*self.all_ports(), "policy"})
        if unknown_hosts:
            raise ValueError(f"services.hosts: unknown service(s) {unknown_hosts}; known: "
                             f"{sorted({*self.all_ports(), 'policy'})}")
        port_fields = {
            f"services.{key}": getattr(self.services, key)
            for key in ServicesConfig.model_fields
            if key.endswith("_port")
        }
        port_fields.update({f"models.{key}.port": m.port for key, m in self.models.items()})
        port_fields.update({f"workers.metrics_port (worker {i})": port
                            for i, port in enumerate(self.workers.metrics_ports())})
        seen: dict[int, str] = {}
        for path, port in port_fields.items():
            if port in seen:
                raise ValueError(f"{path}: port {port} is already used by {seen[port]}")
            seen[port] = path
        return self

    def _check_seats(self, names: list[str]) -> None:
        env = self.environment
        for name in self.context_agents:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]{0,62}", name):
                raise ValueError(f"context_agents.{name}: names are letters, digits, _ and -")
        for seat, role in zip(env.seats, env.seat_roles(), strict=True):
            if not seat.startswith(CONTEXT_PREFIX):
                if seat not in names:
                    raise ValueError(f"environment.seats: '{seat}' is not an agent ({names}) "
                                     f"nor {CONTEXT_PREFIX}<a key of context_agents>")
                continue
            key = seat.removeprefix(CONTEXT_PREFIX)
            if env.name not in CONTEXT_ENVS:
                raise ValueError(f"environment.seats: '{seat}': context agents sit in "
                                 f"{list(CONTEXT_ENVS)} only")
            if key not in self.context_agents:
                raise ValueError(f"environment.seats: '{seat}': no context_agents.{key} "
                                 f"({sorted(self.context_agents)})")
            _check_fit(key, self.context_agents[key], env.name, role)
        seated = set(env.seats)
        for agent in self.trainable_agents:
            if agent.name not in seated:
                raise ValueError(f"agents.{agent.name}: trainable but in no seat of "
                                 "environment.seats, so it would never get a turn to train on "
                                 "(seat it, or set trainable: false)")

    @property
    def learner(self) -> str | None:
        """The trainable agent in the first seat that holds one: whose snapshots fill the
        opponent pool and whose version is the context agents' clock (None: nothing trains)."""
        trainable = {a.name for a in self.trainable_agents}
        return next((s for s in self.environment.seats if s in trainable), None)

    @property
    def clock_agent(self) -> str:
        """Whose live policy version is the scheduled context agents' clock: the learner, else
        (nothing trains, e.g. an evaluation) the first agent, whose version stays put."""
        return self.learner or self.agents[0].name

    def agent(self, name: str) -> AgentConfig:
        for agent in self.agents:
            if agent.name == name:
                return agent
        raise KeyError(name)

    @property
    def trainable_agents(self) -> list[AgentConfig]:
        return [a for a in self.agents if a.trainable]

    def all_ports(self) -> dict[str, int]:
        """Every TCP port the embedded stack binds, by service name."""
        ports = {
            "redis": self.services.redis_port,
            "reward": self.services.reward_port,
            "gateway": self.services.gateway_port,
            "trainer": self.services.trainer_metrics_port,
            "judge": self.services.judge_port,
        }
        for key, model in self.models.items():
            ports[f"policy-{key}"] = model.port
        return ports

    def judge_model_url(self) -> str | None:
        """The OpenAI-compatible base URL the LLM judge asks (None for the rubric backend)."""
        if self.judge.backend != "llm":
            return None
        if self.judge.base_url:
            return self.judge.base_url
        return self.service_url(f"policy-{self.judge.model}") + "/v1"

    def policy_url(self, agent_name: str) -> str:
        return self.service_url(f"policy-{self.agent(agent_name).base}")

    def service_host(self, name: str) -> str:
        """Where service ``name`` (a key of all_ports()) is reached: services.hosts[name],
        else services.hosts['policy'] for a policy server, else services.host."""
        hosts = self.services.hosts
        if name in hosts:
            return hosts[name]
        if name.startswith("policy-") and "policy" in hosts:
            return hosts["policy"]
        return self.services.host

    def service_url(self, name: str) -> str:
        """``http://host:port`` of service ``name`` (a key of all_ports())."""
        return f"http://{self.service_host(name)}:{self.all_ports()[name]}"


def _check_full_weights(cfg: RunConfig, agent: AgentConfig) -> None:
    """A full-weight agent owns a policy server (its ``base`` key) serving its own weights."""
    field = f"agents.{agent.name}.finetune"
    if not agent.trainable:
        raise ValueError(f"{field}: 'full' is for a trainable agent (a frozen agent is its base "
                         "model: leave it 'lora')")
    if agent.init_adapter:
        raise ValueError(f"agents.{agent.name}.init_adapter: an adapter cannot start a "
                         "full-weight agent (finetune: full)")
    sharing = [a.name for a in cfg.agents if a.base == agent.base and a is not agent]
    if sharing or cfg.judge.model == agent.base:
        users = sharing or ["the judge"]
        raise ValueError(f"{field}: 'full' needs a models key of its own (its policy server "
                         f"serves this agent's weights); models.{agent.base} is also used by "
                         f"{users[0]}: add a second key with the same model")
    if "pool" in cfg.environment.opponents:
        raise ValueError(f"{field}: opponent pool snapshots are LoRA adapters; a run with a "
                         "full-weight agent cannot use environment.opponents 'pool'")


def _check_warm_start(cfg: RunConfig, agent: AgentConfig) -> None:
    """``agents[].warm_start`` can run: a seated LoRA learner, a demonstrator its env has, a
    game tree small enough for every_position, one trainer process (the SFT runs in it)."""
    field = f"agents.{agent.name}.warm_start"
    ws, env = agent.warm_start, cfg.environment
    assert ws is not None
    if not agent.trainable or agent.finetune == "full":
        raise ValueError(f"{field}: the SFT trains a LoRA adapter for PPO to start from: a "
                         "trainable agent with finetune 'lora' only")
    if agent.name not in env.seats:
        raise ValueError(f"{field}: '{agent.name}' sits in no seat of environment.seats "
                         f"({env.seats}), so no turn of its can be demonstrated")
    if ws.demonstrator is not None and ws.demonstrator not in env.spec.demonstrators:
        raise ValueError(f"{field}.demonstrator: '{ws.demonstrator}' is not one of "
                         f"{env.name}'s demonstrators ({list(env.spec.demonstrators)})")
    if ws.every_position and not env.spec.enumerable:
        raise ValueError(f"{field}.every_position: '{env.name}' is not a small game without "
                         "chance (EnvSpec.enumerable); sample `episodes` games instead")
    if cfg.trainer.processes > 1:
        raise ValueError(f"{field}: with trainer.processes > 1 run `agora warm-start` first "
                         "and set init_adapter (the trainer's SFT runs in one process)")


def _check_fit(key: str, agent: ContextAgentConfig, env: str, role: str | None) -> None:
    """Every strategy of a context seat must play this env (and this seat's role)."""
    from agora.agents.context import CONTEXT_AGENT_FITS

    for strategy in agent.strategies():
        fit_env, fit_role = CONTEXT_AGENT_FITS[strategy]
        if fit_env != env or (fit_role is not None and role is not None and fit_role != role):
            where = f"the {role} seat of {env}" if role else env
            fits = sorted(n for n, (e, r) in CONTEXT_AGENT_FITS.items()
                          if e == env and (r is None or role is None or r == role))
            raise ValueError(f"context_agents.{key}: '{strategy}' cannot play {where} "
                             f"(strategies that can: {fits})")


def format_errors(err: ValidationError) -> str:
    lines = []
    for item in err.errors():
        path = ".".join(str(p) for p in item["loc"])
        msg = item["msg"].removeprefix("Value error, ")
        # Cross-field checks fail at the top level and name their own path in the message.
        lines.append(f"  {path}: {msg}" if path else f"  {msg}")
    return "\n".join(lines)


def parse_config(data: object, source: str = "<config>") -> RunConfig:
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping at the top level, got {type(data).__name__}"
        )
    try:
        data = apply_services_override(data)
    except ValueError as err:
        raise ConfigError(f"{source}: {err}") from None
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source} is not a valid run config:\n{format_errors(err)}") from None


def read_config_yaml(path: str | Path) -> object:
    """The parsed YAML of a config file; a missing, unreadable or malformed file raises
    ConfigError naming it (shared by every config kind, e.g. agora/reflection/config.py)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read: {err}") from None
    # ValueError: an int past Python's 4300-digit limit; RecursionError: nesting ~1000 deep.
    # Both escaped as tracebacks from `agora up` (tests/integration/test_hostile_input.py).
    except (yaml.YAMLError, ValueError, RecursionError) as err:
        raise ConfigError(f"{path}: not valid YAML: {err or type(err).__name__}") from None


def apply_overrides(data: object, overrides: Sequence[str]) -> object:
    """``--set a.b.c=VALUE`` on the command line: each VALUE is read as YAML (``8``, ``true``,
    ``[x, y]``, ``{a: 1}``); a list is entered by index (``agents.0.lora_rank=8``); missing
    mappings on the way are created. The result is validated like any config, so a bad key or
    value is named by its dotted path. Returns a modified copy."""
    data = copy.deepcopy(data)
    for override in overrides:
        key, sep, raw = override.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ConfigError(f"--set {override!r}: expected KEY.PATH=VALUE, e.g. "
                              "ppo.learning_rate=1e-4")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise ConfigError(f"--set {key}: the value is not valid YAML: {err}") from None
        node = data
        for depth, part in enumerate(parts):
            where = ".".join(parts[: depth + 1])
            last = depth == len(parts) - 1
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError(f"--set {key}: {where} is not an index of a list of "
                                      f"{len(node)}")
                part = int(part)
            elif not isinstance(node, dict):
                raise ConfigError(f"--set {key}: {'.'.join(parts[:depth])} is not a mapping")
            if last:
                node[part] = value
            else:
                if isinstance(node, dict) and not isinstance(node.get(part), (dict, list)):
                    node[part] = {}
                node = node[part]
    return data


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> RunConfig:
    return parse_config(apply_overrides(read_config_yaml(path), overrides), str(path))
