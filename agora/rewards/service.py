"""The reward service's logic (its HTTP app is services/reward/app.py): replay a game, check math
and NLI answers against a task, run programs against hidden tests in the sandbox, and score with
the learned verifier, alone or blended with the rule reward.

Usable in-process: ``RewardService(settings).verify(request)``. Errors a client can fix raise
``RewardError`` with the HTTP status the app answers (422 for bad input, 503 for a broken
learned verifier).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
from concurrent.futures import ThreadPoolExecutor

from agora.data import TaskError
from agora.envs.registry import GAME_BOTS
from agora.ops.metrics import LEARNED_SCORES, PROGRAM_ANSWERS, VERIFICATIONS
from agora.rewards.schemas import (
    MAX_ACTION_CHARS,
    AnyVerifyRequest,
    CodeResult,
    CodeRewards,
    CodeVerifyRequest,
    CodeVerifyResponse,
    MathResult,
    MathVerifyRequest,
    MathVerifyResponse,
    NLIResult,
    NLIVerifyRequest,
    NLIVerifyResponse,
    SandboxRunRequest,
    SandboxRunResponse,
    ScoreRequest,
    ScoreResponse,
    TaskRewards,
    TaskVerifyRequest,
    VerifyRequest,
)
from agora.rewards.settings import RewardSettings
from agora.rewards.verifiers.code import CodeVerdict, expected_test_names, verify_code
from agora.rewards.verifiers.game import GameVerdict, InvalidEpisode, verify_game
from agora.rewards.verifiers.learned import LazyVerifier, VerifierUnavailable, probability
from agora.rewards.verifiers.math import MathVerdict
from agora.rewards.verifiers.nli import verify_nli
from agora.rewards.verifiers.program import ProgramRun, last_program, verify_answer
from agora.sandbox.runner import SandboxLimits, SandboxStatus, run_python


class RewardError(Exception):
    """A request the service refuses, with the HTTP status to answer it with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class RewardService:
    """The verifiers with the settings they share: the learned verifier (loaded once), the
    default blend weight, and the sandbox slots every code request draws from."""

    def __init__(self, settings: RewardSettings) -> None:
        self.settings = settings
        self.learned = LazyVerifier(settings.model)
        self.sandbox_slots = threading.BoundedSemaphore(settings.sandbox_concurrency)
        # None: the sandbox reached the required isolation at start-up (or was not probed yet);
        # else why it cannot run code, for /health and every code request's 503.
        self.sandbox_problem: str | None = None
        self.sandbox_level: str | None = None
        self.sandbox_run_limits: str | None = None

    def probe_sandbox(self) -> None:
        """Run a one-line program under the required isolation: a sandbox that cannot isolate
        must say so at start, not score every program 0 later."""
        wanted = self.settings.sandbox_isolation
        result = run_python("print('ok')", limits=self.isolated(SandboxLimits(wall_seconds=30)))
        self.sandbox_level = result.level
        # Whether a run's processes share one memory and task limit (a cgroup per run) or only
        # each has its own: operators read it on /health.
        self.sandbox_run_limits = next((note for note in result.isolation if "cgroup" in note),
                                       None)
        if result.ok and result.stdout.strip() == "ok":
            self.sandbox_problem = None
        else:
            self.sandbox_problem = (f"the sandbox cannot run code at isolation '{wanted}' "
                                    f"(AGORA_SANDBOX_ISOLATION): {result.reason}")

    def isolated(self, limits: SandboxLimits) -> SandboxLimits:
        """``limits`` with the service's isolation requirement (clients cannot lower it)."""
        return dataclasses.replace(limits, min_isolation=self.settings.sandbox_isolation)

    def require_sandbox(self) -> None:
        if self.sandbox_problem is not None:
            raise RewardError(503, self.sandbox_problem)

    def run_sandbox(self, req: SandboxRunRequest) -> SandboxRunResponse:
        """One program of a rollout worker (a tool call), run here because only this service
        holds a sandbox; a set-up failure is the service's fault (503), not the code's."""
        self.require_sandbox()
        with self.sandbox_slots:
            result = run_python(req.code, stdin=req.stdin, files=req.files,
                                limits=self.isolated(req.limits.sandbox()))
        VERIFICATIONS.labels("sandbox", result.status.value).inc()
        if result.status is SandboxStatus.SANDBOX_ERROR:
            raise RewardError(503, f"sandbox: {result.reason}")
        data = dataclasses.asdict(result)
        return SandboxRunResponse(**{k: data[k] for k in SandboxRunResponse.model_fields})

    def warm(self) -> None:
        """Probe the sandbox (a fraction of a second), and load the learned verifier in the
        background: ``/health`` must not wait for torch."""
        self.probe_sandbox()
        if self.learned.configured:
            threading.Thread(target=self.learned.warm, name="learned-verifier-load",
                             daemon=True).start()

    def verify(self, req: AnyVerifyRequest
               ) -> GameVerdict | MathVerifyResponse | NLIVerifyResponse | CodeVerifyResponse:
        # Called from FastAPI's thread pool (a sync endpoint), which is why the verifiers must
        # not rely on signals (see agora/rewards/verifiers/math.py), and why a code run may block.
        if isinstance(req, MathVerifyRequest):
            return self.verify_math(req)
        if isinstance(req, NLIVerifyRequest):
            return self.verify_nli(req)
        if isinstance(req, CodeVerifyRequest):
            return self.verify_code(req)
        return self.verify_game(req)

    def score(self, req: ScoreRequest) -> ScoreResponse:
        """The learned verifier's score of each answer to the question."""
        scores = self.learned_scores(req.question, req.answers, "/v1/score")
        return ScoreResponse(scores=scores, probs=[probability(x) for x in scores])

    def learned_scores(self, question: str, answers: list[str], route: str) -> list[float]:
        try:
            verifier = self.learned.get()
        except VerifierUnavailable as err:
            # Not configured: no retry can succeed against this deployment, so the request is
            # refused (422, like the judge's unconfigured backend) and workers do not retry it.
            # Configured but failed to load: the service's fault, 503.
            raise RewardError(503 if self.learned.configured else 422, str(err)) from None
        scores = verifier.score(question, answers)
        if not all(math.isfinite(x) for x in scores):  # JSON cannot carry NaN: say why instead
            raise RewardError(503, f"the learned verifier at {self.learned.path} gave a non-finite "
                                     "score: its weights are broken (retrain it)")
        LEARNED_SCORES.labels(route).inc(len(answers))
        return scores

    def verify_game(self, req: VerifyRequest) -> GameVerdict:
        if req.env not in GAME_BOTS:  # the games: envs it can replay
            raise RewardError(422, f"unknown env '{req.env}'; games: {sorted(GAME_BOTS)}")
        too_long = [i for i, a in enumerate(req.actions) if len(a) > MAX_ACTION_CHARS]
        if too_long:
            raise RewardError(422, f"actions {too_long[:5]} exceed {MAX_ACTION_CHARS} characters")
        if any(len(a) > MAX_ACTION_CHARS for a in req.opening):
            raise RewardError(422, f"an opening move exceeds {MAX_ACTION_CHARS} characters")
        try:
            verdict = verify_game(req.env, req.actions, req.rewards, req.seed, req.num_seats,
                                  opening=req.opening)
        except (InvalidEpisode, ValueError) as err:  # ValueError: a seat count the game lacks
            raise RewardError(422, str(err)) from None
        VERIFICATIONS.labels("game", "finished" if verdict.finished else "unfinished").inc()
        return verdict

    def verify_math(self, req: MathVerifyRequest) -> MathVerifyResponse:
        limits = self.isolated(req.program_limits.sandbox())
        if req.answer != "text":
            self.require_sandbox()

        def check(response: str) -> tuple[MathVerdict, ProgramRun | None]:
            # A program answer runs in the sandbox, like code tests: it waits for a slot.
            runs = req.answer != "text" and last_program(response) is not None
            with self.sandbox_slots if runs else contextlib.nullcontext():
                verdict, run = verify_answer(response, req.task, req.answer, limits)
            if run is not None and run.status == SandboxStatus.SANDBOX_ERROR:
                raise RewardError(503, f"sandbox: {run.reason}")
            return verdict, run

        try:
            if req.answer == "text":
                checked = [check(response) for response in req.responses]
            else:
                with ThreadPoolExecutor(max_workers=min(len(req.responses), 8)) as pool:
                    checked = list(pool.map(check, req.responses))
        except TaskError as err:
            raise RewardError(422, f"task: {err}") from None
        verdicts = [v for v, _ in checked]
        rule = [task_reward(req.rewards, v.correct, v.extracted is not None) for v in verdicts]
        mixed = self.mix(req, rule)
        results = [
            MathResult(correct=v.correct, parsable=v.extracted is not None, extracted=v.extracted,
                       method=v.method, score=v.score,
                       program=run.status if run else None, printed=run.printed if run else None,
                       **parts)
            for (v, run), parts in zip(checked, mixed, strict=True)
        ]
        count("math", results)
        for result in results:
            if result.program is not None:
                PROGRAM_ANSWERS.labels("right" if result.correct else "wrong"
                                       if result.program == "ok" else result.program).inc()
        return MathVerifyResponse(results=results, accuracy=accuracy(results), mode=req.mode,
                                  blend_weight=self.weight(req), answer=req.answer)

    def verify_nli(self, req: NLIVerifyRequest) -> NLIVerifyResponse:
        try:
            verdicts = [verify_nli(response, req.task) for response in req.responses]
        except TaskError as err:
            raise RewardError(422, f"task: {err}") from None
        rule = [task_reward(req.rewards, v.correct, v.parsable) for v in verdicts]
        mixed = self.mix(req, rule)
        results = [
            NLIResult(correct=v.correct, parsable=v.parsable, predicted=v.predicted, **parts)
            for v, parts in zip(verdicts, mixed, strict=True)
        ]
        count("nli", results)
        return NLIVerifyResponse(results=results, accuracy=accuracy(results), mode=req.mode,
                                 blend_weight=self.weight(req))

    def weight(self, req: TaskVerifyRequest) -> float | None:
        if req.mode != "blend":
            return None
        return self.settings.blend if req.blend_weight is None else req.blend_weight

    def mix(self, req: TaskVerifyRequest, rule: list[float]) -> list[dict[str, float | None]]:
        """Per response: the rule reward, the learned one (modes learned/blend) and the final.

        The learned probability is mapped onto the request's reward scale (wrong..correct), so a
        blend of the two never mixes a 0..1 probability with, say, a -1..1 rule reward."""
        if req.mode == "rule":
            return [{"reward": r, "rule_reward": r} for r in rule]
        scores = self.learned_scores(req.task.question, req.responses, "/v1/verify")
        low, high = req.rewards.wrong, req.rewards.correct
        weight = self.weight(req)
        out: list[dict[str, float | None]] = []
        for r, s in zip(rule, scores, strict=True):
            prob = probability(s)
            learned = low + (high - low) * prob
            final = learned if weight is None else weight * r + (1.0 - weight) * learned
            out.append({"reward": final, "rule_reward": r, "learned_reward": learned,
                        "learned_prob": prob, "learned_score": s})
        return out

    def verify_code(self, req: CodeVerifyRequest) -> CodeVerifyResponse:
        try:
            expected_test_names(req.tests)
        except ValueError as err:
            raise RewardError(422, f"tests: {err}") from None
        self.require_sandbox()
        programs = req.programs()
        limits = self.isolated(req.limits.sandbox())

        def run(program: str) -> CodeVerdict:
            with self.sandbox_slots:  # the wall clock starts inside run_python, after the wait
                verdict = verify_code(program, req.tests, limits)
            if verdict.status == SandboxStatus.SANDBOX_ERROR:  # ours, not the program's failure
                raise RewardError(503, f"sandbox: {verdict.reason}")
            return verdict

        with ThreadPoolExecutor(max_workers=min(len(programs), 8)) as pool:
            verdicts = list(pool.map(run, programs))
        results = [CodeResult(**v.model_dump(), reward=code_reward(req.rewards, v))
                   for v in verdicts]
        for r in results:
            VERIFICATIONS.labels("code", "passed" if r.passed else
                                 "failed" if r.status == "ok" else r.status).inc()
        return CodeVerifyResponse(results=results,
                                  pass_rate=sum(r.passed for r in results) / len(results))


def code_reward(scheme: CodeRewards, verdict: CodeVerdict) -> float:
    """failed + (passed - failed) x rate. Only a clean pass earns the full reward: a run whose
    tests all reported success but that then hung, crashed or was tampered with counts its
    last test as failed."""
    total = max(1, verdict.tests_total)
    if scheme.partial:
        rate = verdict.tests_passed / total
        if not verdict.passed:
            rate = min(rate, (total - 1) / total)
    else:
        rate = 1.0 if verdict.passed else 0.0
    return scheme.failed + (scheme.passed - scheme.failed) * rate


def task_reward(scheme: TaskRewards, correct: bool, parsable: bool) -> float:
    if correct:
        return scheme.correct
    if not parsable and scheme.unparsable is not None:
        return scheme.unparsable
    return scheme.wrong


def count(kind: str, results: list[MathResult] | list[NLIResult]) -> None:
    for r in results:
        VERIFICATIONS.labels(kind, "correct" if r.correct else
                             "wrong" if r.parsable else "unparsable").inc()


def accuracy(results: list[MathResult] | list[NLIResult]) -> float:
    return sum(r.correct for r in results) / len(results)
