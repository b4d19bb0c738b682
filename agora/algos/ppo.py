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

Device: the learner lives on one device (``trainer.device``, agora/algos/compute.py). The batch
is laid out on the host once with every index the update needs (agora/algos/batch.py), so the
update itself only gathers on the device and reads back to the host once per optimizer step
(the finite-gradient check) and once for its statistics: on a GPU each read-back stalls the
launch queue (docs/training-on-gpus.md).
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from agora.algos import shared_prefix
from agora.algos.advantages import gae, masked_whiten, whiten_by_group
from agora.algos.batch import Batch, TurnSample, collate
from agora.algos.compute import ComputeConfig, Placement, resolve
from agora.config import AgentConfig, PPOConfig

__all__ = ["PPOLearner", "TurnSample", "ValueHead", "collate"]


class ValueHead(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden, 128), nn.Tanh(), nn.Linear(128, 1))
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features.float()).squeeze(-1)


class PPOLearner:
    """An agent's model (base + LoRA via PEFT), critic and optimizers, on one device.

    ``compute`` is the run's ``trainer:`` section (device, dtype, attention kernel);
    ``placement``, when given, is used as it is instead (tests put a learner on devices a
    config cannot name)."""

    def __init__(self, model_path: str, agent: AgentConfig, ppo: PPOConfig, seed: int = 0,
                 compute: ComputeConfig | None = None,
                 placement: Placement | None = None) -> None:
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(seed)
        self.placement = placement or resolve(compute or ComputeConfig(), agent.device)
        self.device = self.placement.device
        if self.placement.on_cpu:
            torch.set_num_threads(ppo.torch_threads)
        self.agent = agent
        self.ppo = ppo
        self.model_path = model_path
        self._masker = None  # built on the first constrained turn (needs xgrammar)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0
        base = AutoModelForCausalLM.from_pretrained(model_path, **self.placement.model_kwargs())
        base.config.use_cache = False
        lora = LoraConfig(
            r=agent.lora_rank,
            lora_alpha=agent.lora_alpha,
            lora_dropout=agent.lora_dropout,
            target_modules=list(agent.lora_targets),
            layers_to_transform=agent.lora_layers,
            task_type="CAUSAL_LM",
        )
        self.model = get_peft_model(base, lora).to(self.device)
        if agent.init_adapter:
            self._load_adapter_weights(Path(agent.init_adapter).expanduser())
        self.value_head = ValueHead(base.config.hidden_size).to(self.device)
        self.policy_params = [p for p in self.model.parameters() if p.requires_grad]
        # Fused AdamW: one kernel for all parameters, step counters on the device (the
        # default per-parameter loop reads each counter back to the host, every step).
        self.policy_opt = torch.optim.AdamW(self.policy_params, lr=ppo.learning_rate,
                                            weight_decay=0.0, fused=True)
        self.value_opt = torch.optim.AdamW(self.value_head.parameters(),
                                           lr=ppo.value_learning_rate, fused=True)
        # fp16 needs loss scaling (its gradients underflow); a disabled scaler is a no-op.
        self.scaler = torch.amp.GradScaler(self.device.type,
                                           enabled=self.placement.dtype == torch.float16)
        body = self._causal_lm().model
        # Dynamic shapes: every batch has its own length. The decoder is what costs.
        self._body = torch.compile(body, dynamic=True) if self.placement.compile else body
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
        return self.placement.autocast()

    def _forward_groups(self, batch: Batch, rows: list[int]) -> list[tuple[list[int], int]]:
        """How ``rows`` are forwarded: ``[(rows, shared prefix length)]``. One group (one
        batched forward) unless sharing prompt prefixes pays on this device
        (``trainer.shared_prefix``, ``shared_prefix.pays_off``)."""
        mode = self.placement.shared_prefix
        # Compiled decoders get plain rows: the prefix path hands a KV-cache object through the
        # decoder, a combination not measured or tested under torch.compile.
        if mode == "off" or self.placement.compile or len(rows) < 2:
            return [(rows, 0)]
        groups = shared_prefix.prefix_groups([batch.prompts[r] for r in rows])
        groups = [([rows[i] for i in members], prefix) for members, prefix in groups]
        lengths = [batch.lengths_host[r] for r in rows]
        if mode == "on" or shared_prefix.pays_off(groups, lengths, self.device.type):
            return groups
        return [(rows, 0)]

    def _action_hidden(self, batch: Batch, rows: list[int] | None = None) -> torch.Tensor:
        """Final hidden states ``[N, H]`` at the positions that predict each action token of
        the given rows (all by default), in flat token order of the rows sorted.

        Every index is built on the host from the batch's host lists, so the forward issues no
        device -> host sync; each group is trimmed to its own longest row."""
        rows = sorted(rows) if rows is not None else list(range(batch.size))
        pieces, flat_order = [], []
        for members, prefix_len in self._forward_groups(batch, rows):
            width = max(batch.lengths_host[r] for r in members)
            local_rows, positions = [], []
            for i, r in enumerate(members):
                tokens = batch.token_indices([r])
                local_rows.extend([i] * len(tokens))
                positions.extend(batch.pred_pos_host[t] for t in tokens)
                flat_order.extend(tokens)
            if len(members) == batch.size:  # the whole batch: slices, no gather
                input_ids, mask = batch.input_ids[:, :width], batch.attention_mask[:, :width]
            else:
                picked = batch.index(members)
                input_ids = batch.input_ids[picked, :width]
                mask = batch.attention_mask[picked, :width]
            if all(batch.lengths_host[r] == width for r in members):
                mask = None  # no padding: transformers then skips its mask (and its host sync)
            hidden = shared_prefix.hidden_states(self._body, input_ids, mask, prefix_len)
            pieces.append(hidden[batch.index(local_rows), batch.index(positions)])
        if len(pieces) == 1:
            return pieces[0]
        # Groups interleave rows: put the tokens back in flat order (argsort on the host).
        order = sorted(range(len(flat_order)), key=flat_order.__getitem__)
        return torch.cat(pieces)[batch.index(order)]

    def _logprobs(self, hidden_at_actions: torch.Tensor, labels: torch.Tensor,
                  allowed: torch.Tensor | None = None):
        """Logprob of each action token and the policy's entropy there; with ``allowed``, both
        under the distribution vLLM sampled from (renormalised over the allowed tokens)."""
        with self._autocast():  # the head's weights are bf16/fp16 where the model's are
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
        batch = collate(samples, self.pad_id, masks).to(self.device)

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

        # 2. Per-token rewards (KL penalty + the turn's reward on its last token), then GAE
        #    over each turn's tokens, laid out as a [turns, tokens] grid.
        old_logp = batch.behaviour_logprobs
        kl = old_logp - ref_logp if ref_logp is not None else torch.zeros_like(old_logp)
        token_rewards = -ppo.kl_coef * kl + batch.is_last * batch.rewards[batch.seq_of_token]
        adv_grid, ret_grid = gae(batch.to_grid(token_rewards), batch.to_grid(values), ppo.gamma,
                                 ppo.gae_lambda)
        advantages, returns = batch.from_grid(adv_grid), batch.from_grid(ret_grid)
        if ppo.advantage_norm == "role":
            role_ids = {role: i for i, role in enumerate(sorted({s.role for s in samples}))}
            role_of_token = batch.index([role_ids[s.role] for s in samples
                                         for _ in s.completion_ids])
            advantages = whiten_by_group(advantages, role_of_token, len(role_ids))
        else:
            advantages = masked_whiten(advantages)

        # 3. PPO epochs over minibatches of turns. Statistics stay on the device until the end
        #    (one sync per optimizer step: the finite-gradient check).
        self.model.train()
        stats: dict[str, list[torch.Tensor]] = {
            k: [] for k in ("pg_loss", "entropy", "clipfrac", "ratio", "vf_loss")}
        shuffle = random.Random(self.updates)
        skipped_steps = 0
        for _epoch in range(ppo.epochs):
            order = shuffle.sample(range(len(samples)), len(samples))
            for start in range(0, len(samples), minibatch):
                rows = sorted(order[start : start + minibatch])
                if fused:
                    hidden = fused_hidden  # the whole batch, already forwarded with grad
                    tokens = slice(None)
                else:
                    with self._autocast():
                        hidden = self._action_hidden(batch, rows).float()
                    tokens = batch.index(batch.token_indices(rows))
                allowed = batch.allowed[tokens] if batch.allowed is not None else None
                new_logp, entropy = self._logprobs(hidden, batch.labels[tokens], allowed)
                ratio = (new_logp - old_logp[tokens]).exp()
                adv = advantages[tokens]
                pg_loss = torch.max(
                    -adv * ratio, -adv * ratio.clamp(1 - ppo.clip_range, 1 + ppo.clip_range)
                ).mean()
                loss = pg_loss - ppo.entropy_coef * entropy.mean()
                self.policy_opt.zero_grad(set_to_none=True)
                self.scaler.scale(loss).backward()
                self.scaler.unscale_(self.policy_opt)
                grad_norm = torch.nn.utils.clip_grad_norm_(self.policy_params, ppo.max_grad_norm)
                if torch.isfinite(grad_norm):
                    self.scaler.step(self.policy_opt)
                else:  # one bad minibatch must not turn the served adapter into nan
                    skipped_steps += 1
                self.scaler.update()

                v_pred = self.value_head(features[tokens])
                vf_loss = F.mse_loss(v_pred, returns[tokens])
                self.value_opt.zero_grad(set_to_none=True)
                vf_loss.backward()
                self.value_opt.step()

                stats["pg_loss"].append(pg_loss.detach())
                stats["entropy"].append(entropy.detach().mean())
                stats["clipfrac"].append(((ratio.detach() - 1).abs() > ppo.clip_range).float()
                                         .mean())
                stats["ratio"].append(ratio.detach().mean())
                stats["vf_loss"].append(vf_loss.detach())
        self.model.eval()
        self.updates += 1
        summary = {k: torch.stack(v).mean() for k, v in stats.items() if v}
        if ref_logp is not None:
            summary["kl"] = kl.mean()
        summary["reward_mean"] = batch.rewards.mean()
        summary["value_mean"] = values.mean()
        names = list(summary)
        out = dict(zip(names, torch.stack([summary[k].float() for k in names]).tolist(),
                       strict=True))  # the update's one device -> host copy of statistics
        out.update(
            lr=float(self.policy_opt.param_groups[0]["lr"]),
            turns=float(len(samples)),
            **({"off_grammar_turns": float(off_grammar)} if off_grammar else {}),
            **({"nonfinite_steps_skipped": float(skipped_steps)} if skipped_steps else {}),
            tokens=float(sum(batch.lengths_host)),
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
        state = torch.load(path / "trainer_state.pt", weights_only=True,
                           map_location=self.device)
        self.value_head.load_state_dict(state["value_head"])
        self.policy_opt.load_state_dict(state["policy_opt"])
        self.value_opt.load_state_dict(state["value_opt"])
        self.updates = int(state["updates"])
        return json.loads((path / "meta.json").read_text())

    def sequence_logprobs(self, sample: TurnSample) -> list[float]:
        """Logprobs of the completion tokens under the current adapter (tests compare these
        with vLLM's)."""
        batch = collate([sample], self.pad_id, self.action_masks([sample])).to(self.device)
        with torch.no_grad(), self._autocast():
            hidden = self._action_hidden(batch).float()
            logp, _ = self._logprobs(hidden, batch.labels, batch.allowed)
        return logp.tolist()
