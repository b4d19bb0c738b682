"""Warm starts from demonstrations, for every env: scripted players' transcripts -> TRL SFT ->
an adapter that PPO starts from (``agents[].init_adapter``).

Why: a 135M model learns little by PPO where rewarded episodes are rare at the start (the
support desks went from 4% to 82% success by SFT on the oracle's turns, and PPO alone did not
move them). Every env names its demonstrators in its spec (``EnvSpec.demonstrators``): a game's
strongest bot (minimax, Hanabi's simple bot), a context agent that plays the role well (a fair
negotiator, the template writer, the oracle fixer, the support oracle), or ``task_answer`` (a
discussion: the task's ground-truth answer in the format the verifier reads). Every seat plays
a demonstrator; each turn of a seat the agent holds in ``environment.seats`` becomes one example:
the observation as chat messages -> the demonstrator's text, exactly what the policy writes at
that step (its prefill included). The adapter has the agent's LoRA shape, so vLLM serves it too.

What this is not: a guarantee of good play (SFT clones the demonstrator as well as a small
model can), nor held-out data (tasks come from the train split; evaluation uses the test split).
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

from agora.agents.context import CONTEXT_AGENT_FITS, make_context_agent
from agora.algos.compute import resolve
from agora.config.agents import CONTEXT_PREFIX
from agora.config.environment import EnvironmentConfig
from agora.config.run import RunConfig
from agora.config.warm_start import WarmStartConfig
from agora.envs.base import TurnBasedEnv, turn_limit
from agora.envs.registry import make_bot
from agora.envs.spec import EnvSpec
from agora.reflection.config import TrainStageConfig
from agora.reflection.training import (
    load_base,
    log_callback,
    lora_config,
    save_adapter,
    scratch_dir,
    torch_threads,
    trainer_args,
)
from agora.rollout.seating import build_env, make_context_seat, seat_names
from agora.serving.model_folders import resolve_model
from agora.train.imitation_fit import imitation_fit
from agora.train.tracking import trl_tracking

TASK_ANSWER = "task_answer"


class TaskAnswerer:
    """A discussion's demonstrator: the task's ground truth, as the answer line the verifier
    reads (agora/envs/discussion.py ANSWER_FORMAT), or a program printing it where the env
    asks for programs."""

    name = TASK_ANSWER

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def act(self, env: TurnBasedEnv, rng: random.Random) -> str:
        if getattr(env, "answer_mode", "text") == "program":  # environment.answer: program
            return f"```python\nprint({self.answer!r})\n```"
        return f"Answer: {self.answer}"


def demonstrator(spec: EnvSpec, role: str | None, payload: dict,
                 only: str | None = None):  # -> a Bot / ContextAgent
    """The first of the env's demonstrators that can play ``role`` (None: any seat); ``only``:
    that one of them (``agora warm-start --demonstrator``)."""
    for name in spec.demonstrators if only is None else (only,):
        if name == TASK_ANSWER:
            return TaskAnswerer(str(payload["task"]["answer"]))
        if name in spec.bots or name in spec.demonstrator_bots:
            return spec.bot(name)
        fit_env, fit_role = CONTEXT_AGENT_FITS.get(name, (None, None))
        if fit_env == spec.name and (fit_role is None or role is None or fit_role == role):
            return make_context_agent(name)
    raise ValueError(f"environment.name: '{spec.name}' has no demonstrator for the "
                     f"{role or 'any'} seat (EnvSpec.demonstrators: {list(spec.demonstrators)})")


def _check_agent_and_demonstrator(section: EnvironmentConfig, agent: str,
                                  only: str | None) -> None:
    """The agent sits in a seat of ``section`` (the config's environment), and ``only``, if
    given, is one of its env's demonstrators."""
    if agent not in section.seats:
        raise ValueError(f"--agent: '{agent}' sits in no seat of environment.seats "
                         f"({section.seats})")
    if only is not None and only not in section.spec.demonstrators:
        raise ValueError(f"--demonstrator: '{only}' is not one of {section.name}'s "
                         f"demonstrators ({list(section.spec.demonstrators)})")


def demonstrations(cfg: RunConfig, agent: str, episodes: int, seed: int = 0,
                   opponents: bool = True, only: str | None = None) -> list[dict]:
    """Prompt/completion examples of ``agent``'s seats in ``episodes`` demonstrator episodes
    (discussions: on the train split's tasks).

    ``opponents``: a game's episodes draw their opponent from ``environment.opponents`` as
    training does (a bot in the other seats, the agent's seat alternating), so the examples
    cover the positions PPO will meet: minimax against itself only ever reaches drawn
    positions, never the ones a random opponent leaves to be won. ``self`` and ``pool`` are
    demonstrators in every seat. A context agent's seat (``context:<key>``) is that agent,
    on its schedule with the episode index as its clock, so the agent is shown how to answer
    each partner strategy training switches through (a fair negotiator that accepts a
    conceder's late offer, not only one opening the same split against itself). Off:
    demonstrators in every seat, always. ``only``: one of the env's demonstrators in every
    demonstrator seat, instead of the first that fits each."""
    from agora.data import load_tasks

    section = cfg.environment
    _check_agent_and_demonstrator(section, agent, only)
    tasks = load_tasks(section.task, split="train") if section.task is not None else []
    mix = [(name, weight) for name, weight in section.opponents.items()
           if name in section.spec.bots] if opponents and section.spec.is_game else []
    draw = random.Random(seed)
    examples: list[dict] = []
    for index in range(episodes):
        payload: dict = {"seed": seed + index}
        if tasks:
            payload["task"] = tasks[index % len(tasks)].model_dump(mode="json")
        if mix:
            names = ["self", *(n for n, _ in mix)]
            weights = [sum(w for n, w in section.opponents.items() if n not in dict(mix)),
                       *(w for _, w in mix)]
            payload["opponent"] = draw.choices(names, weights)[0]
            payload["learner_seat"] = index % len(section.seats)
        sat = seat_names(cfg, payload)
        seats = [i for i, name in enumerate(sat) if name == agent]
        env = build_env(cfg, payload)
        env.reset(payload["seed"])
        players = [make_bot(name.removeprefix("bot:")) if name.startswith("bot:")
                   else make_context_seat(cfg, name.removeprefix(CONTEXT_PREFIX), index)
                   if opponents and name.startswith(CONTEXT_PREFIX)
                   else demonstrator(section.spec, role, payload, only)
                   for name, role in zip(sat, section.seat_roles(), strict=True)]
        rng = random.Random(payload["seed"])
        for _ in range(turn_limit(env)):
            if env.done:
                break
            seat = env.current_seat
            messages = env.observation(seat)
            text = players[seat].act(env, rng)
            if seat in seats:
                examples.append({"prompt": messages,
                                 "completion": [{"role": "assistant", "content": text}]})
            env.step(text)
    return examples


# Far above Tic-Tac-Toe's 335 (68 positions as the first player, 267 as the second, for the
# canonical minimax); a bound so that a game marked enumerable by mistake fails fast, not after
# hours of search.
MAX_POSITIONS = 20_000


def every_position_demonstrations(cfg: RunConfig, agent: str, seed: int = 0,
                                  only: str | None = None,
                                  max_positions: int = MAX_POSITIONS) -> list[dict]:
    """One example per distinct position the demonstrator can meet in ``agent``'s seats, each
    other seat playing every legal move in turn: the demonstrator's whole policy, each
    position once.

    Why not sampled games: a deterministic demonstrator (minimax_canonical) meets few
    positions per game, so 200 games showed 183 of its 335 Tic-Tac-Toe positions and the
    imitation lost a quarter of its games to the random bot, whose replies led where it had
    never been shown a move. Measured (tictactoe-15-warm-every, docs/recipes/tictactoe.md):
    coverage alone did not help; 6 epochs over the 335 fitted about half their moves, and
    games, which repeat minimax's line, drew it more often. Only for games whose spec says
    the tree is small and has no chance (``EnvSpec.enumerable``).
    """
    section = cfg.environment
    spec = section.spec
    if not spec.enumerable:
        raise ValueError(f"--every-position: environment.name '{section.name}' is not a small "
                         "game without chance (EnvSpec.enumerable); sample games with "
                         "--episodes instead")
    _check_agent_and_demonstrator(section, agent, only)
    payload = {"seed": seed}
    roles = section.seat_roles()
    examples: list[dict] = []
    seen: set[str] = set()
    for learner_seat in (i for i, name in enumerate(section.seats) if name == agent):
        player = demonstrator(spec, roles[learner_seat], payload, only)
        rng = random.Random(seed)
        root = build_env(cfg, payload)
        root.reset(seed)
        stack = [root]
        while stack:  # depth first; each env on the stack is a position to expand
            env = stack.pop()
            if env.done:
                continue
            seat = env.current_seat
            if seat != learner_seat:
                for action in env.legal_actions():
                    child = copy.deepcopy(env)
                    child.step(action)
                    stack.append(child)
                continue
            messages = env.observation(seat)
            key = json.dumps(messages, sort_keys=True)
            if key in seen:  # the same board reached by another order of moves
                continue
            seen.add(key)
            if len(seen) > max_positions:
                raise ValueError(f"--every-position: {section.name} has more than "
                                 f"{max_positions} positions for the demonstrator; sample "
                                 "games with --episodes instead")
            text = player.act(env, rng)
            examples.append({"prompt": messages,
                             "completion": [{"role": "assistant", "content": text}]})
            env.step(text)
            stack.append(env)
    return examples


def configured_examples(cfg: RunConfig, agent: str, ws: WarmStartConfig) -> list[dict]:
    """The demonstrations ``ws`` (an agent's ``warm_start:``, or the CLI's flags over it) asks
    for: every position of a small game, or ``episodes`` sampled episodes."""
    if ws.every_position:
        return every_position_demonstrations(cfg, agent, only=ws.demonstrator)
    return demonstrations(cfg, agent, ws.episodes, opponents=ws.opponents, only=ws.demonstrator)


def sft_stage(ws: WarmStartConfig) -> TrainStageConfig:
    """TRL's knobs for a warm start (examples up to 1024 tokens: a discussion's prompt)."""
    return TrainStageConfig(learning_rate=ws.learning_rate, epochs=ws.epochs,
                            batch_size=ws.batch_size, max_steps=ws.max_steps,
                            threads=ws.threads, max_length=1024)


def train_sft_adapter(cfg: RunConfig, agent_name: str, examples: list[dict], out: Path,
                      stage: TrainStageConfig, label: str,
                      log: Callable[[str], None] = print) -> dict:
    """One LoRA adapter of ``agent_name``'s shape, trained on ``examples`` with TRL's
    SFTTrainer (loss on the completion only), written to ``out`` with a summary."""
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    if not examples:
        raise ValueError(f"{label}: no examples to learn from")
    agent = cfg.agent(agent_name)
    model_name = cfg.models[agent.base].model
    placement = resolve(cfg.trainer, agent.device)
    model, tokenizer = load_base(resolve_model(model_name), placement)
    history: list[dict] = []
    started = time.monotonic()
    tracked = trl_tracking(cfg.tracking, out.parent / "tensorboard" / out.name)
    with scratch_dir() as scratch, torch_threads(stage.threads), tracked as report_to:
        args = SFTConfig(**trainer_args(stage, scratch, cfg.seed, placement, report_to),
                         completion_only_loss=True)
        trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(examples),
                             processing_class=tokenizer, peft_config=lora_config(agent),
                             callbacks=[log_callback(log, history, label)])
        trainer.remove_callback(PrinterCallback)
        result = trainer.train()
        fit = imitation_fit(trainer.model, tokenizer, examples, cfg.environment.prefill or "")
    if fit["read"]:
        log(f"  {label}: the demonstrated answer's mean probability "
            f"{fit['mean_probability']:.2f}; greedy decoding writes it in "
            f"{fit['greedy_match']:.1%} of {fit['read']} turns")
    losses = [h["loss"] for h in history if "loss" in h]
    accuracies = [h["mean_token_accuracy"] for h in history if "mean_token_accuracy" in h]
    summary = {"examples": len(examples), "steps": result.global_step,
               "seconds": round(time.monotonic() - started, 1),
               "first_loss": losses[0] if losses else None,
               "final_loss": losses[-1] if losses else result.training_loss,
               # Read beside the loss: a loss of 0.19 per token was a coin flip on the move
               # itself (tictactoe-15-warm-every), the brackets being certain.
               "first_token_accuracy": accuracies[0] if accuracies else None,
               "final_token_accuracy": accuracies[-1] if accuracies else None,
               # The tokens after the prefill alone (agora/train/imitation_fit.py): what
               # sampling and greedy decoding play.
               "imitation": fit}
    save_adapter(trainer.model, out, {"stage": label, "agent": agent.name,
                                      "base_model": model_name, **summary})
    return summary


def read_imitation(cfg: RunConfig, agent_name: str, examples: list[dict],
                   adapter: Path | None) -> dict:
    """How well ``adapter`` (None: the agent's base model) plays ``examples``, without training:
    the same read as a warm start's summary, for any adapter (a warm start, a PPO version)."""
    from peft import PeftModel

    agent = cfg.agent(agent_name)
    placement = resolve(cfg.trainer, agent.device)
    model, tokenizer = load_base(resolve_model(cfg.models[agent.base].model), placement)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter))
    return imitation_fit(model, tokenizer, examples, cfg.environment.prefill or "")

