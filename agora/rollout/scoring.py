"""Scoring of negotiation, story and code_debug episodes: turn rewards, results, metrics.

Tic-Tac-Toe and discussions are scored by one reward-service verdict (``tasks.py``); the envs
here each need their own mix of services, so each has a scorer that fills in, on the record:

- ``turn.reward`` for *every* turn (PPO trains on the LLM turns' rewards), as the sum of three
  parts: ``verifier`` (what the env's rules or hidden tests say: a negotiator's utility, a
  coder's test score), ``judge`` (the judge service's 0..1 score or preference) and
  ``shaping`` (fairness bonus, illegal-move penalty); ``record.rewards`` and
  ``record.reward_parts`` hold, per seat label, the mean over its turns;
- ``record.results``: one word per seat (``deal``/``no_deal``, ``completed``,
  ``passed``/``failed``, ``bug_fixed``/``not_fixed``), counted by ``record_stats``;
- ``record.info["negotiation" | "story_scores" | "code_debug"]``: the env's scores (JSON;
  the story's own ``info["story"]`` is its text), ``record.info["judge"]``: judge calls and
  malformed verdicts, ``record.info["metrics"]``: per agent, the episode's values of the
  metrics in ``ENV_METRICS`` (the trainer averages them over the last 100 episodes).

Where each score comes from: negotiation from ``negotiation_scores`` (pure arithmetic on the
outcome) plus, if ``coherence > 0``, the judge's ``/v1/judge/score`` of each message;
story from the judge service only; code_debug from the reward service's ``/v1/verify`` (kind
code), so model-written code runs only in the reward service's sandbox, never in the worker.

Scripted seats (context agents) are scored exactly like LLM seats, judge calls included, so
their rewards and metrics in the record are a baseline in the same units (the trainer only
reads its agents' turns and metrics).

A malformed judge verdict (an LLM judge whose output did not parse) is not the agent's fault:
it scores the scale's midpoint (0.5) and is counted, never raised. An unreachable service is
retried with backoff, then raised as ``RewardUnavailable`` so the Celery task retries later.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from agora.agents.context import make_context_agent
from agora.config.run import RunConfig
from agora.envs.code_debug import debug_scores, problem_of, same_code
from agora.envs.negotiation import negotiation_scores
from agora.envs.research import stated_facts
from agora.envs.story import StoryWriting, story_judge_request
from agora.envs.support import support_metrics, support_scores
from agora.judge.schemas import MAX_CANDIDATE_CHARS, MAX_CONTEXT_CHARS
from agora.ops.service_key import service_headers
from agora.rewards.verifiers.code import CodeVerdict
from agora.rollout.records import EpisodeRecord, RewardParts
from agora.rollout.seating import build_env
from agora.serving.client import RETRYABLE

JUDGE_MIDPOINT = 0.5  # the 0..1 score a malformed verdict gets


class RewardUnavailable(RuntimeError):
    """A scoring service (reward or judge) stayed unreachable: retry the episode later."""


class JudgeUnavailable(RewardUnavailable):
    pass


def post_json(url: str, body: dict, unavailable: type[RuntimeError], what: str,
              timeout_s: float = 60.0) -> dict:
    """POST with retries while the service is unreachable or answers 5xx (restarting, or an
    LLM judge's model server down: 502); a 4xx is a bad request and raises at once."""
    try:
        for attempt in Retrying(
            retry=retry_if_exception_type((*RETRYABLE, _ServerError)),
            wait=wait_exponential(multiplier=0.5, max=5),
            stop=stop_after_delay(30),
            reraise=True,
        ):
            with attempt:
                resp = httpx.post(url, json=body, timeout=timeout_s,
                                  headers=service_headers())
                if resp.status_code >= 500:
                    raise _ServerError(f"HTTP {resp.status_code}: {resp.text[:300]}")
    except (*RETRYABLE, _ServerError) as err:
        raise unavailable(f"{what} unavailable at {url}: {err}") from err
    resp.raise_for_status()
    return resp.json()


class _ServerError(RuntimeError):
    pass


@dataclass
class JudgeClient:
    """The judge service of the run, counting calls and malformed verdicts for the record."""

    base_url: str
    requests: int = 0
    malformed: int = 0
    # Pairwise verdicts whose two orders disagreed (the judge service then calls a tie): how
    # much of an LLM judge's preference signal is the order of the candidates.
    position_bias: int = 0

    @classmethod
    def of(cls, cfg: RunConfig) -> JudgeClient:
        return cls(cfg.service_url("judge"))

    def score(self, body: dict) -> float:
        """``/v1/judge/score`` as a 0..1 value ((overall - min) / (max - min))."""
        resp = self._post("/v1/judge/score", body)
        if not resp["parsed_ok"]:
            self.malformed += 1
        if resp["overall"] is None:
            return JUDGE_MIDPOINT
        low, high = float(resp["scale_min"]), float(resp["scale_max"])
        return min(1.0, max(0.0, (float(resp["overall"]) - low) / (high - low)))

    def preference(self, body: dict) -> float:
        """``/v1/judge/pairwise``: the preference for ``a`` (a malformed verdict is a tie)."""
        resp = self._post("/v1/judge/pairwise", body)
        if not resp["parsed_ok"]:
            self.malformed += 1
        if resp.get("position_bias"):
            self.position_bias += 1
        return float(resp["prob_a"])

    def _post(self, route: str, body: dict) -> dict:
        self.requests += 1
        return post_json(self.base_url + route, body, JudgeUnavailable, "judge service",
                         timeout_s=180.0)

    def tally(self) -> dict[str, int]:
        return {"requests": self.requests, "malformed": self.malformed,
                "position_bias": self.position_bias}


@dataclass
class Scored:
    """A scorer's result before it is written onto the record."""

    parts: list[RewardParts]  # per turn
    results: list[str]  # per seat
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)  # per seat


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[-limit:]


