"""One rank of a sharded learner, for tests/integration/test_ppo_sharded.py:
``torchrun --nproc-per-node N tests/sharded_learner.py MODEL OUT``.

Runs the updates of ``SCENARIOS`` on ``turns()`` (the test runs the same on one process), saves
each scenario's adapter and a checkpoint under OUT (written by rank 0), then resumes a learner
from a one-process checkpoint the test wrote (``OUT/single-ckpt``, if it exists) and saves what
it loaded."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from agora.algos import distributed
from agora.algos.compute import ComputeConfig, resolve
from agora.algos.ppo import PPOLearner, TurnSample
from agora.config.agents import AgentConfig
from agora.config.training import PPOConfig
from tests.integration.test_ppo_device import _turns

# (name, PPO fields): several minibatches and epochs with a KL term and per-role whitening
# (a minibatch of 3 leaves a rank with no row of it, now and then); the fused single pass;
# full-weight training (every weight sharded and trained, a frozen reference copy); a warm start
# held to its init adapter (a second, frozen adapter the reference forward switches to).
MINIBATCHES = {"batch_turns": 10, "minibatch_turns": 3, "epochs": 2, "kl_coef": 0.05,
               "advantage_norm": "role", "entropy_coef": 0.01}
SCENARIOS = [
    ("minibatches", MINIBATCHES),
    ("fused", {"batch_turns": 10, "minibatch_turns": 10, "epochs": 1, "kl_coef": 0.0}),
    ("full", {**MINIBATCHES, "learning_rate": 1e-4}),
    ("warm", MINIBATCHES),
]
# The warm start's adapter: written by the test before either run (``write_init_adapter``).
INIT_ADAPTER = "init-adapter"
# tests/integration/test_gpu.py runs the same on GPUs (NCCL): AGORA_TEST_DEVICE=cuda.
COMPUTE = ComputeConfig(device=os.environ.get("AGORA_TEST_DEVICE", "cpu"), dtype="fp32")


def learner(model: str, ppo: dict, parallel=distributed.SINGLE,
            scenario: str = "minibatches", out: Path | None = None) -> PPOLearner:
    init = str(out / INIT_ADAPTER) if scenario == "warm" and out is not None else None
    agent = AgentConfig(name="a", base="m", lora_rank=8, lora_alpha=16, init_adapter=init,
                        finetune="full" if scenario == "full" else "lora")
    ppo = {"learning_rate": 5e-3, **ppo}
    placement = resolve(COMPUTE)
    placement = dataclasses.replace(placement,
                                    device=distributed.start(parallel, placement.device))
    return PPOLearner(model, agent, PPOConfig(**ppo), seed=3,
                      placement=placement, parallel=parallel)


def turns(agent: PPOLearner, n: int = 10) -> list[TurnSample]:
    """Rows of unequal lengths, two roles, rewards -1..1; behaviour logprobs are the learner's
    own (the first ratio is 1): the device tests' turns."""
    return _turns(agent, n)


def write_init_adapter(model: str, out: Path) -> None:
    """An adapter two updates away from the base, for the ``warm`` scenario (one process)."""
    agent = learner(model, MINIBATCHES)
    for _ in range(2):
        agent.update(turns(agent))
    agent.save_adapter(out / INIT_ADAPTER)


def main(model: str, out: Path) -> None:
    parallel = distributed.from_environment()
    results = {}
    for name, ppo in SCENARIOS:
        agent = learner(model, ppo, parallel, name, out)
        results[name] = agent.update(turns(agent))
        agent.save_policy(out / name)
        agent.save_checkpoint(out / f"{name}-ckpt", {"scenario": name})
    resumed = learner(model, SCENARIOS[0][1], parallel)
    single = out / "single-ckpt"
    if single.is_dir():
        resumed.load_checkpoint(single)
        resumed.save_checkpoint(out / "resumed-ckpt", {"from": "single"})
    if parallel.leader:
        (out / "stats.json").write_text(json.dumps(results))
    distributed.stop(parallel)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
