"""Collaborative story writing: 2-3 writers take turns adding a paragraph to a seeded premise.

Why this env: there is no verifier for a good story, so it exercises the judge path (rubric
scores or a judge model, ``story_judge_request``) and cooperative credit assignment: the whole
story is judged, and so is each writer's own part.

The premise comes from ``PREMISES`` (chosen by the seed unless one is given). Each of
``rounds`` rounds gives every writer one turn, in seat order. An action is the paragraph itself.

Bad paragraphs are not forfeits (the story goes on without them): an empty one, or an exact
repeat of the premise or of an earlier paragraph, is illegal (``StepResult.legal`` False,
counted per writer, logged) and nothing is added. A paragraph over ``MAX_PARAGRAPH_WORDS`` words
is legal but cut to that length (counted in ``clipped``), so one runaway generation cannot
crowd the other writers out of the prompt.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import Field, field_validator

from agora.envs.base import ChatMessage, Outcome, StepResult
from agora.envs.spec import EnvOptions, EnvSpec, RubricName
from agora.judge.schemas import MAX_CANDIDATE_CHARS, MAX_CONTEXT_CHARS, ScoreRequest

PREMISES = (
    "A lighthouse keeper finds a message in a bottle addressed to her, dated fifty years ahead.",
    "Two rival bakers are snowed in together the night before the village cake contest.",
    "A robot gardener on an abandoned space station discovers a seed it cannot identify.",
    "A boy trades his shadow to a travelling merchant for a map of the hidden city.",
    "The last train of the night stops at a station that is on no map.",
    "An old dragon opens a library and must deal with its first overdue book.",
    "A detective cat investigates the disappearance of every clock in the town.",
    "Three friends find a door at the back of the school that was not there yesterday.",
)
MAX_PARAGRAPH_WORDS = 120
MAX_SHOWN_CHARS = 1200  # the story so far in the prompt: its end, where the action is


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


class StoryWriting:
    """Writers take turns extending one story; the judge scores it afterwards."""

    name = "story"

    def __init__(self, num_agents: int = 2, rounds: int = 2, premise: str | None = None) -> None:
        if not 2 <= num_agents <= 3:
            raise ValueError("story: needs 2-3 writers")
        if rounds < 1:
            raise ValueError("story: needs at least one round")
        self.num_seats = num_agents
        self.rounds = rounds
        self.fixed_premise = premise
        self.reset(0)

    def reset(self, seed: int = 0) -> None:
        if self.fixed_premise is not None:
            self.premise_id, self.premise = -1, self.fixed_premise
        else:
            self.premise_id = random.Random(seed).randrange(len(PREMISES))
            self.premise = PREMISES[self.premise_id]
        self.paragraphs: list[dict[str, object]] = []
        self.illegal = [0] * self.num_seats
        self.clipped = [0] * self.num_seats
        self.illegal_moves: list[dict[str, object]] = []
        self._turn = 0

    @property
    def total_turns(self) -> int:
        return self.rounds * self.num_seats

    @property
    def current_seat(self) -> int:
        return self._turn % self.num_seats

    @property
    def done(self) -> bool:
        return self._turn >= self.total_turns

    def role(self, seat: int) -> str:
        return f"writer{seat + 1}"

    def legal_actions(self) -> list[str]:
        return []  # free text: any new, non-empty paragraph

    @property
    def story(self) -> str:
        return "\n\n".join(str(p["text"]) for p in self.paragraphs)

    def observation(self, seat: int) -> list[ChatMessage]:
        system = (
            f"You are writer {seat + 1} of {self.num_seats}, writing a short story together, "
            "taking turns. Add the next paragraph: 2-4 sentences that continue the story. "
            "Reply with the paragraph only."
        )
        story = self.story
        if len(story) > MAX_SHOWN_CHARS:
            story = "..." + story[-MAX_SHOWN_CHARS:]
        user = (
            f"Premise: {self.premise}\n\n"
            f"Story so far:\n{story or '(nothing yet: you begin)'}\n\n"
            f"Turn {min(self._turn, self.total_turns - 1) + 1} of {self.total_turns}. "
            f"Your paragraph, writer {seat + 1}:"
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(legal=False, done=True, reason="the story is finished")
        seat = self.current_seat
        text = action.strip()
        words = text.split()
        if len(words) > MAX_PARAGRAPH_WORDS:
            text = " ".join(words[:MAX_PARAGRAPH_WORDS])
            self.clipped[seat] += 1
        seen = {_norm(self.premise), *(_norm(str(p["text"])) for p in self.paragraphs)}
        reason = ""
        if not text:
            reason = "empty paragraph"
        elif _norm(text) in seen:
            reason = "repeats the premise or an earlier paragraph"
        if reason:
            self.illegal[seat] += 1
            self.illegal_moves.append({"turn": self._turn, "agent": self.role(seat),
                                       "reason": reason})
        else:
            self.paragraphs.append({"turn": self._turn, "seat": seat, "agent": self.role(seat),
                                    "text": text})
        self._turn += 1
        return StepResult(legal=not reason, done=self.done, reason=reason)

    def outcome(self) -> Outcome:
        roles = [self.role(s) for s in range(self.num_seats)]
        info: dict[str, object] = {
            "premise_id": self.premise_id,
            "premise": self.premise,
            "story": self.story,
            "paragraphs": [dict(p) for p in self.paragraphs],
            "contributions": {r: [str(p["text"]) for p in self.paragraphs if p["agent"] == r]
                              for r in roles},
            "illegal": dict(zip(roles, self.illegal, strict=True)),
            "illegal_moves": list(self.illegal_moves),
            "clipped": dict(zip(roles, self.clipped, strict=True)),
            "turns": self._turn,
        }
        return Outcome(winner=None, draw=False,
                       reason="completed" if self.done else "unfinished", info=info)


def _request(context: str, response: str, rubric_name: str, backend: str | None) -> dict:
    """One validated ``/v1/judge/score`` body (the schema's size limits are applied here, by
    keeping the start of the context, where the premise is, and the start of the response)."""
    body: dict[str, object] = {
        "context": context[:MAX_CONTEXT_CHARS],
        "response": response[:MAX_CANDIDATE_CHARS],
        "rubric": rubric_name,
    }
    if backend is not None:
        body["backend"] = backend
    ScoreRequest.model_validate(body)
    return body


def story_judge_request(
    info: dict, rubric_name: str = "story", backend: str | None = None
) -> dict[str, object]:
    """Judge request bodies from ``Outcome.info``: ``{"story": body, "agents": {role: body}}``.

    The whole story is judged against the premise. Each writer's paragraphs are judged against
    the premise plus what the *other* writers wrote: a writer's part should continue their story
    (with the rubric backend, "continuity" then measures how much of the others' content words
    it picks up; its own words in the context would only inflate that).
    """
    premise = str(info["premise"])
    requests: dict[str, object] = {
        "story": _request(f"Premise: {premise}", str(info["story"]), rubric_name, backend),
    }
    agents: dict[str, dict] = {}
    for role, texts in dict(info["contributions"]).items():
        others = [str(p["text"]) for p in info["paragraphs"] if p["agent"] != role]
        context = f"Premise: {premise}"
        if others:
            context += "\n\nThe other writers wrote:\n" + "\n\n".join(others)
        agents[role] = _request(context, "\n\n".join(texts), rubric_name, backend)
    requests["agents"] = agents
    return requests


class StoryOptions(EnvOptions):
    """``environment.name: story`` (agora/envs/story.py): scored by the judge service.

    ``judge: score``: every writer's reward is (1 - story_weight) x the judge's 0..1 score of
    its own paragraphs + story_weight x the whole story's score (the shared part is what makes
    writers cooperate). ``pairwise``: each turn's reward is the judge's preference (0..1) for
    its paragraph over what the ``baseline`` context agent writes at the same point of the
    story. ``both``: the mean of the two. An illegal turn (empty, or a repeat) also gets
    ``environment.illegal_move_penalty``."""

    rounds: int = Field(2, ge=1, le=10, description="each writer writes once per round")
    premise: str | None = Field(None, min_length=1, max_length=500,
                                description="fixed premise; default: one per seed")
    judge: Literal["score", "pairwise", "both"] = "score"
    rubric: RubricName = "story"
    story_weight: float = Field(0.5, ge=0.0, le=1.0)
    baseline: str = Field("template_writer", description="story context agent for pairwise")

    @field_validator("baseline")
    @classmethod
    def _writer(cls, name: str) -> str:
        from agora.agents.context import CONTEXT_AGENT_FITS

        if CONTEXT_AGENT_FITS.get(name, ("", None))[0] != "story":
            writers = sorted(n for n, (env, _) in CONTEXT_AGENT_FITS.items() if env == "story")
            raise ValueError(f"'{name}' is not a story context agent ({writers})")
        return name


def build(section, payload: dict) -> StoryWriting:
    opts = section.story
    return StoryWriting(num_agents=len(section.seats), rounds=opts.rounds, premise=opts.premise)


SPEC = EnvSpec(
    "story", seats=(2, 3), build=build, options=StoryOptions, context_seats=True,
    demonstrators=("template_writer",),
    verifiers=("judge",), scorer="agora.rollout.scoring:score_story",
    evaluation="episodes", judged=True, metrics={
        "judge_score": "story: judge's 0..1 score of the agent's paragraphs",
        "story_score": "story: judge's 0..1 score of the whole story",
        "preference": "story: judge's preference (0..1) for the agent's paragraph over the "
                      "baseline writer's",
    })
