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

from agora.algos.compute import DEVICE_PATTERN, ComputeConfig, refuse_bf16_field
from agora.data.specs import TaskSpec
from agora.envs.registry import (
    CONTEXT_ENVS,
    COOPERATIVE_GAMES,
    ENV_VERIFIERS,
    GAME_BOTS,
    GAME_SEATS,
)
from agora.envs.support_options import SupportOptions
from agora.stack.deployment import apply_services_override
from agora.train.curriculum.settings import CurriculumConfig, fit_problem
from agora.train.tracking import TrackingConfig


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
    # Games only: sample one of the env's legal actions (vLLM structured outputs ``choice``)
    # instead of free text, so no turn is lost to an illegal or unparsable move; the trainer
    # scores tokens under the same mask (agora/algos/action_mask.py).
    legal_actions_only: bool = False


class BaseModelConfig(_Strict):
    """One base model = one vLLM policy server; agents on it are LoRA adapters."""

    model: str = Field(..., description="smollm2-135m, tiny-random, a HF id or a local folder")
    port: int = Field(8100, ge=1024, le=65535)
    max_model_len: int = Field(512, ge=64)
    max_loras: int = Field(2, ge=1)
    max_lora_rank: int = Field(16, ge=1)
    # 'auto' = float32 on CPUs without native bf16 (see agora/stack/hardware.py), else vLLM's
    # choice.
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
    # lora: a LoRA adapter on the shared base, hot-swapped with vLLM's runtime LoRA API.
    # full: every decoder weight trains (token embeddings and LM head stay frozen: vLLM's weight
    # reload does not refresh its LM head), a frozen copy of the base is the KL reference; the
    # agent gets a policy server of its own, serving the run's copy of its weights, reloaded in
    # place with vLLM's reload_weights after each update (agora/serving/weights.py). Full-weight
    # learning rates are ~100x smaller than LoRA's (e.g. ppo.learning_rate: 1e-6 to 1e-5).
    finetune: Literal["lora", "full"] = "lora"
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
    # A PEFT adapter folder of this agent's LoRA shape to start from (e.g. `agora support-sft`'s
    # output); None = a fresh adapter, i.e. the base model. PPO's KL reference stays the base.
    # (Checked before anything starts: agora/startup_checks.py.)
    init_adapter: str | None = None
    # Where this agent's learner trains (auto | cpu | cuda | cuda:N); None = trainer.device.
    # Two learners of a multi-model run can sit on two GPUs.
    device: str | None = Field(None, pattern=DEVICE_PATTERN)


class NegotiationOptions(_Strict):
    """``environment.name: negotiation`` (agora/envs/negotiation.py).

    A turn's reward is the agent's utility (its share's value over the whole pool's value to
    it; 0 without a deal) + ``fairness`` x the Nash product of everyone's utilities (high only
    when every agent gets a good share) + ``coherence`` x the judge's 0..1 score of the turn's
    message (one ``/v1/judge/score`` per LLM turn; 0 = no judge calls), plus
    ``environment.illegal_move_penalty`` on an illegal turn (a bad proposal or ACCEPT)."""

    max_rounds: int = Field(4, ge=1, le=20, description="rounds without a deal = no deal")
    fairness: float = Field(0.0, ge=0.0, le=10.0)
    coherence: float = Field(0.0, ge=0.0, le=10.0)
    rubric: str = Field("dialogue", description="judge rubric of the coherence score")

    @field_validator("rubric")
    @classmethod
    def _known_rubric(cls, name: str) -> str:
        return _check_rubric(name)


class StoryOptions(_Strict):
    """``environment.name: story`` (agora/envs/story.py): scored by the judge service.

    ``judge: score``: every writer's reward is (1 - story_weight) x the judge's 0..1 score of
    its own paragraphs + story_weight x the whole story's score (the shared part is what makes
    writers cooperate). ``pairwise``: each turn's reward is the judge's preference (0..1) for
    its paragraph over what the ``baseline`` context agent writes at the same point of the
    story. ``both``: the mean of the two. An illegal turn (empty, or a repeat) also gets
    ``environment.illegal_move_penalty``."""

    rounds: int = Field(2, ge=1, le=10, description="each writer writes once per round")
    premise: str | None = Field(None, min_length=1, max_length=500,
                                description="fixed premise; default: one per seed")
    judge: Literal["score", "pairwise", "both"] = "score"
    rubric: str = "story"
    story_weight: float = Field(0.5, ge=0.0, le=1.0)
    baseline: str = Field("template_writer", description="story context agent for pairwise")

    @field_validator("rubric")
    @classmethod
    def _known_rubric(cls, name: str) -> str:
        return _check_rubric(name)

    @field_validator("baseline")
    @classmethod
    def _writer(cls, name: str) -> str:
        from agora.agents.context import CONTEXT_AGENT_FITS

        if CONTEXT_AGENT_FITS.get(name, ("", None))[0] != "story":
            writers = sorted(n for n, (env, _) in CONTEXT_AGENT_FITS.items() if env == "story")
            raise ValueError(f"'{name}' is not a story context agent ({writers})")
        return name


