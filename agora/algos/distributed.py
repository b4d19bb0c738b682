"""Learners that span several processes (``trainer.processes: N``): PyTorch FSDP2, via torchrun.

Why: a learner whose base does not fit one GPU (a 7B+ base, or full-weight training) needs its
weights, gradients and optimizer state sharded over several. agora does not write that engine:
each learner is wrapped with PyTorch's own ``fully_shard`` (FSDP2: one unit per decoder layer plus
the root), started by ``torchrun`` (agora/stack/launcher.py), one process per GPU
(``cuda:LOCAL_RANK``, NCCL), or per CPU slot (gloo: the same code path, which is how CI tests it).
Accelerate's FSDP plugin wraps the same ``fully_shard`` but refuses a CPU process group, so it
could not be tested here; DeepSpeed would bring its own optimizer and checkpoint format.

How the trainer drives it: rank 0 is the trainer (Redis, the Celery queue, publishing, metrics);
every other rank builds the same learners and ``follow``s. Each call rank 0 makes on a learner
that involves the model (update, save, checkpoint, resume) is first broadcast, so all ranks enter
the same collective operations in the same order (``Lockstep``). In an update every rank gets
every sample (the broadcast) and forwards its own share of them; see ``PPOLearner.update``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger("agora.distributed")


@dataclass(frozen=True)
class DataParallel:
    """Where this process sits among the learner's processes (world 1: a plain learner)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @property
    def sharded(self) -> bool:
        return self.world > 1

    def owns(self, row: int) -> bool:
        """Rows of a batch are dealt round-robin: row r belongs to rank r % world."""
        return row % self.world == self.rank

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum over every process (in place, and returned); the tensor itself alone."""
        if self.sharded:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor


SINGLE = DataParallel()


def from_environment() -> DataParallel:
    """The process's place as torchrun describes it (RANK, WORLD_SIZE, LOCAL_RANK)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return SINGLE
    return DataParallel(rank=int(os.environ["RANK"]), world=world,
                        local_rank=int(os.environ.get("LOCAL_RANK", "0")))


def start(parallel: DataParallel, device: torch.device) -> torch.device:
    """Join the process group and return this rank's device: ``cuda:LOCAL_RANK`` with NCCL
    where the learners are on GPUs, the CPU with gloo otherwise."""
    if not parallel.sharded:
        return device
    if device.type == "cuda":
        device = torch.device("cuda", parallel.local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
    log.info("rank %d/%d on %s (%s)", parallel.rank, parallel.world, device, backend)
    return device


def stop(parallel: DataParallel) -> None:
    if parallel.sharded and dist.is_initialized():
        dist.destroy_process_group()


def shard(root: torch.nn.Module, layers: list[torch.nn.Module]) -> None:
    """FSDP2 over a learner's model: one unit per decoder layer (gathered just before it runs,
    freed after), the rest (embeddings, final norm, LM head: tied weights must share a unit)
    in ``root``'s unit."""
    from torch.distributed.fsdp import fully_shard

    for layer in layers:
        fully_shard(layer)
    fully_shard(root)


def broadcast(parallel: DataParallel, message: Any = None) -> Any:
    """Rank 0's ``message`` on every rank (pickled; samples are host lists, no tensors)."""
    box = [message]
    dist.broadcast_object_list(box, src=0)
    return box[0]


# The learner methods that touch the model: every rank must run them, in the same order.
COLLECTIVE_METHODS = frozenset({"update", "set_budget_progress", "save_adapter",
                                "save_weights", "save_policy", "save_checkpoint",
                                "load_checkpoint"})


class Lockstep:
    """Rank 0's handle on a sharded learner: a call to a collective method is broadcast to the
    followers before rank 0 makes it itself; anything else is the learner's own attribute."""

    def __init__(self, name: str, learner: Any, parallel: DataParallel) -> None:
        self._name, self._learner, self._parallel = name, learner, parallel

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._learner, attr)
        if attr not in COLLECTIVE_METHODS or not self._parallel.sharded:
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            broadcast(self._parallel, (self._name, attr, args, kwargs))
            return value(*args, **kwargs)

        return call


def release_followers(parallel: DataParallel) -> None:
    """Tell the followers that rank 0 is done (they return from ``follow``)."""
    if parallel.sharded and dist.is_initialized():
        broadcast(parallel, None)


def follow(learners: dict[str, Any], parallel: DataParallel) -> int:
    """A follower's life: run each call rank 0 broadcasts until it says stop; returns how many
    calls it ran. A rank 0 that dies instead takes the followers down with it (torchrun stops
    the whole group when one process fails)."""
    calls = 0
    while True:
        message = broadcast(parallel)
        if message is None:
            return calls
        name, method, args, kwargs = message
        if method not in COLLECTIVE_METHODS:
            raise RuntimeError(f"rank 0 sent a call followers do not make: {method}")
        getattr(learners[name], method)(*args, **kwargs)
        calls += 1