# --------------------------------------------------------------------------- negotiation

def score_negotiation(cfg: RunConfig, record: EpisodeRecord, judge: JudgeClient) -> Scored:
    opts = cfg.environment.negotiation
    assert opts is not None
    info = record.info
    scores = negotiation_scores(info)
    roles = list(info["agents"])
    utility = scores["utility"]
    nash = float(scores["nash"])
    transcript = list(info["transcript"])
    pool = ", ".join(f"{k}={n}" for k, n in dict(info["pool"]).items())
    parts: list[RewardParts] = []
    coherence: dict[int, list[float]] = {}
    for index, turn in enumerate(record.turns):
        judged = 0.0
        if opts.coherence > 0:
            # The judge sees what the message answers: the items and the messages before it.
            before = transcript[max(0, index - len(roles)):index]
            context = f"A negotiation over these items: {pool}.\n" + "\n".join(
                f"{e['agent']}: {e['text']}" for e in before)
            value = judge.score({"context": _clip(context, MAX_CONTEXT_CHARS),
                                 "response": turn.text[:MAX_CANDIDATE_CHARS],
                                 "rubric": opts.rubric})
            coherence.setdefault(turn.seat, []).append(value)
            judged = opts.coherence * value
        parts.append(RewardParts(
            verifier=float(utility[roles[turn.seat]]),
            judge=judged,
            shaping=opts.fairness * nash + _penalty(cfg, turn.legal),
        ))
    deal = bool(info["deal"])
    metrics = {}
    for seat, role in enumerate(roles):
        metrics[seat] = {"deal_rate": float(deal), "utility": float(utility[role])}
        if seat in coherence:
            metrics[seat]["coherence"] = sum(coherence[seat]) / len(coherence[seat])
    record.info["negotiation"] = scores
    return Scored(parts, ["deal" if deal else "no_deal"] * len(roles), metrics)


# --------------------------------------------------------------------------- story

def score_story(cfg: RunConfig, record: EpisodeRecord, judge: JudgeClient) -> Scored:
    opts = cfg.environment.story
    assert opts is not None
    info = record.info
    seats = len(record.seats)
    roles = [f"writer{s + 1}" for s in range(seats)]  # StoryWriting.role
    own: dict[int, float] = {}  # per LLM seat: its paragraphs' score
    per_seat: dict[int, float] = {}
    story_score = None
    if opts.judge in ("score", "both"):
        reqs = story_judge_request(info, rubric_name=opts.rubric)
        story_score = judge.score(reqs["story"])
        bodies = dict(reqs["agents"])
        own = {s: judge.score(bodies[r]) for s, r in enumerate(roles)}
        w = opts.story_weight
        per_seat = {s: (1 - w) * own[s] + w * story_score for s in range(seats)}
    per_turn = story_preferences(cfg, record, judge) if opts.judge != "score" else {}
    parts: list[RewardParts] = []
    for index, turn in enumerate(record.turns):
        if opts.judge == "score":
            value = per_seat[turn.seat]
        elif opts.judge == "pairwise":
            value = per_turn.get(index, JUDGE_MIDPOINT)
        else:
            value = 0.5 * (per_seat[turn.seat] + per_turn.get(index, JUDGE_MIDPOINT))
        parts.append(RewardParts(judge=value, shaping=_penalty(cfg, turn.legal)))
    metrics: dict[int, dict[str, float]] = {s: {} for s in range(seats)}
    for s, value in own.items():
        metrics[s].update(judge_score=value, story_score=story_score)
    for s in range(seats):
        prefs = [v for i, v in per_turn.items() if record.turns[i].seat == s]
        if prefs:
            metrics[s]["preference"] = sum(prefs) / len(prefs)
    record.info["story_scores"] = {
        "story": story_score,
        "own": {str(s): v for s, v in own.items()},
        "preference": {str(i): v for i, v in per_turn.items()},
    }
    done = info.get("reason") == "completed"
    return Scored(parts, ["completed" if done else "unfinished"] * seats, metrics)


