"""Gateway load: C concurrent chat clients for D seconds through the gateway (with an API key, so
auth and the per-key rate limiter run on every request) and against vLLM called directly, in one
run, in the order direct D, gateway D, direct D. Why three phases: a machine whose background
load drifts during the run (other people's jobs on shared cores) then weighs on both paths
alike; and why whole phases, not halves: each phase has one ramp-up and one drain (the requests
in flight at its deadline), which at tens of seconds per request under load is a large part of
a phase, so both paths must have the same number of each. The two direct phases' throughputs
are printed too, as a measure of the drift. Then the gateway's added latency at low load
(1 client, N sequential requests, alternating direct / gateway for the same reason).

    .venv/bin/python bench/gateway_load.py [--model smollm2-135m] [--clients 64] [--seconds 60]

Direct requests name the agent's LoRA adapter (what the gateway forwards to); gateway requests
name the agent. Every request is a short prompt with max_tokens 16 and temperature 0, so both
paths ask vLLM for the same work. Ratios are gateway / direct: latency ratios above 1 and a
throughput ratio below 1 are the gateway's cost. Any failed request is an error: the script
prints it loudly and exits 1. Figures are appended to bench/results.md.

Why asyncio + aiohttp rather than locust or httpx: one process, and a client cheap enough not
to compete with what it measures on a small machine. httpx's connection pool costs ~15 ms CPU
per request at 64 concurrent requests (encode/httpx#3215; here it used more CPU than vLLM
itself), aiohttp's well under 1 ms. The same pool problem was the gateway's biggest loss; it
now forwards over aiohttp too (agora/gateway/upstream.py). The script also reports the CPU each
process tree (this client, the gateway, vLLM) spent per request, a figure that other people's
load on a shared machine does not move the way it moves wall-clock ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import psutil
import redis
from results import RESULTS, ROOT, append_section, markdown_table

from agora.cli.keys import PEPPER_ENV
from agora.config.run import parse_config
from agora.gateway.keys import KeyStore
from agora.serving.auth import API_KEY_ENV, vllm_headers
from agora.stack.launcher import LaunchError, make_stack
from agora.stack.procs import ServiceFailed

AGENT = "player"
MAX_TOKENS = 16
REQUEST_TIMEOUT_S = 120.0
ERROR_SAMPLES = 5
KEEPALIVE_S = 3.0
PROMPTS = [
    "Name a colour.",
    "What is 2 + 3?",
    "Say hello in French.",
    "Pick a number between 1 and 9.",
    "What is the capital of Italy?",
    "Give one word that rhymes with cat.",
    "Is water wet? Answer yes or no.",
    "Name a fruit that is yellow.",
    "What day comes after Monday?",
    "Spell the word 'tree' backwards.",
    "Name an animal that can fly.",
    "What is 10 minus 4?",
    "Write one short greeting.",
    "Which is bigger, 7 or 12?",
    "Name a month with 30 days.",
    "What do bees make?",
]


@dataclass
class LoadResult:
    """One path's requests: latencies of the good ones, failures counted and sampled."""

    name: str
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    completion_tokens: int = 0
    elapsed_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)  # process -> CPU seconds used

    @property
    def requests(self) -> int:
        return len(self.latencies) + self.errors

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.elapsed_s if self.elapsed_s else 0.0

    def percentile(self, q: int) -> float:
        """q-th percentile in seconds (inclusive method: stays within the observed range)."""
        if len(self.latencies) < 2:
            return self.latencies[0] if self.latencies else float("nan")
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[q - 1]

    def fail(self, message: str) -> None:
        self.errors += 1
        if len(self.error_samples) < ERROR_SAMPLES:
            self.error_samples.append(message)


@dataclass(frozen=True)
class Target:
    """Where one path sends its requests and under which model name."""

    name: str
    url: str
    model: str
    headers: dict[str, str]


def chat_body(model: str, index: int) -> dict:
    return {"model": model, "max_tokens": MAX_TOKENS, "temperature": 0,
            "messages": [{"role": "user", "content": PROMPTS[index % len(PROMPTS)]}]}


