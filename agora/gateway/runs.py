"""Training runs started, watched and stopped through the gateway (``/v1/runs``).

A run is ``agora up CONFIG --run-id ID``, the same command a person types, started as a
subprocess in its own process group: the gateway adds no second way to run training. It uses
the gateway's Redis (``REDIS_URL``), so its state hash, stream and versions are readable here,
and its processes carry ``AGORA_RUN_ID`` like every process the launcher starts.

Stop = SIGTERM to the run's process group: ``agora up`` then stops every service of its stack
(each in its own group) within its grace period; a run still alive after
``AGORA_GATEWAY_STOP_GRACE_S`` is killed, its tagged processes included.

At most one run at a time (the embedded stack's ports and CPUs are for one run): a second
start is 409, as is any start while this gateway belongs to a run of its own stack (the
launcher's ``AGORA_RUN_ID``) that has not finished. The active run id is a Redis key set with
NX, so two concurrent starts cannot both win. Runs keep going when the gateway stops (a gateway
restart must not kill a day of training); their records in Redis let the next gateway watch and
stop them by pid.

What a record in Redis says is not trusted (whoever can write Redis must not steer the gateway
into reading or killing something else): a run's files are where this gateway puts them
(``runs_dir/.gateway/<id>.log``, ``runs_dir/<id>``), derived from its id, never read from the
record; a pid is signalled only if it is this gateway's own child, or a process that carries the
run's ``AGORA_RUN_ID`` and leads its own process group (as ``agora up`` started here does).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import redis.asyncio as aioredis
import yaml
from pydantic import BaseModel, ValidationError

from agora.config.run import RunConfig
from agora.gateway.errors import GatewayError, validation_error
from agora.gateway.posted_config import refuse_server_choices
from agora.gateway.run_context import RunContext, agent_summary_from_state, last_jsonl_rows
from agora.rollout.stream import RunKeys
from agora.stack.launcher import RUN_ID, LaunchError, new_run_id, preflight
from agora.stack.procs import tail

ROOT = Path(__file__).resolve().parents[2]
ACTIVE_KEY = "agora:gateway:active_run"
RUNS_HASH = "agora:gateway:runs"
WRAPPER_KEYS = {"config", "run_id"}
# Environment of the gateway that must not leak into a run it starts: they name the gateway's
# own run (the launcher sets the run's), or a deployment's service hosts (a run started here is
# an embedded stack: all its services are local).
GATEWAY_ONLY_ENV = ("AGORA_CONFIG", "AGORA_RUN_DIR", "AGORA_REDIS_URL", "AGORA_SERVICES")


class RunRecord(BaseModel):
    run_id: str
    name: str
    pid: int
    config_path: str
    log_path: str
    run_dir: str
    gateway_url: str
    started_at: float
    ended_at: float | None = None
    exit_code: int | None = None
    stop_requested: bool = False
    ended: bool = False


def parse_run_request(raw: bytes) -> tuple[RunConfig, str | None]:
    """The posted run config (YAML or JSON; bare, or wrapped as ``{"config": ..., "run_id":
    ...}``) validated, and the requested run id."""
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    # ValueError: bad UTF-8, or an int over Python's 4300-digit limit; RecursionError: deep
    # nesting. Both were 500s (tests/integration/test_hostile_api.py).
    except (ValueError, RecursionError, yaml.YAMLError) as err:
        raise GatewayError(400, f"request body is not valid YAML or JSON: {err}",
                           "invalid_body") from None
    run_id = None
    if isinstance(data, dict) and "config" in data and set(data) <= WRAPPER_KEYS:
        run_id = data.get("run_id")
        data = data["config"]
        if isinstance(data, str):
            try:
                data = yaml.safe_load(data)
            except (ValueError, RecursionError, yaml.YAMLError) as err:
                raise GatewayError(422, f"config: not valid YAML: {err}", "invalid_config",
                                   param="config") from None
    if not isinstance(data, dict):
        raise GatewayError(422, "the run config must be a mapping (the content of a run YAML "
                           "file)", "invalid_config", param="config")
    if run_id is not None and (not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id)):
        raise GatewayError(422, "run_id: letters, digits, '_', '.', '-' (max 101), starting "
                           "with a letter or digit", "invalid_run_id", param="run_id")
    # Before validating: validation imports `tool_modules`.
    try:
        refuse_server_choices(data)
    except RecursionError:
        raise GatewayError(400, "request body is nested too deeply", "invalid_body") from None
    try:
        return RunConfig.model_validate(data), run_id
    except ValidationError as err:
        gerr = validation_error(err)
        gerr.message = "not a valid run config: " + gerr.message
        gerr.code = "invalid_config"
        raise gerr from None


def log_phase(log_path: Path) -> str | None:
    """The last start-up phase ``agora up`` printed (``> starting policy server(s) ...``)."""
    for line in reversed(tail(log_path, 200).splitlines()):
        if line.startswith("> "):
            return line[2:].strip()
    return None


def tagged_processes(run_id: str) -> list[psutil.Process]:
    """Live processes of a run: the launcher tags each with ``AGORA_RUN_ID`` (as do we)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            if proc.status() != psutil.STATUS_ZOMBIE and \
                    proc.environ().get("AGORA_RUN_ID") == run_id:
                found.append(proc)
    return found


