"""The machine probe of `agora results` on its own: what this machine's CPU does now, and
whether anything else is using it. Seconds measured on different days are only comparable
through it (this 2-core machine has run the same bench 2-4x apart from one day to the next).

    .venv/bin/python bench/machine_speed.py [--threads N] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os

from results import append_section, markdown_table

from agora.results.machine_speed import BUSY_SHARE, probe


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for the 'all' figures (default: the CPUs we may use)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    speed = probe(args.threads, args.repeats)
    rows = [["matmul 1024x1024 fp32 (GFLOP/s)", speed.matmul_gflops_1t, speed.matmul_gflops_all],
            ["matmul 1024x1024 bf16 (GFLOP/s)", speed.matmul_bf16_gflops_1t, "-"],
            ["SmolLM2-shaped block fwd+bwd, 512 tokens (ms)", speed.block_ms_1t,
             speed.block_ms_all]]
    shares = ("unknown (no /proc/stat)" if speed.others_share is None else
              f"{speed.others_share:.0%} to other processes, {speed.steal_share:.0%} steal")
    quiet = {True: "quiet", False: f"**not quiet** (others above {BUSY_SHARE:.0%})",
             None: "quietness unknown"}[speed.quiet]
    body = "\n".join([
        f"CPU: {speed.cpu}. 1-min load average {load:.2f} before; during the probe "
        f"({speed.seconds} s) the CPU went {shares}: {quiet}. Median of {args.repeats}.", "",
        markdown_table(["workload", "1 thread", f"{speed.threads} threads"], rows)])
    print(body)
    print(f"appended to {append_section('machine_speed.py', body)}")


if __name__ == "__main__":
    main()