async def one_request(http: aiohttp.ClientSession, target: Target, index: int,
                      result: LoadResult) -> None:
    """Send request ``index``; record its latency (to the last byte of the answer) if vLLM's
    answer is complete, else an error."""
    started = time.perf_counter()
    try:
        async with http.post(target.url, json=chat_body(target.model, index),
                             headers=target.headers) as resp:
            if resp.status != 200:
                result.fail(f"HTTP {resp.status}: {(await resp.text())[:300]}")
                return
            data = await resp.json()
        took = time.perf_counter() - started
        if not isinstance(data["choices"][0]["message"]["content"], str):
            result.fail(f"answer without text: {str(data)[:300]}")
            return
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, IndexError,
            TypeError) as err:
        result.fail(f"{type(err).__name__}: {err}")
        return
    result.latencies.append(took)
    result.completion_tokens += int(data.get("usage", {}).get("completion_tokens", 0))


def new_client(clients: int) -> aiohttp.ClientSession:
    """Keep-alive below the servers' 5 s (uvicorn's, vLLM's and the gateway's): with aiohttp's
    default 15 s, a connection the server closes just as it is reused fails the request
    (ServerDisconnectedError, seen in warm-up), an error of the client, not of what is measured."""
    connector = aiohttp.TCPConnector(limit=clients, keepalive_timeout=KEEPALIVE_S)
    return aiohttp.ClientSession(connector=connector,
                                 timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S))


async def hold_load(target: Target, clients: int, seconds: float,
                    max_requests: int) -> LoadResult:
    """``clients`` loops, each sending its next request as soon as the last one answered, until
    ``seconds`` have passed or ``max_requests`` were sent. Client ``c`` walks the prompts from
    offset ``c``, so both paths send the same sequence."""
    result = LoadResult(target.name)
    sent = 0
    async with new_client(clients) as http:
        started = time.perf_counter()
        deadline = started + seconds

        async def client(offset: int) -> None:
            nonlocal sent
            step = 0
            while time.perf_counter() < deadline and sent < max_requests:
                sent += 1
                await one_request(http, target, offset + step, result)
                step += 1

        # Bounded in time even if a request hangs: each has REQUEST_TIMEOUT_S, and the whole
        # phase is cut off after the last one could have ended.
        await asyncio.wait_for(asyncio.gather(*(client(c) for c in range(clients))),
                               seconds + REQUEST_TIMEOUT_S + 30)
        result.elapsed_s = time.perf_counter() - started
    return result


def combine(first: LoadResult, second: LoadResult) -> LoadResult:
    """One path measured in two parts, as one result."""
    return LoadResult(
        first.name, first.latencies + second.latencies, first.errors + second.errors,
        (first.error_samples + second.error_samples)[:ERROR_SAMPLES],
        first.completion_tokens + second.completion_tokens, first.elapsed_s + second.elapsed_s,
        {name: first.cpu_s[name] + second.cpu_s[name] for name in first.cpu_s})


@dataclass
class LowLoad:
    """The sequential probe: both paths, and gateway - direct for each prompt sent to both.
    Why pairs: at one client a generation takes as long as vLLM needs for its tokens, which
    varies by prompt and by the machine's moment far more than the gateway's few ms; the same
    prompt sent back to back to both paths cancels both, the difference of medians does not."""

    direct: LoadResult
    gateway: LoadResult
    added: list[float] = field(default_factory=list)


async def low_load(direct: Target, gateway: Target, count: int) -> LowLoad:
    """One client, ``count`` requests per path, alternating so both see the same moments."""
    low = LowLoad(LoadResult(direct.name), LoadResult(gateway.name))
    async with new_client(1) as http:
        for index in range(count):
            took = []
            for target, result in ((direct, low.direct), (gateway, low.gateway)):
                done = len(result.latencies)
                started = time.perf_counter()
                await one_request(http, target, index, result)
                result.elapsed_s += time.perf_counter() - started
                if len(result.latencies) > done:
                    took.append(result.latencies[-1])
            if len(took) == 2:
                low.added.append(took[1] - took[0])
    return low


