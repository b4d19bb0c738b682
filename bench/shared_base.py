"""Several LoRA learners on one base (``trainer.share_base``) against a base copy per learner,
in the same run: memory after building them, and the time of one PPO update of each.

Each arm runs in a process of its own (a fresh process per arm: a process's peak memory never
goes down). The shared arm also times the one-batched-forward alternative: every agent's turns
forwarded together through PEFT's mixed-adapter batch (``adapter_names``), forward + backward,
against one forward + backward per adapter: the reason agora forwards learners one by one.

    .venv/bin/python bench/shared_base.py [--config configs/maporl_math.yaml] [--device auto]
        [--dtype auto] [--model-shape config|135m|0.5b|1.5b] [--learners 3] [--turns 32]
        [--repeats 2]

``--learners`` copies of the config's first LoRA agent are the learners (default 3: a
three-agent discussion).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import torch
from model_shapes import SHAPES, shape_model, top_half_layers
from ppo_update import device_name, discussion_turns, timed
from results import append_section, markdown_table

from agora.algos.batch import collate
from agora.algos.compute import ComputeConfig
from agora.algos.ppo import PPOLearner, TurnSample
from agora.algos.shared_base import SharedBase
from agora.config.base import ConfigError
from agora.config.run import load_config
from agora.serving.model_folders import resolve_model


def resident_gib() -> float:
    """This process's resident memory now (/proc/self/statm: pages)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096 / 2**30


def process_memory_gib(device: torch.device) -> float:
    """The process's memory after the updates: peak allocated on a GPU, resident on the CPU
    (where frozen fp32 weights read from safetensors may stay memory-mapped from the page
    cache, which copies made apart can share: the weight count below is the device-free
    figure)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resident_gib()


def weights_gib(learners: list[PPOLearner]) -> float:
    """Bytes of every distinct weight tensor the learners hold (models and critics)."""
    seen: dict[int, int] = {}
    for learner in learners:
        for module in (learner.model, learner.value_head):
            for tensor in [*module.parameters(), *module.buffers()]:
                seen[tensor.data_ptr()] = tensor.numel() * tensor.element_size()
    return sum(seen.values()) / 2**30


def build(args, shared: bool) -> list[PPOLearner]:
    """``--learners`` LoRA learners shaped like the config's first agent."""
    cfg = load_config(args.config)
    template = next(a for a in cfg.agents if a.finetune == "lora")
    if args.model_shape == "config":
        path = resolve_model(cfg.models[template.base].model)
    else:  # random weights of a bigger shape, no download (bench/model_shapes.py)
        path = str(shape_model(args.model_shape))
        template = template.model_copy(update={"lora_layers": top_half_layers(path)})
    compute = ComputeConfig(device=args.device, dtype=args.dtype)
    pool = SharedBase() if shared else None
    return [PPOLearner(path, template.model_copy(update={"name": f"learner{i}"}), cfg.ppo,
                       compute=compute, shared_base=pool)
            for i in range(args.learners)]


def forward_backward(learner: PPOLearner, turns: list[TurnSample],
                     adapters: list[str] | None = None) -> None:
    """One forward + backward of the action logprobs over ``turns``: through the learner's
    active adapter, or with ``adapters`` (one per turn) through PEFT's mixed-adapter batch."""
    batch = collate(turns, learner.pad_id).to(learner.device)
    hooks = (learner.model._enable_peft_forward_hooks(adapter_names=adapters) if adapters
             else contextlib.nullcontext())
    with learner._autocast(), hooks:
        _, logits = learner.forward_module(batch.input_ids, batch.attention_mask, 0,
                                           batch.seq_of_token, batch.pred_pos)
    logp, _ = learner._logprobs(logits.float(), batch.labels)
    learner.model.zero_grad(set_to_none=True)
    (-logp.mean()).backward()


