"""Code debugging: an "author" writes a Python function with a bug, a "fixer" repairs it.

Why two roles: the fixer learns to debug, and the author learns to produce the bugs the fixer
learns most from (subtle but fixable ones), an automatic curriculum (docs/architecture.md
"Environments": one writes buggy code, one fixes it, tests decide). Hidden tests decide
everything, in the sandbox only.

Modes:

* ``"pair"`` (2 seats): seat 0 is the author (sees the spec and signature; told to hide one
  subtle bug, unless ``author_plants_bug=False``), seat 1 the fixer (sees the spec and the
  author's code).
* ``"fixer"`` (1 seat): the buggy code is the problem's known-buggy solution, so the fixer can
  be trained alone.

The problem is ``problem_for_seed(seed)`` unless ``problem_id`` pins one: a training problem for
a training seed, a held-out one for an evaluation seed, from the set ``problems`` names
(agora/envs/code_debug_problems.py: builtin, humaneval or a problem file). An
action is a model answer; its code is ``extract_code(text)`` (the last fenced block, else the
whole text). Code that is empty, does not parse (checked with ``ast``, never executed here) or
does not define the function is illegal (``StepResult.legal`` False, counted per role) but not
a forfeit: the episode goes on, and ``score_debug`` simply finds that it fails the tests.
"""

from __future__ import annotations

import ast
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from agora.envs.base import ChatMessage, Outcome, StepResult
from agora.envs.code_debug_problems import (
    BUILTIN,
    HUMANEVAL,
    Problem,
    ProblemFileError,
    problem_set,
)
from agora.envs.spec import EnvOptions, EnvSpec
from agora.rewards.verifiers.code import CodeVerdict, extract_code, verify_code
from agora.sandbox.parsing import parse_python
from agora.sandbox.runner import SandboxLimits

MAX_CODE_CHARS = 6000  # longer code is cut (and then usually fails to parse)
DEFAULT_LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=8)

Mode = Literal["pair", "fixer"]
EvalProblems = Literal["held_out", "training"]


def problem_for_seed(seed: int, eval_problems: EvalProblems = "held_out",
                     problems: str = BUILTIN) -> Problem:
    """The problem an episode of ``seed`` plays from the set ``problems``: evaluation's seeds
    (agora.evaluation.seeds) play the held-out problems, every other seed (training, warm
    starts) the training ones."""
    # Imported here: agora.evaluation's package imports the envs (a cycle at module level).
    from agora.evaluation.seeds import HELD_OUT_SEEDS

    chosen = problem_set(problems)
    if seed >= HELD_OUT_SEEDS and eval_problems == "held_out":
        return chosen.held_out[(seed - HELD_OUT_SEEDS) % len(chosen.held_out)]
    return chosen.training[seed % len(chosen.training)]