class RunManager:
    def __init__(self, redis: aioredis.Redis, runs_dir: Path, redis_url: str,
                 attached: RunContext, stop_grace_s: float) -> None:
        self.redis = redis
        self.runs_dir = runs_dir.resolve()
        self.redis_url = redis_url
        self.attached = attached
        self.stop_grace_s = stop_grace_s
        self.procs: dict[str, subprocess.Popen] = {}

    # --- start ---------------------------------------------------------------------------

    async def start(self, raw: bytes) -> dict:
        # In a thread: PyYAML needs ~5 s of CPU for a body nested ~1000 deep (measured),
        # which on the event loop would stall every chat the gateway is proxying.
        cfg, run_id = await asyncio.to_thread(parse_run_request, raw)
        await self.refuse_if_own_stack_runs()
        # The gateway decides where runs live: a client must not pick server paths.
        cfg = cfg.model_copy(update={"output_dir": str(self.runs_dir)})
        run_id = run_id or new_run_id(cfg)
        if await self.redis.hexists(RUNS_HASH, run_id) or (self.runs_dir / run_id).exists():
            raise GatewayError(409, f"run '{run_id}' exists already; choose another run_id",
                               "run_exists", param="run_id")
        if not await self.redis.set(ACTIVE_KEY, run_id, nx=True):
            active = await self.redis.get(ACTIVE_KEY)
            if active and await self.is_running(active):
                raise GatewayError(409, f"run '{active}' is active; at most one run at a time "
                                   f"(POST /v1/runs/{active}/stop first)", "run_active")
            await self.redis.delete(ACTIVE_KEY)  # a leftover of a run that ended unseen
            if not await self.redis.set(ACTIVE_KEY, run_id, nx=True):
                raise GatewayError(409, "another run is starting", "run_active")
        try:
            preflight(cfg, use_external_redis=True)
            record = self.launch(cfg, run_id)
        except LaunchError as err:
            await self.redis.delete(ACTIVE_KEY)
            # Taken ports, models not on disk, unreachable services (agora/stack/preflight.py).
            raise GatewayError(409, str(err), "cannot_start") from None
        except BaseException:
            await self.redis.delete(ACTIVE_KEY)
            raise
        await self.save(record)
        return await self.describe(record)

    async def refuse_if_own_stack_runs(self) -> None:
        """A gateway started by ``agora up`` shares that stack's ports and CPUs."""
        if self.attached.run_id is None:
            return
        status = (await self.attached.state()).get("status", "starting")
        if status != "finished":
            raise GatewayError(409, f"this gateway belongs to the embedded stack of run "
                               f"'{self.attached.run_id}' ({status}); at most one run at a time: "
                               "stop that stack first", "run_active")

    def files(self, run_id: str) -> tuple[Path, Path, Path]:
        """(config, log, run folder) of a run started here, from its id alone."""
        if not RUN_ID.fullmatch(run_id):
            raise GatewayError(404, f"no run {run_id!r} was started through this gateway",
                               "run_not_found")
        folder = self.runs_dir / ".gateway"
        return folder / f"{run_id}.yaml", folder / f"{run_id}.log", self.runs_dir / run_id

    def launch(self, cfg: RunConfig, run_id: str) -> RunRecord:
        config_path, log_path, run_dir = self.files(run_id)
        config_path.parent.mkdir(parents=True, exist_ok=True)
        config_path.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
        env = {k: v for k, v in os.environ.items() if k not in GATEWAY_ONLY_ENV}
        env.update(REDIS_URL=self.redis_url, AGORA_RUN_ID=run_id, PYTHONUNBUFFERED="1",
                   COLUMNS="160")
        with open(log_path, "ab", buffering=0) as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "agora.cli", "up", str(config_path), "--run-id", run_id],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                cwd=str(ROOT), start_new_session=True)
        self.procs[run_id] = proc
        host, port = cfg.services.host, cfg.services.gateway_port
        return RunRecord(run_id=run_id, name=cfg.name, pid=proc.pid,
                         config_path=str(config_path), log_path=str(log_path),
                         run_dir=str(run_dir), gateway_url=f"http://{host}:{port}",
                         started_at=time.time())

    # --- watch ---------------------------------------------------------------------------

    async def record(self, run_id: str) -> RunRecord:
        raw = await self.redis.hget(RUNS_HASH, run_id)
        if raw is None:
            raise GatewayError(404, f"no run '{run_id}' was started through this gateway",
                               "run_not_found")
        record = RunRecord.model_validate_json(raw)
        # The files are where this gateway puts them, whatever the record says.
        config_path, log_path, run_dir = self.files(run_id)
        return record.model_copy(update={"run_id": run_id, "config_path": str(config_path),
                                         "log_path": str(log_path), "run_dir": str(run_dir)})

    async def save(self, record: RunRecord) -> None:
        await self.redis.hset(RUNS_HASH, record.run_id, record.model_dump_json())

    def exit_code(self, record: RunRecord) -> tuple[bool, int | None]:
        """(alive, exit code). Our own child is polled (which also reaps it); a run started by
        an earlier gateway process is found by pid and checked by its AGORA_RUN_ID tag, so a
        reused pid is not mistaken for it."""
        proc = self.procs.get(record.run_id)
        if proc is not None:
            code = proc.poll()
            return code is None, code
        return self.tagged_leader(record) is not None, None

    @staticmethod
    def tagged_leader(record: RunRecord) -> int | None:
        """``record.pid`` if it is a live process carrying the run's tag and leading its own
        process group (``agora up`` as a gateway starts it), else None."""
        try:
            other = psutil.Process(record.pid)
            if (other.status() != psutil.STATUS_ZOMBIE
                    and other.environ().get("AGORA_RUN_ID") == record.run_id
                    and os.getpgid(record.pid) == record.pid):
                return record.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess,
                ProcessLookupError):
            pass
        return None

    def live_group(self, record: RunRecord) -> int | None:
        """The process group to signal for a run: this gateway's own child's (its pid, not the
        record's), or a tagged group leader's; None when neither lives."""
        proc = self.procs.get(record.run_id)
        if proc is not None:
            return proc.pid if proc.poll() is None else None
        return self.tagged_leader(record)

    async def is_running(self, run_id: str) -> bool:
        try:
            record = await self.refresh(await self.record(run_id))
        except GatewayError:
            return False
        return not record.ended

    async def refresh(self, record: RunRecord) -> RunRecord:
        """Notice that a run ended: record how, and free the one-run slot."""
        if record.ended:
            return record
        alive, code = self.exit_code(record)
        if alive:
            return record
        # The reaper task may have finished this record meanwhile (and reaped the child, so
        # its exit code is only in the stored record now).
        record = await self.record(record.run_id)
        if record.ended:
            return record
        record.ended, record.exit_code, record.ended_at = True, code, time.time()
        await self.save(record)
        self.procs.pop(record.run_id, None)
        if await self.redis.get(ACTIVE_KEY) == record.run_id:
            await self.redis.delete(ACTIVE_KEY)
        return record

    async def reap_forever(self, period_s: float = 1.0) -> None:
        """Background task: finish the records of runs that exit (and reap the children), so
        the slot frees itself even when nobody asks for the status."""
        while True:
            for run_id in list(self.procs):
                with contextlib.suppress(Exception):  # a Redis blip must not end the task
                    await self.refresh(await self.record(run_id))
            await asyncio.sleep(period_s)

    @staticmethod
    def status_of(record: RunRecord, state: dict[str, str]) -> str:
        if record.ended:
            if record.stop_requested:
                return "stopped"
            return "finished" if record.exit_code == 0 else "failed"
        if record.stop_requested:
            return "stopping"
        return "running" if state.get("status") in ("training", "stopping", "finished") \
            else "starting"

    async def describe(self, record: RunRecord, last: int = 5) -> dict:
        record = await self.refresh(record)
        keys = RunKeys(record.run_id)
        state = await self.redis.hgetall(keys.state)
        rollout = await self.redis.hgetall(keys.stats)
        log_path = Path(record.log_path)
        names = sorted({k.split(":", 1)[0] for k in state if ":" in k})
        status = self.status_of(record, state)
        view = {
            "id": record.run_id,
            "object": "run",
            "name": record.name,
            "status": status,
            # The trainer's own status once it runs, else where ``agora up`` is in starting.
            "phase": state.get("status") or log_phase(log_path),
            "pid": record.pid,
            "exit_code": record.exit_code,
            "started_at": record.started_at,
            "ended_at": record.ended_at,
            "run_dir": record.run_dir,
            "log": record.log_path,
            "gateway": record.gateway_url,
            "progress": {
                "update": int(state["update"]) if "update" in state else None,
                "elapsed_s": float(state["elapsed_s"]) if "elapsed_s" in state else None,
                "agents": {n: agent_summary_from_state(state, n) for n in names},
            },
            "rollout": {k: _number(v) for k, v in rollout.items()},
            "metrics": last_jsonl_rows(Path(record.run_dir) / "metrics.jsonl", last),
        }
        if status == "failed":
            view["log_tail"] = tail(log_path, 30)
        return view

    async def list(self) -> list[dict]:
        run_ids = [r for r in await self.redis.hkeys(RUNS_HASH) if RUN_ID.fullmatch(r)]
        records = sorted([await self.record(r) for r in run_ids], key=lambda r: r.started_at)
        return [await self.describe(r, last=1) for r in records]

    # --- stop ----------------------------------------------------------------------------

    async def stop(self, run_id: str) -> dict:
        record = await self.refresh(await self.record(run_id))
        if record.ended:
            return await self.describe(record)
        record.stop_requested = True
        await self.save(record)
        group = self.live_group(record)
        if group is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s
        while time.monotonic() < deadline and self.exit_code(record)[0]:
            await asyncio.sleep(0.2)
        leftovers = await asyncio.to_thread(tagged_processes, run_id)  # scans /proc: a thread
        if self.exit_code(record)[0] or leftovers:
            # Past the grace period: kill the run and anything it left behind.
            for proc in leftovers:
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    proc.kill()
            group = self.live_group(record)
            if group is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)
            await asyncio.to_thread(_wait, self.procs.get(run_id))
        return await self.describe(record)


def _wait(proc: subprocess.Popen | None) -> None:
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


def _number(value: str) -> float | str:
    try:
        return float(value)
    except ValueError:
        return value
