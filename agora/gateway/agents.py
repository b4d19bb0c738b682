"""``/v1/agents``: who can be asked, on which base model, at which version, and how training is
going for each (the trainer's latest metrics).

Metrics come from the run's ``metrics.jsonl`` (every statistic of the last update: reward, KL,
entropy, losses, win rate, ...) when the run folder is readable here, else from the flat
summary the trainer mirrors into the run's Redis state hash.
"""

from __future__ import annotations

from agora.config.agents import AgentConfig
from agora.config.run import RunConfig
from agora.gateway.run_context import RunContext, agent_summary_from_state


async def agent_view(cfg: RunConfig, run: RunContext, agent: AgentConfig,
                     last_row: dict | None, state: dict[str, str]) -> dict:
    metrics, update = None, None
    if last_row is not None:
        metrics, update = (last_row.get("agents") or {}).get(agent.name), last_row.get("update")
    if metrics is None:
        metrics = agent_summary_from_state(state, agent.name) or None
        update = int(state["update"]) if metrics and "update" in state else None
    return {
        "id": agent.name,
        "object": "agent",
        "base": agent.base,
        "base_model": cfg.models[agent.base].model,
        "trainable": agent.trainable,
        "version": await run.live_version(agent.name),
        "versions": await run.versions_on_disk(agent.name),
        "lora": {"rank": agent.lora_rank, "alpha": agent.lora_alpha},
        "metrics": metrics,
        "metrics_update": update if metrics else None,
        "run_id": run.run_id,
    }


async def agents_view(cfg: RunConfig, run: RunContext) -> list[dict]:
    rows = run.metrics_rows(1)
    state = await run.state()
    last_row = rows[-1] if rows else None
    return [await agent_view(cfg, run, a, last_row, state) for a in cfg.agents]
