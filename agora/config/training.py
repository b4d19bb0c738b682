"""The ``ppo`` (the algorithm) and ``trainer`` (budget, checkpoints, compute) sections."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agora.algos.compute import ComputeConfig, refuse_bf16_field
from agora.config.base import StrictModel


class PPOConfig(StrictModel):
    """Token-level PPO on LoRA (see agora/algos/ppo.py for how each knob enters the loss)."""

    learning_rate: float = Field(5e-4, gt=0.0, lt=1.0)
    value_learning_rate: float = Field(1e-3, gt=0.0, lt=1.0)
    # Linear learning-rate anneal over the budget (trainer.max_updates or max_minutes, whichever
    # is further along), as in CleanRL's ppo.py: the policy lr ends at learning_rate times this.
    # 1.0 keeps it constant. Why: late updates at full lr kept moving a policy that had already
    # learned the game (KL to the base still rising), so the final adapter varied run to run.
    final_lr_fraction: float = Field(1.0, ge=0.0, le=1.0)
    batch_turns: int = Field(32, ge=1, description="agent turns per update")
    # When a multi-agent batch is complete. every: once each trainable agent has batch_turns
    # turns, so every update is batch_turns big; but a seat that acts once per episode then
    # sets the pace, and a seat that acts three times trains on three times batch_turns (the
    # research compare's learning writer: 540 s per update against 150 s alone). any: once the
    # busiest agent has batch_turns and each has at least one: the batch is as many episodes as
    # that agent needs, and a seat that acts less trains on its fewer turns of them. One
    # trainable agent: the same either way.
    batch_fill: Literal["every", "any"] = "every"
    minibatch_turns: int = Field(16, ge=1, description=">= batch_turns: the whole batch at once")
    epochs: int = Field(1, ge=1, le=16)
    # How advantages are normalised: over the whole batch, or within each role (seat) of a
    # shared policy. Per role is the "role-conditioned advantage" of self-play in games whose
    # seats differ (Tic-Tac-Toe's first mover wins more; Hanabi's seats see different hands):
    # each role's turns are judged against that role's own typical outcome, so the policy is
    # not pushed towards whatever the luckier seat happened to do.
    advantage_norm: Literal["batch", "role"] = "batch"
    # Where a turn's advantage comes from. gae: the critic (value head) and GAE over the turn's
    # tokens. grpo / rloo: no critic; the turn's reward against the other samples of the same
    # prompt (group_size episodes of one seed or task, sent together; turns compared by role and
    # turn number): grpo (reward - group mean) / group std, rloo reward - the mean of the
    # others. A token's KL to the reference is subtracted from its advantage (kl_coef).
    advantage: Literal["gae", "grpo", "rloo"] = "gae"
    group_size: int = Field(1, ge=1, le=64, description="episodes per seed or task")
    # DAPO's dynamic sampling (verl's algorithm.filter_groups), grpo / rloo only. A group whose
    # samples all scored alike has zero advantage, yet its tokens still count in the loss's
    # mean over the batch, so a batch of mostly such groups takes a step that much smaller
    # (late in maporl-math-updates-rloo, 75-100% of the turns: adv_zero). True: such groups
    # leave the batch (counted: filtered_turns) and the trainer reads more episodes until
    # batch_turns turns with a signal are in. After max_filtered_batches x batch_turns turns
    # dropped for one update the rest are taken as they come, so a policy whose groups all end
    # alike still trains (more slowly) instead of sampling forever.
    filter_groups: bool = False
    max_filtered_batches: int = Field(4, ge=1, le=64,
                                      description="cap on turns left out per update, in batches")
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

    @model_validator(mode="after")
    def _groups_for_critic_free(self) -> PPOConfig:
        if self.advantage != "gae" and self.group_size < 2:
            raise ValueError(f"group_size: advantage '{self.advantage}' compares samples of the "
                             "same prompt, so it needs group_size >= 2 (e.g. 4)")
        if self.filter_groups and self.advantage == "gae":
            raise ValueError("filter_groups: drops groups whose samples scored alike, which only "
                             "grpo / rloo compare (set advantage: rloo or grpo, and group_size)")
        return self


class AgentPPOConfig(StrictModel):
    """One learner's own optimiser settings (``agents[].ppo``), over the run's ``ppo:``.

    Why per agent: the learners of a multi-model run can differ in base, size and fine-tuning
    (a LoRA agent beside a full-weight one wants a learning rate ~100x larger; a warm-started
    Gemma at SmolLM2's 5e-4 moved 1.24 nats/token from its SFT policy in 10 updates while its
    accuracy fell). Only what one learner's update reads is here: batching, advantages and
    staleness shape the trainer's batches for every agent and stay in ``ppo:``.
    """

    learning_rate: float | None = Field(None, gt=0.0, lt=1.0)
    value_learning_rate: float | None = Field(None, gt=0.0, lt=1.0)
    final_lr_fraction: float | None = Field(None, ge=0.0, le=1.0)
    clip_range: float | None = Field(None, gt=0.0, lt=1.0)
    kl_coef: float | None = Field(None, ge=0.0)
    max_grad_norm: float | None = Field(None, gt=0.0)
    entropy_coef: float | None = Field(None, ge=0.0)


def ppo_for_agent(ppo: PPOConfig, own: AgentPPOConfig | None) -> PPOConfig:
    """The run's ``ppo:`` with the fields one agent sets for itself (None: the run's)."""
    if own is None:
        return ppo
    return ppo.model_copy(update=own.model_dump(exclude_none=True))


# The fields that left ``ppo:`` for ``trainer:`` (they are about the run, not the algorithm).
# A config that still has them under ``ppo:`` (a run folder written before the move) is read
# with them moved, so old runs still evaluate and resume.
MOVED_TO_TRAINER = ("checkpoint_every", "max_updates", "max_minutes", "torch_threads",
                    "pin_cpus", "nice")


class TrainerConfig(ComputeConfig):
    """The ``trainer:`` section: the budget, checkpoints, and where and how learners compute
    (device, dtype, attention, processes: agora/algos/compute.py)."""

    max_updates: int | None = Field(None, ge=1)
    # Wall clock from the trainer's start (loading the models counts), an
    # agents[].warm_start's SFT excepted: the minutes are PPO's.
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
    # LoRA agents of one base model (same device and dtype) train on one copy of it, one
    # adapter each (agora/algos/shared_base.py): a three-agent discussion holds the base once,
    # not three times. Same updates as apart (tested); false = a copy per learner.
    share_base: bool = True