async def warm_up(targets: list[Target], clients: int) -> None:
    """Every prompt once per path (vLLM's prefix cache, the gateway's connection pool), then a
    burst at full concurrency so the first measured batches are not vLLM's first ones."""
    for target in targets:
        scratch = LoadResult("warm-up")
        async with new_client(clients) as http:
            await asyncio.gather(*(one_request(http, target, i, scratch)
                                   for i in range(len(PROMPTS))))
            await asyncio.gather(*(one_request(http, target, i, scratch)
                                   for i in range(clients)))
        if scratch.errors:
            raise SystemExit(f"warm-up against {target.name} failed: {scratch.error_samples}")


class CpuMeter:
    """CPU seconds (user + system) used by each measured process tree. Why: on a small shared
    machine wall-clock ratios move with everyone else's load, while the CPU a request costs the
    gateway (and vLLM, and this client) does not; it is also what the gateway takes from vLLM
    when both share the cores. ``pids`` maps a name to (pid, count its children too): this
    script's own children are the whole stack, so the client counts itself alone."""

    def __init__(self, pids: dict[str, tuple[int, bool]]) -> None:
        self.roots = {name: (psutil.Process(pid), tree) for name, (pid, tree) in pids.items()}

    def read(self) -> dict[str, float]:
        out = {}
        for name, (root, tree) in self.roots.items():
            total = 0.0
            for proc in [root, *(root.children(recursive=True) if tree else [])]:
                try:
                    times = proc.cpu_times()
                except psutil.NoSuchProcess:
                    continue
                total += times.user + times.system
            out[name] = total
        return out

    def measure(self, run, *args):
        """``asyncio.run(run(*args))``, with the CPU each tree used meanwhile in ``cpu_s``."""
        before = self.read()
        result = asyncio.run(run(*args))
        after = self.read()
        result.cpu_s = {name: after[name] - before[name] for name in after}
        return result


def measured_processes(stack) -> dict[str, tuple[int, bool]]:
    """This client alone; the gateway, Redis (keys, rate limits: the gateway's per-request
    lookups; absent if REDIS_URL points elsewhere) and vLLM with their children."""
    found = {"client": (os.getpid(), False)}
    for name, service in (("gateway", "gateway"), ("Redis", "redis"), ("vLLM", "policy-m")):
        if any(s.name == service for s in stack.services):
            found[name] = (stack.service(service).pid, True)
    return found


def bench_config(model: str, port_base: int):
    """A one-agent stack on ports port_base..port_base+6 (workers are required by the stack,
    one with a single slot idles)."""
    return parse_config({
        "name": "bench-gateway",
        "models": {"m": {"model": model, "port": port_base + 5, "max_lora_rank": 8}},
        "agents": [{"name": AGENT, "base": "m", "lora_rank": 8, "lora_alpha": 16}],
        "environment": {"name": "tictactoe", "seats": [AGENT, AGENT]},
        "workers": {"count": 1, "concurrency": 1, "metrics_port": None},
        "services": {"redis_port": port_base, "reward_port": port_base + 1,
                     "gateway_port": port_base + 2, "trainer_metrics_port": port_base + 3,
                     "judge_port": port_base + 4,
                     # vLLM can take over the default 300 s to start on a busy shared machine
                     "health_timeout_s": 900},
    })


def load_agent_adapter(stack, cfg, model: str) -> None:
    """Serve the agent's LoRA adapter (= base weights) under its name, as the trainer does."""
    from agora.algos.ppo import PPOLearner
    from agora.serving.client import PolicyAdmin
    from agora.serving.model_folders import resolve_model

    learner = PPOLearner(resolve_model(model), cfg.agent(AGENT), cfg.ppo, compute=cfg.trainer)
    path = learner.save_adapter(stack.run_dir / "adapter")
    del learner
    PolicyAdmin(cfg.policy_url(AGENT)).load_adapter(AGENT, str(path))


