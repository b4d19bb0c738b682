"""``agora eval``: pick what to compare, start what it needs, run the env's part, write it up.

Which part runs is the env's ``EnvSpec.evaluation`` (agora/envs/spec.py):

| evaluation | part | compared |
|---|---|---|
| round_robin (tictactoe) | round robin + TrueSkill (``games``) | K snapshots + every bot |
| duplicate (hanabi) | scores by partner + duplicate TrueSkill | K snapshots + every bot |
| discussion | pass@k / maj@k at turn 1 and last turn | latest vs baseline |
| episodes (negotiation, story, ...) | metrics, success, judge preference | latest vs baseline |

"latest" is the newest version in a run folder (or the given checkpoint) and "baseline" its v0
(or the base model for a checkpoint). Every run ends with training_curves.png when the run's
metrics.jsonl exists.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from agora.agents.context import OpponentPool
from agora.config.agents import CONTEXT_PREFIX
from agora.data import TaskError, load_tasks
from agora.evaluation import context_envs, discussion, games
from agora.evaluation.context import EvalContext, StartPhase, no_progress, open_http
from agora.evaluation.curves import plot_training_curves
from agora.evaluation.report import write_report
from agora.evaluation.seeds import held_out_seed
from agora.evaluation.serving import EvalServices, GivenUrls
from agora.evaluation.target import EvalInputError, EvalTarget, Version, base_version


@dataclass
class EvalOptions:
    games: int | None = None  # games per pairing / deals per partner / episodes per policy
    k: int = 4  # discussion samples per task
    snapshots: int = 4  # versions of the learner in a game's round robin
    tasks: int | None = None  # held-out discussion tasks
    seed: int = 0
    temperature: float | None = None  # every evaluated agent's; None: eval.temperature
    output: Path | None = None
    concurrency: int = 16
    port_base: int | None = None  # ports of the servers it starts (None: any free ones)
    given: GivenUrls = field(default_factory=GivenUrls)


def spaced(versions: list[Version], count: int) -> list[Version]:
    """``count`` versions evenly spaced over the list, first and last always included."""
    if count >= len(versions):
        return list(versions)
    if count <= 1:
        return [versions[-1]]
    picks = sorted({round(i * (len(versions) - 1) / (count - 1)) for i in range(count)})
    return [versions[i] for i in picks]


def evaluated_agents(target: EvalTarget) -> list[str]:
    """Games: the learner (one policy in every seat). Others: every LLM agent in a seat."""
    cfg = target.cfg
    if cfg.environment.spec.is_game:
        learner = cfg.learner or cfg.environment.seats[0]
        if learner not in target.versions:
            raise EvalInputError(f"{target.source}: no adapter of '{learner}', the agent that "
                                 f"plays {cfg.environment.name} (found {sorted(target.versions)})")
        return [learner]
    return list(dict.fromkeys(s for s in cfg.environment.seats
                              if not s.startswith(CONTEXT_PREFIX)))


def compared(target: EvalTarget, agent: str) -> tuple[Version, Version]:
    """(evaluated, baseline) for ``agent``; an agent without adapters is its base model."""
    if agent not in target.versions:
        base = base_version(agent)
        return base, base
    return target.latest(agent), target.baseline(agent)


async def _games(ctx: EvalContext, target: EvalTarget, served: dict[Version, str],
                 options: EvalOptions, count: int) -> dict:
    cfg = ctx.cfg
    agent = evaluated_agents(target)[0]
    snaps = (spaced(target.versions[agent], options.snapshots) if target.kind == "run"
             else target.versions[agent])
    players = [games.Contestant(v.label, agent=agent, served=served[v]) for v in snaps]
    bots = list(cfg.environment.spec.bots)
    players += [games.Contestant(b, bot=b) for b in bots]
    if cfg.environment.spec.evaluation == "duplicate":
        partners = ["self", *bots]
        played = await games.play_hanabi(ctx, players, partners, count, options.seed)
        section = games.hanabi_report(played, players, partners)
    else:
        played = await games.play_round_robin(ctx, players, count, options.seed)
        section = games.tictactoe_report(played, players)
    section["seeds"] = [min(p.seed for p in played), max(p.seed for p in played)]  # held out
    section["evaluated"] = snaps[-1].label
    section["games_per_pairing"] = count
    return section


async def _discussion(ctx: EvalContext, target: EvalTarget, served: dict[Version, str],
                      options: EvalOptions) -> dict:
    cfg = ctx.cfg
    assert cfg.environment.task is not None
    try:
        tasks = load_tasks(cfg.environment.task, split="test",
                           limit=options.tasks or cfg.eval.tasks)
    except TaskError as err:
        raise EvalInputError(f"environment.task: {err}") from None
    if not tasks:
        raise EvalInputError("environment.task: the test split is empty")
    agents = evaluated_agents(target)
    section: dict = {"tasks": len(tasks), "k": options.k, "policies": {}}
    answers = {}
    for policy, index in (("evaluated", 0), ("baseline", 1)):
        versions = {a: compared(target, a)[index] for a in agents}
        answers[policy] = await discussion.sample_discussions(
            ctx, {a: served[v] for a, v in versions.items()}, tasks, options.k, label=policy)
        section["policies"][policy] = {
            "label": ", ".join(v.label for v in versions.values()),
            **discussion.discussion_report(answers[policy], options.k)}
    section["paired"] = discussion.paired_rounds(answers["evaluated"], answers["baseline"])
    return section


async def _episodes(ctx: EvalContext, target: EvalTarget, served: dict[Version, str],
                    options: EvalOptions, count: int) -> dict:
    cfg = ctx.cfg
    env = cfg.environment.name
    agents = evaluated_agents(target)
    learner = cfg.learner or agents[0]
    partners = context_envs.partner_strategies(cfg)
    section: dict = {"episodes": count, "partners": partners, "policies": {},
                     "seeds": [held_out_seed(options.seed, i) for i in (0, count - 1)]}
    records = {}
    for policy, index in (("evaluated", 0), ("baseline", 1)):
        versions = {a: compared(target, a)[index] for a in agents}
        records[policy] = await context_envs.play_scored(
            ctx, {a: served[v] for a, v in versions.items()}, count, options.seed,
            label=policy)
        section["policies"][policy] = {
            "labels": {a: v.label for a, v in versions.items()},
            "agents": {a: context_envs.agent_metrics(records[policy], a, env) for a in agents},
        }
        # Each episode's outcome, so a reader can re-pair or re-cut them without replaying.
        section.setdefault("outcomes", {})[policy] = [context_envs.outcome_row(r)
                                                      for r in records[policy]]
        if any(len(names) > 1 for names in partners.values()):  # a switching partner
            by_partner: dict[str, list] = {}
            for record in records[policy]:
                by_partner.setdefault(context_envs.partner_of(record), []).append(record)
            section["policies"][policy]["by_partner"] = {
                partner: {a: context_envs.agent_metrics(group, a, env) for a in agents}
                for partner, group in by_partner.items()}
    section["paired"] = {a: context_envs.paired_metrics(records["evaluated"],
                                                         records["baseline"], a)
                         for a in agents}
    if cfg.environment.spec.judged:
        pref = await context_envs.judge_preference(ctx, records["evaluated"], records["baseline"],
                                                   learner)
        pref["a"] = section["policies"]["evaluated"]["labels"][learner]
        pref["b"] = section["policies"]["baseline"]["labels"][learner]
        section["preference"] = pref
    return section


def run_evaluation(target: EvalTarget, options: EvalOptions,
                   on_phase: Callable[[str], None] = lambda _m: None,
                   on_progress: StartPhase = no_progress) -> tuple[dict, Path]:
    """Evaluate ``target``; returns the report and the folder it was written to.
    ``on_progress`` starts a phase's progress (``context.StartPhase``)."""
    started = time.monotonic()
    cfg = target.cfg
    env = cfg.environment.name
    spec = cfg.environment.spec
    if spec.evaluation is None:
        raise EvalInputError(f"environment.name: no evaluation for '{env}' yet")
    out_dir = Path(options.output) if options.output else target.default_output()
    count = options.games or cfg.eval.games
    agents = evaluated_agents(target)
    if spec.is_game:
        agent = agents[0]
        pool = target.versions[agent]
        needed = spaced(pool, options.snapshots) if target.kind == "run" else pool
        defined = [spec.evaluation, "ratings"]
    else:
        needed = list(dict.fromkeys(v for a in agents for v in compared(target, a)))
        defined = (["discussion"] if spec.evaluation == "discussion"
                   else ["context", *(["preference"] if spec.judged else [])])
    services = EvalServices.for_env(cfg, agents, options.given, out_dir / "logs",
                                    options.port_base)
    sections: dict[str, dict] = {}
    with services:
        eval_cfg = services.start(on_phase)
        if options.temperature is not None:
            eval_cfg.eval = eval_cfg.eval.model_copy(update={"temperature": options.temperature})
        served = {}
        for version in needed:
            served[version] = services.load(version)
        on_phase(f"evaluating {', '.join(v.label for v in needed)} on {env}")

        async def main() -> None:
            async with open_http(options.concurrency) as http:
                ctx = EvalContext(eval_cfg, http, options.concurrency, on_progress)
                if spec.is_game:
                    sections["games"] = await _games(ctx, target, served, options, count)
                elif spec.evaluation == "discussion":
                    sections["discussion"] = await _discussion(ctx, target, served, options)
                else:
                    sections["episodes"] = await _episodes(ctx, target, served, options, count)

        asyncio.run(main())
    report: dict = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "target": {"kind": target.kind, "source": str(target.source),
                   "run_dir": str(target.run_dir) if target.run_dir else None,
                   "config_name": cfg.name, "env": env,
                   "versions": {a: [v.label for v in vs] for a, vs in target.versions.items()}},
        "options": {"games": count, "k": options.k, "snapshots": options.snapshots,
                    "tasks": options.tasks or cfg.eval.tasks, "seed": options.seed,
                    "temperature": eval_cfg.eval.temperature},
        "defined": [*defined, "curves"],
        "services": {"started": services.history,
                     "used": {k: v for k, v in vars(options.given).items() if v}},
        "sections": sections,
    }
    pool = training_pool(target.run_dir)
    if pool is not None:
        report["training_pool"] = pool
        report["defined"].append("training_pool")
    metrics = target.run_dir / "metrics.jsonl" if target.run_dir else None
    if metrics is not None and metrics.is_file():
        report["training_curves"] = plot_training_curves(
            metrics, out_dir / "training_curves.png", f"{cfg.name}: training curves")
    else:
        report["training_curves"] = {"path": None,
                                     "skipped": "no metrics.jsonl in the run folder"}
    report["seconds"] = round(time.monotonic() - started, 1)
    write_report(report, out_dir)
    return report, out_dir


def training_pool(run_dir: Path | None) -> dict | None:
    """The run's opponent pool as training left it (``opponent_pool.json``): every snapshot's
    and the learner's Elo, highest first. None for a run without a pool (or a bad file, which
    an evaluation reports rather than dies on)."""
    path = run_dir / "opponent_pool.json" if run_dir else None
    if path is None or not path.is_file():
        return None
    try:
        pool = OpponentPool.load(path)
    except (ValueError, KeyError, TypeError) as err:
        return {"path": str(path), "error": f"unreadable: {err}", "players": []}
    players = sorted(pool.players.values(), key=lambda p: -p.rating)
    return {"path": str(path), "players": [
        {"name": p.name, "version": p.version, "rating": round(p.rating, 1), "games": p.games,
         "snapshot": p.frozen} for p in players]}