def check_code(code: str, func_name: str) -> str:
    """Why ``code`` cannot be a solution ('' if it might be): static checks only, no execution."""
    if not code.strip():
        return "no code"
    try:
        tree = parse_python(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"code does not parse: {type(exc).__name__}"
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    return "" if func_name in defined else f"code does not define {func_name}()"


def _fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


class CodeDebug:
    """Author writes (buggy) code, fixer repairs it; hidden tests score both (``score_debug``)."""

    name = "code_debug"

    def __init__(
        self, mode: Mode = "pair", problem_id: str | None = None, author_plants_bug: bool = True,
        eval_problems: EvalProblems = "held_out", problems: str = BUILTIN,
    ) -> None:
        if mode not in ("pair", "fixer"):
            raise ValueError(f"code_debug: unknown mode '{mode}'")
        self.problems = problems
        if problem_id is not None and problem_id not in problem_set(problems).by_id:
            raise ValueError(f"code_debug: unknown problem '{problem_id}'")
        self.mode = mode
        self.num_seats = 2 if mode == "pair" else 1
        self.roles = ("author", "fixer") if mode == "pair" else ("fixer",)
        self.problem_id = problem_id
        self.author_plants_bug = author_plants_bug
        self.eval_problems = eval_problems
        self.reset(0)

    def reset(self, seed: int = 0) -> None:
        self.problem = (problem_set(self.problems).by_id[self.problem_id] if self.problem_id
                        else problem_for_seed(seed, self.eval_problems, self.problems))
        self.author_code: str | None = self.problem.buggy if self.mode == "fixer" else None
        self.fixer_code: str | None = None
        self.illegal = dict.fromkeys(self.roles, 0)
        self.illegal_moves: list[dict[str, object]] = []
        self._turn = 0

    @property
    def current_seat(self) -> int:
        return self._turn

    @property
    def done(self) -> bool:
        return self._turn >= self.num_seats

    def role(self, seat: int) -> str:
        return self.roles[seat]

    def legal_actions(self) -> list[str]:
        return []  # free text: any code

    def observation(self, seat: int) -> list[ChatMessage]:
        task = f"Task: {self.problem.spec}\nSignature: {self.problem.signature}"
        if self.roles[seat] == "author":
            goal = ("Write the function, but hide one small bug in it that a careful reader "
                    "can find and fix." if self.author_plants_bug else "Write the function.")
            system = f"You write Python. {goal} Reply with one ```python code block."
            user = task
        else:
            system = ("You fix buggy Python code. Reply with the corrected function in one "
                      "```python code block.")
            label = ("Code with a bug" if self.author_plants_bug or self.mode == "fixer"
                     else "Code that may have a bug")
            user = f"{task}\n{label}:\n{_fenced(self.author_code or '')}\nFixed code:"
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(legal=False, done=True, reason="episode is over")
        role = self.roles[self._turn]
        code = extract_code(action)[:MAX_CODE_CHARS]
        if role == "author":
            self.author_code = code
        else:
            self.fixer_code = code
        reason = check_code(code, self.problem.func_name)
        if reason:
            self.illegal[role] += 1
            self.illegal_moves.append({"turn": self._turn, "agent": role, "reason": reason})
        self._turn += 1
        return StepResult(legal=not reason, done=self.done, reason=reason)

    def outcome(self) -> Outcome:
        info: dict[str, object] = {
            "problem_id": self.problem.problem_id,
            "problems": self.problems,
            "mode": self.mode,
            "author_source": "model" if self.mode == "pair" else "bug_list",
            "author_code": self.author_code or "",
            "fixer_code": self.fixer_code or "",
            "illegal": dict(self.illegal),
            "illegal_moves": list(self.illegal_moves),
        }
        return Outcome(winner=None, draw=False,
                       reason="completed" if self.done else "unfinished", info=info)


def _summary(verdict: CodeVerdict) -> dict[str, object]:
    return {
        "passed": verdict.passed,
        "tests_passed": verdict.tests_passed,
        "tests_total": verdict.tests_total,
        "pass_rate": verdict.tests_passed / verdict.tests_total,
        "status": verdict.status,
        "reason": verdict.reason,
    }


def score_debug(info: dict, limits: SandboxLimits | None = None) -> dict[str, object]:
    """Run the hidden tests on the author's and the fixer's code (sandboxed) and score both.

    - ``fixer`` reward: the pass rate of the fixed code, in [0, 1].
    - ``author_bug``: the author's code passes some but not all tests: it loads and is close to
      right, so there is something to repair (code that fails every test is a non-answer, not a
      bug; code that passes every test has no bug).
    - ``fixed``: ``author_bug`` and the fixer's code passes every test.
    - ``author`` reward (pair mode only): ``0.5 + 0.5 * author_pass_rate`` if ``fixed`` else 0.
      Only bugs that get fixed pay, so hiding an unfixable mess is worth nothing; among fixed
      bugs, subtler ones (the buggy code passes more tests) pay more, because they teach the
      fixer most. Correct code, garbage and unfixed bugs all get 0.
    - ``fixer_improvement``: fixer pass rate minus author pass rate (a fixer that copies the code
      gets the buggy code's pass rate as reward, so this part is there to subtract it).

    Identical codes (up to surrounding blank space) are run once.
    """
    problem = problem_of(info)
    limits = limits or DEFAULT_LIMITS
    author_code, fixer_code = str(info["author_code"]), str(info["fixer_code"])
    author = verify_code(problem.program(author_code), problem.tests, limits)
    fixer = (author if same_code(info)
             else verify_code(problem.program(fixer_code), problem.tests, limits))
    return debug_scores(info, author, fixer)


def problem_of(info: dict) -> Problem:
    """The problem an episode's outcome info was played on (its set: ``info["problems"]``,
    builtin in records written before problem sets)."""
    return problem_set(str(info.get("problems", BUILTIN))).by_id[str(info["problem_id"])]


def same_code(info: dict) -> bool:
    """The fixer returned the author's code (up to surrounding blank space): one run serves."""
    return str(info["fixer_code"]).strip() == str(info["author_code"]).strip()


def debug_scores(info: dict, author: CodeVerdict, fixer: CodeVerdict) -> dict[str, object]:
    """``score_debug``'s scores from test verdicts obtained elsewhere (the rollout worker gets
    them from the reward service, so model-written code never runs in the worker)."""
    a, f = _summary(author), _summary(fixer)
    author_bug = 0 < author.tests_passed < author.tests_total
    fixed = author_bug and fixer.passed
    rewards = {"fixer": float(f["pass_rate"])}
    if info.get("mode", "pair") == "pair":
        rewards["author"] = 0.5 + 0.5 * float(a["pass_rate"]) if fixed else 0.0
    return {
        "problem_id": str(info["problem_id"]),
        "author": a,
        "fixer": f,
        "author_bug": author_bug,
        "fixed": fixed,
        "fixer_improvement": float(f["pass_rate"]) - float(a["pass_rate"]),
        "rewards": rewards,
    }


class CodeDebugOptions(EnvOptions):
    """``environment.name: code_debug`` (agora/envs/code_debug.py): hidden tests decide, run by
    the reward service in its sandbox. ``pair``: seat 0 writes the (buggy) code, seat 1 fixes
    it; ``fixer``: one seat fixes the problem's known-buggy code. Rewards as in
    ``score_debug``: the fixer gets its code's test pass rate, the author 0.5 + 0.5 x its own
    pass rate if its bug got fixed (else 0); an illegal turn (code that does not parse or
    define the function) also gets ``environment.illegal_move_penalty``."""

    mode: Literal["pair", "fixer"] = "pair"
    problems: str = Field(
        BUILTIN, description="the problem set: builtin (17 hand-written functions), humaneval "
        "(a plausible bug planted in HumanEval functions, agora/envs/humaneval_debug.py) or the "
        "path of a JSONL problem file in that format")
    problem_id: str | None = Field(None, description="pin one problem; default: one per seed")
    author_plants_bug: bool = True
    eval_problems: EvalProblems = Field(
        "held_out", description="evaluation episodes play held_out problems, ones training "
        "never shows (agora/envs/code_debug_problems.py), or the training ones (as before "
        "2026-12-07)")
    cpu_seconds: int = Field(2, ge=1, le=30, description="sandbox CPU limit per program")
    wall_seconds: float = Field(8.0, gt=0.0, le=60.0, description="sandbox wall-clock limit")

    @field_validator("problems")
    @classmethod
    def _loadable_set(cls, problems: str) -> str:
        try:
            problem_set(problems)
        except ProblemFileError as exc:
            raise ValueError(f"{exc} (or name a set: {BUILTIN}, {HUMANEVAL})") from None
        return problems

    @field_validator("problem_id")
    @classmethod
    def _known_problem(cls, problem_id: str | None, info: ValidationInfo) -> str | None:
        if problem_id is None or "problems" not in info.data:  # no set: its error says why
            return problem_id
        known = problem_set(info.data["problems"]).by_id
        if problem_id not in known:
            shown = sorted(known)[:20]
            more = f" and {len(known) - len(shown)} more" if len(known) > len(shown) else ""
            raise ValueError(f"unknown problem '{problem_id}' in the {info.data['problems']} "
                             f"set; known: {shown}{more}")
        return problem_id


def build(section, payload: dict) -> CodeDebug:
    opts = section.code_debug
    return CodeDebug(mode=opts.mode, problem_id=opts.problem_id,
                     author_plants_bug=opts.author_plants_bug, eval_problems=opts.eval_problems,
                     problems=opts.problems)


SPEC = EnvSpec(
    "code_debug", seats=(1, 2), build=build, options=CodeDebugOptions,
    roles=lambda opts: ["author", "fixer"] if opts.mode == "pair" else ["fixer"],
    context_seats=True, verifiers=("code_tests",),
    demonstrators=("buggy_author", "oracle_fixer"),
    scorer="agora.rollout.scoring:score_code_debug", evaluation="episodes", sandboxed=True,
    success_metric="solved",
    metrics={
        "pass_rate": "code_debug: share of hidden tests the agent's code passes",
        "solved": "code_debug: share of episodes where the agent's code passes every test",
        "bug_fixed": "code_debug (author): share of episodes with a bug that got fixed",
    })