def story_preferences(cfg: RunConfig, record: EpisodeRecord, judge: JudgeClient
                      ) -> dict[int, float]:
    """Per turn, the judge's preference for its paragraph over the baseline writer's at
    the same point of the story (the env is replayed from the record to get that point)."""
    opts = cfg.environment.story
    assert opts is not None
    env = build_env(cfg, {})
    assert isinstance(env, StoryWriting)
    env.reset(record.seed)
    baseline = make_context_agent(opts.baseline)
    prefs: dict[int, float] = {}
    for index, turn in enumerate(record.turns):
        theirs = baseline.act(env, random.Random(record.seed * 1009 + index))
        context = f"Premise: {env.premise}\n\nStory so far:\n{env.story or '(nothing yet)'}"
        prefs[index] = judge.preference({
            "context": _clip(context, MAX_CONTEXT_CHARS),
            "a": turn.text.strip()[:MAX_CANDIDATE_CHARS],
            "b": theirs[:MAX_CANDIDATE_CHARS],
            "rubric": opts.rubric,
        })
        env.step(turn.text)
    return prefs


# --------------------------------------------------------------------------- research

def score_research(cfg: RunConfig, record: EpisodeRecord, judge: JudgeClient) -> Scored:
    """The team's answer, for both seats: its facts (exact), and the judge's 0..1 scores of
    its relevance to the question and its faithfulness to the pages actually retrieved."""
    opts = cfg.environment.research
    assert opts is not None
    info = record.info
    answer = str(info["answer"])
    facts = list(info["facts"])
    stated = stated_facts(answer, facts)
    found = sum(stated) / len(stated) if stated else 0.0
    relevance = faithfulness = 0.0
    if answer:
        relevance = judge.score({"context": _clip(str(info["question"]), MAX_CONTEXT_CHARS),
                                 "response": answer[:MAX_CANDIDATE_CHARS],
                                 "rubric": opts.relevance_rubric})
        pages = "\n\n".join(f"[{i}] {t}" for i, t in dict(info["pages"]).items())
        # Nothing retrieved: nothing the answer says is supported by a page.
        if pages:
            faithfulness = judge.score({"context": pages[:MAX_CONTEXT_CHARS],
                                        "response": answer[:MAX_CANDIDATE_CHARS],
                                        "rubric": opts.faithfulness_rubric})
    team = opts.facts_weight * found + (1 - opts.facts_weight) * 0.5 * (relevance + faithfulness)
    parts = [RewardParts(verifier=opts.facts_weight * found,
                         judge=team - opts.facts_weight * found,
                         shaping=_penalty(cfg, turn.legal)) for turn in record.turns]
    wanted = {str(f["page"]) for f in facts}
    shared = {"facts_found": found, "solved": float(bool(stated) and all(stated)),
              "relevance": relevance, "faithfulness": faithfulness}
    metrics = {0: {**shared, "pages_found": len(wanted & set(info["retrieved"])) / len(wanted),
                   "searches": float(len(info["searches"]))},
               1: dict(shared)}
    record.info["research_scores"] = {"stated": stated, "team": team}
    done = info.get("reason") == "completed"
    return Scored(parts, ["completed" if done else "unfinished"] * 2, metrics)


# --------------------------------------------------------------------------- code_debug

