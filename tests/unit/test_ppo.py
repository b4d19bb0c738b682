"""PPO on LoRA, on the tiny random Llama: the math (GAE, collate) and that it actually learns."""

from __future__ import annotations

import pytest
import torch

from agora.algos.advantages import gae, group_advantages, informative_turns, learning_signal
from agora.algos.ppo import PPOLearner, TurnSample, chunked_token_logprobs, collate
from agora.config.agents import AgentConfig
from agora.config.training import PPOConfig
from tests.stack_helpers import FP32
from tests.stack_helpers import bandit_samples as _bandit_samples


def _gae_by_hand(rewards, values, gamma, lam):
    """One turn, walked backwards token by token (the textbook recursion)."""
    adv, last, next_value = [0.0] * len(rewards), 0.0, 0.0
    for t in range(len(rewards) - 1, -1, -1):
        last = rewards[t] + gamma * next_value - values[t] + gamma * lam * last
        adv[t], next_value = last, values[t]
    return adv


def test_gae_resets_between_turns_and_matches_hand_computation():
    samples = [TurnSample([1], [5, 6], [0.0, 0.0], 1.0), TurnSample([1], [7, 8, 9], [0.0] * 3,
                                                                      -1.0)]
    batch = collate(samples, pad_id=0)
    rewards = torch.tensor([0.0, 1.0, 0.0, 0.0, -1.0])
    values = torch.tensor([0.5, 0.2, 0.1, 0.3, 0.0])
    adv_grid, ret_grid = gae(batch.to_grid(rewards), batch.to_grid(values), gamma=1.0, lam=1.0)
    adv, ret = batch.from_grid(adv_grid), batch.from_grid(ret_grid)
    # With gamma = lambda = 1 the advantage is (sum of future rewards in the turn) - V.
    assert torch.allclose(adv, torch.tensor([1.0 - 0.5, 1.0 - 0.2, -1.0 - 0.1, -1.0 - 0.3, -1.0]))
    assert torch.allclose(ret, torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0]))
    # Discounted, on turns of unequal length: the padded grid gives the per-turn recursion.
    rewards = torch.randn(5, generator=torch.Generator().manual_seed(0))
    adv_grid, _ = gae(batch.to_grid(rewards), batch.to_grid(values), gamma=0.9, lam=0.8)
    want = (_gae_by_hand(rewards[:2].tolist(), values[:2].tolist(), 0.9, 0.8)
            + _gae_by_hand(rewards[2:].tolist(), values[2:].tolist(), 0.9, 0.8))
    torch.testing.assert_close(batch.from_grid(adv_grid), torch.tensor(want))


def test_collate_points_each_action_at_the_position_that_predicts_it():
    samples = [
        TurnSample([1, 2, 3], [7, 8], [-0.1, -0.2], 1.0),
        TurnSample([4, 5], [9], [-0.3], -1.0),
    ]
    batch = collate(samples, pad_id=0)
    assert batch.input_ids.shape[1] == 5
    # The token after each predicting position is the action itself.
    rows, positions = batch.seq_of_token.tolist(), batch.pred_pos.tolist()
    actions = [int(batch.input_ids[r, p + 1]) for r, p in zip(rows, positions, strict=True)]
    assert actions == [7, 8, 9]
    assert batch.labels.tolist() == [7, 8, 9]
    assert batch.seq_of_token.tolist() == [0, 0, 1]


def _bandit_learner(tiny_model: str, **ppo) -> tuple[PPOLearner, int, int]:
    """A learner on the tiny model and the bandit's good and bad tokens ("A", "B")."""
    agent = AgentConfig(name="a", base="m", lora_rank=8, lora_alpha=16)
    config = PPOConfig(learning_rate=5e-3, batch_turns=8, minibatch_turns=8, **ppo)
    learner = PPOLearner(tiny_model, agent, config, compute=FP32)
    tok = learner.tokenizer
    good = tok.encode("A", add_special_tokens=False)[0]
    bad = tok.encode("B", add_special_tokens=False)[0]
    return learner, good, bad


@pytest.mark.parametrize(("epochs", "kl_coef"), [(2, 0.0), (1, 0.01), (1, 0.0)],
                         ids=["two-epochs", "with-kl", "fused-single-pass"])
