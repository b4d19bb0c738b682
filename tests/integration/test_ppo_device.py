"""The PPO update on a device: every tensor on the learner's device, no per-token host syncs,
the same numbers whatever the placement options; device, dtype and attention as config.

CI has no GPU, so the update's device-dependent code runs here through the same path a GPU run
takes (the device is a parameter, never an ``if cuda`` branch), and two hooks catch what would
go wrong on a GPU:
- ``torch.device("meta")`` as the default device while the update runs: a tensor created
  without an explicit device lands on ``meta`` instead of silently on the CPU, and the dispatch
  hook reports the op that made it (on a GPU run that tensor would have been on the CPU: the
  crash ``index is on cpu, different from other tensors on cuda:0``);
- the same hook counts the ops that force a device -> host sync (``item()``/``int()``,
  ``nonzero``, boolean-mask indexing, ``unique``): their number must not grow with the tokens.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from agora.algos.compute import (
    ComputeConfig,
    Placement,
    resolve,
    resolve_attention,
    weights_dtype,
)
from agora.algos.ppo import PPOLearner, TurnSample, collate
from agora.config.agents import AgentConfig
from agora.config.base import ConfigError
from agora.config.training import PPOConfig
from tests.stack_helpers import FP32, tiny_config

aten = torch.ops.aten
SYNC_OPS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
            aten._unique2.default, aten.unique_dim.default, aten.unique_consecutive.default,
            aten.bincount.default}


class DeviceAudit(TorchDispatchMode):
    """Records every op whose output is off ``device`` and every op that syncs the host.
    ``host_ok``: outputs on the CPU are the batch's explicit host staging (a learner on a GPU);
    an implicit creation still shows up, on ``meta``."""

    def __init__(self, device: torch.device, host_ok: bool = False) -> None:
        super().__init__()
        self.devices = {device, torch.device("cpu")} if host_ok else {device}
        self.off_device: list[str] = []
        self.syncs: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SYNC_OPS or (func is aten.index.Tensor and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool
                for i in (args[1] if len(args) > 1 else []) if i is not None)):
            self.syncs.append(str(func))
        out = func(*args, **kwargs)
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(tensor, torch.Tensor) and tensor.device not in self.devices:
                self.off_device.append(f"{func} -> {tensor.device}")
        return out


def _learner(tiny_model: str, **ppo) -> PPOLearner:
    agent = AgentConfig(name="a", base="m", lora_rank=8, lora_alpha=16)
    return PPOLearner(tiny_model, agent, PPOConfig(**ppo), compute=FP32)


def _turns(learner: PPOLearner, n: int, completion_len: int = 3) -> list[TurnSample]:
    tok = learner.tokenizer
    shared = tok.encode("You play a game. Rules: be brief. Your move:", add_special_tokens=False)
    out = []
    for i in range(n):
        # Rows of unequal length (padding), half of them sharing more than the instructions.
        state = f" state {i % 4} role {'XO'[i % 2]}" + " again" * (i % 2)
        prompt = shared + tok.encode(state, add_special_tokens=False)
        completion = tok.encode(" abcdefgh"[1 + i % 7:][:completion_len] or "a",
                                add_special_tokens=False)
        sample = TurnSample(prompt, completion, [0.0] * len(completion), float(i % 3 - 1),
                            role="XO"[i % 2])
        sample.behaviour_logprobs = learner.sequence_logprobs(sample)
        out.append(sample)
    return out


def _audited_update(learner: PPOLearner, turns: list[TurnSample]) -> DeviceAudit:
    audit = DeviceAudit(learner.device)
    with torch.device("meta"), audit:
        stats = learner.update(turns)
    assert stats["turns"] == len(turns)
    return audit


@pytest.mark.parametrize("ppo", [
    {"kl_coef": 0.02, "epochs": 2, "batch_turns": 16, "minibatch_turns": 8},
    {"kl_coef": 0.0, "epochs": 1, "batch_turns": 16, "minibatch_turns": 16,
     "advantage_norm": "role"},
], ids=["reference-and-minibatches", "fused-role-advantages"])
@pytest.mark.parametrize("sharing", ["on", "off"])
def test_update_creates_nothing_off_the_learner_device(tiny_model, ppo, sharing):
    learner = _learner(tiny_model, **ppo)
    learner.placement = dataclasses.replace(learner.placement, shared_prefix=sharing)
    turns = _turns(learner, 16)
    learner.update(turns)  # first step: AdamW creates its step counters (outside our code)
    audit = _audited_update(learner, turns)
    assert audit.off_device == [], audit.off_device[:5]


def test_host_syncs_do_not_grow_with_tokens_or_turns(tiny_model):
    """What is left: one per optimizer step (the finite-gradient check) and, inside
    transformers, two per forward of padded rows (its SDPA mask asks whether the padding mask
    is all ones). The count is the same for 6 turns of 1 token and 24 turns of 6 tokens."""
    counts = {}
    for turns, tokens in [(6, 1), (24, 6)]:
        learner = _learner(tiny_model, kl_coef=0.02, epochs=2, batch_turns=64,
                           minibatch_turns=64)
        learner.placement = dataclasses.replace(learner.placement, shared_prefix="off")
        batch = _turns(learner, turns, completion_len=tokens)
        learner.update(batch)
        counts[(turns, tokens)] = len(_audited_update(learner, batch).syncs)
    assert len(set(counts.values())) == 1, counts
    forwards, steps = 3, 2  # the reference pass, then 2 epochs x one minibatch
    assert counts[(6, 1)] <= 2 * forwards + steps, counts


def test_the_update_is_the_same_with_and_without_the_shared_prefix(tiny_model):
    """The placement options change the speed, never the result."""
    results = []
    for sharing in ("on", "off"):
        learner = _learner(tiny_model, kl_coef=0.02, epochs=2, batch_turns=8, minibatch_turns=4,
                           learning_rate=1e-2)
        learner.placement = dataclasses.replace(learner.placement, shared_prefix=sharing)
        turns = _turns(learner, 8)
        stats = learner.update(turns)
        after = learner.sequence_logprobs(turns[0])
        assert after != pytest.approx(turns[0].behaviour_logprobs, abs=1e-3)  # it trained
        results.append((stats, after))
    (on, on_logp), (off, off_logp) = results
    for key in ("pg_loss", "kl", "ratio", "vf_loss", "value_mean"):
        assert on[key] == pytest.approx(off[key], abs=1e-4), key
    assert on_logp == pytest.approx(off_logp, abs=1e-4)


def test_compute_config_resolves_on_a_cpu_machine_and_names_bad_fields():
    if torch.cuda.is_available():
        pytest.skip("this test is about a machine without a GPU (CI's)")
    auto = resolve(ComputeConfig())
    assert auto.device == torch.device("cpu") and auto.attn_implementation == "sdpa"
    assert auto.weights_dtype == torch.float32  # fp32 master weights on the CPU
    bf16 = resolve(ComputeConfig(device="cpu", dtype="bf16"))
    assert bf16.dtype == torch.bfloat16 and bf16.trl_args() == {
        "use_cpu": True, "bf16": True, "fp16": False}
    with pytest.raises(ValueError, match="trainer.device: 'cuda:1' but torch sees no CUDA GPU"):
        resolve(ComputeConfig(device="cuda:1"))
    with pytest.raises(ValueError, match="agents\\[0\\].device"):
        resolve(ComputeConfig(), "cuda", field_prefix="agents[0]")
    with pytest.raises(ValueError, match="flash_attention_2 runs on CUDA GPUs only"):
        resolve(ComputeConfig(device="cpu", attn_implementation="flash_attention_2"))
    # A GPU keeps weights in the compute dtype, except where every weight trains.
    cuda = torch.device("cuda", 0)
    assert weights_dtype(torch.bfloat16, cuda) == torch.bfloat16
    assert weights_dtype(torch.bfloat16, torch.device("cpu")) == torch.float32
    gpu_like = dataclasses.replace(bf16, weights_dtype=torch.bfloat16)
    assert gpu_like.model_kwargs()["dtype"] == torch.bfloat16
    assert gpu_like.model_kwargs(full_weights=True)["dtype"] == torch.float32
    # On a GPU without the package (or in fp32) the message says what to do.
    if not __import__("importlib").util.find_spec("flash_attn"):
        with pytest.raises(ValueError, match="needs the flash-attn package"):
            resolve_attention("flash_attention_2", cuda, torch.bfloat16)
    assert resolve_attention("sdpa", cuda, torch.float32) == "sdpa"


def test_run_config_device_fields_are_checked():
    cfg = tiny_config(trainer={"device": "cpu", "dtype": "bf16", "compile": False},
                      agents=[{"name": "player", "base": "tiny", "lora_rank": 8,
                               "device": "cuda:1"}])
    assert cfg.trainer.dtype == "bf16" and cfg.agents[0].device == "cuda:1"
    bad = [({"trainer": {"device": "gpu"}}, "trainer.device"),
           ({"trainer": {"dtype": "int8"}}, "trainer.dtype"),
           ({"trainer": {"attn_implementation": "flash"}}, "trainer.attn_implementation"),
           ({"agents": [{"name": "player", "base": "tiny", "lora_rank": 8, "device": "tpu"}]},
            "agents.0.device"),
           ({"ppo": {"bf16": False}}, "ppo: bf16 moved to trainer.dtype")]
    for override, message in bad:
        with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
            tiny_config(**override)


def test_agora_up_refuses_a_gpu_learner_on_a_machine_without_one(tmp_path):
    """Said before anything starts (no Redis, no vLLM), naming the field, exit 2."""
    if torch.cuda.is_available():
        pytest.skip("this test is about a machine without a GPU (CI's)")
    import subprocess
    import sys

    from tests.stack_helpers import write_config

    cfg = tiny_config(trainer={"device": "cuda"})
    path = write_config(cfg, tmp_path / "gpu.yaml")
    proc = subprocess.run([sys.executable, "-m", "agora.cli", "up", str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "trainer.device: 'cuda' but torch sees no CUDA GPU" in " ".join(proc.stdout.split())
    assert "Traceback" not in proc.stdout + proc.stderr
    runs = tmp_path / "runs"
    assert not runs.exists() or not list(runs.rglob("*.log"))  # no service was started


@pytest.mark.slow
def test_compiled_update_matches_the_eager_one(tiny_model):
    """``trainer.compile: true`` runs the same update through torch.compile (inductor). One
    fused pass (no reference forward) and plain rows keep the compilations to one graph and
    its backward: inductor on 2 CPU cores takes minutes per graph."""
    results = []
    for compile_ in (False, True):
        agent = AgentConfig(name="a", base="m", lora_rank=8, lora_alpha=16)
        learner = PPOLearner(tiny_model, agent, PPOConfig(kl_coef=0.0),
                             compute=FP32.model_copy(update={"compile": compile_,
                                                             "shared_prefix": "off"}))
        assert (learner.forward_module._decoder[0] is not learner._causal_lm().model) == compile_
        turns = _turns(learner, 8)
        if compile_:  # even where sharing would pay, a compiled decoder gets plain rows
            learner.placement = dataclasses.replace(learner.placement, shared_prefix="on")
            batch = collate(turns, learner.pad_id)
            assert learner._forward_groups(batch, list(range(8))) == [(list(range(8)), 0)]
        results.append(learner.update(turns))
    eager, compiled = results
    for key in ("pg_loss", "entropy", "ratio", "vf_loss", "value_mean"):
        assert compiled[key] == pytest.approx(eager[key], abs=1e-4), key


def test_shared_prefix_pays_off_on_the_cpu_from_the_measured_share_and_never_on_a_gpu():
    from agora.algos import shared_prefix

    lengths = [100] * 4
    saving = [([0, 1, 2, 3], 10)]  # 3 x 10 of 400 tokens saved: 7.5%
    assert shared_prefix.saved_share(saving, lengths) == pytest.approx(0.075)
    assert shared_prefix.pays_off(saving, lengths, "cpu")
    assert not shared_prefix.pays_off([([0, 1, 2, 3], 4)], lengths, "cpu")  # 3%
    assert not shared_prefix.pays_off([([0, 1, 2, 3], 90)], lengths, "cuda")
    learner_groups = [([0, 1], 40), ([2, 3], 40)]
    assert shared_prefix.saved_share(learner_groups, lengths) == pytest.approx(0.2)


@pytest.mark.parametrize("sharing", ["on", "off"])
def test_the_gpu_layout_runs_on_the_cpu(tiny_model, sharing):
    """A GPU learner keeps its weights in bf16 (fp32 master weights are a CPU choice) and
    autocasts to bf16: the same layout, on the CPU, through the same code. It once met an fp32
    hidden state with a bf16 head outside autocast, which only a GPU run would have shown."""
    agent = AgentConfig(name="a", base="m", lora_rank=8, lora_alpha=16)
    gpu_like = Placement(device=torch.device("cpu"), dtype=torch.bfloat16,
                         weights_dtype=torch.bfloat16, attn_implementation="sdpa",
                         shared_prefix=sharing)
    ppo = PPOConfig(kl_coef=0.02, batch_turns=8, minibatch_turns=4)
    learner = PPOLearner(tiny_model, agent, ppo, placement=gpu_like)
    assert next(learner._causal_lm().parameters()).dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in learner.policy_params)  # PEFT keeps LoRA fp32
    reference = PPOLearner(tiny_model, agent, ppo, compute=FP32)
    turns = _turns(learner, 8)
    fp32_logp = reference.sequence_logprobs(turns[0])
    assert turns[0].behaviour_logprobs == pytest.approx(fp32_logp, abs=0.1)
    stats = learner.update(turns)
    assert stats["ratio"] == pytest.approx(1.0, abs=0.05) and stats["turns"] == 8
    audit = _audited_update(learner, turns)
    assert audit.off_device == [], audit.off_device[:5]