class CodeDebugOptions(_Strict):
    """``environment.name: code_debug`` (agora/envs/code_debug.py): hidden tests decide, run by
    the reward service in its sandbox. ``pair``: seat 0 writes the (buggy) code, seat 1 fixes
    it; ``fixer``: one seat fixes the problem's known-buggy code. Rewards as in
    ``score_debug``: the fixer gets its code's test pass rate, the author 0.5 + 0.5 x its own
    pass rate if its bug got fixed (else 0); an illegal turn (code that does not parse or
    define the function) also gets ``environment.illegal_move_penalty``."""

    mode: Literal["pair", "fixer"] = "pair"
    problem_id: str | None = Field(None, description="pin one problem; default: one per seed")
    author_plants_bug: bool = True
    cpu_seconds: int = Field(2, ge=1, le=30, description="sandbox CPU limit per program")
    wall_seconds: float = Field(8.0, gt=0.0, le=60.0, description="sandbox wall-clock limit")

    @field_validator("problem_id")
    @classmethod
    def _known_problem(cls, problem_id: str | None) -> str | None:
        from agora.envs.code_debug import PROBLEMS_BY_ID

        if problem_id is not None and problem_id not in PROBLEMS_BY_ID:
            raise ValueError(f"unknown problem '{problem_id}'; known: {sorted(PROBLEMS_BY_ID)}")
        return problem_id


def _check_rubric(name: str) -> str:
    # Imported here, not at the top: agora.judge's settings import this module.
    from agora.judge.rubrics import NAMED_RUBRICS

    if name not in NAMED_RUBRICS:
        raise ValueError(f"unknown rubric '{name}'; built-in rubrics: {sorted(NAMED_RUBRICS)}")
    return name


class PoolConfig(_Strict):
    """Frozen snapshots of the learner as opponents (``opponents: {pool: w}``;
    agora/train/snapshots.py).

    The trainer adds its adapter as a snapshot at v0 and every ``snapshot_every`` updates,
    keeps the newest ``max_snapshots`` with Elo ratings, and draws one per pool episode
    (``sampling`` as in ``OpponentPool.sample``); the worker serves it from vLLM under its own
    LoRA name (``<agent>@v<version>``) and seats it in every seat but the learner's."""

    snapshot_every: int = Field(5, ge=1, description="trainer updates between snapshots")
    max_snapshots: int = Field(8, ge=1, le=64)
    sampling: Literal["latest", "uniform", "recency"] = "latest"
    latest_prob: float = Field(0.5, ge=0.0, le=1.0)


