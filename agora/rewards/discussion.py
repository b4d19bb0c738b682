"""Turning per-turn verifier scores of a discussion into each agent's turn rewards (MAPoRL).

Why not just "1 if this answer is right": in a discussion an answer also matters for what it
makes the others (and the agent itself) say next. Following MAPoRL (Park et al., 2025), an
answer's reward looks ahead and, through the cooperative incentive ``alpha``, across:

    own(i, t)  = mean of agent i's verifier scores over rounds t..T
                 (an answer that leads to right answers later is worth more)
    team(i, t) = mean over teammates j != i of own(j, t)
    r(i, t)    = own(i, t) + alpha * team(i, t)

``alpha = 0`` trains each agent for itself; larger ``alpha`` rewards helping the team. With one
agent, team() is 0. Scores are the verifier's (1 right, 0 wrong by default).

``credit="answer"`` (``reward.discussion_credit``) drops the look-ahead: own(i, t) is agent i's
score in round t alone. Why offer it: under a group baseline (rloo) the look-ahead mixes the
later rounds' noise into the first answer's credit, so a first-round answer is no longer paid
its own 0/1 as it is when the agent trains alone; with ``alpha = 0`` and ``credit="answer"``
the first round is trained exactly like the agent alone and only the later rounds see the
others (docs/results.md).
"""

from __future__ import annotations

from typing import Literal

# reward.discussion_credit: which rounds pay an answer (see above).
DiscussionCredit = Literal["future", "answer"]


def discussion_rewards(scores: list[list[float]], alpha: float,
                       credit: DiscussionCredit = "future") -> list[list[float]]:
    """``scores[t][i]`` = verifier score of agent i's answer in round t -> rewards, same shape."""
    rounds = len(scores)
    if rounds == 0:
        return []
    agents = len(scores[0])
    if credit == "answer":
        own = [list(row) for row in scores]
    else:
        own = [
            [sum(scores[u][i] for u in range(t, rounds)) / (rounds - t) for i in range(agents)]
            for t in range(rounds)
        ]
    rewards = []
    for t in range(rounds):
        row = []
        for i in range(agents):
            mates = [own[t][j] for j in range(agents) if j != i]
            team = sum(mates) / len(mates) if mates else 0.0
            row.append(own[t][i] + alpha * team)
        rewards.append(row)
    return rewards
