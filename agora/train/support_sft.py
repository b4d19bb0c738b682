"""Warm start for the tool-using support desks: SFT on the scripted oracle's transcripts.

Why: PPO alone did not teach SmolLM2-135M the support task (0% success before and after 15
minutes: successes, 1-3% of training episodes, were too rare to reinforce). The scripted
``support_oracle`` desks solve every level with the real tools, so their turns are
demonstrations of the whole protocol: search with a query that finds the right page, compute
with the calculator, copy the tool's result into ``ANSWER:``, hand off what the desk cannot
do. Behaviour cloning them gives PPO a policy that already succeeds sometimes (the recipe of
RLHF's SFT stage, and of the reflection pipeline's stage (b)).

What is held out: tasks are split by a hash of their question (``task_split``); SFT sees only
the train share, so ``agora support-eval --split test`` measures questions (for level 1: facts)
the adapter never saw. Each example is one generation: the desk's observation as chat messages
-> the oracle's text (a tool call up to ``</tool>``, an ``ANSWER:`` or a ``HANDOFF``), exactly
what the policy writes at that step. The adapter has the agent's LoRA shape, so vLLM serves it
and ``agents[].init_adapter`` starts PPO from it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from agora.config.run import RunConfig
from agora.envs.support import SupportEnv, support_scores
from agora.envs.support_agents import SupportOracle
from agora.envs.support_options import SupportOptions, build_support_env
from agora.envs.support_tasks import task_split
from agora.reflection.config import TrainStageConfig
from agora.train.warm_start import train_sft_adapter

MAX_SEED_SCAN = 100  # train-share tasks are found within a few seeds; this bounds a bad split


def oracle_examples(cfg: RunConfig, episodes: int, levels: list[int], seed: int = 0,
                    split: str = "train") -> list[dict]:
    """Prompt/completion examples of ``episodes`` oracle episodes per level, on ``split``
    tasks only. Only solved episodes count (the oracle solves all; a failure would be a bug in
    a tool or the task, not a demonstration)."""
    opts = getattr(cfg.environment, "support", None)  # a config has its own env's options only
    if opts is None:
        raise ValueError("environment: support-sft needs environment.name: support")
    oracle, examples = SupportOracle(), []
    next_seed = seed
    for level in levels:
        for _ in range(episodes):
            env = _env_on_split(opts, level, split, next_seed)
            next_seed = env.seed + 1
            rng, episode = random.Random(env.seed), []
            while not env.done:
                messages = env.observation(env.current_seat)
                text = oracle.act(env, rng)
                episode.append({"prompt": messages,
                                "completion": [{"role": "assistant", "content": text}]})
                env.step(text)
            if support_scores(env.outcome().info)["success"]:
                examples.extend(episode)
    return examples


def _env_on_split(opts: SupportOptions, level: int, split: str, seed: int) -> SupportEnv:
    """The env reset to the first task of ``split`` at ``level`` from ``seed`` on."""
    for candidate in range(seed, seed + MAX_SEED_SCAN):
        env = build_support_env(opts, {"seed": candidate})
        env.reset(candidate, level=level)
        if task_split(env.task.question) == split:
            return env
    raise ValueError(f"no {split} task at level {level} within {MAX_SEED_SCAN} seeds")


def train_support_sft(cfg: RunConfig, examples: list[dict], out: Path, stage: TrainStageConfig,
                      log: Callable[[str], None] = print) -> dict:
    """The config's first agent's adapter, SFT on the oracle's ``examples`` (the same trainer
    as every warm start: agora/train/warm_start.py)."""
    if not examples:
        raise ValueError("no SFT examples: the oracle solved no episode")
    return train_sft_adapter(cfg, cfg.agents[0].name, examples, out, stage, "support sft", log)
