"""The shared-prefix forward must equal a plain forward: same hidden states, same gradients."""

from __future__ import annotations

import dataclasses

import torch

from agora.algos import shared_prefix
from agora.algos.ppo import PPOLearner, TurnSample, collate
from agora.config.agents import AgentConfig
from agora.config.training import PPOConfig
from agora.envs.tictactoe import TicTacToe
from tests.stack_helpers import FP32


def test_prefix_groups_split_on_the_role_token_where_it_pays_and_stop_before_the_shortest_prompt():
    shared = list(range(100, 200))  # instructions, a role token, more instructions
    prompts = [
        shared + [1] + shared + [7, 8, 9],
        shared + [1] + shared + [5],
        shared + [2] + shared + [6, 6],
        shared + [2] + shared + [4],
    ]
    groups = shared_prefix.prefix_groups(prompts)
    assert sorted(groups) == [([0, 1], 201), ([2, 3], 201)]
    # Short prompts: a second forward call costs more than the 40 tokens it would save.
    short = shared[:20]
    assert shared_prefix.prefix_groups([short + [1] + short + [7, 8, 9], short + [1] + short,
                                        short + [2] + short + [6], short + [2] + short]
                                       ) == [([0, 1, 2, 3], 20)]
    # One prompt is the whole prefix of another: stop one short so it keeps a suffix.
    assert shared_prefix.prefix_groups([shared, shared + [3]]) == [([0, 1], 99)]
    # Prompts with nothing in common, or a lone row, forward plainly.
    assert shared_prefix.prefix_groups([[1, 2, 3], [4, 5, 6]]) == [([0, 1], 0)]
    assert shared_prefix.prefix_groups([shared]) == [([0], 0)]


def test_prefix_groups_part_a_discussion_batch_by_question_and_round():
    """A discussion learner's batch: per question, 4 first-round prompts (the same ~60 tokens)
    and 4 second-round prompts (~130: its own answer and the teammate's). One group under the
    instructions' common prefix pads every first-round row to the longest second-round one;
    the chosen groups forward far fewer tokens than that."""
    instructions = list(range(100, 146))
    prompts, lengths = [], []
    for question in range(2):
        asked = instructions + [10 + question] * 8
        for _ in range(4):
            prompts.append(asked + [2, 3, 4])  # round 1: the question, then the reply prompt
            lengths.append(len(prompts[-1]) + 20)
        for sample in range(4):
            own = [50 + 10 * question + sample] * (60 + 5 * sample)  # its own first answer
            prompts.append(asked + [5] + own + [6] * 10)
            lengths.append(len(prompts[-1]) + 20)
    groups = shared_prefix.prefix_groups(prompts, lengths)
    rounds_one = {frozenset(range(0, 4)), frozenset(range(8, 12))}
    assert rounds_one <= {frozenset(rows) for rows, _ in groups}
    assert all(prefix == 56 for rows, prefix in groups if frozenset(rows) in rounds_one)
    assert sorted(r for rows, _ in groups for r in rows) == list(range(16))
    one_group = [(list(range(16)), 46)]
    chosen = shared_prefix.forwarded_tokens(groups, lengths)
    assert chosen < 0.7 * shared_prefix.forwarded_tokens(one_group, lengths)
    assert shared_prefix.saved_share(groups, lengths) > shared_prefix.saved_share(one_group,
                                                                                 lengths)


def _learner(tiny_model) -> PPOLearner:
    agent = AgentConfig(name="a", base="m", lora_rank=8, lora_alpha=16)
    learner = PPOLearner(tiny_model, agent, PPOConfig(), compute=FP32)
    with torch.no_grad():  # a non-zero adapter, so the prefix's keys/values depend on it
        for p in learner.policy_params:
            p.add_(torch.randn_like(p) * 0.05)
    return learner


def _tictactoe_turns(learner: PPOLearner, n: int) -> list[TurnSample]:
    env, turns = TicTacToe(), []
    game = 0
    while len(turns) < n:
        env.reset(seed=game)
        game += 1
        while not env.done and len(turns) < n:
            seat = env.current_seat
            prompt = learner.tokenizer.apply_chat_template(
                env.observation(seat), add_generation_prompt=True, tokenize=False) + "["
            ids = learner.tokenizer.encode(prompt, add_special_tokens=False)
            move = env.legal_actions()[len(turns) % len(env.legal_actions())]
            completion = learner.tokenizer.encode(move[1:], add_special_tokens=False)
            turns.append(TurnSample(ids, completion, [0.0] * len(completion), 1.0))
            env.step(move)
    return turns


def _plain_action_hidden(learner: PPOLearner, batch) -> torch.Tensor:
    body = learner.model.get_base_model().model
    hidden = body(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    return hidden[batch.seq_of_token, batch.pred_pos]


def test_shared_prefix_forward_matches_plain_forward_values_and_gradients(tiny_model):
    learner = _learner(tiny_model)
    batch = collate(_tictactoe_turns(learner, 12), learner.pad_id)
    groups = shared_prefix.prefix_groups(batch.prompts)
    # X and O prompts apart, and each split again where a longer prefix pays
    assert len(groups) >= 2 and all(prefix > 40 for _, prefix in groups)

    def loss_and_grads(hidden):
        loss = hidden.pow(2).mean()
        learner.model.zero_grad(set_to_none=True)
        loss.backward()
        return hidden.detach(), [p.grad.clone() for p in learner.policy_params]

    learner.placement = dataclasses.replace(learner.placement, shared_prefix="on")
    shared_hidden, shared_grads = loss_and_grads(learner._action_forward(batch)[0])
    plain_hidden, plain_grads = loss_and_grads(_plain_action_hidden(learner, batch))
    assert shared_hidden.shape == plain_hidden.shape
    torch.testing.assert_close(shared_hidden, plain_hidden, atol=1e-4, rtol=1e-4)
    for got, want in zip(shared_grads, plain_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-3)


def test_minibatch_rows_select_their_own_tokens_in_flat_order(tiny_model):
    learner = _learner(tiny_model)
    batch = collate(_tictactoe_turns(learner, 10), learner.pad_id)
    rows = [7, 2, 5]
    with torch.no_grad():
        every = _plain_action_hidden(learner, batch)
        for mode in ("on", "off"):
            learner.placement = dataclasses.replace(learner.placement, shared_prefix=mode)
            some, _ = learner._action_forward(batch, rows)
            selected = torch.isin(batch.seq_of_token, torch.tensor(rows))
            torch.testing.assert_close(some, every[selected], atol=1e-4, rtol=1e-4)
