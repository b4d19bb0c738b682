"""How fast this machine is right now, and whether anything else is using it.

Every figure of `agora results` that has a time budget (``minutes: 20``) depends on how much
compute those minutes buy: on 2026-11-29 this 2-core machine ran the same negotiation PPO run
at roughly half the updates it got on 2026-11-26, with nothing else running in the container.
A probe taken before each experiment turns "the machine seemed slow" into a figure that
travels with the results: the same fixed workload, timed the same way, on every machine.

The probe names the CPU (model, torch's vector capability, and AVX512-BF16 / AMX or neither:
the learner autocasts to bf16 only where the CPU has them, bf16 matmuls run ~2.5x fp32's
speed with AVX512-BF16 and far faster on AMX, so a different host under the same "2 cores"
changes what the minutes are worth) and times what dominates agora's CPU runs: a square
fp32 matmul (GFLOP/s) and the forward + backward of one decoder block shaped like
SmolLM2-135M's (hidden 576, 9 heads, MLP 1536) over 512 tokens, each on one thread and on all
of them, and a bf16 matmul on one. Around it, /proc/stat says how much
of the machine's CPU went elsewhere while it ran: to other processes (a
machine is quiet when that is near 0) and to the hypervisor (steal). Written by hand because
no library we use times a fixed torch workload and reads /proc/stat's shares together.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from agora.stack.hardware import FAST_BF16_FLAGS, cpu_flags, cpu_model

PROC_STAT = Path("/proc/stat")
MATMUL_SIZE = 1024
# SmolLM2-135M's block: hidden 576, 9 heads of 64, MLP 1536 (its config.json).
HIDDEN, HEADS, MLP = 576, 9, 1536
TOKENS = (2, 256)  # batch x sequence: 512 tokens, like a few agent turns
REPEATS = 7  # timed repetitions per measure (after one warm-up); the median is kept
# Above this share of the machine's CPU going to other processes during the probe, the
# machine is not quiet: time-budgeted figures taken now are not comparable.
BUSY_SHARE = 0.15


@dataclass(frozen=True)
class CpuTimes:
    """Jiffies from /proc/stat's first line: busy (user..softirq), idle (idle + iowait),
    steal (time the hypervisor gave to other guests)."""

    busy: int
    idle: int
    steal: int

    @classmethod
    def read(cls, path: Path = PROC_STAT) -> CpuTimes | None:
        try:
            fields = [int(x) for x in path.read_text().splitlines()[0].split()[1:]]
        except (OSError, ValueError, IndexError):
            return None  # not Linux, or a /proc we cannot read: no shares, the timings stand
        fields += [0] * (8 - len(fields))
        user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
        return cls(user + nice + system + irq + softirq, idle + iowait, steal)


def cpu_name(model: str | None = None, flags: frozenset[str] | None = None) -> str:
    """``AMD EPYC (AVX512, bf16: avx512_bf16)``: the CPU's model, torch's capability and the
    flags that make the learner's bf16 autocast pay (``bf16: none`` where it computes in fp32);
    this machine's own by default."""
    model = cpu_model() if model is None else model
    flags = cpu_flags() if flags is None else flags
    fast = [f for f in FAST_BF16_FLAGS if f in flags] or ["none"]
    return f"{model} ({torch.backends.cpu.get_cpu_capability()}, bf16: {'+'.join(fast)})"


@dataclass(frozen=True)
class MachineSpeed:
    cpu: str  # cpu_name()
    threads: int  # torch's thread count for the "all" figures
    matmul_gflops_1t: float
    matmul_gflops_all: float
    matmul_bf16_gflops_1t: float
    block_ms_1t: float  # one decoder block, forward + backward, 512 tokens
    block_ms_all: float
    others_share: float | None  # of the machine's CPU time during the probe, not ours
    steal_share: float | None
    seconds: float  # how long the probe took

    @property
    def quiet(self) -> bool | None:
        return None if self.others_share is None else self.others_share <= BUSY_SHARE

    def as_dict(self) -> dict:
        return {**asdict(self), "quiet": self.quiet}

    def line(self) -> str:
        return describe(self.as_dict())


