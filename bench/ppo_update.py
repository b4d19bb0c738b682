"""PPO update throughput (tokens/s), on any device, against baselines from the same run:

* floor: one plain forward + backward of the adapter over the same sequences, in one batched
  forward under the same autocast as the update (what any LoRA trainer must pay at least once
  per update; our update also pays a no-grad reference pass);
* the update with the shared-prompt-prefix forward forced on and forced off, beside the one
  ``trainer.shared_prefix: auto`` picks on this device;
* on a GPU: the share of the update's wall time the GPU is busy (torch.profiler kernel time)
  and the peak memory.

``--sweep`` measures the shared-prefix speed-up against the share of tokens the prefix saves
(synthetic turns), which is where ``shared_prefix.MIN_SAVED_SHARE`` comes from.

    .venv/bin/python bench/ppo_update.py [--device auto] [--dtype auto]
        [--model-shape config|135m|0.5b|1.5b] [--set ttt32|ttt64|long64|disc32] [--compile]
        [--sweep]

``--model-shape config`` is the config's own model (SmolLM2-135M-Instruct here); the other
shapes are random weights built from a config (bench/model_shapes.py), no download.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import statistics
import time
from pathlib import Path

import torch
from model_shapes import SHAPES, shape_model, top_half_layers
from results import append_section, markdown_table

from agora.algos import shared_prefix
from agora.algos.batch import collate
from agora.algos.compute import ComputeConfig
from agora.algos.ppo import PPOLearner, TurnSample
from agora.config.run import load_config
from agora.envs.tictactoe import TicTacToe
from agora.serving.model_folders import resolve_model

SETS = {"ttt32": ("tictactoe", 32), "ttt64": ("tictactoe", 64), "long64": ("long", 64),
        "disc32": ("discussion", 32)}


def tictactoe_turns(learner: PPOLearner, n: int, prefill: str) -> list[TurnSample]:
    """``n`` turns from games of random legal moves, with on-policy behaviour logprobs."""
    env, turns, game = TicTacToe(), [], 0
    rng = torch.Generator().manual_seed(0)
    while len(turns) < n:
        env.reset(seed=game)
        game += 1
        while not env.done and len(turns) < n:
            text = learner.tokenizer.apply_chat_template(
                env.observation(env.current_seat), add_generation_prompt=True, tokenize=False)
            prompt = learner.tokenizer.encode(text + prefill, add_special_tokens=False)
            legal = env.legal_actions()
            move = legal[int(torch.randint(len(legal), (1,), generator=rng))]
            completion = learner.tokenizer.encode(move[len(prefill):], add_special_tokens=False)
            sample = TurnSample(prompt, completion, [], float(len(turns) % 3 - 1))
            sample.behaviour_logprobs = learner.sequence_logprobs(sample)
            turns.append(sample)
            env.step(move)
    return turns


def synthetic_turns(learner: PPOLearner, n: int, tokens: int, shared_share: float,
                    completion: int = 8) -> list[TurnSample]:
    """``n`` turns of ~``tokens`` tokens whose first ``shared_share`` of the prompt is the same
    instructions and the rest differs per turn (a long observation), with random completions."""
    rng = torch.Generator().manual_seed(1)
    low, high = 1000, len(learner.tokenizer) - 1  # clear of the special tokens

    def draw(k: int) -> list[int]:
        return torch.randint(low, high, (k,), generator=rng).tolist()

    prompt_len = tokens - completion
    shared = draw(round(prompt_len * shared_share))
    turns = []
    for i in range(n):
        sample = TurnSample(shared + draw(prompt_len - len(shared) + i % 5), draw(completion),
                            [], float(i % 3 - 1))
        sample.behaviour_logprobs = learner.sequence_logprobs(sample)
        turns.append(sample)
    return turns


def discussion_turns(learner: PPOLearner, n: int) -> list[TurnSample]:
    """``n`` turns shaped like a MAPoRL discussion learner's batch (configs/maporl_math.yaml,
    rloo in groups of 4): per question, 4 first-round turns (the same ~60-token prompt) and 4
    second-round ones (~130 tokens: that prompt's question, its own answer and the
    teammate's), every completion ~24 tokens; random token ids."""
    rng = torch.Generator().manual_seed(2)
    low, high = 1000, len(learner.tokenizer) - 1

    def draw(k: int) -> list[int]:
        return torch.randint(low, high, (k,), generator=rng).tolist()

    instructions, turns = draw(46), []
    while len(turns) < n:
        asked = instructions + draw(10)
        first = [asked + draw(4)] * 4  # a group: 4 samples of the same prompt
        second = [asked + draw(60 + 8 * i) for i in range(4)]
        for prompt in first + second:
            sample = TurnSample(prompt, draw(20 + len(turns) % 9), [], float(len(turns) % 2))
            sample.behaviour_logprobs = learner.sequence_logprobs(sample)
            turns.append(sample)
    return turns[:n]


def synchronize(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def floor_step(learner: PPOLearner, turns: list[TurnSample]) -> None:
    batch = collate(turns, learner.pad_id).to(learner.device)
    with learner._autocast():
        # The learner's own model call (decoder, then the LM head at the action positions only)
        # over every row, padded, with no prefix sharing.
        _, logits = learner.forward_module(batch.input_ids, batch.attention_mask, 0,
                                           batch.seq_of_token, batch.pred_pos)
        logp, _ = learner._logprobs(logits.float(), batch.labels)
    learner.model.zero_grad(set_to_none=True)
    (-logp.mean()).backward()


def timed(fn, repeats: int, device: torch.device = torch.device("cpu")) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def with_sharing(learner: PPOLearner, mode: str) -> PPOLearner:
    learner.placement = dataclasses.replace(learner.placement, shared_prefix=mode)
    return learner


def gpu_busy_share(learner: PPOLearner, turns: list[TurnSample]) -> float | None:
    """Kernel time / wall time of one update (None on the CPU)."""
    if learner.device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    synchronize(learner.device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        learner.update(turns)
        synchronize(learner.device)
        wall = time.perf_counter() - start
    kernels_us = sum(e.self_device_time_total for e in prof.key_averages()
                     if e.device_type == torch.autograd.DeviceType.CUDA)
    return kernels_us / 1e6 / wall


def peak_memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # process peak (KiB)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU, {torch.get_num_threads()} thread(s)"


def build_learner(args, cfg) -> tuple[PPOLearner, str]:
    agent = cfg.trainable_agents[0]
    if args.model_shape == "config":
        model_name = cfg.models[agent.base].model
        path = resolve_model(model_name)
    else:
        model_name = f"{args.model_shape} shape, random weights"
        path = str(shape_model(args.model_shape))
        agent = agent.model_copy(update={"lora_layers": top_half_layers(path)})
    compute = ComputeConfig(device=args.device, dtype=args.dtype, compile=args.compile)
    return PPOLearner(path, agent, cfg.ppo, compute=compute), model_name


def sweep(learner: PPOLearner, repeats: int) -> list[list[str]]:
    rows = []
    for share in (0.05, 0.1, 0.2, 0.4, 0.6):
        turns = synthetic_turns(learner, 32, 160, share)
        on = timed(lambda t=turns: with_sharing(learner, "on").update(t), repeats, learner.device)
        off = timed(lambda t=turns: with_sharing(learner, "off").update(t), repeats,
                    learner.device)
        lengths = [len(t.prompt_ids) + len(t.completion_ids) for t in turns]
        groups = shared_prefix.prefix_groups([t.prompt_ids for t in turns], lengths)
        saved = shared_prefix.saved_share(groups, lengths)
        rows.append([f"{share:.2f}", f"{saved:.2f}", f"{off:.3f}", f"{on:.3f}",
                     f"{off / on:.2f}x"])
        print("shared prompt share {} (tokens saved {}): off {} s, on {} s, speed-up {}".format(
            *rows[-1]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=Path("configs/tictactoe_selfplay.yaml"))
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp16", "fp32"])
    parser.add_argument("--model-shape", default="config", choices=["config", *SHAPES])
    parser.add_argument("--set", default="ttt32", choices=list(SETS))
    parser.add_argument("--turns", type=int, help="override the set's number of turns")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="trainer.compile: true")
    parser.add_argument("--sweep", action="store_true",
                        help="shared-prefix speed-up vs tokens saved, instead of the table")
    args = parser.parse_args()
    cfg = load_config(args.config)
    learner, model_name = build_learner(args, cfg)
    device = learner.device
    where = (f"{device_name(device)}, weights {learner.placement.weights_dtype}, autocast "
             f"{learner.placement.dtype}, attention {learner.placement.attn_implementation}"
             f"{', torch.compile' if args.compile else ''}")
    if args.sweep:
        rows = sweep(learner, args.repeats)
        append_section("ppo_update.py --sweep", f"Model `{model_name}` on {where}; 32 "
                       f"synthetic turns of ~160 tokens, median of {args.repeats}.\n\n"
                       + markdown_table(["shared prompt share", "tokens saved", "no sharing s",
                                         "sharing s", "speed-up"], rows))
        return

    kind, count = SETS[args.set]
    count = args.turns or count
    if kind == "tictactoe":
        turns = tictactoe_turns(learner, count, cfg.environment.prefill)
    elif kind == "discussion":
        turns = discussion_turns(learner, count)
    else:
        turns = synthetic_turns(learner, count, 270, 0.4)
    tokens = sum(len(t.prompt_ids) + len(t.completion_ids) for t in turns)
    print(f"{model_name} on {where}: {len(turns)} turns, {tokens} tokens")

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    results = {"floor (fwd+bwd)": timed(lambda: floor_step(learner, turns), args.repeats,
                                        device)}
    for mode in ("auto", "on", "off"):
        results[f"PPO update, sharing {mode}"] = timed(
            lambda m=mode: with_sharing(learner, m).update(turns), args.repeats, device)
    busy = gpu_busy_share(with_sharing(learner, "auto"), turns)
    peak = peak_memory_gib(device)

    floor = results["floor (fwd+bwd)"]
    print(f"{'step':28} {'seconds':>8} {'tokens/s':>9} {'vs floor':>9}")
    for name, seconds in results.items():
        print(f"{name:28} {seconds:8.3f} {tokens / seconds:9.0f} {floor / seconds:8.2f}x")
    speedup = results["PPO update, sharing off"] / results["PPO update, sharing on"]
    extra = f"shared prefix speed-up: {speedup:.2f}x; peak memory {peak:.1f} GiB" + (
        "" if busy is None else f"; GPU busy {busy:.0%} of an update")
    print(extra)
    rows = [[name, f"{seconds:.3f}", f"{tokens / seconds:.0f}", f"{floor / seconds:.2f}x"]
            for name, seconds in results.items()]
    append_section("ppo_update.py", f"Model `{model_name}` on {where}; set {args.set}: "
                   f"{len(turns)} turns, {tokens} tokens; median of {args.repeats}.\n\n"
                   f"{markdown_table(['step', 'seconds', 'tokens/s', 'vs floor'], rows)}\n\n"
                   f"{extra}")


if __name__ == "__main__":
    main()