class EnvironmentConfig(_Strict):
    name: Literal["tictactoe", "hanabi", "discussion", "negotiation", "story", "code_debug",
                  "support"] = "tictactoe"
    # Which agent sits in each seat for self-play episodes (a shared policy repeats its name).
    # In a discussion, one seat per discussing agent. In negotiation/story/code_debug a seat may
    # be a scripted context agent: ``context:<name>`` (a key of the run's ``context_agents``).
    seats: list[str]
    # Fraction of episodes played against each opponent: "self" (the seats above), a scripted
    # bot name ("random", "minimax"; games only), or "pool" (a frozen snapshot of the
    # learner in every other seat, see ``pool``). Against a bot or the pool the learner takes
    # a random one of its seats.
    opponents: dict[str, float] = Field(default_factory=lambda: {"self": 1.0})
    illegal_move_penalty: float = -1.0
    prefill: str = Field("[", description="text the assistant turn starts with")
    # Discussions: answer-read-revise rounds, and where the questions come from.
    rounds: int = Field(2, ge=1, le=10)
    task: TaskSpec | None = None
    # Options of the other environments: only the section of ``name`` may be given (it is
    # filled with its defaults when left out).
    negotiation: NegotiationOptions | None = None
    story: StoryOptions | None = None
    code_debug: CodeDebugOptions | None = None
    support: SupportOptions | None = None  # tool-using agents (agora/envs/support_options.py)
    pool: PoolConfig = Field(default_factory=PoolConfig)

    @field_validator("seats")
    @classmethod
    def _one_agent_per_seat(cls, seats: list[str], info: ValidationInfo) -> list[str]:
        name = info.data.get("name")
        if name in GAME_SEATS:
            low, high = GAME_SEATS[name]
            if not low <= len(seats) <= high:
                size = str(low) if low == high else f"{low}-{high}"
                raise ValueError(f"{name} has {size} seats, got {len(seats)}")
        if not seats:
            raise ValueError("at least one seat")
        return seats

    @field_validator("opponents")
    @classmethod
    def _check_opponents(cls, opponents: dict[str, float]) -> dict[str, float]:
        known = {"self", "pool"} | {b for bots in GAME_BOTS.values() for b in bots}
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
        elif self.name in GAME_BOTS and set(self.opponents) - {"self", "pool",
                                                                *GAME_BOTS[self.name]}:
            raise ValueError(f"opponents: {self.name}'s bots are {list(GAME_BOTS[self.name])}")
        elif self.name in CONTEXT_ENVS and set(self.opponents) - {"self", "pool"}:
            raise ValueError(f"opponents: {self.name} plays against 'self' (the seats, context "
                             "agents included) or 'pool'; game bots play games only")
        for section in CONTEXT_ENVS:
            if getattr(self, section) is not None and section != self.name:
                raise ValueError(f"{section}: options of '{section}', but environment.name is "
                                 f"'{self.name}'")
        if self.name == "negotiation":
            self.negotiation = self.negotiation or NegotiationOptions()
            _seat_count(self.name, self.seats, 2, 3)
        elif self.name == "story":
            self.story = self.story or StoryOptions()
            _seat_count(self.name, self.seats, 2, 3)
        elif self.name == "code_debug":
            self.code_debug = self.code_debug or CodeDebugOptions()
            size = 2 if self.code_debug.mode == "pair" else 1
            _seat_count(f"code_debug mode '{self.code_debug.mode}'", self.seats, size, size)
        elif self.name == "support":
            self.support = self.support or SupportOptions()
            _seat_count("support (triage, billing, policy)", self.seats, 3, 3)
        return self

    def seat_roles(self) -> list[str | None]:
        """Each seat's role where it constrains who may sit there (code_debug's author and
        fixer), else None."""
        if self.name == "code_debug" and self.code_debug is not None:
            return ["author", "fixer"] if self.code_debug.mode == "pair" else ["fixer"]
        if self.name == "support":
            return ["triage", "billing", "policy"]
        return [None] * len(self.seats)


def _seat_count(what: str, seats: list[str], low: int, high: int) -> None:
    if not low <= len(seats) <= high:
        size = str(low) if low == high else f"{low}-{high}"
        raise ValueError(f"seats: {what} has {size} seats, got {len(seats)}")


CONTEXT_PREFIX = "context:"


class ContextAgentConfig(_Strict):
    """A scripted seat (agora/agents/context.py), seated as ``context:<name>``.

    Give exactly one of: ``strategy`` (one fixed strategy); ``cycle`` + ``every`` (each
    strategy for ``every`` trainer updates in turn, round and round); ``schedule`` (points
    ``[start_update, strategy]``, the first at 0) with an optional repeating ``period``. The
    clock is the learner's policy version (= the trainer's update index), read by the worker
    at the start of each episode, so the learner meets partners that change as it trains.
    """

    strategy: str | None = None
    cycle: list[str] | None = Field(None, min_length=2)
    every: int | None = Field(None, ge=1, description="updates per strategy of the cycle")
    schedule: list[tuple[int, str]] | None = Field(None, min_length=1)
    period: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _one_form(self) -> ContextAgentConfig:
        from agora.agents.context import CONTEXT_AGENTS, Schedule

        given = [k for k in ("strategy", "cycle", "schedule") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of strategy, cycle (+ every) or schedule "
                             f"(+ period); got {given or 'none'}")
        if (self.cycle is None) != (self.every is None):
            raise ValueError("cycle and every go together")
        if self.period is not None and self.schedule is None:
            raise ValueError("period applies to schedule only")
        unknown = [n for n in self.strategies() if n not in CONTEXT_AGENTS]
        if unknown:
            raise ValueError(f"unknown strategy {unknown}; known: {sorted(CONTEXT_AGENTS)}")
        if self.schedule is not None:
            Schedule(tuple(self.schedule), self.period)  # raises ValueError with the reason
        return self

    def strategies(self) -> list[str]:
        if self.strategy is not None:
            return [self.strategy]
        if self.cycle is not None:
            return list(dict.fromkeys(self.cycle))
        return list(dict.fromkeys(name for _, name in self.schedule or []))

    def make_schedule(self):  # -> agora.agents.context.Schedule | None (fixed strategy)
        from agora.agents.context import Schedule

        if self.cycle is not None and self.every is not None:
            return Schedule.cycling(self.cycle, self.every)
        if self.schedule is not None:
            return Schedule(tuple(self.schedule), self.period)
        return None


