"""Envs with a scorer (negotiation, story, code_debug, support): metrics, success, preference.

Each compared policy (the evaluated version and its baseline: v0, or the base model for a
checkpoint) plays the same ``episodes`` seeds in the config's seats. A scheduled context agent
plays each strategy of its schedule in turn (episode i: strategy i mod their number), the
same for both policies, so the two meet the same partners, and a learner trained against a
switching partner is judged against all of them, not only the one its last update met (the
partner of the final clock made the "before" of a warm start 98% deals in one run and 35% in
the next). Metrics are also kept per partner strategy (``by_partner``). Every episode is
scored exactly as in training (``agora.rollout.scoring``: the judge service, the reward
service's sandbox), and per LLM agent the episode metrics of ``ENV_METRICS`` are averaged:

- metrics that are 0/1 per episode (``deal_rate``, ``solved``, ``bug_fixed``,
  ``task_success``) as rates with 95% Wilson intervals; the *success rate* of a task env is its
  success metric (code_debug: ``solved`` = every hidden test passes; support:
  ``task_success`` = the team's final answer is right);
- the others, and the mean reward, as means with 95% normal intervals.

Judged envs (story, negotiation, research) also get a *preference rate*: per seed, the judge
service's ``/v1/judge/pairwise`` compares the evaluated policy's episode (a) with the
baseline's (b): the whole story against the premise, the learner's negotiation messages
against the item pool, or the team's answer against the question, with the env's rubric. The
judge asks in both orders; ``prob_a`` is 1 when a wins both, 0 when b does, 0.5 for a tie or a
position-biased split. Preference rate = mean ``prob_a`` over the seeds, with a 95% Wilson
interval over the number of seeds.

Evaluation episode ``i`` plays a held-out seed (agora.evaluation.seeds), never one training
played.
"""

from __future__ import annotations

import asyncio

from agora.agents.context import make_context_agent
from agora.config.agents import CONTEXT_PREFIX
from agora.config.run import RunConfig
from agora.envs.registry import ENV_METRICS, REGISTRY
from agora.evaluation.context import EvalContext
from agora.evaluation.definitions import BINARY_METRICS, COUNT_METRICS
from agora.evaluation.seeds import held_out_seed
from agora.evaluation.stats import (
    mean_interval,
    paired_difference,
    paired_mean_difference,
    rate,
)
from agora.evaluation.switching import seated_strategies
from agora.judge.schemas import MAX_CANDIDATE_CHARS, MAX_CONTEXT_CHARS
from agora.rollout.records import EpisodeRecord
from agora.rollout.runner import BotPlayer, Player
from agora.rollout.scoring import JudgeUnavailable, post_json, score_episode
from agora.rollout.seating import ContextSeat, build_env


def partner_strategies(cfg: RunConfig) -> dict[str, list[str]]:
    """Each context agent's strategies: its schedule's, in order, or its one fixed strategy."""
    out = {}
    for key, spec in cfg.context_agents.items():
        schedule = spec.make_schedule()
        out[key] = schedule.names if schedule is not None else [str(spec.strategy)]
    return out


def partner_of(record: EpisodeRecord) -> str:
    """The strategies the record's context seats played, e.g. ``greedy`` (``a+b`` for two)."""
    return "+".join(seated_strategies(record.seats).values())


async def play_scored(ctx: EvalContext, served: dict[str, str], episodes: int, seed: int,
                      label: str = "episodes") -> list[EpisodeRecord]:
    """``episodes`` scored episodes of the config's seats (LLM seats asking ``served[agent]``,
    context seats on strategy ``i mod n`` of their n in episode i); progress shows as the phase
    ``label``."""
    cfg = ctx.cfg
    strategies = partner_strategies(cfg)
    advance = ctx.start_phase(f"{label}: {episodes} episodes", episodes)

    async def one(i: int) -> EpisodeRecord:
        players: list[Player] = []
        for seat in cfg.environment.seats:
            if seat.startswith(CONTEXT_PREFIX):
                key = seat.removeprefix(CONTEXT_PREFIX)
                names = strategies[key]
                players.append(BotPlayer(ContextSeat(
                    key, make_context_agent(names[i % len(names)]))))
            else:
                players.append(ctx.llm_player(seat, served[seat]))
        # The payload's seed picks what the seed picks in training (support: the level).
        episode_seed = held_out_seed(seed, i)
        record = await ctx.play(build_env(cfg, {"seed": episode_seed}), players, f"eval-{i}",
                                episode_seed, max_turns=256)
        await asyncio.to_thread(score_episode, cfg, record)
        advance()
        return record

    return list(await asyncio.gather(*(one(i) for i in range(episodes))))


