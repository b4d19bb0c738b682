"""Every environment's facts, one ``EnvSpec`` each: what the config, the workers, the trainer,
the evaluation and the gateway need to know about an env, kept in one place.

Pure data (no env classes, no config imports), so that every layer can read it without import
cycles. The tables the code used before (``GAME_BOTS``, ``GAME_SEATS``, ``COOPERATIVE_GAMES``,
``CONTEXT_ENVS``, ``ENV_VERIFIERS``, ``ENV_METRICS``, the gateway's seat counts and default play)
are derived from it. Not yet here: the builders and scorers, which the rollout, evaluation and
cli still pick with if/elif chains per env name.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DefaultPlay:
    """How an agent plays this env when its own run trained on another (the gateway's
    episodes): the assistant turn's prefill and the sampling limits."""

    prefill: str
    max_tokens: int
    stop: tuple[str, ...]


@dataclass(frozen=True)
class EnvSpec:
    name: str
    # Player counts it allows (None: the config's seats decide, within its own checks).
    seats: tuple[int, int] | None = None
    # Scripted bots that can fill the other seats (agora/agents/bots.py): a game. They are
    # opponents in training ("environment.opponents") and in evaluation ("eval.opponents").
    bots: tuple[str, ...] = ()
    # The whole table wins or loses together, with a running team score (reward.team_credit).
    cooperative: bool = False
    # Seats may be scripted context agents (``context:<name>``).
    context_seats: bool = False
    # reward.verifier values that score it (the first is the default); none: a game, scored
    # by replaying it in the reward service.
    verifiers: tuple[str, ...] = ()
    # Per-agent metrics its scorer reports (name -> what it is): the trainer shows each one's
    # mean over the agent's last 100 episodes in metrics.jsonl, Prometheus and the progress view.
    metrics: dict[str, str] = field(default_factory=dict)
    # How the gateway plays it for an agent trained elsewhere (None: it cannot).
    play: DefaultPlay | None = None


SPECS: tuple[EnvSpec, ...] = (
    EnvSpec("tictactoe", seats=(2, 2), bots=("random", "minimax"), verifiers=("game_outcome",),
            play=DefaultPlay("[", 6, ("]",))),
    EnvSpec("hanabi", seats=(2, 5), bots=("hanabi_random", "hanabi_simple"), cooperative=True,
            metrics={"hanabi_score": "hanabi: the team's fireworks at the end, 0-25 (0-n after "
                                     "a forfeit)"},
            play=DefaultPlay("[", 14, ("\n",))),
    EnvSpec("discussion", seats=(1, 5), verifiers=("math", "nli"),
            play=DefaultPlay("", 128, ("\n\n",))),
    EnvSpec("negotiation", context_seats=True, verifiers=("deal",), metrics={
        "deal_rate": "negotiation: share of episodes ending in a deal",
        "utility": "negotiation: value of the agent's share over the whole pool's, 0 = no deal",
        "coherence": "negotiation: judge's 0..1 score of the agent's messages",
    }),
    EnvSpec("story", context_seats=True, verifiers=("judge",), metrics={
        "judge_score": "story: judge's 0..1 score of the agent's paragraphs",
        "story_score": "story: judge's 0..1 score of the whole story",
        "preference": "story: judge's preference (0..1) for the agent's paragraph over the "
                      "baseline writer's",
    }),
    EnvSpec("code_debug", context_seats=True, verifiers=("code_tests",), metrics={
        "pass_rate": "code_debug: share of hidden tests the agent's code passes",
        "solved": "code_debug: share of episodes where the agent's code passes every test",
        "bug_fixed": "code_debug (author): share of episodes with a bug that got fixed",
    }),
    EnvSpec("support", context_seats=True, verifiers=("tool_task",), metrics={
        "task_success": "support: share of episodes whose final answer is right",
        "tool_accuracy": "support: share of the agent's tool calls that were well-formed, "
                         "allowed, ran without error and used a tool the task needs",
        "tool_calls": "support: tool calls the agent made per episode",
    }),
)
REGISTRY: dict[str, EnvSpec] = {spec.name: spec for spec in SPECS}
ENV_NAMES: tuple[str, ...] = tuple(REGISTRY)

# The tables the rest of the code reads, derived from the specs.
GAME_BOTS: dict[str, tuple[str, ...]] = {s.name: s.bots for s in SPECS if s.bots}
GAME_SEATS: dict[str, tuple[int, int]] = {s.name: s.seats for s in SPECS
                                          if s.bots and s.seats is not None}
COOPERATIVE_GAMES: tuple[str, ...] = tuple(s.name for s in SPECS if s.cooperative)
CONTEXT_ENVS: tuple[str, ...] = tuple(s.name for s in SPECS if s.context_seats)
ENV_VERIFIERS: dict[str, tuple[str, ...]] = {s.name: s.verifiers for s in SPECS if s.verifiers}
ENV_METRICS: dict[str, dict[str, str]] = {s.name: s.metrics for s in SPECS if s.metrics}