def test_ppo_raises_probability_of_rewarded_action(tiny_model, epochs, kl_coef):
    learner, good, bad = _bandit_learner(tiny_model, epochs=epochs, kl_coef=kl_coef)
    probe_good = _bandit_samples(learner, good, bad, 2)[0]
    before = learner.sequence_logprobs(probe_good)[0]
    stats = {}
    for _ in range(4):
        stats = learner.update(_bandit_samples(learner, good, bad, 8))
    after = learner.sequence_logprobs(probe_good)[0]
    assert after > before + 0.5, (before, after)
    assert {"pg_loss", "vf_loss", "entropy", "clipfrac", "reward_mean"} <= set(stats)
    assert ("kl" in stats) == (kl_coef > 0 or epochs > 1)  # the fused pass has no reference
    assert stats["reward_mean"] == 0.0  # half +1, half -1
    # the learning signal: every turn rewarded, +-1 -> spread 1; a critic (gae) is judged
    assert stats["reward_std"] == pytest.approx(1.0) and stats["reward_nonzero"] == 1.0
    assert stats["adv_abs"] > 0 and "explained_var" in stats and "adv_zero" not in stats


def test_checkpoint_round_trip_restores_adapter_and_optimizer(tiny_model, tmp_path):
    agent = AgentConfig(name="a", base="m", lora_rank=8, lora_alpha=16)
    ppo = PPOConfig(learning_rate=5e-3, minibatch_turns=4)
    learner = PPOLearner(tiny_model, agent, ppo, compute=FP32)
    tok = learner.tokenizer
    good, bad = (tok.encode(c, add_special_tokens=False)[0] for c in "AB")
    learner.update(_bandit_samples(learner, good, bad, 4))
    probe = _bandit_samples(learner, good, bad, 1)[0]
    trained = learner.sequence_logprobs(probe)
    learner.save_checkpoint(tmp_path / "ckpt", {"version": 3})

    fresh = PPOLearner(tiny_model, agent, ppo, compute=FP32)
    assert fresh.sequence_logprobs(probe) != trained
    meta = fresh.load_checkpoint(tmp_path / "ckpt")
    assert meta == {"version": 3}
    assert fresh.updates == 1
    assert torch.allclose(torch.tensor(fresh.sequence_logprobs(probe)), torch.tensor(trained),
                          atol=1e-6)


def test_learning_rate_anneals_linearly_over_the_budget(tiny_model):
    agent = AgentConfig(name="a", base="m", lora_rank=4, lora_alpha=8)
    ppo = PPOConfig(learning_rate=1e-3, final_lr_fraction=0.25)
    learner = PPOLearner(tiny_model, agent, ppo, compute=FP32)
    assert learner.set_budget_progress(0.0) == pytest.approx(1e-3)
    assert learner.set_budget_progress(0.5) == pytest.approx(6.25e-4)
    assert learner.set_budget_progress(1.0) == pytest.approx(2.5e-4)
    assert learner.set_budget_progress(3.0) == pytest.approx(2.5e-4)  # clamped past the end
    tok = learner.tokenizer
    good, bad = (tok.encode(c, add_special_tokens=False)[0] for c in "AB")
    stats = learner.update(_bandit_samples(learner, good, bad, 4))
    assert stats["lr"] == pytest.approx(2.5e-4)  # the optimizer really stepped with it
    constant = PPOLearner(tiny_model, agent, PPOConfig(learning_rate=1e-3),
                          compute=FP32)
    assert constant.set_budget_progress(0.9) == pytest.approx(1e-3)


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_group_advantages_sum_to_zero_within_each_group(kind):
    rewards = [1.0, -1.0, 0.0, 1.0, 0.5, 0.5, 3.0, 2.0]
    groups = ["a", "a", "a", "a", "b", "b", None, "c"]
    adv = group_advantages(rewards, groups, kind)
    assert sum(adv[:4]) == pytest.approx(0.0, abs=1e-9)
    assert adv[4:6] == [0.0, 0.0]  # equal rewards: nothing to prefer
    assert adv[6:] == [0.0, 0.0]  # alone in its group: no baseline, no push
    assert adv[0] > 0 > adv[1] and adv[0] == pytest.approx(adv[3])
    if kind == "rloo":  # reward minus the mean of the others
        assert adv[0] == pytest.approx(1.0 - (-1.0 + 0.0 + 1.0) / 3)
    else:  # standardised within the group
        group = torch.tensor(rewards[:4])
        assert adv[1] == pytest.approx(((group[1] - group.mean()) / group.std()).item(), rel=1e-4)


