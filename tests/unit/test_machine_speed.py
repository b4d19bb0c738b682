"""The CPU shares of the machine probe, read from /proc/stat-shaped files."""

from __future__ import annotations

import os

import pytest

from agora.results.machine_speed import CpuTimes, cpu_name, cpu_shares, describe
from agora.results.report import machine_lines

HZ = os.sysconf("SC_CLK_TCK")


def stat(tmp_path, name: str, user: int, idle: int, steal: int):
    path = tmp_path / name
    # user nice system idle iowait irq softirq steal guest guest_nice
    path.write_text(f"cpu  {user} 0 0 {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3 4\n")
    return CpuTimes.read(path)


def test_others_share_is_the_busy_time_this_process_did_not_spend(tmp_path):
    start = stat(tmp_path, "a", user=1000, idle=1000, steal=0)
    end = stat(tmp_path, "b", user=1000 + 6 * HZ, idle=1000 + 3 * HZ, steal=1 * HZ)
    shares = cpu_shares(start, end, own_seconds=2.0)  # 6 s busy, 2 of them ours, of 10 s
    assert shares == {"others_share": pytest.approx(0.4), "steal_share": pytest.approx(0.1)}
    # this process counted more than the machine's busy time (clock granularity): never < 0
    assert cpu_shares(start, end, own_seconds=9.0)["others_share"] == 0.0


def test_without_a_readable_proc_stat_the_shares_are_unknown(tmp_path):
    assert CpuTimes.read(tmp_path / "missing") is None
    (tmp_path / "garbled").write_text("cpu x y\n")
    assert CpuTimes.read(tmp_path / "garbled") is None
    start = stat(tmp_path, "a", user=1, idle=1, steal=0)
    assert cpu_shares(None, start, 1.0) == {"others_share": None, "steal_share": None}
    assert cpu_shares(start, start, 0.0) == {"others_share": None, "steal_share": None}


def test_results_md_says_what_the_machine_was_doing_before_an_experiment():
    speed = {"cpu": "AMD EPYC (AVX512)", "threads": 2, "matmul_gflops_1t": 61.4,
             "matmul_gflops_all": 110.2, "matmul_bf16_gflops_1t": 150.0,
             "block_ms_1t": 140.2, "block_ms_all": 88.0, "others_share": 0.42,
             "steal_share": 0.01, "seconds": 8.0, "quiet": False}
    (line,) = [x for x in machine_lines(speed) if x]
    assert line.startswith("Machine before it: AMD EPYC (AVX512): matmul 61 GFLOP/s on 1 "
                           "thread, 110 on 2, bf16 150 on 1;")
    assert "block forward + backward 140 ms on 1 thread, 88 ms on 2" in line
    assert line.endswith("other processes 42%, steal 1% of the CPU (**not quiet**).")
    unknown = {**speed, "others_share": None, "steal_share": None, "quiet": None}
    assert describe(unknown).endswith("88 ms on 2") and "quiet" not in machine_lines(unknown)[1]
    # an outcome probed before the CPU's name and bf16 were kept still reads
    older = {k: v for k, v in unknown.items() if k not in ("cpu", "matmul_bf16_gflops_1t")}
    assert describe(older).startswith("matmul 61 GFLOP/s on 1 thread, 110 on 2; one decoder")
    assert machine_lines(None) == []  # outcomes kept from before the probe existed


def test_the_cpu_is_named_with_the_flags_that_make_bf16_pay():
    xeon = cpu_name("Intel Xeon", frozenset({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}))
    assert xeon.startswith("Intel Xeon (") and xeon.endswith(", bf16: avx512_bf16+amx_bf16)")
    assert cpu_name("Old Xeon", frozenset({"avx2"})).endswith(", bf16: none)")
    assert cpu_name().endswith(")")  # this machine's own, whatever it is
