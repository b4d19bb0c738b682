"""The ``models``, ``agents`` and ``context_agents`` sections: who plays, on which base model,
sampling how, and the scripted seats beside them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agora.algos.compute import DEVICE_PATTERN
from agora.config.base import StrictModel
from agora.config.training import AgentPPOConfig
from agora.config.warm_start import WarmStartConfig


class SamplingConfig(StrictModel):
    """How an agent samples its turn from the policy server."""

    temperature: float = Field(1.0, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(6, ge=1, le=4096)
    stop: list[str] = Field(default_factory=lambda: ["]"])
    # Games only: sample one of the env's legal actions (vLLM structured outputs ``choice``)
    # instead of free text, so no turn is lost to an illegal or unparsable move; the trainer
    # scores tokens under the same mask (agora/algos/action_mask.py).
    legal_actions_only: bool = False


class BaseModelConfig(StrictModel):
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


class AgentConfig(StrictModel):
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
    # output); None = a fresh adapter, i.e. the base model.
    # (Checked before anything starts: agora/startup_checks.py.)
    init_adapter: str | None = None
    # SFT on the env's demonstrators, run by the trainer before PPO
    # (agora/train/run_warm_start.py); its adapter is version 0 and the KL reference. Bounded
    # by its own epochs / max_steps: trainer.max_minutes counts PPO after it. An init_adapter
    # wins over it.
    warm_start: WarmStartConfig | None = None
    # What PPO's KL penalty holds the policy to: `init` = the policy it started from (the
    # init_adapter when there is one, as RLHF holds a policy to its SFT model; else the base),
    # `base` = the base model. Measured on the negotiation warm start: with the base as the
    # reference, kl_coef 0.01 paid PPO ~0.3 a turn to drift back to a base that cannot
    # negotiate, and deals fell from 98% to 1% (docs/recipes/context-agents.md).
    kl_reference: Literal["init", "base"] = "init"
    # This learner's own learning rate, KL coefficient, clip range, ... over the run's ``ppo:``
    # (fields left out: the run's). E.g. `ppo: {learning_rate: 1.0e-4}` for a warm-started
    # agent on another base, or a full-weight agent beside LoRA ones.
    ppo: AgentPPOConfig | None = None
    # Where this agent's learner trains (auto | cpu | cuda | cuda:N); None = trainer.device.
    # Two learners of a multi-model run can sit on two GPUs.
    device: str | None = Field(None, pattern=DEVICE_PATTERN)


CONTEXT_PREFIX = "context:"


class ContextAgentConfig(StrictModel):
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

