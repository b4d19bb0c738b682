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
"""

from __future__ import annotations


def discussion_rewards(scores: list[list[float]], alpha: float) -> list[list[float]]:
    """``scores[t][i]`` = verifier score of agent i's answer in round t -> rewards, same shape."""
    rounds = len(scores)
    if rounds == 0:
        return []
    agents = len(scores[0])
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
