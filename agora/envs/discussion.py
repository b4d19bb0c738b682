"""MAPoRL discussion: N agents answer a question, read each other's answers, and revise.

Round 1: every agent answers the question alone. Round t > 1: every agent sees the question and
all agents' answers from round t - 1 (its own marked "you") and gives an updated answer. Within a
round the agents answer *simultaneously*: an agent never sees a same-round answer, so seat order
does not leak information. The episode ends after ``rounds`` rounds.

Every answer is verified afterwards by the reward service (math or NLI); the env itself never
judges correctness, it only records who said what in which round (``answers``).
"""

from __future__ import annotations

from dataclasses import dataclass

from agora.envs.base import ChatMessage, Outcome, StepResult
from agora.envs.spec import DefaultPlay, EnvSpec

# What the agents are told to end their answer with, per task kind; the verifiers look for it.
ANSWER_FORMAT = {
    "math": "End with a final line 'Answer: <number>'.",
    "nli": "End with a final line 'Answer: entailment', 'Answer: neutral' or "
    "'Answer: contradiction'.",
}
# Math discussions that may answer with a program (environment.answer; the reward service runs
# it in its sandbox and reads the last printed line).
PROGRAM_FORMAT = {
    "program": "Answer with a short Python program in a ```python block that prints the final "
    "answer.",
    "either": "End with a final line 'Answer: <number>', or write a short Python program in a "
    "```python block that prints the final answer.",
}
# A long revision can push the prompt past the model's context: show at most this much of each
# previous answer (the end, where the final answer is).
MAX_SHOWN_CHARS = 600


@dataclass
class DiscussionTask:
    """The part of a task the agents see (the answer stays with the verifier)."""

    task_id: str
    kind: str  # "math" | "nli"
    question: str


class Discussion:
    name = "discussion"

    def __init__(self, task: DiscussionTask, num_agents: int = 2, rounds: int = 2,
                 answer: str = "text") -> None:
        if task.kind not in ANSWER_FORMAT:
            raise ValueError(f"discussion: unknown task kind '{task.kind}'")
        if answer != "text" and (task.kind != "math" or answer not in PROGRAM_FORMAT):
            raise ValueError(f"discussion: answer '{answer}' is for math tasks "
                             f"({sorted(PROGRAM_FORMAT)})")
        self.answer_mode = answer
        self.answer_format = (PROGRAM_FORMAT[answer] if answer != "text"
                              else ANSWER_FORMAT[task.kind])
        if num_agents < 1 or rounds < 1:
            raise ValueError("discussion: needs at least one agent and one round")
        self.task = task
        self.num_seats = num_agents
        self.rounds = rounds
        self.answers: list[list[str]] = []  # [round][seat]
        self._turn = 0

    def reset(self, seed: int = 0) -> None:
        self.answers = [[""] * self.num_seats for _ in range(self.rounds)]
        self._turn = 0

    @property
    def round(self) -> int:
        return self._turn // self.num_seats

    @property
    def current_seat(self) -> int:
        return self._turn % self.num_seats

    @property
    def done(self) -> bool:
        return self._turn >= self.rounds * self.num_seats

    def role(self, seat: int) -> str:
        return f"agent{seat + 1}"

    def legal_actions(self) -> list[str]:
        return []  # free text: any answer is a legal move, the verifier decides if it is right

    def observation(self, seat: int) -> list[ChatMessage]:
        others = (f"You are agent {seat + 1} of {self.num_seats} working on the same problem. "
                  if self.num_seats > 1 else "")
        system = f"{others}Think step by step, briefly. {self.answer_format}"
        user = f"Question: {self.task.question}"
        if self.round > 0:
            shown = []
            for other, text in enumerate(self.answers[self.round - 1]):
                who = "you" if other == seat else f"agent {other + 1}"
                clipped = text if len(text) <= MAX_SHOWN_CHARS else "..." + text[-MAX_SHOWN_CHARS:]
                shown.append(f"Answer from {who}:\n{clipped.strip()}")
            user += (
                "\n\n" + "\n\n".join(shown)
                + "\n\nCheck these answers, fix any mistake, and give your final answer."
            )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(legal=False, done=True, reason="discussion is over")
        self.answers[self.round][self.current_seat] = action
        self._turn += 1
        return StepResult(legal=True, done=self.done)

    def outcome(self) -> Outcome:
        # Correctness is the verifier's call; the env only reports that the discussion ran.
        return Outcome(winner=None, draw=False, reason="completed" if self.done else "unfinished",
                       info={"rounds": self.rounds, "task_id": self.task.task_id})


def build(section, payload: dict) -> Discussion:
    """The episode's discussion of the task the trainer drew for it (``payload["task"]``)."""
    from agora.data import Task  # the datasets layer (reasoning-gym) only where a task is read

    task = Task.model_validate(payload["task"])
    return Discussion(DiscussionTask(task.task_id, task.kind, task.question),
                      num_agents=len(section.seats), rounds=section.rounds,
                      # A run's environment section; the gateway's episodes (EpisodeCreate)
                      # have no answer mode: a user answers in text.
                      answer=getattr(section, "answer", "text"))


def check(section) -> None:
    if section.task is None:
        raise ValueError("task: a discussion needs a task source (reasoning_gym, jsonl or hf)")
    if set(section.opponents) - {"self", "pool"}:
        raise ValueError("opponents: scripted bots play games only; a discussion plays 'self' "
                         "(the seats) or 'pool' (the other agents' snapshots)")


SPEC = EnvSpec(
    "discussion", seats=(1, 5), build=build, check=check, verifiers=("math", "nli"),
    demonstrators=("task_answer",),
    evaluation="discussion", play=DefaultPlay("", 128, ("\n\n",)),
    # environment.answer program | either (agora/rollout/worker.py program_counts)
    metrics={"programs_run": "discussion: answers given as a program, per episode",
             "programs_failed": "discussion: answer programs that crashed, timed out or "
                                "printed nothing, per episode",
             "programs_right": "discussion: answer programs that printed the right answer, "
                               "per episode"})