def create_key(redis_url: str, rate: int | None) -> str:
    """A key for the bench; the gateway reads the same pepper from the environment it
    inherited from us."""
    store = KeyStore(redis.Redis.from_url(redis_url), os.environ.get(PEPPER_ENV, ""))
    return store.create("bench", rate=rate)


def check_auth_is_on(gateway: Target) -> None:
    """The measured path must be the authenticated one: a keyless request has to be refused."""
    body = chat_body(gateway.model, 0)
    status = httpx.post(gateway.url, json=body, timeout=30).status_code
    if status != 401:
        raise SystemExit(f"gateway answered {status} to a request without a key (expected 401)")


# --- report -----------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b else "n/a"


def load_rows(direct: LoadResult, gateway: LoadResult) -> list[list[str]]:
    rows = [[r.name, str(r.requests), str(r.errors), f"{r.throughput:.2f}", ms(r.percentile(50)),
             ms(r.percentile(99)), f"{r.completion_tokens / r.elapsed_s:.1f}"]
            for r in (direct, gateway)]
    rows.append(["ratio gateway/direct", "", "",
                 ratio(gateway.throughput, direct.throughput),
                 ratio(gateway.percentile(50), direct.percentile(50)),
                 ratio(gateway.percentile(99), direct.percentile(99)), ""])
    return rows


def low_rows(low: LowLoad) -> list[list[str]]:
    direct, gateway = low.direct, low.gateway
    rows = [[r.name, str(r.requests), str(r.errors), ms(r.percentile(50)), ms(r.percentile(99))]
            for r in (direct, gateway)]
    rows.append(["added by gateway (ms)", "", "",
                 ms(gateway.percentile(50) - direct.percentile(50)),
                 ms(gateway.percentile(99) - direct.percentile(99))])
    paired = LoadResult("paired", latencies=low.added)
    rows.append(["added, same prompt paired (ms)", str(len(low.added)), "",
                 ms(paired.percentile(50)), ms(paired.percentile(99))])
    rows.append(["ratio gateway/direct", "", "",
                 ratio(gateway.percentile(50), direct.percentile(50)),
                 ratio(gateway.percentile(99), direct.percentile(99))])
    return rows


def cpu_rows(direct: LoadResult, gateway: LoadResult) -> list[list[str]]:
    """CPU ms per completed request, by process, for each path under load."""
    names = list(direct.cpu_s)
    rows = []
    for r in (direct, gateway):
        done = max(1, len(r.latencies))
        per = [1000 * r.cpu_s[n] / done for n in names]
        rows.append([r.name, *(f"{v:.1f}" for v in per), f"{sum(per):.1f}"])
    return rows


LOAD_HEADER = ["path", "requests", "errors", "req/s", "p50 ms", "p99 ms", "tokens/s"]
LOW_HEADER = ["path", "requests", "errors", "p50 ms", "p99 ms"]


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(w) if i else cell.ljust(w)
                               for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
                     for row in [header, *rows])


def machine(load_at_start: float) -> str:
    try:
        cpus = subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        cpus = str(os.cpu_count())
    return (f"{cpus} CPUs (nproc), 1-min load average {load_at_start:.1f} before the stack "
            f"started, {os.getloadavg()[0]:.1f} at the end")


def cpu_header(result: LoadResult) -> list[str]:
    return ["path", *(f"{name} CPU ms/req" for name in result.cpu_s), "total"]


def drift(first: LoadResult, second: LoadResult) -> str:
    return (f"Drift: direct {first.throughput:.2f} req/s in the first phase, "
            f"{second.throughput:.2f} in the last.")


