"""The episode record: what a rollout worker appends to the run's Redis stream.

It carries everything the trainer needs and nothing it must recompute: for every LLM turn the
exact prompt and completion token ids the policy server used and the behaviour logprobs it
sampled with (PPO's importance ratio needs them), plus the policy version that produced the
turn (for the staleness bound). Scripted-bot turns are kept for replay and metrics but have no
tokens. Rewards are filled in from the reward service's verdict.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seat: int
    agent: str = Field(..., description="agent name, or 'bot:<name>' for a scripted opponent")
    role: str = Field("", description="the seat's role in the env, e.g. the mark 'X' or 'O'")
    text: str = Field(..., description="the full action text, prefill included")
    legal: bool = True
    policy_version: int | None = None
    prompt_token_ids: list[int] = Field(default_factory=list)
    completion_token_ids: list[int] = Field(default_factory=list)
    behaviour_logprobs: list[float] = Field(default_factory=list)
    finish_reason: str | None = None
    # With ``sampling.legal_actions_only``: the completions the turn was restricted to (legal
    # actions minus the prefill). The trainer rebuilds vLLM's token masks from them.
    choices: list[str] | None = None
    # The images of the turn's prompt, in order, as the data URLs the policy was sent
    # (vision-language agents, docs/vlm.md); the learner recomputes their pixels.
    images: list[str] = Field(default_factory=list)
    reward: float = 0.0

    @property
    def is_llm(self) -> bool:
        return not self.agent.startswith("bot:")


class RewardParts(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verifier: float = 0.0
    judge: float = 0.0
    shaping: float = 0.0


class EpisodeRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    episode_id: str
    env: str
    seed: int
    task_id: str = ""
    opponent: str = "self"
    seats: list[str] = Field(..., description="who sat where: agent names or 'bot:<name>'")
    policy_versions: dict[str, int] = Field(default_factory=dict)
    turns: list[Turn] = Field(default_factory=list)
    # Per seat: 'win' | 'loss' | 'draw' | 'illegal'
    results: list[str] = Field(default_factory=list)
    # Final reward per agent (summed over the seats it played) and its parts.
    rewards: dict[str, float] = Field(default_factory=dict)
    reward_parts: dict[str, RewardParts] = Field(default_factory=dict)
    info: dict[str, object] = Field(default_factory=dict)
    duration_s: float = 0.0
