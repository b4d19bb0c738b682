"""The reflection pipeline's config: one YAML file, validated by pydantic.

It is its own model rather than a ``RunConfig``: a reflection run has no environment, workers,
reward service or PPO, but it has an oracle, two adapters (actor, critic) and two offline
training stages. The policy server section *is* the run config's ``BaseModelConfig``, so vLLM
is started exactly as everywhere else. Unknown keys fail (``sft.learning_rte``), and every
error names its dotted field, like ``agora up``'s config errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agora.algos.compute import ComputeConfig, refuse_bf16_field
from agora.config.agents import BaseModelConfig, SamplingConfig
from agora.config.base import ConfigError
from agora.config.run import apply_overrides, format_errors, read_config_yaml
from agora.data.specs import TaskSpec
from agora.reflection.prompts import CriticCheck
from agora.reflection.reference_oracle import MAX_SAMPLES as REFERENCE_MAX_SAMPLES
from agora.reflection.task_programs import EquationForm
from agora.train.tracking import TrackingConfig, missing_packages

ROLES = ("actor", "critic")
STAGES = ("base", "sft", "dpo")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _sampling(temperature: float, max_tokens: int) -> SamplingConfig:
    # No stop strings: answers end at the chat template's end-of-turn token.
    return SamplingConfig(temperature=temperature, max_tokens=max_tokens, stop=[])


class RoleConfig(_Strict):
    """One agent (actor or critic): its LoRA adapter and how it samples."""

    lora_rank: int = Field(8, ge=1, le=256)
    lora_alpha: int = Field(16, ge=1)
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    lora_targets: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1
    )
    lora_layers: list[int] | None = None
    sampling: SamplingConfig = Field(default_factory=lambda: _sampling(0.7, 128))
    sft_epochs: float | None = Field(
        None, gt=0.0, le=100.0, description="this role's SFT epochs in place of sft.epochs "
        "(sft.max_steps still stops both): a critic that checks with a program must copy the "
        "question's terms to the character, and its few hundred examples may need more passes "
        "than the actor's; None = sft.epochs"
    )


class OracleConfig(_Strict):
    """The stronger model that writes critiques and refinements of the actor's answers.

    Any OpenAI-compatible chat endpoint (``base_url`` ends in ``/v1``); left empty, the policy
    server's own base model answers, with the longer budget and more samples set here.
    ``backend: reference`` asks no model: a script writes the texts from the ground truth
    (``reference_oracle.py``); then ``samples`` is 1 (the true critique) or 2 (and a misleading
    one), and the model fields are unused.
    """

    backend: Literal["model", "reference"] = Field(
        "model", description="model: an OpenAI-compatible endpoint writes critiques and "
        "refinements; reference: a script writes them from the ground truth"
    )
    base_url: str | None = Field(None, description="e.g. http://host:8000/v1; None = policy")
    model: str = Field("base", description="the model name to ask the endpoint for")
    api_key_env: str | None = Field(
        None, description="name of the environment variable holding the API key (never the key)"
    )
    samples: int = Field(4, ge=1, le=32, description="critiques (each + refinement) per answer")
    temperature: float = Field(0.8, ge=0.0, le=5.0)
    max_tokens: int = Field(256, ge=1, le=8192)
    show_reference: bool = Field(
        False, description="tell the oracle the ground truth (feedback as in Oracle-RISE)"
    )
    timeout_s: float = Field(600.0, gt=0.0)
    critique: Literal["worked", "verdict"] = Field(
        "worked", description="reference backend: worked = a critique states the right result "
        "before its verdict; verdict = the verdict alone, so the actor works the answer again "
        "rather than copying the critic's"
    )
    equation_program: EquationForm = Field(
        "root", description="reference backend, critic_check: program: the program an "
        "equation's critique holds; root = the root of the linear difference of its sides "
        "(two lines), search = the equation's own text searched for a whole root within "
        "±1000 (one line, closer to the question)"
    )

    @property
    def scripted(self) -> bool:
        """No model writes the texts: the reference script does."""
        return self.backend == "reference"

    @model_validator(mode="after")
    def _reference_samples(self) -> OracleConfig:
        if self.scripted and self.samples > REFERENCE_MAX_SAMPLES:
            raise ValueError(f"samples: the reference oracle writes at most "
                             f"{REFERENCE_MAX_SAMPLES} critiques per answer (the true one and a "
                             f"misleading one), not {self.samples}")
        if self.critique != "worked" and not self.scripted:
            raise ValueError(f"critique: '{self.critique}' shapes the reference backend's "
                             f"critiques; a model oracle writes its own (set backend: reference)")
        return self


class PairsConfig(_Strict):
    """Which of the pair rules (``pairs.py``) make preference pairs."""

    hold_right_answers: bool = Field(
        True, description="the actor's 'right answer kept > wrong refinement' pairs: they teach "
        "it to hold a right answer against a critique, and where it cannot tell its right "
        "answers from its wrong ones, to ignore the critic altogether"
    )
    keep_approved_answers: bool = Field(
        False, description="the actor's 'answer kept after a true correct > changed to a wrong "
        "answer' pairs: with the 'right refinement > wrong answer kept' pairs (after a true "
        "wrong), they make the refinement turn depend on the verdict, so a critic right more "
        "often than not adds to the actor's answers instead of shuffling them"
    )


class TrainStageConfig(_Strict):
    """TRL trainer knobs shared by SFT and DPO (each role trains its own adapter)."""

    learning_rate: float = Field(2e-4, gt=0.0, lt=1.0)
    epochs: float = Field(1.0, gt=0.0, le=100.0)
    batch_size: int = Field(4, ge=1)
    grad_accum: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1, description="stop early; None = epochs decide")
    max_length: int = Field(768, ge=32, description="tokens per example (prompt + completion)")
    threads: int | None = Field(None, ge=1, description="torch threads; None = torch's default")
    logging_steps: int = Field(5, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _moved_fields(cls, data):
        return refuse_bf16_field(data)


class DPOStageConfig(TrainStageConfig):
    learning_rate: float = Field(5e-5, gt=0.0, lt=1.0)
    beta: float = Field(0.1, gt=0.0, le=10.0, description="DPO's pull towards the SFT adapter")
    sft_weight: float = Field(
        0.0, ge=0.0, le=100.0, description="weight of an SFT (negative log-likelihood) term on "
        "the chosen answers beside DPO's (RPO; TRL's loss_type [sigmoid, sft]): DPO alone may "
        "lower the chosen answers' likelihood as long as the rejected ones fall faster, and "
        "undo what SFT taught; 0 = DPO alone"
    )
    data_from: Literal["base", "sft"] = Field(
        "base", description="whose first answers DPO's pairs are made of: base = the oracle "
        "round SFT learnt from (the base actor's answers); sft = a second oracle round on the "
        "SFT actor's own answers (on-policy pairs: the critic learns to judge answers like those "
        "it will see, not the base model's, and the actor's pairs start where it now stands)"
    )


class EvalStageConfig(_Strict):
    tasks: int | None = Field(None, ge=1, description="held-out (test split) problems; "
                              "None = the whole test split")
    turns: int = Field(5, ge=1, le=20, description="actor answers per problem (1 + refinements)")
    stop_on_approval: bool = Field(
        False, description="stop refining once the critic says 'Verdict: correct' (the approved "
        "answer then stands for the remaining turns)"
    )
    concurrency: int = Field(16, ge=1, le=512, description="problems in flight (vLLM batches)")


class ReflectionConfig(_Strict):
    name: str = Field("reflection", pattern=r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,62}$")
    seed: int = 0
    output_dir: str = Field("runs", description="the run folder is <output_dir>/<name>")
    policy: BaseModelConfig
    policy_url: str | None = Field(
        None, description="a running vLLM server of policy.model (http://host:port); None = "
        "each command starts one on policy.port and stops it when done"
    )
    task: TaskSpec
    train_tasks: int = Field(64, ge=1, description="training problems the actor answers")
    actor_samples: int = Field(2, ge=1, le=32, description="first answers per training problem")
    max_shown_chars: int = Field(
        600, ge=50, description="an answer or feedback shown in a prompt keeps its last N chars"
    )
    actor: RoleConfig = Field(default_factory=RoleConfig)
    critic: RoleConfig = Field(default_factory=RoleConfig)
    oracle: OracleConfig = Field(default_factory=OracleConfig)
    balance_critic: bool = Field(
        False, description="the critic's SFT examples and pairs count right and wrong first "
        "answers equally (the larger kind subsampled, seeded): the base actor's answers are "
        "mostly wrong, a trained actor's mostly right, and a critic trained on the first learns "
        "to say 'wrong'"
    )
    critic_judges_refinements: bool = Field(
        False, description="the critic's SFT examples and pairs also judge the oracle's "
        "refinements as proposed answers (scripted oracle only): a trained actor answers in "
        "the refinements' short format, which the base actor's first answers never show, and "
        "a critic trained on those alone judged it at chance"
    )
    critic_check: CriticCheck = Field(
        "text", description="text: the critic writes its verdict; program: it writes a Python "
        "block printing the result, the sandbox runs it and the verdict is the printed result "
        "compared with the proposed answer (a 135M critic does not tell a right one-digit sum "
        "from one off, but can write print(7 - 3))"
    )
    pairs: PairsConfig = Field(default_factory=PairsConfig)
    sft: TrainStageConfig = Field(default_factory=TrainStageConfig)
    dpo: DPOStageConfig = Field(default_factory=DPOStageConfig)
    eval: EvalStageConfig = Field(default_factory=EvalStageConfig)
    # Where SFT and DPO train (device, dtype, attention kernel), as a run config's trainer:.
    trainer: ComputeConfig = Field(default_factory=ComputeConfig)
    # Experiment trackers the SFT and DPO stages report to (TRL's report_to), as a run config's.
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)

    @model_validator(mode="after")
    def _fits_the_server(self) -> ReflectionConfig:
        for role in ROLES:
            rank = self.role(role).lora_rank
            if rank > self.policy.max_lora_rank:
                raise ValueError(f"{role}.lora_rank: {rank} exceeds policy.max_lora_rank="
                                 f"{self.policy.max_lora_rank} (vLLM could not load the adapter)")
        if self.task.source == "reasoning_gym":
            generated = self.task.test_size or self.task.size
            if self.eval.tasks is not None and self.eval.tasks > generated:
                raise ValueError(f"eval.tasks: {self.eval.tasks} held-out problems asked, but "
                                 f"the test split generates {generated} (task.test_size); "
                                 f"raise task.test_size to {self.eval.tasks}")
        if self.critic_judges_refinements and not self.oracle.scripted:
            raise ValueError("critic_judges_refinements: only the scripted oracle (oracle."
                             "backend: reference) can critique refinements without inference")
        if self.critic_check == "program" and self.oracle.critique != "worked":
            raise ValueError(f"critic_check: 'program' critiques show the check's printed "
                             f"result, so oracle.critique: '{self.oracle.critique}' (the "
                             f"verdict alone) cannot hold; set oracle.critique: worked")
        if self.task.source != "reasoning_gym" and self.task.format not in ("gsm8k", "math"):
            raise ValueError(f"task.format: reflection is on math problems ('gsm8k' or "
                             f"'math'), not '{self.task.format}'")
        return self

    def role(self, name: str) -> RoleConfig:
        return self.actor if name == "actor" else self.critic

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name


def parse_reflection_config(data: object, source: str = "<config>") -> ReflectionConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, "
                          f"got {type(data).__name__}")
    try:
        return ReflectionConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source} is not a valid reflection config:\n"
                          f"{format_errors(err)}") from None


def load_reflection_config(path: str | Path, overrides: Sequence[str] = ()) -> ReflectionConfig:
    """The config at ``path`` with ``--set`` overrides (as for run configs); a tracker whose
    package is missing is refused here, before any stage spends minutes on work it could not
    report."""
    cfg = parse_reflection_config(apply_overrides(read_config_yaml(path), overrides), str(path))
    if missing := missing_packages(cfg.tracking):
        raise ConfigError(f"{path}: " + "; ".join(missing))
    return cfg
