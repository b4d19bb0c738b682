"""What each scripted negotiator earns against each partner strategy: the ceiling of a warm start.

A negotiation learner is warm-started by SFT on a demonstrator's turns
(``agents[].warm_start.demonstrator``: ``fair`` by default, or ``conceder``), and a 135M model
imitates its demonstrator at best: the demonstrator's own utility, against the strategies
training cycles its partner through, bounds what the warm start can bring. This script plays
every scripted negotiator (``agora/agents/context.py``) in the learner's seat (seat 0, it opens)
against every partner strategy on the evaluation's held-out item pools
(``agora/evaluation/seeds.py``), with no model, in seconds. The baseline is the fair
negotiator, the default demonstrator, measured in the same run on the same pools.

    .venv/bin/python bench/negotiation_demonstrators.py [--pools 400]
"""

from __future__ import annotations

import argparse
import random
import statistics

from results import append_section, markdown_table

from agora.agents.context import make_context_agent
from agora.envs.negotiation import Negotiation
from agora.evaluation.seeds import held_out_seed

NEGOTIATORS = ("fair", "conceder", "greedy")
BASELINE = "fair"


def play(opener: str, partner: str, seed: int, max_rounds: int) -> tuple[float, bool]:
    """One negotiation of two scripted agents: the opener's utility and whether they dealt."""
    env = Negotiation(num_agents=2, max_rounds=max_rounds)
    env.reset(seed)
    players = (make_context_agent(opener), make_context_agent(partner))
    rng = random.Random(seed)
    while not env.done:
        env.step(players[env.current_seat].act(env, rng))
    info = env.outcome().info
    return float(info["utility"][env.agents[0]]), bool(info["deal"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=400, help="held-out item pools")
    parser.add_argument("--max-rounds", type=int, default=4, help="configs/negotiation.yaml's")
    args = parser.parse_args()
    seeds = [held_out_seed(0, i) for i in range(args.pools)]
    rows, means = [], {}
    for opener in NEGOTIATORS:
        cells, utilities = [], []
        for partner in NEGOTIATORS:
            games = [play(opener, partner, seed, args.max_rounds) for seed in seeds]
            utility = statistics.mean(u for u, _ in games)
            deals = statistics.mean(d for _, d in games)
            utilities.append(utility)
            cells.append(f"{utility:.2f} ({deals:.0%} deals)")
        means[opener] = statistics.mean(utilities)
        rows.append([opener, *cells, f"{means[opener]:.2f}"])
    table = markdown_table(["learner's seat plays", *(f"vs {p}" for p in NEGOTIATORS),
                            "mean over the cycle"], rows)
    ratios = ", ".join(f"{name} {means[name] / means[BASELINE]:.2f}x" for name in NEGOTIATORS)
    body = (f"{args.pools} held-out item pools, {args.max_rounds} rounds, the learner's seat "
            f"opening; utility (deal rate).\n\n{table}\n\nmean utility against the "
            f"{BASELINE} demonstrator's (baseline, same pools): {ratios}")
    print(body)
    append_section("negotiation_demonstrators.py", body)


if __name__ == "__main__":
    main()