def append_results(args, where: str, directs: list[LoadResult],
                   loaded: tuple[LoadResult, LoadResult], low: LowLoad) -> None:
    """One section per run (bench/results.py)."""
    note = f"{args.note}\n\n" if args.note else ""
    section = (
        f"{note}"
        f"Machine: {where}. Model `{args.model}`. {args.clients} clients x {args.seconds:g} s "
        f"per phase (direct, gateway, direct), aiohttp client, max_tokens {MAX_TOKENS}, "
        f"temperature 0, API key with rate {args.rate or 'unlimited'}/min. "
        f"{drift(*directs)}\n\n"
        f"{markdown_table(LOAD_HEADER, load_rows(*loaded))}\n\n"
        f"CPU per request under load (process trees; what the gateway costs on shared cores):\n\n"
        f"{markdown_table(cpu_header(loaded[0]), cpu_rows(*loaded))}\n\n"
        f"Low load (1 client, {args.sequential} sequential requests per path, alternating):\n\n"
        f"{markdown_table(LOW_HEADER, low_rows(low))}\n"
    )
    append_section("gateway_load.py", section)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-requests", type=int, default=100_000,
                        help="cap on requests per path under load")
    parser.add_argument("--sequential", type=int, default=100,
                        help="requests per path at low load (1 client)")
    parser.add_argument("--rate", type=int, default=10_000_000,
                        help="the bench key's requests/minute (0: no limit); high by default so "
                             "the limiter runs but never refuses")
    parser.add_argument("--note", default="",
                        help="a remark saved with the figures (e.g. what was changed)")
    parser.add_argument("--port-base", type=int, default=8420,
                        help="the stack uses ports port-base .. port-base+5")
    args = parser.parse_args()
    for name in ("clients", "seconds", "max_requests", "sequential"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")

    load_at_start = os.getloadavg()[0]
    cfg = bench_config(args.model, args.port_base)
    stack = make_stack(cfg, "bench-gateway", False, runs_root=Path(tempfile.mkdtemp()))
    os.environ[API_KEY_ENV] = stack.vllm_api_key  # the direct path asks vLLM itself
    try:
        try:
            stack.start(with_trainer=False)
        except (LaunchError, ServiceFailed) as err:
            # A busy machine can keep vLLM from getting healthy in time: say so, no traceback.
            print(f"the stack did not start: {err}", file=sys.stderr)
            return 2
        load_agent_adapter(stack, cfg, args.model)
        key = create_key(stack.redis_url, args.rate or None)
        host = cfg.services.host
        direct = Target("direct (vLLM)", f"{cfg.policy_url(AGENT)}/v1/chat/completions",
                        AGENT, vllm_headers())
        gateway = Target("gateway", f"http://{host}:{cfg.services.gateway_port}"
                         "/v1/chat/completions", AGENT, {"authorization": f"Bearer {key}"})
        check_auth_is_on(gateway)
        meter = CpuMeter(measured_processes(stack))
        asyncio.run(warm_up([direct, gateway], args.clients))
        phase = (args.clients, args.seconds, args.max_requests)
        directs = [meter.measure(hold_load, direct, *phase)]
        through = meter.measure(hold_load, gateway, *phase)
        directs.append(meter.measure(hold_load, direct, *phase))
        loaded = (combine(*directs), through)
        low = asyncio.run(low_load(direct, gateway, args.sequential))
    finally:
        stack.stop()

    where = machine(load_at_start)
    print(f"model {args.model}, {args.clients} clients x {args.seconds:g} s per phase (direct, "
          f"gateway, direct), max_tokens {MAX_TOKENS}, machine: {where}")
    print(drift(*directs))
    print(text_table(LOAD_HEADER, load_rows(*loaded)))
    print("\nCPU per request under load (process trees)")
    print(text_table(cpu_header(loaded[0]), cpu_rows(*loaded)))
    print(f"\nlow load: 1 client, {args.sequential} sequential requests per path")
    print(text_table(LOW_HEADER, low_rows(low)))
    append_results(args, where, directs, loaded, low)
    print(f"\nappended to {RESULTS.relative_to(ROOT)}")

    failed = [r for r in (*loaded, low.direct, low.gateway) if r.errors]
    for r in failed:
        print(f"\n!!! {r.errors} ERRORS on {r.name} !!!", file=sys.stderr)
        for sample in r.error_samples:
            print(f"    {sample}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
