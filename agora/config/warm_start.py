"""``agents[].warm_start``: SFT on the env's demonstrators, run by the trainer before PPO.

Why a config section and not only ``agora warm-start`` + ``init_adapter``: the warm start is
part of the recipe (Tic-Tac-Toe met its 15-minute targets only from an SFT that learnt
minimax's table), so every way of running a config (``agora up``, ``agora demo``, compose,
k8s) should run the same one. Its time is bounded by its own ``epochs`` / ``max_steps``;
``trainer.max_minutes`` is PPO's, counted after it (a 15-minute demo is 15 minutes of PPO
whether or not an SFT came first).
"""

from __future__ import annotations

from pydantic import Field

from agora.config.base import StrictModel


class WarmStartConfig(StrictModel):
    """What ``agora warm-start`` takes as flags (agora/train/warm_start.py), as a config."""

    episodes: int = Field(200, ge=1, description="demonstration episodes (unless "
                          "every_position)")
    every_position: bool = Field(False, description="a small game without chance "
                                 "(tictactoe): every position the demonstrator can meet, "
                                 "once, instead of `episodes` games")
    demonstrator: str | None = Field(None, description="one of the env's demonstrators "
                                     "(default: the first that fits each seat), e.g. "
                                     "tictactoe's minimax_canonical")
    opponents: bool = Field(True, description="games: demonstrations against the config's "
                            "opponents mix (false: demonstrators in every seat)")
    epochs: float = Field(2.0, gt=0, le=100, description="passes over the examples")
    learning_rate: float = Field(1e-3, gt=0, lt=1)
    batch_size: int = Field(8, ge=1)
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimizer "
                                  "steps (None: epochs decide)")
    threads: int | None = Field(None, ge=1, description="torch threads for the SFT (None: "
                                "torch's default, every core: the rollout side is idle "
                                "until PPO starts)")
