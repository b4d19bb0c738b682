"""The ``reward`` section: how an episode becomes rewards (verifier, outcome values, and
teammates' share)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agora.config.base import StrictModel
from agora.rewards.discussion import DiscussionCredit


class RewardConfig(StrictModel):
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
    # Which rounds pay a discussion answer. 'future': MAPoRL's look-ahead, the agent's mean
    # score over this and the later rounds (an answer that leads to right answers is worth
    # more). 'answer': this answer's own score only (with cooperation 0, the first round is
    # paid exactly like the agent trained alone).
    discussion_credit: DiscussionCredit = "future"
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