class RewardConfig(_Strict):
    # game_outcome: win/draw/loss from replaying a game. math / nli: each answer is checked
    # against the task's ground truth (correct / wrong below). deal / judge / code_tests: how
    # negotiation / story / code_debug are scored (their options are in environment.<name>).
    # Left out: the environment's own (a discussion must choose math or nli).
    verifier: Literal["game_outcome", "math", "nli", "deal", "judge", "code_tests",
                      "tool_task"] | None = None
    win: float = 1.0
    draw: float = 0.0
    loss: float = -1.0
    correct: float = 1.0
    wrong: float = 0.0
    # MAPoRL's cooperative incentive alpha: how much of teammates' verified scores each agent
    # gets (agora/rewards/discussion.py). 0 = every agent for itself.
    cooperation: float = Field(0.0, ge=0.0, le=10.0)
    # Which verifier scores math/NLI answers: the rule verifier, the learned verifier (a
    # classifier trained with `agora verifier train`, folder in `learned_model`), or a blend
    # w * rule + (1 - w) * learned.
    mode: Literal["rule", "learned", "blend"] = "rule"
    blend_weight: float = Field(0.5, ge=0.0, le=1.0)
    learned_model: str | None = Field(None, description="folder from `agora verifier train`")
    # Cooperative games (Hanabi): which team reward each legal move earns. 'outcome': the
    # final team score, the same for every move of the game. 'to_go': the score the team made
    # from that move on (final minus the score before it), so a move is credited only with
    # what came after it (REINFORCE's causality: same expected gradient, less variance over
    # a 40-move game; a move that blows the last fuse earns 0).
    team_credit: Literal["outcome", "to_go"] = "outcome"

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
    # Linear learning-rate anneal over the budget (trainer.max_updates or max_minutes, whichever
    # is further along), as in CleanRL's ppo.py: the policy lr ends at learning_rate times this.
    # 1.0 keeps it constant. Why: late updates at full lr kept moving a policy that had already
    # learned the game (KL to the base still rising), so the final adapter varied run to run.
    final_lr_fraction: float = Field(1.0, ge=0.0, le=1.0)
    batch_turns: int = Field(32, ge=1, description="agent turns per update")
    minibatch_turns: int = Field(16, ge=1, description=">= batch_turns: the whole batch at once")
    epochs: int = Field(1, ge=1, le=16)
    # How advantages are normalised: over the whole batch, or within each role (seat) of a
    # shared policy. Per role is the "role-conditioned advantage" of self-play in games whose
    # seats differ (Tic-Tac-Toe's first mover wins more; Hanabi's seats see different hands):
    # each role's turns are judged against that role's own typical outcome, so the policy is
    # not pushed towards whatever the luckier seat happened to do.
    advantage_norm: Literal["batch", "role"] = "batch"
    clip_range: float = Field(0.2, gt=0.0, lt=1.0)
    kl_coef: float = Field(0.02, ge=0.0)
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0)
    max_grad_norm: float = Field(1.0, gt=0.0)
    entropy_coef: float = Field(0.0, ge=0.0)
    max_staleness: int = Field(1, ge=0, description="drop episodes older than this many versions")

    @model_validator(mode="before")
    @classmethod
    def _moved_fields(cls, data):
        return refuse_bf16_field(data)


# The fields that left ``ppo:`` for ``trainer:`` (they are about the run, not the algorithm).
# A config that still has them under ``ppo:`` (a run folder written before the move) is read
# with them moved, so old runs still evaluate and resume.
MOVED_TO_TRAINER = ("checkpoint_every", "max_updates", "max_minutes", "torch_threads",
                    "pin_cpus", "nice")


