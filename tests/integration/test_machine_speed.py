"""The machine probe on this machine's real CPU: figures in their units, torch's thread count
left as found, and a machine made busy by other processes reported as not quiet."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from agora.results.machine_speed import BUSY_SHARE, probe

SPIN = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass\n"


def test_the_probe_times_its_workload_and_leaves_torch_threads_as_found():
    torch.set_num_threads(1)
    speed = probe(threads=2, repeats=2)
    assert torch.get_num_threads() == 1
    assert speed.threads == 2 and speed.seconds > 0
    assert 0.5 < speed.matmul_gflops_1t < 10_000 and 0.5 < speed.matmul_gflops_all < 10_000
    assert 1 < speed.block_ms_1t < 60_000 and 1 < speed.block_ms_all < 60_000
    # bf16 without hardware support runs at ~1 GFLOP/s here, half that while the other test
    # worker shares the core (make test runs two): a floor for the unit, not for the speed.
    assert 0.05 < speed.matmul_bf16_gflops_1t < 100_000 and speed.cpu
    assert speed.as_dict()["quiet"] == speed.quiet


def test_other_processes_spinning_make_the_machine_not_quiet():
    # One spinner per CPU /proc/stat counts: whatever the core count, most of the machine's
    # time goes to them, far above the quiet threshold.
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(os.cpu_count())]
    try:
        speed = probe(repeats=2)
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
    assert speed.others_share is not None and speed.others_share > BUSY_SHARE
    assert speed.quiet is False
