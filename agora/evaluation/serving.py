"""The processes an evaluation needs, and only those: started, used, stopped.

- one vLLM server per base model of the evaluated agents (and of an LLM judge's model), with
  runtime LoRA loading, on a free port; every compared version is loaded as its own adapter
  name (``eval-<label>-<hash of its folder>``: two runs' ``player@v3`` never collide);
- the judge service when the env is judged (story, negotiation);
- the reward service when the env's outcome needs its sandbox (code_debug).

Games and discussions need neither: game outcomes come from the env itself and discussion
answers are checked in-process by the reward service's own verifiers.

A server that is already running can be used instead (``--policy-url``, ``--judge-url``,
``--reward-url``): a running ``agora up`` stack's, or the tests' session servers. Adapters
loaded into such a server are unloaded again at the end; servers started here are stopped.
The existing scorers and clients read the endpoints from a ``RunConfig``, so the config is
copied and its ports pointed at these servers (``retarget``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from agora.config.run import RunConfig
from agora.evaluation.target import EvalInputError, Version
from agora.judge.settings import service_env as judge_service_env
from agora.serving.client import PolicyAdmin, PolicyServerError, PolicyUnavailable
from agora.serving.model_folders import resolve_model
from agora.serving.vllm_server import SERVED_BASE_NAME, vllm_service
from agora.stack.procs import Service, free_port, http_ok, port_in_use, stop_all

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class GivenUrls:
    """Servers to use instead of starting them (None: start one if needed)."""

    policy: str | None = None
    judge: str | None = None
    reward: str | None = None


def served_name(version: Version) -> str:
    """The name a version is served under (``base`` for the base model)."""
    if version.path is None:
        return SERVED_BASE_NAME
    digest = hashlib.sha1(str(version.path.resolve()).encode()).hexdigest()[:10]
    return "eval-" + re.sub(r"[^A-Za-z0-9_.@-]", "_", version.label) + "-" + digest


def _split(url: str, flag: str) -> tuple[str, int]:
    try:
        parsed = httpx.URL(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except Exception:  # httpx raises several types for a malformed URL
        raise EvalInputError(f"{flag} {url}: not a URL (e.g. http://127.0.0.1:8100)") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise EvalInputError(f"{flag} {url}: not an http URL (e.g. http://127.0.0.1:8100)")
    return parsed.host, port


@dataclass
class EvalServices:
    cfg: RunConfig
    bases: list[str]  # keys of cfg.models to serve
    need_judge: bool
    need_reward: bool
    given: GivenUrls
    logs_dir: Path
    port_base: int | None = None  # first port to try for started servers (None: any free)
    started: list[Service] = field(default_factory=list)
    # (name, pid, port) of every server started here, kept after stop() for the report.
    history: list[dict[str, object]] = field(default_factory=list)
    _taken: set[int] = field(default_factory=set)
    loaded: list[tuple[str, str]] = field(default_factory=list)  # (policy url, name) to unload
    eval_cfg: RunConfig | None = None

    @classmethod
    def for_env(cls, cfg: RunConfig, agents: list[str], given: GivenUrls, logs_dir: Path,
                port_base: int | None = None) -> EvalServices:
        bases = list(dict.fromkeys(cfg.agent(a).base for a in agents))
        spec = cfg.environment.spec
        need_judge = spec.judged
        judge_model = cfg.judge.model if cfg.judge.backend == "llm" else None
        if need_judge and judge_model and not cfg.judge.base_url and judge_model not in bases:
            bases.append(judge_model)  # an LLM judge on a policy server of the run
        # Model-written code (a sandboxed env's tools, program answers) runs only in a reward
        # service's sandbox, never in the evaluating process.
        need_reward = spec.sandboxed or cfg.environment.answer != "text"
        return cls(cfg, bases, need_judge, need_reward, given, logs_dir, port_base)

    def _port(self) -> int:
        """A free port: any (the OS picks), or the first free one from ``port_base`` on."""
        if self.port_base is None:
            return free_port()
        for port in range(self.port_base, min(self.port_base + 100, 65536)):
            if port not in self._taken and not port_in_use(port, self.cfg.services.host):
                self._taken.add(port)
                return port
        raise EvalInputError(f"--port-base {self.port_base}: no free port in the 100 from it")

    # --- start / stop ------------------------------------------------------------------------
    def start(self, on_phase: Callable[[str], None] = lambda _m: None) -> RunConfig:
        """Start what is needed and not given; returns the config pointed at these servers."""
        cfg = self.cfg.model_copy(deep=True)
        host = cfg.services.host
        given_hosts = {}
        for flag, url in (("--policy-url", self.given.policy), ("--judge-url", self.given.judge),
                          ("--reward-url", self.given.reward)):
            if url:
                given_hosts[flag] = _split(url, flag)
        if len({h for h, _ in given_hosts.values()}) > 1:
            raise EvalInputError(f"{', '.join(given_hosts)}: every given server must be on one "
                                 "host")
        if given_hosts:
            host = next(iter(given_hosts.values()))[0]
            cfg.services.host = host
        if "--policy-url" in given_hosts:
            if len(self.bases) != 1:
                raise EvalInputError(f"--policy-url: the evaluated agents use {len(self.bases)} "
                                     f"base models ({self.bases}); start them here instead")
            cfg.models[self.bases[0]].port = given_hosts["--policy-url"][1]
        must_start = (("--policy-url" not in given_hosts)
                      or (self.need_judge and "--judge-url" not in given_hosts)
                      or (self.need_reward and "--reward-url" not in given_hosts))
        if given_hosts and must_start and host != self.cfg.services.host:
            raise EvalInputError(f"{', '.join(given_hosts)} point at {host}, but the servers "
                                 f"started here listen on {self.cfg.services.host}: give every "
                                 "server's URL, or none on another host")
        try:
            group: list[Service] = []
            if "--policy-url" not in given_hosts:
                for key in self.bases:
                    cfg.models[key].port = self._port()
                    cfg.models[key].max_loras = max(cfg.models[key].max_loras, 2)
                    group.append(self._vllm(cfg, key))
                on_phase(f"starting vLLM on {', '.join(self.bases)} (about a minute on CPU)")
            if self.need_reward:
                if "--reward-url" in given_hosts:
                    cfg.services.reward_port = given_hosts["--reward-url"][1]
                else:
                    cfg.services.reward_port = self._port()
                    group.append(self._uvicorn(cfg, "reward", "services.reward.app:app",
                                               cfg.services.reward_port, {}))
            if self.need_judge:
                if "--judge-url" in given_hosts:
                    cfg.services.judge_port = given_hosts["--judge-url"][1]
                else:
                    cfg.services.judge_port = self._port()
                    group.append(self._uvicorn(cfg, "judge", "services.judge.app:app",
                                               cfg.services.judge_port, self._judge_env(cfg)))
            for svc in group:
                svc.start()
                self.started.append(svc)
                self.history.append({"name": svc.name, "pid": svc.pid,
                                     "log": str(svc.log_path)})
            for svc in group:
                svc.wait_healthy(cfg.services.health_timeout_s)
            # Per-service hosts (services.hosts, set by compose/k8s deployments) would send
            # requests elsewhere: every server of the evaluation is at ``host``.
            hosts = getattr(cfg.services, "hosts", None)
            if isinstance(hosts, dict):
                hosts.clear()
            self._check_given(cfg, given_hosts)
        except BaseException:
            self.stop()
            raise
        self.eval_cfg = cfg
        return cfg

    def _check_given(self, cfg: RunConfig, given: dict[str, tuple[str, int]]) -> None:
        urls = {"--policy-url": [f"http://{cfg.services.host}:{cfg.models[b].port}/health"
                                 for b in self.bases],
                "--judge-url": [f"http://{cfg.services.host}:{cfg.services.judge_port}/health"],
                "--reward-url": [f"http://{cfg.services.host}:{cfg.services.reward_port}/health"]}
        for flag in given:
            for url in urls[flag]:
                if not http_ok(url, timeout_s=5)():
                    raise EvalInputError(f"{flag}: no healthy server at {url}")

    def _vllm(self, cfg: RunConfig, key: str) -> Service:
        model = cfg.models[key]
        return vllm_service(resolve_model(model.model), model, cfg.services.host,
                            self.logs_dir / f"policy-{key}.log", name=f"policy-{key}")

    def _uvicorn(self, cfg: RunConfig, name: str, app: str, port: int, extra: dict[str, str]
                 ) -> Service:
        host = cfg.services.host
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **extra}
        return Service(name=name,
                       command=[sys.executable, "-m", "uvicorn", app, "--host", host, "--port",
                                str(port), "--no-access-log"],
                       log_path=self.logs_dir / f"{name}.log", env=env, cwd=str(ROOT),
                       health=http_ok(f"http://{host}:{port}/health"))

    @staticmethod
    def _judge_env(cfg: RunConfig) -> dict[str, str]:
        """As the launcher's (Stack.judge_env), without a Redis cache: one evaluation asks
        each question once."""
        return judge_service_env(cfg, redis_url="")

    def stop(self) -> None:
        """Unload what was loaded into servers we did not start; stop what we started."""
        if self.given.policy:  # servers we started forget their adapters when stopped
            for url, name in self.loaded:
                # Best effort: the server may be gone already.
                with contextlib.suppress(PolicyServerError, PolicyUnavailable, httpx.HTTPError):
                    PolicyAdmin(url, retry_for_s=5).unload_adapter(name)
        self.loaded = []
        stop_all(self.started)
        self.started = []

    # --- adapters ----------------------------------------------------------------------------
    def load(self, version: Version) -> str:
        """Make ``version`` servable on its agent's policy server; returns its served name."""
        assert self.eval_cfg is not None, "start() first"
        name = served_name(version)
        if version.path is None:
            return name
        url = self.eval_cfg.policy_url(version.agent)
        try:
            PolicyAdmin(url).load_adapter(name, str(version.path))
        except PolicyServerError as err:
            raise EvalInputError(f"{version.path}: the policy server refused the adapter "
                                 f"({err}); is it a LoRA of the config's base model within "
                                 "max_lora_rank?") from None
        self.loaded.append((url, name))
        return name

    def __enter__(self) -> EvalServices:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
