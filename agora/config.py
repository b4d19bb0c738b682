"""A training run is one YAML file, validated here.

Every section forbids unknown keys so a typo (``learning_rte``) fails loudly instead of silently
using a default. ``load_config`` turns pydantic's errors into one message per bad field, naming
the dotted path (``ppo.clip_range: Input should be less than 1``), which is what the CLI prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from agora.envs.tictactoe import TicTacToe
from agora.tasks.specs import TaskSpec


class ConfigError(ValueError):
    """A run config that cannot be used; the message names each bad field."""


class _Strict(BaseModel):
    # No NaN/inf: YAML's .nan passes no range check and would poison rewards or the loss.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SamplingConfig(_Strict):
    """How an agent samples its turn from the policy server."""

    temperature: float = Field(1.0, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(6, ge=1, le=4096)
    stop: list[str] = Field(default_factory=lambda: ["]"])


class BaseModelConfig(_Strict):
    """One base model = one vLLM policy server; agents on it are LoRA adapters."""

    model: str = Field(..., description="smollm2-135m, tiny-random, a HF id or a local folder")
    port: int = Field(8100, ge=1024, le=65535)
    max_model_len: int = Field(512, ge=64)
    max_loras: int = Field(2, ge=1)
    max_lora_rank: int = Field(16, ge=1)
    # 'auto' = float32 on CPUs without native bf16 (see agora/hardware.py), else vLLM's choice.
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # KV block size. vLLM's CPU default (128) is longer than the prompt prefix that turns
    # share (chat template + system prompt, ~45 tokens here), so nothing was ever served from
    # the prefix cache (0 hits measured); 32 lets that prefix be computed once.
    block_size: int | None = Field(32, ge=16, le=256)
    # Extra `python -m vllm.entrypoints.openai.api_server` flags, passed through verbatim.
    extra_args: list[str] = Field(default_factory=list)


class AgentConfig(_Strict):
    name: str = Field(..., pattern=r"^[A-Za-z][A-Za-z0-9_\-]{0,62}$")
    base: str = Field(..., description="key into `models`")
    trainable: bool = True
    lora_rank: int = Field(16, ge=1, le=256)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    lora_targets: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    # Decoder layers that get LoRA (PEFT layers_to_transform); None = all. Adapting only the
    # top layers stops backprop there: measured on SmolLM2 (30 layers, 32 x 113 tokens, 1
    # thread) fwd+bwd took 13 s with LoRA on layers 15-29 vs 23 s on all layers.
    lora_layers: list[int] | None = None
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)


class EnvironmentConfig(_Strict):
    name: Literal["tictactoe", "discussion"] = "tictactoe"
    # Which agent sits in each seat for self-play episodes (a shared policy repeats its name).
    # In a discussion, one seat per discussing agent.
    seats: list[str]
    # Fraction of episodes played against each opponent: "self" (the seats above) or a scripted
    # bot name ("random", "minimax"). In bot episodes the learner takes a random seat.
    opponents: dict[str, float] = Field(default_factory=lambda: {"self": 1.0})
    illegal_move_penalty: float = -1.0
    prefill: str = Field("[", description="text the assistant turn starts with")
    # Discussions: answer-read-revise rounds, and where the questions come from.
    rounds: int = Field(2, ge=1, le=10)
    task: TaskSpec | None = None

    @field_validator("seats")
    @classmethod
    def _one_agent_per_seat(cls, seats: list[str], info: ValidationInfo) -> list[str]:
        name = info.data.get("name")
        if name == "tictactoe" and len(seats) != TicTacToe.num_seats:
            raise ValueError(f"{name} has {TicTacToe.num_seats} seats, got {len(seats)}")
        if not seats:
            raise ValueError("at least one seat")
        return seats

    @field_validator("opponents")
    @classmethod
    def _check_opponents(cls, opponents: dict[str, float]) -> dict[str, float]:
        known = {"self", "random", "minimax"}
        unknown = set(opponents) - known
        if unknown:
            raise ValueError(f"unknown opponent(s) {sorted(unknown)}; choose from {sorted(known)}")
        if any(w < 0 for w in opponents.values()) or sum(opponents.values()) <= 0:
            raise ValueError("opponent weights must be >= 0 and not all zero")
        return opponents

    @model_validator(mode="after")
    def _env_needs(self) -> EnvironmentConfig:
        if self.name == "discussion":
            if self.task is None:
                raise ValueError("task: a discussion needs a task source (reasoning_gym, jsonl "
                                 "or hf)")
            if set(self.opponents) != {"self"}:
                raise ValueError("opponents: scripted bots play games only; a discussion is "
                                 "{self: 1.0}")
        return self


class RewardConfig(_Strict):
    # game_outcome: win/draw/loss from replaying a game. math / nli: each answer is checked
    # against the task's ground truth (correct / wrong below).
    verifier: Literal["game_outcome", "math", "nli"] = "game_outcome"
    win: float = 1.0
    draw: float = 0.0
    loss: float = -1.0
    correct: float = 1.0
    wrong: float = 0.0
    # MAPoRL's cooperative incentive alpha: how much of teammates' verified scores each agent
    # gets (agora/rewards.py). 0 = every agent for itself.
    cooperation: float = Field(0.0, ge=0.0, le=10.0)
    # Which verifier scores math/NLI answers: the rule verifier, the learned verifier (a
    # classifier trained with `agora verifier train`, folder in `learned_model`), or a blend
    # w * rule + (1 - w) * learned.
    mode: Literal["rule", "learned", "blend"] = "rule"
    blend_weight: float = Field(0.5, ge=0.0, le=1.0)
    learned_model: str | None = Field(None, description="folder from `agora verifier train`")

    @model_validator(mode="after")
    def _learned_needs_a_model(self) -> RewardConfig:
        if self.mode != "rule" and not self.learned_model:
            raise ValueError(f"learned_model: mode '{self.mode}' needs the folder of a trained "
                             "verifier (agora verifier train --out DIR)")
        return self


class PPOConfig(_Strict):
    """Token-level PPO on LoRA (see agora/algos/ppo.py for how each knob enters the loss)."""

    learning_rate: float = Field(5e-4, gt=0.0, lt=1.0)
    value_learning_rate: float = Field(1e-3, gt=0.0, lt=1.0)
    batch_turns: int = Field(32, ge=1, description="agent turns per update")
    minibatch_turns: int = Field(16, ge=1, description=">= batch_turns: the whole batch at once")
    epochs: int = Field(1, ge=1, le=16)
    clip_range: float = Field(0.2, gt=0.0, lt=1.0)
    kl_coef: float = Field(0.02, ge=0.0)
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0)
    max_grad_norm: float = Field(1.0, gt=0.0)
    entropy_coef: float = Field(0.0, ge=0.0)
    max_staleness: int = Field(1, ge=0, description="drop episodes older than this many versions")
    checkpoint_every: int = Field(1, ge=1)
    max_updates: int | None = Field(None, ge=1)
    max_minutes: float | None = Field(None, gt=0.0)
    # None = bf16 autocast only where the CPU has native bf16 (agora/hardware.py).
    bf16: bool | None = None
    torch_threads: int = Field(1, ge=1, description="vLLM keeps the other core busy")
    # Pin the trainer to the last `torch_threads` CPUs: vLLM's CPU engine binds the first ones,
    # and an unpinned trainer was measured time-slicing with it on the same core.
    pin_cpus: bool = True
    # The trainer's CPU niceness. vLLM's engine-core and API processes and the rollout workers
    # are light but latency-bound, and they share the trainer's core: at equal priority they
    # waited behind each PPO update and rollouts stalled (measured: 40 s between updates of
    # 20 s). A niced trainer yields to them at once and still gets the rest of the core.
    nice: int = Field(10, ge=0, le=19)


class WorkersConfig(_Strict):
    count: int = Field(1, ge=1, le=64)
    concurrency: int = Field(8, ge=1, le=256, description="episodes in flight per worker")
    # Episodes queued ahead of the trainer; bounded so rollouts never run far past max_staleness.
    queue_ahead: int = Field(64, ge=1)
    # Seconds after which a task taken by a dead worker goes back to the queue.
    visibility_timeout: int = Field(60, ge=5)


class ServicesConfig(_Strict):
    host: str = "127.0.0.1"
    redis_port: int = Field(6390, ge=1024, le=65535)
    reward_port: int = Field(8201, ge=1024, le=65535)
    gateway_port: int = Field(8200, ge=1024, le=65535)
    trainer_metrics_port: int = Field(8202, ge=1024, le=65535)
    judge_port: int = Field(8203, ge=1024, le=65535)
    health_timeout_s: float = Field(300.0, gt=0)


class JudgeConfig(_Strict):
    """The judge service of the embedded stack (see agora/judge/settings.py for its env)."""

    # 'rubric': deterministic text-feature scores (no model). 'llm': ask a model through an
    # OpenAI-compatible server: `model` names a key of `models` (its policy server's base
    # model judges, locally) unless `base_url` points at another server.
    backend: Literal["rubric", "llm"] = "rubric"
    model: str | None = None
    base_url: str | None = None
    served_model: str = Field("base", description="model name to ask for at base_url")


class EvalConfig(_Strict):
    games: int = Field(200, ge=1)
    tasks: int = Field(100, ge=1, description="held-out tasks per discussion evaluation")
    opponents: list[Literal["random", "minimax"]] = Field(
        default_factory=lambda: ["random", "minimax"]
    )


class RunConfig(_Strict):
    name: str = Field("run", pattern=r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,62}$")
    seed: int = 0
    output_dir: str = "runs"
    models: dict[str, BaseModelConfig]
    agents: list[AgentConfig] = Field(..., min_length=1)
    environment: EnvironmentConfig
    reward: RewardConfig = Field(default_factory=RewardConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    workers: WorkersConfig = Field(default_factory=WorkersConfig)
    services: ServicesConfig = Field(default_factory=ServicesConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)

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
        games = self.environment.name == "tictactoe"
        if games != (self.reward.verifier == "game_outcome"):
            raise ValueError(f"reward.verifier: '{self.reward.verifier}' does not score a "
                             f"'{self.environment.name}' environment")
        for seat in self.environment.seats:
            if seat not in names:
                raise ValueError(f"environment.seats: '{seat}' is not an agent ({names})")
        port_fields = {
            f"services.{key}": getattr(self.services, key)
            for key in ServicesConfig.model_fields
            if key.endswith("_port")
        }
        port_fields.update({f"models.{key}.port": m.port for key, m in self.models.items()})
        seen: dict[int, str] = {}
        for path, port in port_fields.items():
            if port in seen:
                raise ValueError(f"{path}: port {port} is already used by {seen[port]}")
            seen[port] = path
        return self

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
        return f"http://{self.services.host}:{self.models[self.judge.model].port}/v1"

    def policy_url(self, agent_name: str) -> str:
        model = self.models[self.agent(agent_name).base]
        return f"http://{self.services.host}:{model.port}"


def _format_errors(err: ValidationError) -> str:
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
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source} is not a valid run config:\n{_format_errors(err)}") from None


def load_config(path: str | Path) -> RunConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    return parse_config(data, str(path))
