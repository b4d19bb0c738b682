"""Trainer throughput (tokens/s of one PPO update): our PPOLearner vs TRL's PPOTrainer, on the
same model, the same Tic-Tac-Toe prompts (bench/ppo_update.py's), the same batch (one update of
``--turns`` sequences, one minibatch, one epoch, as configs/tictactoe_selfplay.yaml trains) and
the same LoRA (rank, alpha, target modules, layers), in one process with the same torch threads.

    .venv/bin/python bench/trl_ppo.py [--model smollm2-135m] [--turns 32] [--repeats 3]
        [--device auto|cpu|cuda] [--dtype auto|bf16|fp16|fp32] [--model-shape 135m|0.5b|1.5b]

Both trainers run on the same ``--device`` in the same precision (``agora.algos.compute``
resolves it once; TRL gets the matching ``use_cpu``/``bf16``/``fp16`` and model dtype).

Which TRL: the installed TRL (1.16) no longer has a PPOTrainer: TRL 1.10 moved it to
``trl.experimental.ppo`` (huggingface/trl#4482) and huggingface/trl#7020 deleted it; 1.12.0 is
the last release that ships it. This script installs that release with pip, ``--no-deps``, into
its own folder (``.venv/trl-1.12.0-ppo``, outside site-packages, once) and puts it first on
sys.path in this process only; it runs on the installed transformers/accelerate/peft.

What is timed, and what is and is not comparable:

* ours: ``PPOLearner.update`` (warm-up, then the median of ``--repeats``): critic values,
  GAE, advantage whitening, then the PPO epoch (forward with grad, clipped loss, backward,
  AdamW). Behaviour logprobs come from vLLM in production, so they are given, not timed.
* TRL: ``PPOTrainer.train`` for warm-up + ``--repeats`` updates, instrumented (its ``train``
  is one monolithic loop, so we wrap the functions it calls): "optimisation" runs from the
  update's first training forward to its ``log`` call (the PPO epoch: forward of policy and
  value model with grad, loss, backward, optimizer step; plus its metric gathering, which is
  cheap). That is the figure compared with ours. "full step" adds TRL's rollout phase:
  generation with HF ``generate``, reference, value and reward forwards, GAE. It is printed
  for information; ours does its generation in vLLM, elsewhere.
* critic: TRL's value model is a separate ``AutoModelForSequenceClassification`` copy of the
  model; ours is a small MLP on the base model's features. To compare like with like by
  default TRL's value backbone is frozen (only its score head trains, as only our head
  trains); TRL still pays the value model's forward in each minibatch.
  ``--train-value-backbone`` measures TRL's default instead (the whole value model trains).
* reward: TRL needs a reward model; a freshly initialised sequence-classification head on
  the same model stands in (the scores are meaningless, only the cost matters, and it is in
  the rollout phase, not in the compared figure). Ours gets game outcomes from the reward
  service.
* tokens: each trainer's own non-pad prompt+completion tokens per update. TRL generates its
  own completions (up to the longest of ours), so its counts differ a little from ours.
* KL: with the config's ``kl_coef: 0`` ours skips the reference forward; TRL always does it
  but in the rollout phase, so it is outside the compared figure either way.

Figures are appended to bench/results.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from model_shapes import SHAPES, shape_model, top_half_layers
from ppo_update import synchronize, tictactoe_turns, timed
from results import ROOT, append_section, markdown_table

from agora.algos.compute import ComputeConfig, Placement
from agora.algos.ppo import PPOLearner, TurnSample
from agora.config.agents import AgentConfig
from agora.config.run import load_config
from agora.config.training import PPOConfig
from agora.serving.model_folders import resolve_model

LEGACY_TRL = "1.12.0"  # the last TRL release with trl.experimental.ppo
LEGACY_DIR = ROOT / ".venv" / f"trl-{LEGACY_TRL}-ppo"


def import_legacy_trl():
    """TRL's PPOTrainer and PPOConfig from TRL 1.12.0, installed on first use (see docstring)."""
    if not (LEGACY_DIR / "trl" / "experimental" / "ppo").is_dir():
        print(f"installing trl=={LEGACY_TRL} (no deps) into {LEGACY_DIR} for its PPOTrainer")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--target", str(LEGACY_DIR), f"trl=={LEGACY_TRL}"], check=True)
    if "trl" in sys.modules:
        raise RuntimeError("another TRL was imported before the legacy one")
    sys.path.insert(0, str(LEGACY_DIR))
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl
    from trl.experimental.ppo import ppo_trainer

    if trl.__version__ != LEGACY_TRL:
        raise RuntimeError(f"expected trl {LEGACY_TRL}, imported {trl.__version__}")
    return ppo_trainer


