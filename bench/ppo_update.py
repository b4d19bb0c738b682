"""PPO update throughput (tokens/s) on real Tic-Tac-Toe turns, against two baselines from the
same run:

* floor: one plain forward + backward of the adapter over the same sequences (what any
  LoRA trainer must pay at least once per update; our update also pays a no-grad reference pass);
* no-sharing: the same PPO update with the shared-prefix forward switched off.

    .venv/bin/python bench/ppo_update.py [--config configs/tictactoe_selfplay.yaml] [--turns 32]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from results import append_section, markdown_table

from agora.algos import shared_prefix
from agora.algos.ppo import PPOLearner, TurnSample, collate
from agora.config import load_config
from agora.envs.tictactoe import TicTacToe
from agora.models import resolve_model


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


def floor_step(learner: PPOLearner, turns: list[TurnSample]) -> None:
    batch = collate(turns, learner.pad_id)
    body = learner.model.get_base_model().model
    hidden = body(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    logp, _ = learner._logprobs(hidden[batch.seq_of_token, batch.pred_pos], batch.labels)
    learner.model.zero_grad(set_to_none=True)
    (-logp.mean()).backward()


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, default=Path("configs/tictactoe_selfplay.yaml"))
    parser.add_argument("--turns", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cfg = load_config(args.config)
    agent = cfg.trainable_agents[0]
    learner = PPOLearner(resolve_model(cfg.models[agent.base].model), agent, cfg.ppo)
    turns = tictactoe_turns(learner, args.turns, cfg.environment.prefill)
    tokens = sum(len(t.prompt_ids) + len(t.completion_ids) for t in turns)
    print(f"{len(turns)} turns, {tokens} tokens, {torch.get_num_threads()} thread(s)")

    results = {"floor (fwd+bwd)": timed(lambda: floor_step(learner, turns), args.repeats)}
    results["PPO update, shared prefix"] = timed(lambda: learner.update(turns), args.repeats)
    saved = shared_prefix.MIN_SHARED_TOKENS
    shared_prefix.MIN_SHARED_TOKENS = 10**9
    results["PPO update, no sharing"] = timed(lambda: learner.update(turns), args.repeats)
    shared_prefix.MIN_SHARED_TOKENS = saved

    floor = results["floor (fwd+bwd)"]
    print(f"{'step':28} {'seconds':>8} {'tokens/s':>9} {'vs floor':>9}")
    for name, seconds in results.items():
        print(f"{name:28} {seconds:8.2f} {tokens / seconds:9.0f} {floor / seconds:8.2f}x")
    speedup = results["PPO update, no sharing"] / results["PPO update, shared prefix"]
    print(f"shared prefix speed-up: {speedup:.2f}x")
    rows = [[name, f"{seconds:.2f}", f"{tokens / seconds:.0f}", f"{floor / seconds:.2f}x"]
            for name, seconds in results.items()]
    append_section("ppo_update.py", f"Model `{cfg.models[agent.base].model}`, {len(turns)} "
                   f"turns, {tokens} tokens, {torch.get_num_threads()} thread(s), median of "
                   f"{args.repeats}.\n\n"
                   f"{markdown_table(['step', 'seconds', 'tokens/s', 'vs floor'], rows)}\n\n"
                   f"shared prefix speed-up: {speedup:.2f}x")


if __name__ == "__main__":
    main()
