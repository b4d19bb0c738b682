"""Token-level PPO on a LoRA adapter, for one agent. Read top to bottom, like CleanRL's ppo.py.

One ``PPOLearner`` per trainable agent (multi-model PPO = several of these side by side). Each
agent turn is one sequence: prompt tokens (the env's view + prefill) then completion tokens (what
vLLM sampled). Only completion tokens are actions. The turn's reward, decided by the reward
service, lands on its last token.

Per update:
1. One no-grad forward with the adapter *disabled* (= the frozen reference policy) gives, at
   each completion position, the reference logprob (for the KL penalty) and the hidden state the
   critic reads. (After a warm start the reference is the adapter PPO started from, kept as a
   second, frozen adapter: ``kl_reference``.) Why the critic reads frozen features: it costs no
   extra forward and keeps value gradients out of the adapter, so the policy's few LoRA
   parameters serve the policy alone. The value head is a small MLP trained on those
   features. (With no KL term and a single pass, this forward is skipped and the critic reads
   the policy's own, detached features instead: see ``update``.)
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

Several processes (``trainer.processes``, agora/algos/distributed.py): the model is sharded with
FSDP2 and each process forwards its own rows of every minibatch (row r on rank r % world). Losses
are sums over a process's tokens divided by the minibatch's tokens on *all* processes, times the
world size, so FSDP's gradient average is exactly the one-process minibatch gradient; advantage
whitening uses statistics summed over every process. One process is the same code with world 1.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint

from agora.algos import distributed, shared_prefix
from agora.algos.advantages import gae, group_advantages, learning_signal, whiten_by_group
from agora.algos.batch import Batch, TurnSample, collate
from agora.algos.compute import ComputeConfig, Placement, resolve
from agora.algos.distributed import DataParallel
from agora.algos.shared_base import SharedBase, adapter_name
from agora.config.agents import AgentConfig
from agora.config.training import PPOConfig
from agora.envs.images import decode_data_url

__all__ = ["PPOLearner", "TurnSample", "ValueHead", "collate"]

# Whole (unsharded) state dicts, on the host: checkpoints are the same files whatever the number
# of processes that wrote them, so a run resumes on more or fewer GPUs.
FULL_STATE = StateDictOptions(full_state_dict=True, cpu_offload=True)
LOAD_FULL_STATE = StateDictOptions(full_state_dict=True, strict=False)
# The frozen copy of the init adapter that a warm-started learner is held to (kl_reference).
REFERENCE_ADAPTER = "reference"


class ValueHead(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden, 128), nn.Tanh(), nn.Linear(128, 1))
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features.float()).squeeze(-1)


class ActionForward(nn.Module):
    """The model call of an update as one module: decoder, the hidden states at the positions
    that predict action tokens, the LM head there.

    Why one module: FSDP gathers a unit's weights in that unit's ``forward``; the LM head (tied
    to the embeddings in small models) sits in the root unit, so it must be reached through the
    root's forward, not called on its own. The logits exist only at action positions (a few
    tokens per turn), never over the whole vocabulary at every prompt position."""

    def __init__(self, model: nn.Module, causal_lm: nn.Module, body: nn.Module) -> None:
        super().__init__()
        self.model = model  # the trained module: the PEFT model, or the causal LM itself
        self._causal_lm = [causal_lm]  # the same weights as (in) ``model``, not registered twice
        # The (maybe compiled) decoder, kept out of the module tree: it is ``model``'s own
        # decoder, and registering it twice would list its weights twice.
        self._decoder = [body]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                prefix_len: int, rows: torch.Tensor, positions: torch.Tensor,
                **image_inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``image_inputs``: a vision-language model's pixel inputs for the rows' images."""
        hidden = shared_prefix.hidden_states(self._decoder[0], input_ids, attention_mask,
                                             prefix_len, **image_inputs)[rows, positions]
        return hidden, self._causal_lm[0].lm_head(hidden)


def language_model_targets(model: nn.Module, names: list[str],
                           layers: list[int] | None) -> list[str]:
    """Full names of a vision-language model's language-model modules whose last name is in
    ``names`` (q_proj, ...), in ``layers`` only when given: PEFT's ``layers_to_transform``
    would also count the vision tower's layers."""
    found = []
    for name, _ in model.named_modules():
        parts = name.split(".")
        if parts[-1] not in names or any(p.startswith("vision") for p in parts):
            continue
        index = next((int(p) for p in parts if p.isdigit()), None)
        if layers is None or index in layers:
            found.append(name)
    if not found:
        raise ValueError(f"lora_targets {names} name no module of the language model")
    return found


