"""The level rule: promote on a high success rate, demote on a collapse, with hysteresis.

Pure logic over a ``LevelState`` (no Redis: ``store.py`` keeps the state), so the rule can be
checked on synthetic outcomes. The success rate is over the last ``window`` episodes played at
the current level only: the window is emptied when the level changes, so outcomes at an easier
level never count towards leaving a harder one. Three things keep a level from flapping: the
band between ``demote_below`` and ``promote_at``, where nothing happens; ``patience``, the
episodes a level must have been played before it may change again; and ``backoff``: each
demotion from a level multiplies the patience needed before the agent is promoted to it again.
Without the backoff an agent that masters level L but cannot yet do any of L+1 bounces between
them every two windows, spending half its episodes where it only fails (measured: 15 level
changes in 45 PPO updates of the support task, nothing learnt at the upper level).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agora.train.curriculum.settings import CurriculumConfig


@dataclass(frozen=True)
class Rule:
    window: int
    promote_at: float
    demote_below: float
    patience: int
    top: int  # the highest level (the ladder's size - 1)
    backoff: float = 1.0  # patience factor per earlier demotion from the level promoted to

    @classmethod
    def from_config(cls, settings: CurriculumConfig, levels: int) -> Rule:
        return cls(window=settings.window, promote_at=settings.promote_at,
                   demote_below=settings.demote_below, patience=settings.patience,
                   top=levels - 1, backoff=settings.backoff)

    def promotion_patience(self, state: LevelState) -> int:
        """Episodes at ``state.level`` before a promotion: ``patience`` times ``backoff`` for
        every time the agent was demoted from the level above."""
        bounced = state.demotions.get(state.level + 1, 0)
        return int(round(self.patience * self.backoff ** bounced))


@dataclass
class LevelState:
    level: int
    window: list[float] = field(default_factory=list)  # successes at this level, oldest first
    played: int = 0  # episodes observed at this level since it was set
    changes: int = 0
    demotions: dict[int, int] = field(default_factory=dict)  # level -> times demoted from it

    @property
    def success_rate(self) -> float | None:
        return sum(self.window) / len(self.window) if self.window else None


def observe(state: LevelState, success: float, rule: Rule) -> int:
    """Add one episode's success (0..1) at ``state.level``; move the level if the rule says so.
    Returns the move: +1 promoted, -1 demoted, 0 stayed."""
    state.window.append(min(1.0, max(0.0, float(success))))
    del state.window[:-rule.window]
    state.played += 1
    move = decide(state, rule)
    if move:
        if move < 0:
            state.demotions[state.level] = state.demotions.get(state.level, 0) + 1
        state.level += move
        state.window.clear()
        state.played = 0
        state.changes += 1
    return move


def decide(state: LevelState, rule: Rule) -> int:
    """+1, -1 or 0 for the state as it is (see the module docstring)."""
    rate = state.success_rate
    if rate is None or state.played < rule.patience:
        return 0
    if (rate >= rule.promote_at and state.level < rule.top
            and state.played >= rule.promotion_patience(state)):
        return 1
    if rate < rule.demote_below and state.level > 0:
        return -1
    return 0