class TrainerConfig(ComputeConfig):
    """The ``trainer:`` section: the budget, checkpoints, and where and how learners compute
    (device, dtype, attention, processes: agora/algos/compute.py)."""

    max_updates: int | None = Field(None, ge=1)
    max_minutes: float | None = Field(None, gt=0.0)
    checkpoint_every: int = Field(1, ge=1)
    # CPU only (a learner on a GPU leaves them alone): torch threads, pinning and niceness.
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
    # Prometheus metrics of worker i on metrics_port + i (embedded stack); null: none.
    metrics_port: int | None = Field(8210, ge=1024, le=65535 - 64)

    def metrics_ports(self) -> list[int]:
        return [] if self.metrics_port is None else [
            self.metrics_port + i for i in range(self.count)]


class ServicesConfig(_Strict):
    host: str = "127.0.0.1"
    redis_port: int = Field(6390, ge=1024, le=65535)
    reward_port: int = Field(8201, ge=1024, le=65535)
    gateway_port: int = Field(8200, ge=1024, le=65535)
    trainer_metrics_port: int = Field(8202, ge=1024, le=65535)
    # Seconds the finished trainer keeps its metrics endpoint up before it exits, so that
    # Prometheus (scraping every 5 s) records the last updates' values instead of losing them.
    trainer_final_scrape_s: float = Field(12.0, ge=0, le=600)
    judge_port: int = Field(8203, ge=1024, le=65535)
    health_timeout_s: float = Field(300.0, gt=0)
    # `agora up` restarts a crashed policy server or embedded Redis this many times (each) before
    # it stops everything (agora/stack/supervisor.py); other services stop everything at once.
    restarts: int = Field(3, ge=0, le=100)
    # Where a service is reached when it is not at `host`: compose and k8s give each service its
    # own DNS name (keys: the names of RunConfig.all_ports(), or `policy` for every policy
    # server). `host` stays the address the trainer binds its metrics to (0.0.0.0 in a
    # container). Usually set by the deployment via AGORA_SERVICES (agora/stack/deployment.py).
    hosts: dict[str, str] = Field(default_factory=dict)


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
    # Scripted bots of the game (GAME_BOTS), or "self": the agent in every seat (for
    # cooperative games, e.g. Hanabi's self-play score).
    opponents: list[str] = Field(default_factory=lambda: ["random", "minimax"])


class RunConfig(_Strict):
    name: str = Field("run", pattern=r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,62}$")
    seed: int = 0
    output_dir: str = "runs"
    models: dict[str, BaseModelConfig]
    agents: list[AgentConfig] = Field(..., min_length=1)
    environment: EnvironmentConfig
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
        if self.reward.team_credit == "to_go" and env not in COOPERATIVE_GAMES:
            raise ValueError(f"reward.team_credit: 'to_go' needs a cooperative game with a team "
                             f"score ({sorted(COOPERATIVE_GAMES)}), not '{env}'")
        scorers = ENV_VERIFIERS.get(env, ("game_outcome",))  # other envs are games
        if self.reward.verifier is None and len(scorers) == 1:
            self.reward.verifier = scorers[0]
        if self.reward.verifier not in scorers:
            raise ValueError(f"reward.verifier: '{self.reward.verifier}' does not score a "
                             f"'{env}' environment (use {' or '.join(scorers)})")
        self._check_seats(names)
        if env in GAME_BOTS:
            allowed = {"self", *GAME_BOTS[env]}
            wrong = [o for o in self.eval.opponents if o not in allowed]
            if "eval" not in self.model_fields_set and env != "tictactoe":
                self.eval.opponents = list(GAME_BOTS[env])
            elif wrong:
                raise ValueError(f"eval.opponents: {wrong} cannot play {env} (choose from "
                                 f"{sorted(allowed)})")
        if "pool" in self.environment.opponents:
            if len(self.trainable_agents) != 1:
                raise ValueError("environment.opponents: 'pool' snapshots one learner; the run "
                                 f"has {len(self.trainable_agents)} trainable agents")
            if env == "discussion":
                raise ValueError("environment.opponents: no 'pool' in a discussion")
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
        data = apply_services_override(data)
    except ValueError as err:
        raise ConfigError(f"{source}: {err}") from None
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source} is not a valid run config:\n{_format_errors(err)}") from None


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
