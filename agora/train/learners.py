"""The learners: one PPOLearner per agent, where each one runs, and the follower ranks' life.

Apart from the loop because this is the part every rank runs: with ``trainer.processes`` > 1
(agora/algos/distributed.py) rank 0 is the trainer and drives the learners, while the other
ranks build the very same learners, in the same order, and only follow rank 0's calls.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import torch

from agora.algos import distributed
from agora.algos.compute import Placement, resolve
from agora.algos.distributed import DataParallel
from agora.algos.ppo import PPOLearner
from agora.algos.shared_base import SharedBase
from agora.config.run import RunConfig
from agora.config.training import ppo_for_agent
from agora.serving.model_folders import resolve_model
from agora.stack.hardware import pin_to_last_cpus

# The trainer's logger: these lines read in logs/trainer.log as they did inside the trainer.
log = logging.getLogger("agora.train.trainer")


def learner_placements(cfg: RunConfig, parallel: DataParallel) -> dict[str, Placement]:
    """Each agent's learner placement; sharded, every learner sits on this process's device
    (``cuda:LOCAL_RANK``, or the CPU), and the process group is joined here."""
    placements = {a.name: resolve(cfg.trainer, a.device) for a in cfg.agents}
    if parallel.sharded:
        device = distributed.start(parallel, next(iter(placements.values())).device)
        placements = {name: dataclasses.replace(p, device=device)
                      for name, p in placements.items()}
    return placements


def pin_cpu_learners(cfg: RunConfig, placements: dict[str, Placement],
                     parallel: DataParallel) -> None:
    """CPU pinning and niceness keep a CPU learner out of vLLM's way on a shared machine; a
    learner on a GPU needs its host thread to feed the GPU at full speed instead. (Several
    CPU processes would all pin to the same last CPUs: they are left to the scheduler.)"""
    if all(p.on_cpu for p in placements.values()) and not parallel.sharded:
        if cfg.trainer.pin_cpus:
            pinned = pin_to_last_cpus(cfg.trainer.torch_threads)
            log.info("trainer pinned to CPUs %s", pinned)
        if cfg.trainer.nice:
            os.nice(cfg.trainer.nice)


def build_learners(cfg: RunConfig, placements: dict[str, Placement],
                   parallel: DataParallel) -> dict[str, PPOLearner]:
    """One learner per agent, in config order (every rank builds them in the same order).
    Frozen agents get a learner too (zero-initialised LoRA = the base model) so that every
    agent is an adapter name on its server; it is just never updated."""
    if all(p.on_cpu for p in placements.values()):
        torch.set_num_threads(cfg.trainer.torch_threads)
    # LoRA agents of one base on one device hold one copy of it (trainer.share_base); the
    # learner itself declines sharing where it owns its modules (full weights, VLM, sharded).
    shared = SharedBase() if cfg.trainer.share_base else None
    learners = {agent.name: PPOLearner(resolve_model(cfg.models[agent.base].model), agent,
                                       ppo_for_agent(cfg.ppo, agent.ppo), seed=cfg.seed,
                                       placement=placements[agent.name], parallel=parallel,
                                       shared_base=shared)
                for agent in cfg.agents}
    if shared is not None:
        for key, adapters in shared.adapters.items():
            if len(adapters) > 1:
                log.info("%d learners share one copy of %s on %s", len(adapters), key[0],
                         key[1])
    return learners


def run_follower(cfg: RunConfig, parallel: DataParallel) -> None:
    """A rank other than 0: the same learners, driven by rank 0's broadcast calls."""
    learners = build_learners(cfg, learner_placements(cfg, parallel), parallel)
    calls = distributed.follow(learners, parallel)
    log.info("rank %d: rank 0 finished after %d learner calls", parallel.rank, calls)
