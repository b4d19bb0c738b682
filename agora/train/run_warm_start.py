"""The trainer's first stage: ``agents[].warm_start`` (SFT on the env's demonstrators) before
PPO; ``trainer.max_minutes`` counts PPO after it.

The same SFT as ``agora warm-start`` (agora/train/warm_start.py), run where every deployment
runs it: the trainer, before it saves version 0. The adapter goes to
``runs/<id>/warm-start/<agent>/`` and becomes the agent's ``init_adapter`` for this process, so
version 0 *is* the warm start (what ``agora demo``'s "before" row plays) and the KL reference
(``kl_reference: init``) holds PPO to it. ``--resume`` finds the adapter there and trains
nothing again. An ``init_adapter`` given in the config wins: the warm start is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agora.config.run import RunConfig

WARM_START_DIR = "warm-start"


def warm_start_dir(run_dir: Path, agent: str) -> Path:
    return run_dir / WARM_START_DIR / agent


def warm_start_agents(cfg: RunConfig, run_dir: Path, log: Callable[[str], None] = print,
                      status: Callable[[str], None] = lambda _s: None) -> dict[str, dict]:
    """Train (or, on resume, find) each warm-started agent's adapter and point its
    ``init_adapter`` there. Returns each trained agent's summary (examples, steps, seconds,
    losses, imitation read); ``status`` hears "warm start <agent> step k/n" as it goes."""
    from agora.train.warm_start import configured_examples, sft_stage, train_sft_adapter

    summaries: dict[str, dict] = {}
    for agent in cfg.agents:
        ws = agent.warm_start
        if ws is None:
            continue
        if agent.init_adapter:
            log(f"{agent.name}: init_adapter {agent.init_adapter} given; warm_start skipped")
            continue
        out = warm_start_dir(run_dir, agent.name)
        if (out / "adapter_config.json").is_file():
            log(f"{agent.name}: warm start found at {out} (resumed run); not trained again")
        else:
            examples = configured_examples(cfg, agent.name, ws)
            source = "every position" if ws.every_position else f"{ws.episodes} episodes"
            log(f"{agent.name}: warm start on {len(examples)} demonstrated turns ({source})")
            stage = sft_stage(ws)
            label = f"warm start {agent.name}"

            def heard(line: str, label: str = label) -> None:
                log(line)
                if " step " in line:  # "  warm start <agent> step k/n  loss ..."
                    status(line.split("loss")[0].strip())

            # save_adapter writes a temp folder and renames it: a trainer killed mid-SFT
            # leaves no half adapter that --resume would take for a finished one.
            summaries[agent.name] = train_sft_adapter(cfg, agent.name, examples, out, stage,
                                                      label, log=heard)
        agent.init_adapter = str(out)
    return summaries