def agent_metrics(records: list[EpisodeRecord], agent: str, env: str) -> dict[str, object]:
    values: dict[str, list[float]] = {}
    for record in records:
        for key, value in dict(record.info.get("metrics") or {}).get(agent, {}).items():
            values.setdefault(key, []).append(float(value))
    turns = [t for r in records for t in r.turns if t.agent == agent]
    out: dict[str, object] = {
        "reward": mean_interval([r.rewards[agent] for r in records if agent in r.rewards]),
        "legal_rate": sum(t.legal for t in turns) / len(turns) if turns else None,
    }
    for key in [*ENV_METRICS.get(env, {}), *sorted(set(values) - set(ENV_METRICS.get(env, {})))]:
        if key not in values:
            continue
        vals = values[key]
        if key in BINARY_METRICS:
            out[key] = rate(sum(vals), len(vals))
        else:  # shares and 0..1 judge scores; counts (tool_calls) only have a floor
            out[key] = mean_interval(vals, 0.0, None if key in COUNT_METRICS else 1.0)
    if (success := REGISTRY[env].success_metric) in values:
        out["success"] = out[success]
    return out


# Where an env draws each seed's task from a finite set, the info key that names it: code
# debugging's function, the help desk's and research's question, the story's premise.
TASK_KEYS = ("problem_id", "task_id", "question_id", "premise")


def task_of(record: EpisodeRecord) -> str | None:
    """The task an episode posed (its problem, question or premise, and the partner strategy
    it met), or None where every seed makes a task of its own (a game, a negotiation's pool)."""
    for key in TASK_KEYS:
        if key in record.info:
            return f"{record.info[key]}|{partner_of(record)}"
    return None


def outcome_row(record: EpisodeRecord) -> dict[str, object]:
    """One evaluation episode as eval.json keeps it: its seed, task, partner strategy, and per
    agent its metrics and reward."""
    return {"seed": record.seed, "task": task_of(record), "partner": partner_of(record),
            "metrics": dict(record.info.get("metrics") or {}), "rewards": dict(record.rewards)}


def paired_metrics(evaluated: list[EpisodeRecord], baseline: list[EpisodeRecord], agent: str
                   ) -> dict[str, dict[str, object]]:
    """Per metric of ``agent``, evaluated minus baseline over the seeds both played (episode i
    of both lists played the same seed and partner): ``paired_outcomes`` of their rows."""
    return paired_outcomes([outcome_row(r) for r in evaluated],
                           [outcome_row(r) for r in baseline], agent)


def paired_outcomes(evaluated: list[dict], baseline: list[dict], agent: str
                    ) -> dict[str, dict[str, object]]:
    """Per metric of ``agent`` (its 0/1 outcomes and its 0..1 means such as a negotiation's
    utility; counts are left out), evaluated minus baseline over the seeds both played
    (row i of both lists, as eval.json's ``outcomes`` keep them, played the same seed and
    partner; ``agora eval-diff`` pairs two runs' rows).

    The unit the difference varies over is the seed, unless seeds repeat tasks: 300 seeds of
    code debugging pose 23 held-out functions x 2 author strategies = 46 tasks, and a task's
    repeats are not independent draws (decoded greedily they are the same answer six times),
    so an interval over seeds would be far too narrow. Then the unit is the task: per task,
    the evaluated mean minus the baseline's over its seeds, and the mean over tasks with an
    interval over tasks (``paired_mean_difference``), beside each version's own mean over
    tasks. Otherwise, by seed: Newcombe's interval for a 0/1 metric (``paired_difference``,
    whose spread comes from the seeds where the two disagree), and for a mean the normal
    interval of the per-seed differences, which drops what both versions share (a
    negotiation pool that is worth little to either)."""

    def outcomes(rows: list[dict]) -> dict[str, list[float | None]]:
        out: dict[str, list[float | None]] = {}
        for i, row in enumerate(rows):
            for key, value in dict(row.get("metrics") or {}).get(agent, {}).items():
                if key not in COUNT_METRICS:
                    out.setdefault(key, [None] * len(rows))[i] = float(value)
        return out

    a, b = outcomes(evaluated), outcomes(baseline)
    tasks = [row.get("task") for row in evaluated]
    paired: dict[str, dict[str, object]] = {}
    for key in sorted(set(a) & set(b)):
        seeds = [i for i, (x, y) in enumerate(zip(a[key], b[key], strict=True))
                 if x is not None and y is not None]
        mine = [float(a[key][i] or 0.0) for i in seeds]
        theirs = [float(b[key][i] or 0.0) for i in seeds]
        seed_tasks = [tasks[i] for i in seeds]
        if seeds and None not in seed_tasks and len(set(seed_tasks)) < len(seeds):
            paired[key] = paired_by_task(mine, theirs, [str(t) for t in seed_tasks])
        elif key in BINARY_METRICS:
            paired[key] = {**paired_difference([x == 1.0 for x in mine],
                                               [y == 1.0 for y in theirs]),
                           "unit": "seed", "seeds": len(seeds)}
        else:
            paired[key] = {**paired_mean_difference(mine, theirs), "unit": "seed",
                           "seeds": len(seeds), "evaluated": mean_interval(mine, 0.0, 1.0),
                           "baseline": mean_interval(theirs, 0.0, 1.0)}
    return paired