@functools.lru_cache(maxsize=256)
def decoded_image(url: str):
    """A data URL's image, decoded once per update's worth of turns (PPO epochs and the
    reference forward see the same images again). 256: a batch's turns with room to spare, at
    ~30-100 kB of pixels each for the boards drawn here."""
    return decode_data_url(url)


# Tokens whose full-vocabulary softmax is taken at once (PPOLearner._logprobs): 256 x a
# 262k-token vocabulary is 268 MB per fp32 intermediate.
LOGPROB_CHUNK_TOKENS = 256


def _token_logprobs(logits: torch.Tensor, labels: torch.Tensor, allowed: torch.Tensor | None,
                    temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprob of each label and the entropy, at ``temperature``, renormalised over
    ``allowed`` (None: the whole vocabulary); one row per token."""
    if temperature != 1.0:
        logits = logits / temperature
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


def chunked_token_logprobs(logits: torch.Tensor, labels: torch.Tensor,
                           allowed: torch.Tensor | None, temperature: float,
                           chunk: int = LOGPROB_CHUNK_TOKENS
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """``_token_logprobs`` ``chunk`` tokens at a time, with the same numbers and gradients.

    The softmax's full-vocabulary intermediates (scaled logits, log-softmax, its exp, the
    entropy's product) then exist for one chunk at once, and with grad each chunk is
    checkpointed, so the backward recomputes them instead of keeping them for every token.
    With Gemma's 262k-token vocabulary each is ~1 GB per 1,000 tokens: a Gemma learner's
    update on 32 discussion turns peaked at 13.2 GB with them whole, 11.7 GB chunked."""
    count = logits.shape[0]
    if count <= chunk:
        return _token_logprobs(logits, labels, allowed, temperature)
    pieces = []
    for start in range(0, count, chunk):
        part = slice(start, start + chunk)
        args = (logits[part], labels[part], None if allowed is None else allowed[part],
                temperature)
        pieces.append(checkpoint(_token_logprobs, *args, use_reentrant=False)
                      if logits.requires_grad else _token_logprobs(*args))
    logp, entropy = zip(*pieces, strict=True)
    return torch.cat(logp), torch.cat(entropy)


class PPOLearner:
    """An agent's model (base + LoRA via PEFT, or every weight with ``finetune: full``), critic
    and optimizers, on one device (or sharded over several processes).

    ``compute`` is the run's ``trainer:`` section (device, dtype, attention kernel);
    ``placement``, when given, is used as it is instead (tests put a learner on devices a
    config cannot name). ``shared_base``: a LoRA learner adds its adapter to the base model
    other agents already loaded there, instead of loading a copy of its own
    (agora/algos/shared_base.py; not for full weights, vision-language models, sharded or
    compiled learners)."""

    def __init__(self, model_path: str, agent: AgentConfig, ppo: PPOConfig, seed: int = 0,
                 compute: ComputeConfig | None = None,
                 placement: Placement | None = None,
                 parallel: DataParallel = distributed.SINGLE,
                 shared_base: SharedBase | None = None) -> None:
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

        from agora.serving.model_folders import is_vision_language

        torch.manual_seed(seed)
        self.placement = placement or resolve(compute or ComputeConfig(), agent.device)
        self.device = self.placement.device
        self.parallel = parallel
        self.agent = agent
        self.ppo = ppo
        # The temperature the agent samples at: the learner scores tokens under the same
        # distribution (logits / T), the one vLLM sampled from and reports logprobs of
        # (``--logprobs-mode processed_logprobs``), so PPO's ratio and KL are of the policy that
        # acted. Without it, at T = 0.8 the first ratio of a token was p_1(x) / p_0.8(x), not 1.
        # Greedy (T = 0) samples no distribution; its tokens are scored at T = 1.
        self.temperature = agent.sampling.temperature or 1.0
        self.model_path = model_path
        self._masker = None  # built on the first constrained turn (needs xgrammar)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0
        self.full_weights = agent.finetune == "full"
        # A vision-language model (docs/vlm.md): LoRA on its language model only, and every
        # forward gets the turn's images as the processor's pixel inputs.
        self.vision = is_vision_language(model_path)
        self.image_processor = None
        if self.vision:
            self._refuse_unsupported_vision_setup(agent, parallel)
            from transformers import AutoProcessor

            self.image_processor = AutoProcessor.from_pretrained(model_path).image_processor
        model_class = AutoModelForImageTextToText if self.vision else AutoModelForCausalLM

        def load_base() -> nn.Module:
            # Full weights train as fp32 master weights (autocast does the bf16 math).
            loaded = model_class.from_pretrained(
                model_path, **self.placement.model_kwargs(full_weights=self.full_weights))
            loaded.config.use_cache = False
            return loaded

        # Compiled learners keep a base of their own too: a compiled decoder guards on which
        # adapter is active, and switching adapters under torch.compile is not tested here.
        self.shared = (shared_base is not None and not self.full_weights and not self.vision
                       and not parallel.sharded and not self.placement.compile)
        # The trained adapter's name ("default" on a base of its own) and the frozen
        # reference adapter's, if any (see below).
        self.adapter = adapter_name(agent.name) if self.shared else "default"
        self.reference_adapter = (f"{REFERENCE_ADAPTER}_{self.adapter}" if self.shared
                                  else REFERENCE_ADAPTER)
        self.reference_forward: ActionForward | None = None
        if self.full_weights:
            base = load_base()
            # The KL reference and the critic's features: a frozen copy of the base (LoRA
            # gets both from the same weights with the adapter switched off).
            self.model = base.to(self.device)
            # The token embeddings and the LM head stay frozen: vLLM's reload_weights does not
            # refresh the LM head it serves (measured on the CPU build with a tied head: after
            # a reload the served logits still came from the old head, off by up to 1.6 nats),
            # so a trained head would make served and learned policies differ. Frozen, they
            # also spare AdamW's two fp32 moments of the largest matrices (21% of SmolLM2).
            for frozen in (base.get_input_embeddings(), base.get_output_embeddings()):
                if frozen is not None:
                    frozen.requires_grad_(False)
            reference = AutoModelForCausalLM.from_pretrained(
                model_path, **self.placement.model_kwargs()).to(self.device).eval()
            reference.requires_grad_(False)
            reference.config.use_cache = False
            self.reference_forward = ActionForward(reference, reference, reference.model)
        else:
            # A VLM's targets are named in full: only its language model's projections (the
            # vision tower has q/k/v_proj too), which is what vLLM serves LoRA on.
            base = None if self.shared else load_base()
            targets = (language_model_targets(base, agent.lora_targets, agent.lora_layers)
                       if self.vision else list(agent.lora_targets))
            lora = LoraConfig(
                r=agent.lora_rank,
                lora_alpha=agent.lora_alpha,
                lora_dropout=agent.lora_dropout,
                target_modules=targets,
                layers_to_transform=None if self.vision else agent.lora_layers,
                task_type="CAUSAL_LM",
            )
            # Seeded here, after loading: the adapter's initial weights do not depend on
            # whether this learner loaded the base or found it shared.
            torch.manual_seed(seed)
            if self.shared:
                self.model = shared_base.peft_model(self._base_key(model_path), load_base,
                                                    lora, self.adapter, self.device)
            else:
                self.model = get_peft_model(base, lora).to(self.device)
            if agent.init_adapter:
                weights = self._read_adapter(Path(agent.init_adapter).expanduser())
                self._set_adapter_weights(weights, self.adapter)
                if agent.kl_reference == "init":
                    # The KL reference is the policy PPO starts from: the same weights as a
                    # second, frozen adapter the reference forward switches to.
                    self.model.add_adapter(self.reference_adapter, lora)
                    self._set_adapter_weights(weights, self.reference_adapter)
            self._activate()  # this adapter trains, every other one (a reference) not
        hidden = self._causal_lm().config.get_text_config().hidden_size
        self.value_head = ValueHead(hidden).to(self.device)
        body = self._causal_lm().model
        # Dynamic shapes: every batch has its own length. The decoder is what costs.
        self.forward_module = ActionForward(
            self.model, self._causal_lm(),
            torch.compile(body, dynamic=True) if self.placement.compile else body)
        if parallel.sharded:  # after init_adapter, before the optimizers see the parameters
            distributed.shard(self.forward_module, list(body.layers))
            if self.reference_forward is not None:
                distributed.shard(self.reference_forward,
                                  list(self.reference_forward.model.model.layers))
            distributed.shard(self.value_head, [])
        self.policy_params = [param for _, param in self._saved_parameters()
                              if param.requires_grad]
        # Fused AdamW: one kernel for all parameters, step counters on the device (the
        # default per-parameter loop reads each counter back to the host, every step).
        self.policy_opt = torch.optim.AdamW(self.policy_params, lr=ppo.learning_rate,
                                            weight_decay=0.0, fused=True)
        self.value_opt = torch.optim.AdamW(self.value_head.parameters(),
                                           lr=ppo.value_learning_rate, fused=True)
        # fp16 needs loss scaling (its gradients underflow); a disabled scaler is a no-op.
        self.scaler = torch.amp.GradScaler(self.device.type,
                                           enabled=self.placement.dtype == torch.float16)
        self.updates = 0

    def _base_key(self, model_path: str) -> tuple[str, ...]:
        """Which learners may share a base: same weights, device, dtype and attention."""
        return (model_path, str(self.device), str(self.placement.weights_dtype),
                self.placement.attn_implementation)

    def _activate(self) -> None:
        """Make this learner's adapter the one the model runs and trains. PEFT's set_adapter
        also sets requires_grad on that adapter alone: on a shared base the other agents'
        adapters (and any frozen reference) stay out of this learner's backward."""
        if not self.full_weights:
            self.model.set_adapter(self.adapter)

    @staticmethod
    def _refuse_unsupported_vision_setup(agent: AgentConfig, parallel: DataParallel) -> None:
        """What a vision-language learner does not do yet, said at start rather than failing
        inside a forward."""
        if parallel.sharded:
            raise ValueError("trainer.processes: a vision-language learner runs in one "
                             "process for now (docs/vlm.md)")
        if agent.finetune == "full":
            raise ValueError(f"agents.{agent.name}.finetune: 'full' is not supported for a "
                             "vision-language model yet; use lora (docs/vlm.md)")

    @staticmethod
    def _read_adapter(folder: Path) -> dict[str, torch.Tensor]:
        """A trained adapter's weights (``agents[].init_adapter``, e.g. an SFT warm start)."""
        from safetensors.torch import load_file

        return load_file(str(folder / "adapter_model.safetensors"))

    def _set_adapter_weights(self, weights: dict[str, torch.Tensor], adapter: str) -> None:
        """Load ``weights`` into one of the model's adapters: same LoRA shape, so every key
        must match."""
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(self.model, weights, adapter_name=adapter)
        if getattr(result, "unexpected_keys", None):
            raise ValueError(f"init_adapter {self.agent.init_adapter}: keys this agent's LoRA "
                             f"does not have (another rank, targets or layers?): "
                             f"{result.unexpected_keys[:3]}")

    # --- forward helpers ------------------------------------------------------------------
    def _causal_lm(self):
        return self.model if self.full_weights else self.model.get_base_model()

    def _reference(self) -> tuple[ActionForward, contextlib.AbstractContextManager]:
        """The frozen reference policy's forward, and the context it runs in: the frozen
        copy (full weights), the frozen init adapter (``kl_reference: init`` after a warm
        start), or the base with the adapter switched off."""
        if self.reference_forward is not None:
            return self.reference_forward, contextlib.nullcontext()
        if self.has_reference_adapter:
            return self.forward_module, self._reference_adapter_active()
        return self.forward_module, self.model.disable_adapter()

    @property
    def has_reference_adapter(self) -> bool:
        return not self.full_weights and self.reference_adapter in self.model.peft_config

    @contextlib.contextmanager
    def _reference_adapter_active(self):
        """Forward with the frozen reference adapter instead of the trained one. PEFT's
        set_adapter also sets which adapter requires grad, so switching back to the trained
        adapter leaves exactly it trainable, as before."""
        self.model.set_adapter(self.reference_adapter, inference_mode=True)
        try:
            yield
        finally:
            self._activate()

    def _autocast(self):
        return self.placement.autocast()

    def _forward_groups(self, batch: Batch, rows: list[int]) -> list[tuple[list[int], int]]:
        """How ``rows`` are forwarded: ``[(rows, shared prefix length)]``. One group (one
        batched forward) unless sharing prompt prefixes pays on this device
        (``trainer.shared_prefix``, ``shared_prefix.pays_off``)."""
        if self.vision:
            # Rows with images and rows without are forwarded apart (the vision tower runs
            # only for the first), never over a shared prefix (its image features would have
            # to be shared too; not built).
            with_images = [r for r in rows if batch.images_host[r]]
            without = [r for r in rows if not batch.images_host[r]]
            return [(group, 0) for group in (with_images, without) if group]
        mode = self.placement.shared_prefix
        # Compiled decoders get plain rows: the prefix path hands a KV-cache object through the
        # decoder, a combination not measured or tested under torch.compile. Sharded learners
        # too: several root forwards before one backward is not a pattern FSDP2 is tested on.
        if (mode == "off" or self.placement.compile or self.parallel.sharded
                or len(rows) < 2):
            return [(rows, 0)]
        lengths = [batch.lengths_host[r] for r in rows]
        groups = shared_prefix.prefix_groups([batch.prompts[r] for r in rows], lengths)
        if mode == "on" or shared_prefix.pays_off(groups, lengths, self.device.type):
            return [([rows[i] for i in members], prefix) for members, prefix in groups]
        return [(rows, 0)]

    def _action_forward(self, batch: Batch, rows: list[int] | None = None,
                        module: ActionForward | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """Final hidden states ``[N, H]`` at the positions that predict each action token of
        the given rows (all by default), and the logits there ``[N, vocab]`` (fp32), in flat
        token order of the rows sorted; through ``module`` (default: the policy).

        Every index is built on the host from the batch's host lists, so the forward issues no
        device -> host sync; each group is trimmed to its own longest row."""
        rows = sorted(rows) if rows is not None else list(range(batch.size))
        hidden_pieces, logit_pieces, flat_order = [], [], []
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
            hidden, logits = (module or self.forward_module)(
                input_ids, mask, prefix_len, batch.index(local_rows), batch.index(positions),
                **self._vision_inputs(batch, members))
            hidden_pieces.append(hidden)
            logit_pieces.append(logits.float())
        if len(hidden_pieces) == 1:
            return hidden_pieces[0], logit_pieces[0]
        # Groups interleave rows: put the tokens back in flat order (argsort on the host).
        order = batch.index(sorted(range(len(flat_order)), key=flat_order.__getitem__))
        return torch.cat(hidden_pieces)[order], torch.cat(logit_pieces)[order]

    def _vision_inputs(self, batch: Batch, rows: list[int]) -> dict[str, torch.Tensor]:
        """The model's image inputs for ``rows`` (all with images, or none: see
        ``_forward_groups``), made by the model's own image processor from the images the
        policy server was sent, so the learner sees the pixels vLLM saw."""
        if not self.vision or not batch.images_host[rows[0]]:
            return {}
        images = [[decoded_image(url) for url in batch.images_host[r]] for r in rows]
        inputs = self.image_processor(images=images, return_tensors="pt")
        return {name: value.to(self.device, non_blocking=True,
                               dtype=self.placement.weights_dtype
                               if value.is_floating_point() else value.dtype)
                for name, value in inputs.items()}

    def _logprobs(self, logits: torch.Tensor, labels: torch.Tensor,
                  allowed: torch.Tensor | None = None):
        """Logprob of each action token and the policy's entropy there, under the distribution
        vLLM sampled from: at the agent's temperature and, with ``allowed``, renormalised over
        the allowed tokens."""
        return chunked_token_logprobs(logits, labels, allowed, self.temperature)

    def action_masks(self, samples: list[TurnSample]) -> list[torch.Tensor | None]:
        """Per sample, the allowed-token mask of each completion token (None: free text).
        Raises ValueError for a completion its choices could not have produced."""
        if all(s.choices is None for s in samples):
            return [None] * len(samples)
        if self._masker is None:
            from agora.algos.action_mask import ChoiceMasker, stop_token_ids

            vocab = self._causal_lm().config.get_text_config().vocab_size
            self._masker = ChoiceMasker(self.tokenizer, vocab,
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
        self._activate()  # on a shared base another learner's adapter may be on
        samples, masks, off_grammar = self._masked_samples([s for s in samples
                                                            if s.completion_ids])
        world = self.parallel.world
        if len(samples) < world:  # every process must have a row (all see the same samples)
            return {}
        started = time.perf_counter()
        ppo = self.ppo
        # This process's rows (all of them with one process); ``local`` maps a batch row to
        # its row here.
        mine = [r for r in range(len(samples)) if self.parallel.owns(r)]
        local = {r: i for i, r in enumerate(mine)}
        batch = collate([samples[r] for r in mine], self.pad_id,
                        [masks[r] for r in mine]).to(self.device)
        actions = [len(s.completion_ids) for s in samples]

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
                fused_hidden, fused_logits = self._action_forward(batch)
            features = fused_hidden.float().detach()
            ref_logp = None
        else:
            reference, switch = self._reference()
            with torch.no_grad(), self._autocast(), switch:
                features, ref_logits = self._action_forward(batch, module=reference)
                features = features.float()
                ref_logp, _ = self._logprobs(ref_logits, batch.labels, batch.allowed)
                del ref_logits
        with torch.no_grad():
            values = self.value_head(features)

        # 2. Advantages. With the critic (gae): per-token rewards (KL penalty + the turn's
        #    reward on its last token), then GAE over each turn's tokens, laid out as a [turns,
        #    tokens] grid; then whitening, per role with ``advantage_norm: role`` (statistics
        #    over every process's tokens). Without (grpo, rloo): the turn's reward against the
        #    other samples of its prompt.
        old_logp = batch.behaviour_logprobs
        kl = old_logp - ref_logp if ref_logp is not None else torch.zeros_like(old_logp)
        critic = ppo.advantage == "gae"
        if critic:
            token_rewards = -ppo.kl_coef * kl + batch.is_last * batch.rewards[batch.seq_of_token]
            adv_grid, ret_grid = gae(batch.to_grid(token_rewards), batch.to_grid(values),
                                     ppo.gamma, ppo.gae_lambda)
            advantages, returns = batch.from_grid(adv_grid), batch.from_grid(ret_grid)
            raw_advantages = advantages
            turn_adv = None
            roles = sorted({s.role for s in samples}) if ppo.advantage_norm == "role" else [""]
            role_ids = {role: i for i, role in enumerate(roles)}
            group_of_token = batch.index([role_ids.get(samples[r].role, 0) for r in mine
                                          for _ in range(actions[r])])
            advantages = whiten_by_group(advantages, group_of_token, len(roles),
                                         self.parallel.all_reduce_sum)
        else:
            # grpo / rloo: every token of a turn gets the turn's advantage against its group
            # (computed over the whole batch: every process sees every sample's reward), less
            # its own KL to the reference. No critic: the value head is not trained.
            turn_adv = group_advantages([s.reward for s in samples], [s.group for s in samples],
                                        ppo.advantage)
            # Built on the host from host numbers, then one copy to the learner's device (as
            # Batch.index does): no per-element device writes.
            host = torch.tensor([turn_adv[r] for r in mine for _ in range(actions[r])],
                                dtype=torch.float32)
            advantages = host.to(self.device, non_blocking=True) - ppo.kl_coef * kl
            returns = values
            raw_advantages = advantages

        # 3. PPO epochs over minibatches of turns. Statistics stay on the device until the end
        #    (one sync per optimizer step: the finite-gradient check). Each loss is a sum over
        #    this process's tokens of the minibatch, scaled by world / the minibatch's tokens
        #    on every process: FSDP averages gradients over processes, so the step is the mean
        #    over all the minibatch's tokens, as with one process.
        self.model.train()
        stats: dict[str, list[torch.Tensor]] = {
            k: [] for k in ("pg_loss", "entropy", "clipfrac", "ratio", "vf_loss", "grad_norm")}
        shuffle = random.Random(self.updates)
        skipped_steps = 0
        for _epoch in range(ppo.epochs):
            order = shuffle.sample(range(len(samples)), len(samples))
            for start in range(0, len(samples), minibatch):
                chunk = order[start : start + minibatch]
                rows = sorted(local[r] for r in chunk if r in local)
                scale = world / sum(actions[r] for r in chunk)
                if not rows:  # none of this minibatch is ours: take part in the collectives
                    rows, scale = [0], 0.0  # with a row whose loss counts for nothing
                if fused:
                    hidden, logits = fused_hidden, fused_logits  # already forwarded, with grad
                    tokens = slice(None)
                else:
                    with self._autocast():
                        hidden, logits = self._action_forward(batch, rows)
                    tokens = batch.index(batch.token_indices(rows))
                allowed = batch.allowed[tokens] if batch.allowed is not None else None
                new_logp, entropy = self._logprobs(logits, batch.labels[tokens], allowed)
                ratio = (new_logp - old_logp[tokens]).exp()
                adv = advantages[tokens]
                pg_loss = torch.max(
                    -adv * ratio, -adv * ratio.clamp(1 - ppo.clip_range, 1 + ppo.clip_range)
                ).sum() * scale
                entropy_term = entropy.sum() * scale
                loss = pg_loss - ppo.entropy_coef * entropy_term
                self.policy_opt.zero_grad(set_to_none=True)
                self.scaler.scale(loss).backward()
                self.scaler.unscale_(self.policy_opt)
                grad_norm = torch.nn.utils.clip_grad_norm_(self.policy_params, ppo.max_grad_norm)
                if isinstance(grad_norm, DTensor):  # sharded: the norm over every shard
                    grad_norm = grad_norm.full_tensor()
                if torch.isfinite(grad_norm):
                    self.scaler.step(self.policy_opt)
                else:  # one bad minibatch must not turn the served adapter into nan
                    skipped_steps += 1
                self.scaler.update()

                if critic:
                    v_pred = self.value_head(features[tokens])
                    vf_loss = (v_pred - returns[tokens]).square().sum() * scale
                    self.value_opt.zero_grad(set_to_none=True)
                    vf_loss.backward()
                    self.value_opt.step()
                else:
                    vf_loss = torch.zeros((), device=self.device)

                ratio = ratio.detach()
                stats["pg_loss"].append(pg_loss.detach())
                stats["entropy"].append(entropy_term.detach())
                stats["clipfrac"].append(((ratio - 1).abs() > ppo.clip_range).float().sum()
                                         * scale)
                stats["ratio"].append(ratio.sum() * scale)
                stats["vf_loss"].append(vf_loss.detach())
                stats["grad_norm"].append(grad_norm.detach())  # before clipping
        self.model.eval()
        self.updates += 1
        summary = {k: torch.stack(v).mean() for k, v in stats.items() if v}
        if ref_logp is not None:
            summary["kl"] = kl.mean()
        summary["reward_mean"] = batch.rewards.mean()
        summary["value_mean"] = values.mean()
        summary.update(learning_signal(batch.rewards, raw_advantages, returns, values,
                                       None if critic else turn_adv))
        names = list(summary)
        # Averaged over processes: exact for the minibatch statistics (each process's is its
        # tokens' sum x world / all the minibatch's tokens; the gradient norm is the same on
        # every process), per-process means for the others.
        totals = self.parallel.all_reduce_sum(torch.stack([summary[k].float() for k in names]))
        out = dict(zip(names, (totals / world).tolist(), strict=True))  # the one host copy
        out.update(
            lr=float(self.policy_opt.param_groups[0]["lr"]),
            turns=float(len(samples)),
            **({"off_grammar_turns": float(off_grammar)} if off_grammar else {}),
            **({"nonfinite_steps_skipped": float(skipped_steps)} if skipped_steps else {}),
            tokens=float(sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)),
            update_s=time.perf_counter() - started,
        )
        return {k: (v if math.isfinite(v) else 0.0) for k, v in out.items()}

    # --- persistence ----------------------------------------------------------------------
    def _saved_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """What a saved policy holds: this learner's LoRA adapter (by name: on a shared base
        the model holds other agents' adapters too), or the whole model (frozen embeddings
        included: vLLM serves the folder)."""
        named = self.forward_module.named_parameters()
        if self.full_weights:
            return list(named)
        return [(name, param) for name, param in named if f".{self.adapter}." in name]

    def _trained_state(self) -> dict[str, torch.Tensor]:
        """The saved weights (``_saved_parameters``), whole, on the first process's host, keyed
        as the model names them (PEFT's names, or the checkpoint names of the base).
        Sharded: every process takes part in gathering each one; the others keep nothing."""
        state = {}
        for name, param in self._saved_parameters():
            whole = param.full_tensor() if isinstance(param, DTensor) else param
            if self.parallel.leader:
                state[name.removeprefix("model.")] = whole.detach().cpu()
        return state

    def save_adapter(self, path: Path) -> Path:
        """A PEFT adapter folder that vLLM's /v1/load_lora_adapter accepts (written by the
        first process; every process must call this when sharded)."""
        state = self._trained_state()
        if self.parallel.leader:
            path.mkdir(parents=True, exist_ok=True)
            # Only the trained adapter: a reference adapter would land in a subfolder.
            self.model.save_pretrained(str(path), state_dict=state,
                                       selected_adapters=[self.adapter])
            if self.adapter != "default":
                # PEFT writes a named adapter into a subfolder of that name; vLLM and
                # ``init_adapter`` read the folder itself.
                for written in (path / self.adapter).iterdir():
                    written.replace(path / written.name)
                (path / self.adapter).rmdir()
        return path

    def save_weights(self, path: Path) -> Path:
        """A full-weight agent's model folder (weights, config, tokenizer): what vLLM serves
        and reloads in place (agora/serving/weights.py)."""
        state = self._trained_state()
        if self.parallel.leader:
            path.mkdir(parents=True, exist_ok=True)
            self.model.save_pretrained(str(path), state_dict=state)
            self.tokenizer.save_pretrained(str(path))
        return path

    def save_policy(self, path: Path) -> Path:
        """What the policy server takes: the adapter, or the whole model (``finetune: full``)."""
        return self.save_weights(path) if self.full_weights else self.save_adapter(path)

    def save_checkpoint(self, path: Path, meta: dict) -> None:
        """Policy, critic and both optimizers, whole (not per shard): a checkpoint resumes
        with any number of processes."""
        self.save_policy(path / ("weights" if self.full_weights else "adapter"))
        state = {
            "value_head": get_model_state_dict(self.value_head, options=FULL_STATE),
            "policy_opt": get_optimizer_state_dict(self.forward_module, self.policy_opt,
                                                   options=FULL_STATE),
            "value_opt": get_optimizer_state_dict(self.value_head, self.value_opt,
                                                  options=FULL_STATE),
            "updates": self.updates,
        }
        if self.parallel.leader:
            torch.save(state, path / "trainer_state.pt")
            (path / "meta.json").write_text(json.dumps(meta, indent=2))

    def _load_trained_state(self, saved: dict[str, torch.Tensor]) -> None:
        """Put saved weights (PEFT adapter file names, or a model folder's) back, sharded or
        not. An adapter file names a weight without its adapter ("...lora_A.weight"), the
        model with it ("...lora_A.default.weight")."""
        names = {name.removeprefix("model.").replace(f".{self.adapter}.", "."): name
                 for name, _ in self._saved_parameters()}
        unexpected = sorted(set(saved) - set(names))
        if unexpected:
            raise RuntimeError(f"checkpoint has weights this model does not have: "
                               f"{unexpected[:3]}")
        set_model_state_dict(self.forward_module, {names[k]: v for k, v in saved.items()},
                             options=LOAD_FULL_STATE)

    def load_checkpoint(self, path: Path) -> dict:
        from safetensors.torch import load_file

        folder = path / ("weights" if self.full_weights else "adapter")
        saved: dict[str, torch.Tensor] = {}
        for part in sorted(folder.glob("*.safetensors")):  # big models come in shards
            saved.update(load_file(str(part)))
        self._load_trained_state(saved)
        state = torch.load(path / "trainer_state.pt", weights_only=True, map_location="cpu")
        set_model_state_dict(self.value_head, state["value_head"], options=LOAD_FULL_STATE)
        set_optimizer_state_dict(self.forward_module, self.policy_opt, state["policy_opt"],
                                 options=LOAD_FULL_STATE)
        set_optimizer_state_dict(self.value_head, self.value_opt, state["value_opt"],
                                 options=LOAD_FULL_STATE)
        self.updates = int(state["updates"])
        return json.loads((path / "meta.json").read_text())

    def sequence_logprobs(self, sample: TurnSample) -> list[float]:
        """Logprobs of the completion tokens under the current adapter (tests compare these
        with vLLM's)."""
        self._activate()
        batch = collate([sample], self.pad_id, self.action_masks([sample])).to(self.device)
        with torch.no_grad(), self._autocast():
            _, logits = self._action_forward(batch)
            logp, _ = self._logprobs(logits, batch.labels, batch.allowed)
        return logp.tolist()
