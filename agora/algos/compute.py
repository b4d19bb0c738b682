"""Where a learner trains and in what precision: ``trainer.device``, ``dtype`` and
``attn_implementation`` of a run config, resolved once into a ``Placement``.

Why one place: the PPO learner, the TRL stages (support SFT, reflection SFT/DPO, the verifier's
RewardTrainer) and the benches must agree on the device, the autocast dtype and the attention
kernel, or a run silently trains in fp32 on the CPU while its GPU idles (measured before this
module: every tensor of the update was built on the CPU and autocast was ``"cpu"``).

The choices, and why:
- ``device: auto`` is the first CUDA GPU when torch sees one, else the CPU.
- ``dtype: auto`` is bf16 on a GPU that supports it (fp16 otherwise) and on a CPU with native
  bf16 (AMX / AVX512-BF16, ``agora.stack.hardware``), else fp32: bf16 on a CPU without it was
  measured 3.5x slower.
- Weights are stored in fp32 on the CPU (autocast computes in bf16 where that pays, and the
  fp32 weights were the fastest layout measured here) and in the compute dtype on a GPU (half
  the memory; PEFT keeps the LoRA weights themselves in fp32).
- ``attn_implementation: auto`` is flash-attn 2 on a GPU where the package is installed (the
  GPU image installs it), else PyTorch's SDPA.

Nothing here imports torch at module level: the config (and so the gateway) imports this file.
"""

from __future__ import annotations

import contextlib
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    import torch

DEVICE_PATTERN = r"^(auto|cpu|cuda(:[0-9]{1,2})?)$"
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


class ComputeConfig(BaseModel):
    """The ``trainer:`` section of a run config (and of a reflection config)."""

    model_config = ConfigDict(extra="forbid")

    device: str = Field("auto", pattern=DEVICE_PATTERN,
                        description="auto | cpu | cuda | cuda:N (agents[].device overrides)")
    dtype: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    attn_implementation: Literal["auto", "sdpa", "flash_attention_2", "eager"] = "auto"
    # torch.compile the decoder for the PPO forward (mode "default", dynamic shapes: turns have
    # any length), on plain rows (no shared prefix). Off by default: the first update pays the
    # compilation (42 s for the tiny test model on 2 CPU cores).
    compile: bool = False
    # The shared-prompt-prefix forward (agora/algos/shared_prefix.py): auto decides per device
    # from the measured threshold in ``shared_prefix.pays_off``; on / off force it.
    shared_prefix: Literal["auto", "on", "off"] = "auto"
    # Processes each PPO learner spans (agora/algos/distributed.py): the model, gradients and
    # optimizer state sharded with PyTorch FSDP2, one process per GPU (or per CPU slot),
    # started by torchrun. 1 = a plain learner on one device.
    processes: int = Field(1, ge=1, le=64)

    @model_validator(mode="after")
    def _sharding_fits(self) -> ComputeConfig:
        if self.processes > 1 and self.compile:
            raise ValueError("trainer.compile: not with trainer.processes > 1 (torch.compile "
                             "under FSDP is not tested here); set one of them back")
        if self.processes > 1 and self.shared_prefix == "on":
            raise ValueError("trainer.shared_prefix: 'on' needs trainer.processes: 1 (a "
                             "sharded learner forwards plain rows)")
        return self


@dataclass(frozen=True)
class Placement:
    """A resolved ``ComputeConfig``: everything a learner needs to put tensors somewhere."""

    device: torch.device
    dtype: torch.dtype  # autocast dtype; float32 = autocast off
    weights_dtype: torch.dtype
    attn_implementation: str
    compile: bool = False
    shared_prefix: str = "auto"

    @property
    def on_cpu(self) -> bool:
        return self.device.type == "cpu"

    def autocast(self) -> contextlib.AbstractContextManager:
        import torch

        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def model_kwargs(self, full_weights: bool = False) -> dict[str, Any]:
        """``from_pretrained`` keyword arguments (the model is then moved with ``.to``).
        ``full_weights``: every weight trains, so they stay fp32 master weights and autocast
        does the low-precision math (AdamW on bf16 weights loses small updates)."""
        import torch

        dtype = torch.float32 if full_weights else self.weights_dtype
        return {"dtype": dtype, "attn_implementation": self.attn_implementation}

    def trl_args(self) -> dict[str, Any]:
        """The ``TrainingArguments`` fields that put a TRL trainer on this device."""
        import torch

        return {"use_cpu": self.on_cpu, "bf16": self.dtype == torch.bfloat16,
                "fp16": self.dtype == torch.float16}


def refuse_bf16_field(data: object) -> object:
    """A pydantic before-validator's body: the old ``bf16`` switches of ``ppo:`` and the
    reflection stages became ``trainer.dtype``; say so instead of 'extra field' (pydantic's
    error location names the section)."""
    if isinstance(data, dict) and "bf16" in data:
        raise ValueError("bf16 moved to trainer.dtype (auto | bf16 | fp16 | fp32; "
                         "bf16: false is trainer.dtype: fp32)")
    return data


def resolve_device(spec: str, field: str = "trainer.device") -> torch.device:
    """``auto | cpu | cuda | cuda:N`` -> a torch device that exists, or a ValueError naming
    ``field`` (a config asking for a GPU on a machine without one must not fall back quietly)."""
    import torch

    if spec == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{field}: '{spec}' but torch sees no CUDA GPU "
                             f"(torch {torch.__version__}); use 'cpu' or 'auto'")
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"{field}: '{spec}' but only {torch.cuda.device_count()} "
                             f"GPU(s) are visible")
        return torch.device("cuda", index)
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    import torch

    if name != "auto":
        return getattr(torch, DTYPES[name])
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    from agora.stack.hardware import cpu_has_fast_bf16

    return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32


def weights_dtype(compute: torch.dtype, device: torch.device) -> torch.dtype:
    """fp32 master weights on the CPU (autocast does the bf16 math), the compute dtype on an
    accelerator (half the memory of fp32; LoRA weights stay fp32 under PEFT)."""
    import torch

    return torch.float32 if device.type == "cpu" else compute


def flash_attn_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def resolve_attention(name: str, device: torch.device, dtype: torch.dtype,
                      field: str = "trainer.attn_implementation") -> str:
    import torch

    if name == "auto":
        return "flash_attention_2" if device.type == "cuda" and flash_attn_installed() else "sdpa"
    if name == "flash_attention_2":
        if device.type != "cuda":
            raise ValueError(f"{field}: flash_attention_2 runs on CUDA GPUs only "
                             f"(this learner is on {device}); use sdpa")
        if not flash_attn_installed():
            raise ValueError(f"{field}: flash_attention_2 needs the flash-attn package "
                             f"(installed in the GPU images; pip install flash-attn "
                             f"--no-build-isolation); use sdpa or auto")
        if dtype == torch.float32:
            raise ValueError(f"{field}: flash_attention_2 needs dtype bf16 or fp16, not fp32")
    return name


def resolve(cfg: ComputeConfig, device: str | None = None,
            field_prefix: str = "trainer") -> Placement:
    """``cfg`` with an optional per-learner device override (``agents[].device``)."""
    spec = device or cfg.device
    where = resolve_device(spec, f"{field_prefix}.device")
    dtype = resolve_dtype(cfg.dtype, where)
    return Placement(
        device=where,
        dtype=dtype,
        weights_dtype=weights_dtype(dtype, where),
        attn_implementation=resolve_attention(cfg.attn_implementation, where, dtype,
                                              f"{field_prefix}.attn_implementation"),
        compile=cfg.compile,
        shared_prefix=cfg.shared_prefix,
    )