def score_code_debug(cfg: RunConfig, record: EpisodeRecord, judge: JudgeClient) -> Scored:
    """Hidden tests through the reward service (its sandbox), then ``debug_scores``."""
    opts = cfg.environment.code_debug
    assert opts is not None
    info = record.info
    problem = problem_of(info)
    codes = [problem.program(str(info["author_code"]))]
    if not same_code(info):
        codes.append(problem.program(str(info["fixer_code"])))
    body = {"kind": "code", "responses": codes, "tests": problem.tests,
            "limits": {"cpu_seconds": opts.cpu_seconds, "wall_seconds": opts.wall_seconds}}
    url = cfg.service_url("reward") + "/v1/verify"
    verdict = post_json(url, body, RewardUnavailable, "reward service", timeout_s=120.0)
    results = [CodeVerdict.model_validate(r) for r in verdict["results"]]
    scores = debug_scores(info, results[0], results[-1])
    roles = ["author", "fixer"] if opts.mode == "pair" else ["fixer"]
    rewards = dict(scores["rewards"])
    parts = [RewardParts(verifier=float(rewards[roles[t.seat]]), shaping=_penalty(cfg, t.legal))
             for t in record.turns]
    seat_results, metrics = [], {}
    for seat, role in enumerate(roles):
        summary = dict(scores[role])
        metrics[seat] = {"pass_rate": float(summary["pass_rate"]),
                         "solved": float(bool(summary["passed"]))}
        if role == "author":
            metrics[seat]["bug_fixed"] = float(bool(scores["fixed"]))
            seat_results.append("bug_fixed" if scores["fixed"] else "not_fixed")
        else:
            seat_results.append("passed" if summary["passed"] else "failed")
    record.info["code_debug"] = scores
    return Scored(parts, seat_results, metrics)


# --------------------------------------------------------------------------- support

def score_support(cfg: RunConfig, record: EpisodeRecord, judge: JudgeClient) -> Scored:
    """The team's answer checked against the ground truth (``support_scores``): every turn gets
    reward.correct or reward.wrong, + ``call_bonus`` per accurate call it made, + the illegal
    move penalty on an illegal turn. No service is asked: the truth is in the record."""
    opts = cfg.environment.support
    assert opts is not None
    info = record.info
    scores = support_scores(info)
    success = bool(scores["success"])
    verifier = cfg.reward.correct if success else cfg.reward.wrong
    accurate: dict[int, int] = {}
    for call in list(info["calls"]):
        accurate[int(call["turn"])] = accurate.get(int(call["turn"]), 0) + int(call["accurate"])
    parts = [RewardParts(verifier=verifier,
                         shaping=opts.call_bonus * accurate.get(index, 0) + _penalty(cfg, t.legal))
             for index, t in enumerate(record.turns)]
    record.info["support"] = scores
    results = ["success" if success else "failure"] * len(record.seats)
    return Scored(parts, results, support_metrics(info, record.seats))


# --------------------------------------------------------------------------- common

# What an env's spec names as its ``scorer`` (agora/envs/spec.py): these four, or a plugin's.
Scorer = Callable[[RunConfig, EpisodeRecord, JudgeClient], Scored]


def _penalty(cfg: RunConfig, legal: bool) -> float:
    """Illegal turns are not forfeits in these envs (the episode goes on), so the penalty goes
    to the illegal turn only, on top of the episode's reward (docs/architecture.md
    "Learning": credit for illegal moves)."""
    return 0.0 if legal else cfg.environment.illegal_move_penalty


def score_episode(cfg: RunConfig, record: EpisodeRecord) -> bool:
    """Score ``record`` in place if its env's spec names a scorer; False for the others (the
    reward service's verifier scores them)."""
    scorer: Scorer | None = cfg.environment.spec.load_scorer()
    if scorer is None:
        return False
    judge = JudgeClient.of(cfg)
    scored = scorer(cfg, record, judge)
    apply_scored(record, scored)
    record.info["judge"] = judge.tally()
    return True


def apply_scored(record: EpisodeRecord, scored: Scored) -> None:
    """Turn rewards = the sum of their parts; per seat label (scripted ones too), the mean of
    its turns' rewards and parts, and its metrics averaged over the seats it held."""
    if len(scored.parts) != len(record.turns):
        raise ValueError(f"{len(scored.parts)} reward parts for {len(record.turns)} turns")
    sums: dict[str, list[RewardParts]] = {}
    for turn, p in zip(record.turns, scored.parts, strict=True):
        turn.reward = p.verifier + p.judge + p.shaping
        sums.setdefault(turn.agent, []).append(p)
    record.reward_parts = {
        agent: RewardParts(**{k: sum(getattr(p, k) for p in ps) / len(ps)
                              for k in RewardParts.model_fields})
        for agent, ps in sums.items()
    }
    record.rewards = {a: p.verifier + p.judge + p.shaping for a, p in record.reward_parts.items()}
    record.results = scored.results
    by_agent: dict[str, dict[str, list[float]]] = {}
    for seat, values in scored.metrics.items():
        for key, value in values.items():
            by_agent.setdefault(record.seats[seat], {}).setdefault(key, []).append(float(value))
    record.info["metrics"] = {a: {k: sum(v) / len(v) for k, v in m.items()}
                              for a, m in by_agent.items()}