@dataclass
class TrlUpdate:
    """Wall-clock marks of one TRL PPO update, and the tokens its training forwards saw."""

    started: float
    first_train_forward: float | None = None
    logged: float | None = None
    tokens: int = 0
    padded_tokens: int = 0

    @property
    def optimisation_s(self) -> float:
        return self.logged - self.first_train_forward

    @property
    def full_s(self) -> float:
        return self.logged - self.started


@dataclass
class TrlTimer:
    """Wraps the module functions TRL's monolithic ``train`` calls, to split each update."""

    module: object
    device: torch.device
    updates: list[TrlUpdate] = field(default_factory=list)

    def install(self, trainer) -> None:
        generate, forward, log = (self.module.batch_generation, self.module.forward,
                                  trainer.log)

        def timed_generation(*args, **kwargs):
            self.updates.append(TrlUpdate(started=time.perf_counter()))
            return generate(*args, **kwargs)

        def timed_forward(model, query_responses, pad_token_id):
            if model is trainer.model:  # the training forward (rollout ones pass sub-models)
                update = self.updates[-1]
                if update.first_train_forward is None:
                    synchronize(self.device)  # the rollout phase's GPU work is not counted
                    update.first_train_forward = time.perf_counter()
                update.tokens += int((query_responses != pad_token_id).sum())
                update.padded_tokens += query_responses.numel()
            return forward(model, query_responses, pad_token_id)

        def timed_log(*args, **kwargs):
            synchronize(self.device)
            self.updates[-1].logged = time.perf_counter()
            return log(*args, **kwargs)

        self.module.batch_generation = timed_generation
        self.module.forward = timed_forward
        trainer.log = timed_log