def test_informative_turns_are_those_of_groups_that_did_not_all_score_alike():
    rewards = [1.0, 0.0, 1.0, 0.5, 0.5, 2.0, 0.0, 0.0, 0.0]
    groups = ["a", "a", "a", "b", "b", None, "c", "c", "d"]
    assert informative_turns(rewards, groups) == [True, True, True, False, False, False,
                                                  False, False, False]
    # Exactly the turns group_advantages can give a non-zero advantage to.
    for kind in ("grpo", "rloo"):
        adv = group_advantages(rewards, groups, kind)
        assert all(a == 0.0 for a, kept in zip(adv, informative_turns(rewards, groups),
                                               strict=True) if not kept)


def test_filtering_groups_needs_group_advantages():
    with pytest.raises(ValueError, match="filter_groups"):
        PPOConfig(filter_groups=True)
    assert PPOConfig(advantage="rloo", group_size=4, filter_groups=True).max_filtered_batches == 4


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_critic_free_advantages_learn_the_bandit_and_leave_the_critic_alone(tiny_model, kind):
    learner, good, bad = _bandit_learner(tiny_model, advantage=kind, group_size=8,
                                         kl_coef=0.01)
    probe = _bandit_samples(learner, good, bad, 2)[0]
    before = learner.sequence_logprobs(probe)[0]
    critic = [p.detach().clone() for p in learner.value_head.parameters()]
    for _ in range(4):
        samples = _bandit_samples(learner, good, bad, 8)
        for sample in samples:
            sample.group = "same-prompt"
        stats = learner.update(samples)
    assert learner.sequence_logprobs(probe)[0] > before + 0.5
    assert stats["vf_loss"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(critic, learner.value_head.parameters(),
                                                 strict=True))
    assert stats["adv_zero"] == 0.0 and "explained_var" not in stats  # one mixed group
    # Ungrouped, the same batch has no baseline: every advantage is 0 and (no KL term, no
    # earlier steps' momentum) nothing moves; the learning signal says so.
    fresh, _, _ = _bandit_learner(tiny_model, advantage=kind, group_size=8, kl_coef=0.0)
    still = fresh.sequence_logprobs(probe)[0]
    alone = fresh.update(_bandit_samples(fresh, good, bad, 8))
    assert fresh.sequence_logprobs(probe)[0] == pytest.approx(still, abs=1e-6)
    assert alone["adv_zero"] == 1.0 and alone["adv_abs"] == 0.0


def test_the_learning_signal_reads_what_the_batch_could_teach():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0])
    returns = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.5])
    perfect = learning_signal(rewards, returns - 0.5, returns, returns.clone(), None)
    assert perfect["reward_std"] == pytest.approx(0.5)
    assert perfect["reward_nonzero"] == pytest.approx(0.5)
    assert perfect["explained_var"] == pytest.approx(1.0)  # values are the returns
    blind = learning_signal(rewards, returns, returns, torch.zeros(5), None)
    assert blind["explained_var"] == pytest.approx(0.0, abs=1e-6)  # a baseline of 0
    flat = learning_signal(torch.zeros(4), torch.zeros(5), torch.zeros(5), torch.zeros(5),
                           [0.0, 0.0, 0.5, -0.5])
    assert flat["reward_std"] == 0.0 and flat["adv_zero"] == pytest.approx(0.5)


def test_critic_free_advantages_need_groups():
    with pytest.raises(ValueError, match="group_size >= 2"):
        PPOConfig(advantage="grpo")


@pytest.mark.parametrize("masked", [False, True], ids=["whole-vocab", "allowed-tokens"])
def test_chunked_logprobs_give_the_same_values_and_gradients_as_one_pass(masked):
    # The learner takes the softmax a chunk of tokens at a time (memory: a 262k vocabulary);
    # chunk edges, temperature, the allowed-token mask and the backward must not change a number.
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(23, 50, generator=gen)
    labels = torch.randint(0, 50, (23,), generator=gen)
    allowed = None
    if masked:
        allowed = torch.rand(23, 50, generator=gen) > 0.5
        allowed[torch.arange(23), labels] = True
    grads, results = [], []
    for chunk in (1000, 5):  # one pass; 5 chunks of 5 and a last one of 3
        leaf = logits.clone().requires_grad_(True)
        logp, entropy = chunked_token_logprobs(leaf, labels, allowed, 0.7, chunk=chunk)
        (logp.sum() - 0.3 * entropy.sum()).backward()
        results.append((logp.detach(), entropy.detach()))
        grads.append(leaf.grad)
    assert torch.allclose(results[0][0], results[1][0], atol=1e-6)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-6)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    assert torch.isfinite(grads[1]).all()
    # And it is the tempered distribution: at T = 1 the numbers differ.
    at_one, _ = chunked_token_logprobs(logits, labels, allowed, 1.0, chunk=5)
    assert (at_one - results[1][0]).abs().max() > 1e-2