def mixed_batch(learners: list[PPOLearner], turns: dict[str, list[TurnSample]],
                repeats: int) -> dict[str, float]:
    """Seconds of forward + backward over every learner's turns: one per adapter, and one
    mixed-adapter batch. PEFT allows ``adapter_names`` in eval mode only; with no LoRA
    dropout eval and train mode compute the same, and gradients still flow."""
    model = learners[0].model
    model.eval()
    for learner in learners:
        for param in learner.policy_params:
            param.requires_grad_(True)

    def apart() -> None:
        for learner in learners:
            forward_backward(learner, turns[learner.agent.name])

    every = [t for learner in learners for t in turns[learner.agent.name]]
    names = [learner.adapter for learner in learners for _ in turns[learner.agent.name]]
    device = learners[0].device
    return {"fwd+bwd, one per adapter": timed(apart, repeats, device),
            "fwd+bwd, one mixed-adapter batch": timed(
                lambda: forward_backward(learners[0], every, names), repeats, device)}


def arm(args, shared: bool) -> dict:
    learners = build(args, shared)
    device = learners[0].device
    turns = {learner.agent.name: discussion_turns(learner, args.turns) for learner in learners}

    def update_all() -> None:
        for learner in learners:
            learner.update(turns[learner.agent.name])

    out = {"learners": len(learners), "weights_gib": weights_gib(learners),
           "updates_s": timed(update_all, args.repeats, device),
           "memory_gib": process_memory_gib(device),
           "where": f"{device_name(device)}, weights {learners[0].placement.weights_dtype}",
           "model": learners[0].model_path}
    if shared:
        out["mixed"] = mixed_batch(learners, turns, args.repeats)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=Path("configs/maporl_math.yaml"))
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp16", "fp32"])
    parser.add_argument("--model-shape", default="config", choices=["config", *SHAPES])
    parser.add_argument("--learners", type=int, default=3, help="LoRA learners of one base")
    parser.add_argument("--turns", type=int, default=32, help="turns per learner")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--arm", choices=["apart", "shared"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        load_config(args.config)
    except ConfigError as exc:
        sys.exit(f"--config: {exc}")
    if args.arm:  # a child: one arm, its figures as one JSON line
        print(json.dumps(arm(args, args.arm == "shared")))
        return

    results = {}
    for name in ("apart", "shared"):
        done = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--arm", name],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"the {name} arm failed:\n{done.stderr[-3000:]}")
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    apart, shared = results["apart"], results["shared"]
    def row(name: str, figures: dict) -> list[str]:
        return [name, f"{figures['weights_gib']:.2f}",
                f"{figures['weights_gib'] / apart['weights_gib']:.2f}x",
                f"{figures['memory_gib']:.2f}", f"{figures['updates_s']:.2f}",
                f"{figures['updates_s'] / apart['updates_s']:.2f}x"]

    rows = [row("a base copy per learner", apart), row("one shared base", shared)]
    mixed = shared["mixed"]
    per_adapter = mixed["fwd+bwd, one per adapter"]
    mixed_rows = [[name, f"{seconds:.2f}", f"{seconds / per_adapter:.2f}x"]
                  for name, seconds in mixed.items()]
    body = (f"`{Path(shared['model']).name}` on {shared['where']}; {shared['learners']} LoRA "
            f"learners shaped like `{args.config}`'s first agent, {args.turns} "
            f"discussion-shaped turns each, median of {args.repeats}. Weights: every distinct "
            f"weight tensor the learners hold; process: resident set after the updates (CPU) "
            f"or peak allocated (GPU); updates: one PPO update of every learner.\n\n"
            + markdown_table(["learners", "weights GiB", "vs apart", "process GiB",
                              "updates s", "vs apart"], rows)
            + "\n\n" + markdown_table(["every learner's turns", "seconds", "vs one per adapter"],
                                      mixed_rows))
    print(body)
    append_section("shared_base.py", body)


if __name__ == "__main__":
    main()
