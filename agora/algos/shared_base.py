"""Several LoRA learners on one copy of their base model (``trainer.share_base``).

A MAPoRL discussion trains three agents of the same base; built apart, each learner held its
own copy of the base weights (3 x 540 MB of fp32 SmolLM2 on the CPU; on a GPU, 3 x 14 GB of a
bf16 7B model, which decides whether a discussion fits on one card). Shared, the base is loaded
once and each agent is one named LoRA adapter on it (PEFT's multi-adapter model). A learner
activates its adapter before each forward: the frozen weights are the same, only which adapter
is on changes, so an update is the same computation as on a learner of its own (tested).

Why the agents' turns are not forwarded in one mixed-adapter batch (PEFT's ``adapter_names``,
which it refuses in training mode anyway): on the CPU that path gathers each adapter's rows in
every LoRA layer and was measured slower than one forward per adapter (bench/shared_base.py).
On a GPU fewer, larger forwards would launch fewer kernels; not built without one to measure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


def adapter_name(agent: str) -> str:
    """The agent's adapter on a shared base. Prefixed so that no agent name can equal a module
    name of the model ("model", "layers"): saved names are matched segment by segment."""
    return f"agent_{agent}"


@dataclass
class SharedBase:
    """The base models of one trainer, each loaded once per (path, device, dtype, attention),
    with one adapter per agent that trains on it."""

    models: dict[tuple[str, ...], nn.Module] = field(default_factory=dict)
    adapters: dict[tuple[str, ...], list[str]] = field(default_factory=dict)

    def peft_model(self, key: tuple[str, ...], load_base: Callable[[], nn.Module],
                   lora: Any, adapter: str, device: torch.device) -> nn.Module:
        """The PEFT model of ``key`` with ``adapter`` added: the base is loaded (and moved to
        ``device``) only by the first agent of that key."""
        from peft import get_peft_model

        if adapter in self.adapters.get(key, []):
            raise ValueError(f"adapter {adapter!r} is already on this base (two agents of "
                             "one name?)")
        model = self.models.get(key)
        if model is None:
            model = get_peft_model(load_base(), lora, adapter_name=adapter).to(device)
            self.models[key] = model
        else:
            model.add_adapter(adapter, lora)
        self.adapters.setdefault(key, []).append(adapter)
        return model

    def sharers(self, key: tuple[str, ...]) -> int:
        """How many agents train on the base of ``key``."""
        return len(self.adapters.get(key, []))
