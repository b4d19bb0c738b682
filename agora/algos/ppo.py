"""Token-level PPO on a LoRA adapter, for one agent. Read top to bottom, like CleanRL's ppo.py.

One ``PPOLearner`` per trainable agent (multi-model PPO = several of these side by side). Each
agent turn is one sequence: prompt tokens (the env's view + prefill) then completion tokens (what
vLLM sampled). Only completion tokens are actions. The turn's reward, decided by the reward
service, lands on its last token.

Per update:
1. One no-grad forward with the adapter *disabled* (= the frozen reference policy) gives, at
   each completion position, the reference logprob (for the KL penalty) and the hidden state the
   critic reads. Why the critic reads the frozen base's features: it costs no extra forward and
   keeps value gradients out of the adapter, so the policy's few LoRA parameters serve the
   policy alone. The value head is a small MLP trained on those features. (With no KL term
   and a single pass, this forward is skipped and the critic reads the policy's own, detached
   features instead: see ``update``.)
2. Per-token reward = -kl_coef * (logp_behaviour - logp_ref), plus the turn reward on the last
   token; GAE(gamma, lambda) over the completion tokens gives advantages and returns.
3. For ``epochs`` passes over minibatches: forward with the adapter on, ratio against the
   *behaviour* logprobs vLLM reported (rollouts run asynchronously, so the behaviour policy may
   be up to ``max_staleness`` versions old; the clipped ratio is also the off-policy correction),
   clipped surrogate loss, optional entropy bonus, grad-norm clip, AdamW step.
   The value head is fitted to the returns with its own optimizer.

Memory: logits are computed only at completion positions (a few tokens per turn), never over the
whole 49k-token vocabulary at every prompt position.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from agora.algos import shared_prefix
from agora.config import AgentConfig, PPOConfig
from agora.hardware import cpu_has_fast_bf16


@dataclass
class TurnSample:
    """One agent turn, as the trainer learns from it."""

    prompt_ids: list[int]
    completion_ids: list[int]
    behaviour_logprobs: list[float]
    reward: float
    version: int = 0
    role: str = ""
    # Legal-action decoding: the completions vLLM restricted this turn to (None: free text).
    choices: list[str] | None = None


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T] right-padded
    attention_mask: torch.Tensor  # [B, T]
    prompts: list[list[int]]  # each turn's prompt tokens (to find shared prefixes)
    pred_pos: torch.Tensor  # [N] position (within its row) of the logits predicting each action
    labels: torch.Tensor  # [N] the action token ids
    seq_of_token: torch.Tensor  # [N] which sample each action token belongs to
    behaviour_logprobs: torch.Tensor  # [N]
    rewards: torch.Tensor  # [B]
    # [N, vocab] tokens each action could have been (legal-action decoding); None: any token.
    allowed: torch.Tensor | None = None


def collate(samples: list[TurnSample], pad_id: int,
            masks: list[torch.Tensor | None] | None = None) -> Batch:
    """Right-padded rows plus the flat per-action-token views. ``masks`` (one per sample, from
    ``action_mask.ChoiceMasker``; None rows are unconstrained) become ``Batch.allowed``."""
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in samples]
    width = max(lengths)
    input_ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(samples), width), dtype=torch.long)
    pred_pos, labels, seq_of_token, behaviour = [], [], [], []
    for row, s in enumerate(samples):
        ids = s.prompt_ids + s.completion_ids
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
        for k, token in enumerate(s.completion_ids):
            # The logits at position p predict token p+1: action k sits at len(prompt)+k.
            pred_pos.append(len(s.prompt_ids) + k - 1)
            labels.append(token)
            seq_of_token.append(row)
        behaviour.extend(s.behaviour_logprobs)
    return Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        prompts=[s.prompt_ids for s in samples],
        pred_pos=torch.tensor(pred_pos),
        labels=torch.tensor(labels),
        seq_of_token=torch.tensor(seq_of_token),
        behaviour_logprobs=torch.tensor(behaviour, dtype=torch.float32),
        rewards=torch.tensor([s.reward for s in samples], dtype=torch.float32),
        allowed=_stack_masks(samples, masks),
    )


def _stack_masks(samples: list[TurnSample], masks: list[torch.Tensor | None] | None):
    if not masks or all(m is None for m in masks):
        return None
    vocab = next(m for m in masks if m is not None).shape[1]
    return torch.cat([m if m is not None else torch.ones(len(s.completion_ids), vocab,
                                                           dtype=torch.bool)
                      for s, m in zip(samples, masks, strict=True)])


def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    seq_of_token: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation within each turn (tokens of one sequence are contiguous
    and in order in the flat layout; the value after a turn's last token is 0)."""
    advantages = torch.zeros_like(token_rewards)
    last_adv = 0.0
    next_value = 0.0
    for i in range(len(token_rewards) - 1, -1, -1):
        if i == len(token_rewards) - 1 or seq_of_token[i + 1] != seq_of_token[i]:
            last_adv, next_value = 0.0, 0.0  # a new sequence starts here (walking backwards)
        delta = token_rewards[i] + gamma * next_value - values[i]
        last_adv = delta + gamma * lam * last_adv
        advantages[i] = last_adv
        next_value = values[i]
    return advantages, advantages + values