def paired_by_task(evaluated: list[float], baseline: list[float],
                   tasks: list[str]) -> dict[str, object]:
    """Per-seed outcomes (0/1, or 0..1 means) of both versions grouped by task: the mean over
    tasks of (evaluated mean - baseline mean), and each version's mean over tasks."""
    by_task: dict[str, tuple[list[float], list[float]]] = {}
    for x, y, task in zip(evaluated, baseline, tasks, strict=True):
        mine, theirs = by_task.setdefault(task, ([], []))
        mine.append(float(x))
        theirs.append(float(y))
    rates = [(sum(x) / len(x), sum(y) / len(y)) for x, y in by_task.values()]
    return {**paired_mean_difference([x for x, _ in rates], [y for _, y in rates]),
            "unit": "task", "seeds": len(tasks),
            "evaluated": mean_interval([x for x, _ in rates], 0.0, 1.0),
            "baseline": mean_interval([y for _, y in rates], 0.0, 1.0)}


def preference_body(ctx: EvalContext, a: EpisodeRecord, b: EpisodeRecord, learner: str
                    ) -> dict[str, object]:
    env = ctx.cfg.environment
    if env.name == "story" and env.story is not None:
        context = f"Premise: {a.info['premise']}"
        texts = [str(r.info.get("story", "")) for r in (a, b)]
        rubric = env.story.rubric
    elif env.name == "research" and env.research is not None:
        # The same question (same seed): which team's answer answers it better?
        context = str(a.info["question"])
        texts = [str(r.info.get("answer", "")) for r in (a, b)]
        rubric = env.research.relevance_rubric
    else:
        assert env.negotiation is not None
        pool = ", ".join(f"{k}={n}" for k, n in dict(a.info["pool"]).items())
        context = f"A negotiation over these items: {pool}. The messages of one negotiator:"
        texts = ["\n".join(t.text.strip() for t in r.turns if t.agent == learner) for r in (a, b)]
        rubric = env.negotiation.rubric
    return {"context": context[-MAX_CONTEXT_CHARS:], "a": texts[0][:MAX_CANDIDATE_CHARS],
            "b": texts[1][:MAX_CANDIDATE_CHARS], "rubric": rubric}


async def judge_preference(ctx: EvalContext, latest: list[EpisodeRecord],
                           baseline: list[EpisodeRecord], learner: str) -> dict[str, object]:
    url = f"http://{ctx.cfg.services.host}:{ctx.cfg.services.judge_port}/v1/judge/pairwise"

    async def one(a: EpisodeRecord, b: EpisodeRecord) -> dict:
        body = preference_body(ctx, a, b, learner)
        return await asyncio.to_thread(post_json, url, body, JudgeUnavailable, "judge service",
                                       180.0)

    verdicts = await asyncio.gather(*(one(a, b) for a, b in zip(latest, baseline, strict=True)))
    probs = [float(v["prob_a"]) for v in verdicts]
    return {
        "comparisons": len(probs),
        "preference": rate(sum(probs), len(probs)),
        **preference_over_tasks(probs, [task_of(record) for record in latest]),
        "wins": sum(p > 0.5 for p in probs), "ties": sum(p == 0.5 for p in probs),
        "losses": sum(p < 0.5 for p in probs),
        "position_bias": sum(bool(v["position_bias"]) for v in verdicts),
        "malformed": sum(not v["parsed_ok"] for v in verdicts),
        "rubric": verdicts[0]["rubric"] if verdicts else None,
    }


def preference_over_tasks(probs: list[float], tasks: list[str | None]) -> dict[str, object]:
    """Where the seeds repeat tasks (story: 8 premises x the co-writer's strategies), the
    preference as a mean over tasks of each task's mean verdict, with an interval over tasks:
    the Wilson interval over comparisons takes a premise's repeats for independent verdicts.
    Empty where every seed poses its own task."""
    if not probs or None in tasks or len(set(tasks)) == len(tasks):
        return {}
    by_task: dict[str, list[float]] = {}
    for prob, task in zip(probs, tasks, strict=True):
        by_task.setdefault(str(task), []).append(prob)
    means = [sum(v) / len(v) for v in by_task.values()]
    return {"preference_by_task": {**mean_interval(means, 0.0, 1.0), "seeds": len(probs)}}
