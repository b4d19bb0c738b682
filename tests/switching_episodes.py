"""Episodes of a learner among a switching partner, written as the rollout worker writes them
(tests/unit/test_switching.py, tests/integration/test_results_files.py)."""

from __future__ import annotations

from pathlib import Path

from agora.rollout.records import EpisodeRecord

# update -> (partner strategy, the learner's rewards in that update's episodes)
SCHEDULE = {0: ("fair", [0.2, 0.4]), 1: ("fair", [0.5, 0.7]), 2: ("greedy", [0.0, 0.1]),
            3: ("greedy", [0.2, 0.2]), 4: ("fair", [0.3, 0.3]), 5: ("fair", [0.7, 0.5]),
            6: ("greedy", [0.3, 0.3]), 7: ("greedy", [0.0, 0.0])}


def write_episodes(path: Path, schedule: dict = SCHEDULE, learner: str = "alice") -> Path:
    lines = []
    for clock, (strategy, rewards) in schedule.items():
        for i, reward in enumerate(rewards):
            record = EpisodeRecord(
                run_id="r", episode_id=f"e{clock}-{i}", env="negotiation", seed=clock,
                seats=[learner, f"bot:context:partner/{strategy}"],
                rewards={learner: reward}, info={"clock": clock})
            lines.append(record.model_dump_json())
    path.write_text("\n".join(lines) + "\n{\"cut")
    return path
