"""``agora export RUN --agent A``: a trained agent as a folder anyone can load without agora.

A LoRA agent becomes a PEFT adapter folder whose ``base_model_name_or_path`` names the base as
the hub knows it (``HuggingFaceTB/SmolLM2-135M-Instruct``, not agora's cache path), or, with
``--merge``, a plain model folder (PEFT's ``merge_and_unload``); a full-weight agent is already
a model folder. Each export carries a model card (``README.md``): the base, the run's config,
and its evaluation table when ``agora eval`` wrote one (``<run>/eval/eval.md``).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from agora.config.run import RunConfig, load_config
from agora.serving.model_folders import GEMMA3, SMOLLM2, TINY_QWEN2, TINY_RANDOM, resolve_model
from agora.serving.weights import live_weights_dir

# agora's model names -> their hub ids (tiny-random has none: it is built locally for tests).
HUB_IDS = {SMOLLM2: "HuggingFaceTB/SmolLM2-135M-Instruct", GEMMA3: "google/gemma-3-270m"}
VERSION_DIR = re.compile(r"^v(\d+)$")


class ExportError(ValueError):
    """What cannot be exported, naming the option at fault."""


@dataclass(frozen=True)
class Exported:
    path: Path
    kind: str  # "adapter" | "merged" | "full"
    version: int | None
    base: str


def base_name(model: str) -> str:
    """How an export names its base: the hub id, the user's own folder or id, or (the tiny
    test models only) the local folder it was built in."""
    if model in HUB_IDS:
        return HUB_IDS[model]
    return resolve_model(model) if model in (TINY_RANDOM, TINY_QWEN2) else model


def adapter_versions(run_dir: Path, agent: str) -> list[int]:
    folder = run_dir / "adapters" / agent
    if not folder.is_dir():
        return []
    return sorted(int(m.group(1)) for child in folder.iterdir()
                  if (m := VERSION_DIR.match(child.name))
                  and (child / "adapter_config.json").is_file())


def export_agent(run_dir: Path, agent: str, out: Path, version: int | None = None,
                 merge: bool = False) -> Exported:
    cfg_path = run_dir / "config.yaml"
    if not cfg_path.is_file():
        raise ExportError(f"RUN: {run_dir} has no config.yaml (not a run folder of `agora up`)")
    cfg = load_config(cfg_path)
    names = [a.name for a in cfg.agents]
    if agent not in names:
        raise ExportError(f"--agent: '{agent}' is not an agent of this run ({names})")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"--out: {out} exists and is not empty")
    spec = cfg.agent(agent)
    model = cfg.models[spec.base].model
    base = base_name(model)
    if spec.finetune == "full":
        live = live_weights_dir(run_dir, agent)
        if version is not None:
            raise ExportError("--version: a full-weight agent keeps only its live weights")
        if not (live / "config.json").is_file():
            raise ExportError(f"RUN: no weights of '{agent}' under {live}")
        shutil.copytree(live, out, dirs_exist_ok=True)
        exported = Exported(out, "full", None, base)
    else:
        versions = adapter_versions(run_dir, agent)
        if not versions:
            raise ExportError(f"RUN: no saved adapter of '{agent}' under {run_dir / 'adapters'}")
        version = versions[-1] if version is None else version
        if version not in versions:
            raise ExportError(f"--version: v{version} of '{agent}' is not on disk "
                              f"(saved: {versions[0]}..{versions[-1]})")
        adapter = run_dir / "adapters" / agent / f"v{version}"
        if merge:
            _merge(resolve_model(model), adapter, out)
            exported = Exported(out, "merged", version, base)
        else:
            shutil.copytree(adapter, out, dirs_exist_ok=True)
            config_file = out / "adapter_config.json"
            config = json.loads(config_file.read_text())
            config["base_model_name_or_path"] = base
            config_file.write_text(json.dumps(config, indent=2) + "\n")
            exported = Exported(out, "adapter", version, base)
    (out / "README.md").write_text(model_card(cfg, agent, exported, run_dir))
    return exported


def _merge(base_path: str, adapter: Path, out: Path) -> None:
    """The base with the adapter folded into its weights (fp32, as trained)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    merged.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(base_path).save_pretrained(str(out))


def model_card(cfg: RunConfig, agent: str, exported: Exported, run_dir: Path) -> str:
    """A Hugging Face model card: metadata, how it was trained, the run's config and eval."""
    meta = {"base_model": exported.base, "tags": ["agora", "reinforcement-learning", "ppo",
                                                   "multi-agent", cfg.environment.name]}
    if exported.kind == "adapter":
        meta["library_name"] = "peft"
    version = f"v{exported.version}" if exported.version is not None else "live weights"
    lines = ["---", yaml.safe_dump(meta, sort_keys=False).rstrip(), "---", "",
             f"# {agent} ({cfg.name}, {version})", "",
             f"Agent `{agent}` of the agora run `{run_dir.name}`: environment "
             f"`{cfg.environment.name}`, trained with multi-agent PPO from `{exported.base}` "
             f"({'a LoRA adapter' if exported.kind == 'adapter' else 'a model folder'}"
             f"{', merged into the base' if exported.kind == 'merged' else ''}).", ""]
    evaluation = run_dir / "eval" / "eval.md"
    if evaluation.is_file():
        lines += ["## Evaluation", "", evaluation.read_text().strip(), ""]
    else:
        lines += ["## Evaluation", "", f"Not evaluated yet: `agora eval {run_dir}`.", ""]
    lines += ["## Training config", "", "```yaml",
              yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False).rstrip(), "```", ""]
    return "\n".join(lines)