def describe(speed: dict) -> str:
    """One line of a probe's figures (``MachineSpeed.as_dict()``, as kept in an outcome; the
    CPU's name and the bf16 figure are left out of outcomes probed before they existed)."""
    threads = speed["threads"]
    bf16 = speed.get("matmul_bf16_gflops_1t")
    line = (f"matmul {speed['matmul_gflops_1t']:.0f} GFLOP/s on 1 thread, "
            f"{speed['matmul_gflops_all']:.0f} on {threads}"
            f"{'' if bf16 is None else f', bf16 {bf16:.0f} on 1'}; one decoder block forward "
            f"+ backward {speed['block_ms_1t']:.0f} ms on 1 thread, {speed['block_ms_all']:.0f} "
            f"ms on {threads}")
    if speed.get("cpu"):
        line = f"{speed['cpu']}: {line}"
    if speed.get("others_share") is not None:
        line += (f"; other processes {speed['others_share']:.0%}, steal "
                 f"{speed['steal_share']:.0%} of the CPU")
    return line


def _median_seconds(work, repeats: int = REPEATS) -> float:
    work()  # warm-up: allocations, kernel selection
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _matmul_work(dtype: torch.dtype = torch.float32):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(MATMUL_SIZE, MATMUL_SIZE, generator=gen).to(dtype)
    b = torch.randn(MATMUL_SIZE, MATMUL_SIZE, generator=gen).to(dtype)
    return lambda: torch.mm(a, b)


def _block_work():
    """A pre-norm decoder block (attention + gated MLP) with its weights as leaf tensors;
    one call runs forward and backward."""
    gen = torch.Generator().manual_seed(0)

    def weight(rows: int, cols: int) -> torch.Tensor:
        return (torch.randn(rows, cols, generator=gen) / cols ** 0.5).requires_grad_()

    wq, wk, wv, wo = (weight(HIDDEN, HIDDEN) for _ in range(4))
    w_gate, w_up, w_down = weight(MLP, HIDDEN), weight(MLP, HIDDEN), weight(HIDDEN, MLP)
    batch, seq = TOKENS
    x = torch.randn(batch, seq, HIDDEN, generator=gen)
    norm = torch.nn.functional.rms_norm

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(batch, seq, HEADS, HIDDEN // HEADS).transpose(1, 2)

    def step() -> None:
        h = norm(x, (HIDDEN,))
        q, k, v = heads(h @ wq.T), heads(h @ wk.T), heads(h @ wv.T)
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x2 = x + attn.transpose(1, 2).reshape(batch, seq, HIDDEN) @ wo.T
        h2 = norm(x2, (HIDDEN,))
        out = x2 + (torch.nn.functional.silu(h2 @ w_gate.T) * (h2 @ w_up.T)) @ w_down.T
        out.square().mean().backward()

    return step


def probe(threads: int | None = None, repeats: int = REPEATS) -> MachineSpeed:
    """Time the fixed workload (~3 s on 2 quiet cores) on 1 thread and on ``threads`` (default:
    the CPUs this process may use), the median of ``repeats``, and the CPU shares around it.
    Restores torch's thread count."""
    threads = threads or len(os.sched_getaffinity(0))
    saved = torch.get_num_threads()
    flops = 2 * MATMUL_SIZE ** 3
    own_start, cpu_start, wall_start = time.process_time(), CpuTimes.read(), time.monotonic()
    figures = {}
    try:
        for label, n in (("1t", 1), ("all", threads)):
            torch.set_num_threads(n)
            matmul = _median_seconds(_matmul_work(), repeats)
            figures[f"matmul_gflops_{label}"] = flops / matmul / 1e9
            figures[f"block_ms_{label}"] = _median_seconds(_block_work(), repeats) * 1000
            if n == 1:
                bf16 = _median_seconds(_matmul_work(torch.bfloat16), repeats)
                figures["matmul_bf16_gflops_1t"] = flops / bf16 / 1e9
    finally:
        torch.set_num_threads(saved)
    own = time.process_time() - own_start
    cpu_end, seconds = CpuTimes.read(), time.monotonic() - wall_start
    return MachineSpeed(cpu=cpu_name(), threads=threads, seconds=round(seconds, 1),
                        **{k: round(v, 1) for k, v in figures.items()},
                        **cpu_shares(cpu_start, cpu_end, own))


def cpu_shares(start: CpuTimes | None, end: CpuTimes | None, own_seconds: float) -> dict:
    """``others_share``: of all CPU time between the two readings, the busy part not spent by
    this process (``own_seconds``); ``steal_share``: the part the hypervisor took."""
    if start is None or end is None:
        return {"others_share": None, "steal_share": None}
    hz = os.sysconf("SC_CLK_TCK")
    busy, idle, steal = (end.busy - start.busy, end.idle - start.idle, end.steal - start.steal)
    total = busy + idle + steal
    if total <= 0:
        return {"others_share": None, "steal_share": None}
    others = max(0.0, busy - own_seconds * hz) / total
    return {"others_share": round(others, 3), "steal_share": round(steal / total, 3)}