def masked_whiten(x: torch.Tensor) -> torch.Tensor:
    if x.numel() < 2:
        return x
    return (x - x.mean()) / (x.std() + 1e-8)


def whiten_by_group(x: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """Normalise each group's values on their own (role-conditioned advantages)."""
    out = torch.empty_like(x)
    for g in torch.unique(group):
        mask = group == g
        out[mask] = masked_whiten(x[mask])
    return out


class ValueHead(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden, 128), nn.Tanh(), nn.Linear(128, 1))
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features.float()).squeeze(-1)


class PPOLearner:
    """An agent's model (base + LoRA via PEFT), critic and optimizers."""

    def __init__(self, model_path: str, agent: AgentConfig, ppo: PPOConfig, seed: int = 0) -> None:
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(seed)
        torch.set_num_threads(ppo.torch_threads)
        self.agent = agent
        self.ppo = ppo
        self.use_bf16 = cpu_has_fast_bf16() if ppo.bf16 is None else ppo.bf16
        self.model_path = model_path
        self._masker = None  # built on the first constrained turn (needs xgrammar)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0
        base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        base.config.use_cache = False
        lora = LoraConfig(
            r=agent.lora_rank,
            lora_alpha=agent.lora_alpha,
            lora_dropout=agent.lora_dropout,
            target_modules=list(agent.lora_targets),
            layers_to_transform=agent.lora_layers,
            task_type="CAUSAL_LM",
        )
        self.model = get_peft_model(base, lora)
        if agent.init_adapter:
            self._load_adapter_weights(Path(agent.init_adapter).expanduser())
        self.value_head = ValueHead(base.config.hidden_size)
        self.policy_params = [p for p in self.model.parameters() if p.requires_grad]
        self.policy_opt = torch.optim.AdamW(self.policy_params, lr=ppo.learning_rate,
                                            weight_decay=0.0)
        self.value_opt = torch.optim.AdamW(self.value_head.parameters(),
                                           lr=ppo.value_learning_rate)
        self.updates = 0

    def _load_adapter_weights(self, folder: Path) -> None:
        """Start from a trained adapter (``agents[].init_adapter``, e.g. an SFT warm start)
        instead of a fresh one: same LoRA shape, so every key must match."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        weights = load_file(str(folder / "adapter_model.safetensors"))
        result = set_peft_model_state_dict(self.model, weights)
        if getattr(result, "unexpected_keys", None):
            raise ValueError(f"init_adapter {folder}: keys this agent's LoRA does not have "
                             f"(another rank, targets or layers?): {result.unexpected_keys[:3]}")

    # --- forward helpers ------------------------------------------------------------------
    def _causal_lm(self):
        return self.model.get_base_model()

    def _autocast(self):
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.use_bf16)

    def _action_hidden(self, batch: Batch, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Final hidden states ``[N, H]`` at the positions that predict each action token of
        the given sample rows (all rows by default), in the batch's flat token order.

        Rows are forwarded in groups sharing a prompt prefix, which is computed once per group
        (``shared_prefix``); each group is trimmed to its own longest row."""
        body = self._causal_lm().model
        if rows is None:
            rows = torch.arange(len(batch.prompts))
        token_rows, pieces = [], []
        groups = shared_prefix.prefix_groups([batch.prompts[int(r)] for r in rows])
        for members, prefix_len in groups:
            sample_ids = rows[members]
            width = int(batch.attention_mask[sample_ids].sum(1).max())
            hidden = shared_prefix.hidden_states(
                body, batch.input_ids[sample_ids, :width],
                batch.attention_mask[sample_ids, :width], prefix_len)
            tokens = torch.nonzero(torch.isin(batch.seq_of_token, sample_ids)).squeeze(-1)
            local_row = {int(s): i for i, s in enumerate(sample_ids)}
            local = torch.tensor([local_row[int(s)] for s in batch.seq_of_token[tokens]])
            pieces.append(hidden[local, batch.pred_pos[tokens]])
            token_rows.append(tokens)
        order = torch.argsort(torch.cat(token_rows))
        return torch.cat(pieces)[order]

    def _logprobs(self, hidden_at_actions: torch.Tensor, labels: torch.Tensor,
                  allowed: torch.Tensor | None = None):
        """Logprob of each action token and the policy's entropy there; with ``allowed``, both
        under the distribution vLLM sampled from (renormalised over the allowed tokens)."""
        logits = self._causal_lm().lm_head(hidden_at_actions).float()
        if allowed is not None:
            logits = logits.masked_fill(~allowed, float("-inf"))
        logp_all = F.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        # Masked tokens have p = 0 and logp = -inf: zero logp there *before* the product, or
        # 0 * -inf is nan in the forward and, worse, in the backward (a where() after the
        # product still sends nan gradients into the adapter).
        finite_logp = logp_all if allowed is None else logp_all.masked_fill(~allowed, 0.0)
        entropy = -(logp_all.exp() * finite_logp).sum(-1)
        return logp, entropy

    def action_masks(self, samples: list[TurnSample]) -> list[torch.Tensor | None]:
        """Per sample, the allowed-token mask of each completion token (None: free text).
        Raises ValueError for a completion its choices could not have produced."""
        if all(s.choices is None for s in samples):
            return [None] * len(samples)
        if self._masker is None:
            from agora.algos.action_mask import ChoiceMasker, stop_token_ids

            self._masker = ChoiceMasker(self.tokenizer, self._causal_lm().config.vocab_size,
                                        stop_token_ids(self.tokenizer, self.model_path))
        return [None if s.choices is None else self._masker.allowed(s.choices, s.completion_ids)
                for s in samples]

    def _masked_samples(self, samples: list[TurnSample]):
        """The samples whose tokens fit their choices, with their masks, and how many did not
        (a record from another grammar backend, say): those are dropped, not trained on with a
        wrong ratio."""
        kept, masks = [], []
        for sample in samples:
            try:
                masks.extend(self.action_masks([sample]))
            except ValueError:
                continue
            kept.append(sample)
        return kept, masks, len(samples) - len(kept)

    # --- the update -----------------------------------------------------------------------
    def set_budget_progress(self, progress: float) -> float:
        """Anneal the policy lr linearly from ``learning_rate`` (progress 0) to
        ``learning_rate * final_lr_fraction`` (progress 1); returns the lr now in use."""
        progress = min(1.0, max(0.0, progress))
        scale = 1.0 - progress * (1.0 - self.ppo.final_lr_fraction)
        lr = self.ppo.learning_rate * scale
        for group in self.policy_opt.param_groups:
            group["lr"] = lr
        return lr

    def update(self, samples: list[TurnSample]) -> dict[str, float]:
        samples, masks, off_grammar = self._masked_samples([s for s in samples
                                                            if s.completion_ids])
        if not samples:
            return {}
        started = time.perf_counter()
        ppo = self.ppo
        batch = collate(samples, self.pad_id, masks)

        # 1. Reference logprobs and critic features, adapter off, no grad. Without a KL term
        #    and with a single pass over one minibatch there is nothing to compare against the
        #    reference, so that forward is skipped ("fused"): the one forward with the adapter on
        #    gives the policy's logprobs (with grad) and, detached, the critic's features. That
        #    forward is a third of the update's cost.
        # A batch overshoots batch_turns by up to one episode's turns: minibatch_turns >=
        # batch_turns means "the whole batch in one minibatch", however big it came out.
        minibatch = len(samples) if ppo.minibatch_turns >= ppo.batch_turns else ppo.minibatch_turns
        fused = ppo.kl_coef == 0 and ppo.epochs == 1 and minibatch >= len(samples)
        if fused:
            with self._autocast():
                fused_hidden = self._action_hidden(batch).float()
            features = fused_hidden.detach()
            ref_logp = None
        else:
            with torch.no_grad(), self._autocast(), self.model.disable_adapter():
                features = self._action_hidden(batch).float()
                ref_logp, _ = self._logprobs(features, batch.labels, batch.allowed)
        with torch.no_grad():
            values = self.value_head(features)

        # 2. Per-token rewards (KL penalty + turn reward on the last token), then GAE.
        old_logp = batch.behaviour_logprobs
        kl = old_logp - ref_logp if ref_logp is not None else torch.zeros_like(old_logp)
        token_rewards = -ppo.kl_coef * kl
        is_last = torch.ones_like(batch.seq_of_token, dtype=torch.bool)
        is_last[:-1] = batch.seq_of_token[1:] != batch.seq_of_token[:-1]
        token_rewards[is_last] += batch.rewards
        advantages, returns = gae(token_rewards, values, batch.seq_of_token, ppo.gamma,
                                  ppo.gae_lambda)
        if ppo.advantage_norm == "role":
            role_ids = {role: i for i, role in enumerate(sorted({s.role for s in samples}))}
            role_of_sample = torch.tensor([role_ids[s.role] for s in samples])
            advantages = whiten_by_group(advantages, role_of_sample[batch.seq_of_token])
        else:
            advantages = masked_whiten(advantages)

        # 3. PPO epochs over minibatches of turns.
        self.model.train()
        stats: dict[str, list[float]] = {k: [] for k in
                                         ("pg_loss", "entropy", "clipfrac", "ratio", "vf_loss")}
        generator = torch.Generator().manual_seed(self.updates)
        skipped_steps = 0
        for _epoch in range(ppo.epochs):
            order = torch.randperm(len(samples), generator=generator)
            for start in range(0, len(samples), minibatch):
                rows = order[start : start + minibatch]
                token_sel = torch.isin(batch.seq_of_token, rows)
                if fused:
                    hidden = fused_hidden  # the whole batch, already forwarded with grad
                else:
                    with self._autocast():
                        hidden = self._action_hidden(batch, rows).float()
                allowed = batch.allowed[token_sel] if batch.allowed is not None else None
                new_logp, entropy = self._logprobs(hidden, batch.labels[token_sel], allowed)
                log_ratio = new_logp - old_logp[token_sel]
                ratio = log_ratio.exp()
                adv = advantages[token_sel]
                pg_loss = torch.max(
                    -adv * ratio, -adv * ratio.clamp(1 - ppo.clip_range, 1 + ppo.clip_range)
                ).mean()
                loss = pg_loss - ppo.entropy_coef * entropy.mean()
                self.policy_opt.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(self.policy_params, ppo.max_grad_norm)
                if torch.isfinite(grad_norm):
                    self.policy_opt.step()
                else:  # one bad minibatch must not turn the served adapter into nan
                    skipped_steps += 1

                v_pred = self.value_head(features[token_sel])
                vf_loss = F.mse_loss(v_pred, returns[token_sel])
                self.value_opt.zero_grad(set_to_none=True)
                vf_loss.backward()
                self.value_opt.step()

                stats["pg_loss"].append(pg_loss.item())
                stats["entropy"].append(entropy.mean().item())
                stats["clipfrac"].append(float(((ratio - 1).abs() > ppo.clip_range).float().mean()))
                stats["ratio"].append(ratio.mean().item())
                stats["vf_loss"].append(vf_loss.item())
        self.model.eval()
        self.updates += 1
        out = {k: sum(v) / len(v) for k, v in stats.items() if v}
        out.update(
            **({} if ref_logp is None else {"kl": float(kl.mean())}),
            lr=float(self.policy_opt.param_groups[0]["lr"]),
            reward_mean=float(batch.rewards.mean()),
            value_mean=float(values.mean()),
            turns=float(len(samples)),
            **({"off_grammar_turns": float(off_grammar)} if off_grammar else {}),
            **({"nonfinite_steps_skipped": float(skipped_steps)} if skipped_steps else {}),
            tokens=float(batch.attention_mask.sum()),
            update_s=time.perf_counter() - started,
        )
        return {k: (v if math.isfinite(v) else 0.0) for k, v in out.items()}

    # --- persistence ----------------------------------------------------------------------
    def save_adapter(self, path: Path) -> Path:
        """A PEFT adapter folder that vLLM's /v1/load_lora_adapter accepts."""
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(path))
        return path

    def save_checkpoint(self, path: Path, meta: dict) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.save_adapter(path / "adapter")
        torch.save(
            {
                "value_head": self.value_head.state_dict(),
                "policy_opt": self.policy_opt.state_dict(),
                "value_opt": self.value_opt.state_dict(),
                "updates": self.updates,
            },
            path / "trainer_state.pt",
        )
        (path / "meta.json").write_text(json.dumps(meta, indent=2))

    def load_checkpoint(self, path: Path) -> dict:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        adapter = load_file(str(path / "adapter" / "adapter_model.safetensors"))
        result = set_peft_model_state_dict(self.model, adapter)
        if getattr(result, "unexpected_keys", None):
            raise RuntimeError(f"checkpoint adapter has unexpected keys: {result.unexpected_keys}")
        state = torch.load(path / "trainer_state.pt", weights_only=True)
        self.value_head.load_state_dict(state["value_head"])
        self.policy_opt.load_state_dict(state["policy_opt"])
        self.value_opt.load_state_dict(state["value_opt"])
        self.updates = int(state["updates"])
        return json.loads((path / "meta.json").read_text())

    def sequence_logprobs(self, sample: TurnSample) -> list[float]:
        """Logprobs of the completion tokens under the current adapter (tests compare these
        with vLLM's)."""
        batch = collate([sample], self.pad_id, self.action_masks([sample]))
        with torch.no_grad():
            hidden = self._action_hidden(batch).float()
            logp, _ = self._logprobs(hidden, batch.labels, batch.allowed)
        return logp.tolist()