def trl_trainer(ppo_trainer, model_path: str, agent: AgentConfig, ppo: PPOConfig,
                turns: list[TurnSample], steps: int, train_value_backbone: bool, out: Path,
                placement: Placement):
    """TRL's PPOTrainer set up like our learner: same LoRA, batch, epochs, clip, lr, gamma."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    weights = placement.model_kwargs()
    policy = AutoModelForCausalLM.from_pretrained(model_path, **weights)
    value = AutoModelForSequenceClassification.from_pretrained(model_path, num_labels=1,
                                                               **weights)
    reward = AutoModelForSequenceClassification.from_pretrained(model_path, num_labels=1,
                                                                **weights)
    for model in (value, reward):
        model.config.pad_token_id = tokenizer.pad_token_id
    if not train_value_backbone:
        for name, param in value.named_parameters():
            param.requires_grad = name.startswith("score")
    batch = len(turns)
    config = ppo_trainer.PPOConfig(
        output_dir=str(out), report_to="none", save_strategy="no", **placement.trl_args(),
        disable_tqdm=True, seed=0, per_device_train_batch_size=batch,
        gradient_accumulation_steps=1, num_mini_batches=1, num_ppo_epochs=ppo.epochs,
        local_rollout_forward_batch_size=batch, total_episodes=batch * steps,
        response_length=max(len(t.completion_ids) for t in turns), temperature=1.0,
        learning_rate=ppo.learning_rate, cliprange=ppo.clip_range, kl_coef=ppo.kl_coef,
        gamma=ppo.gamma, lam=ppo.gae_lambda, max_grad_norm=ppo.max_grad_norm,
        num_sample_generations=0, missing_eos_penalty=None, stop_token=None,
    )
    lora = LoraConfig(r=agent.lora_rank, lora_alpha=agent.lora_alpha,
                      lora_dropout=agent.lora_dropout, target_modules=list(agent.lora_targets),
                      layers_to_transform=agent.lora_layers, task_type="CAUSAL_LM")
    dataset = Dataset.from_dict({"input_ids": [t.prompt_ids for t in turns]})
    return ppo_trainer.PPOTrainer(args=config, processing_class=tokenizer, model=policy,
                                  ref_model=None, reward_model=reward, value_model=value,
                                  train_dataset=dataset, eval_dataset=dataset,
                                  peft_config=lora)


def lora_layers_within(agent: AgentConfig, model_path: str) -> AgentConfig:
    """The config's LoRA layers that the model has (tiny-random has fewer than SmolLM2's 30;
    none left = all layers)."""
    from transformers import AutoConfig

    if agent.lora_layers is None:
        return agent
    depth = AutoConfig.from_pretrained(model_path).num_hidden_layers
    kept = [layer for layer in agent.lora_layers if layer < depth]
    return agent.model_copy(update={"lora_layers": kept or None})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=Path("configs/tictactoe_selfplay.yaml"))
    parser.add_argument("--model", default="smollm2-135m",
                        help="overrides the config's model (tiny-random for a quick check)")
    parser.add_argument("--turns", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-value-backbone", action="store_true",
                        help="TRL's default critic: the whole value model trains")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp16", "fp32"])
    parser.add_argument("--model-shape", choices=list(SHAPES),
                        help="random weights of this size instead of --model")
    args = parser.parse_args()
    for name in ("turns", "repeats"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be > 0")
    ppo_trainer = import_legacy_trl()

    cfg = load_config(args.config)
    if args.model_shape:
        model_path = str(shape_model(args.model_shape))
        args.model = f"{args.model_shape} shape, random weights"
        agent = cfg.trainable_agents[0].model_copy(
            update={"lora_layers": top_half_layers(model_path)})
    else:
        model_path = resolve_model(args.model)
        agent = lora_layers_within(cfg.trainable_agents[0], model_path)
    learner = PPOLearner(model_path, agent, cfg.ppo,
                         compute=ComputeConfig(device=args.device, dtype=args.dtype))
    placement = learner.placement
    turns = tictactoe_turns(learner, args.turns, cfg.environment.prefill)
    ours_tokens = sum(len(t.prompt_ids) + len(t.completion_ids) for t in turns)
    ours_s = timed(lambda: learner.update(turns), args.repeats, placement.device)
    threads = torch.get_num_threads()

    trainer = trl_trainer(ppo_trainer, model_path, agent, cfg.ppo, turns, 1 + args.repeats,
                          args.train_value_backbone, Path(tempfile.mkdtemp()), placement)
    torch.set_num_threads(threads)  # same threads as ours, whatever TRL's setup did
    timer = TrlTimer(ppo_trainer, placement.device)
    timer.install(trainer)
    trainer.train()
    measured = timer.updates[1:]  # the first one is the warm-up, as for ours
    if len(measured) != args.repeats or any(u.logged is None for u in measured):
        raise RuntimeError(f"expected {args.repeats} timed TRL updates, got {len(measured)}")
    trl_opt_s = statistics.median(u.optimisation_s for u in measured)
    trl_full_s = statistics.median(u.full_s for u in measured)
    trl_tokens = round(statistics.median(u.tokens for u in measured))
    trl_padded = round(statistics.median(u.padded_tokens for u in measured))

    ours_rate, trl_rate = ours_tokens / ours_s, trl_tokens / trl_opt_s
    critic = ("TRL value model fully trained (TRL default)" if args.train_value_backbone
              else "TRL value backbone frozen, score head trained (like our critic head)")
    layers = ("all" if agent.lora_layers is None
              else f"{min(agent.lora_layers)}-{max(agent.lora_layers)}")
    setup = (f"Model `{args.model}`, {len(turns)} Tic-Tac-Toe turns per update, one minibatch, "
             f"{cfg.ppo.epochs} epoch(s), LoRA r={agent.lora_rank} alpha={agent.lora_alpha} on "
             f"{'/'.join(agent.lora_targets)}, layers {layers}, on {placement.device} "
             f"(weights {placement.weights_dtype}, autocast {placement.dtype}), {threads} "
             f"torch thread(s); TRL {LEGACY_TRL} experimental PPOTrainer; "
             f"{critic}; median of {args.repeats} after a warm-up.")
    header = ["trainer step", "seconds", "tokens", "tokens/s"]
    rows = [
        ["ours: PPOLearner.update", f"{ours_s:.2f}", ours_tokens, f"{ours_rate:.0f}"],
        ["TRL: optimisation (PPO epoch)", f"{trl_opt_s:.2f}", trl_tokens, f"{trl_rate:.0f}"],
        ["TRL: full step (incl. HF generate, ref/value/reward fwd)", f"{trl_full_s:.2f}",
         trl_tokens, f"{trl_tokens / trl_full_s:.0f}"],
    ]
    ratio = f"ratio ours/TRL (tokens/s, optimisation only): {ours_rate / trl_rate:.2f}x"
    padding = (f"TRL's training forwards ran {trl_padded} token positions ({trl_tokens} real), "
               f"logits over the whole vocabulary at each; ours computes logits only at "
               f"completion positions.")
    print(setup)
    print(f"{'trainer step':58} {'seconds':>8} {'tokens':>7} {'tokens/s':>9}")
    for name, seconds, tokens, rate in rows:
        print(f"{name:58} {seconds:>8} {tokens:>7} {rate:>9}")
    print(ratio)
    print(padding)
    print("Not comparable: TRL's full step includes HF generation (ours generates in vLLM); "
          "TRL pays a separate value-model forward, ours a small MLP on base features.")
    path = append_section("trl_ppo.py", f"{setup}\n\n{markdown_table(header, rows)}\n\n"
                          f"{ratio}. {padding} What is and is not comparable: "
                          "see bench/trl_ppo.py's docstring.")
    print(f"appended to {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
