"""The LLM judge: any OpenAI-compatible ``/v1/chat/completions`` server (a vLLM judge model in
compose; locally the base model on the policy server).

Failure policy, and why:
- Connection errors and 5xx are retried with exponential backoff (tenacity): a judge server that
  is restarting should slow a request down, not fail it.
- After the retries, or on a 4xx (our request does not suit that server: unknown model, bad
  key), the call raises ``JudgeUpstreamError``, which the service answers with 502 (504 on a
  read timeout): the failure is the judge model's, not the caller's input.
- A prompt longer than the judge model's context is the one 4xx that is about a single request
  (a long story), not the setup: it gets no verdict, i.e. a malformed one (logged, counted).
- An answer that arrives but says nothing parseable is not an error: it is a malformed verdict,
  returned with ``verdict=None`` so the caller's fallback (tie / parsed_ok=false) applies.
- Greedy decoding (temperature 0 by default) so that a cached verdict is the verdict a repeat
  call would have produced.
- ``constrained``: for a judge model too small to follow the format (SmolLM2-135M gave no
  parseable preference verdict in 512), vLLM's structured outputs allow only the verdict lines
  (``choice``) or the score lines (``regex``): no reasoning, always a verdict. Whether that
  verdict means anything is what the position-bias count then shows.
- ``logprobs``: the verdict is read from the judge model's next-token probabilities instead of
  its sampled text (G-Eval): the answer is prefilled up to ``VERDICT:`` (or ``SCORE <name>: ``)
  and one token is asked for with its top log-probabilities (vLLM's ``continue_final_message``).
  A pairwise verdict is then P(A), P(B), P(TIE) (``slot_distribution``); a score is the
  expected value over the scale's numbers (``expected_score``, one request per criterion, a
  second one when a "1" may begin "10"). Scales reaching past 10 keep text verdicts (their
  numbers span several tokens). Combined with ``constrained``, only verdict tokens are
  allowed, so the probabilities are over the verdicts alone.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re

import httpx
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from agora.judge.errors import JudgeUpstreamError
from agora.judge.prompts import PROMPT_VERSION, pairwise_messages, score_messages
from agora.judge.schemas import OrderVerdict, Rubric
from agora.judge.verdicts import (
    expected_score,
    number_distribution,
    parse_scores,
    parse_verdict,
    slot_distribution,
    slot_probability,
    slot_to_candidate,
)

log = logging.getLogger(__name__)

RETRYABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError)


class _ServerError(Exception):
    """A 5xx from the judge server: retried, then reported."""

    def __init__(self, resp: httpx.Response) -> None:
        super().__init__(f"HTTP {resp.status_code}: {resp.text[:300]}")
        self.status_code = resp.status_code


def chat_url(base_url: str) -> str:
    """Accept both the OpenAI-style base (``http://host:8000/v1``) and the bare server URL."""
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/chat/completions"


def too_long(error_text: str) -> bool:
    """vLLM's 400 for a prompt longer than the model's context ("Input length (N) exceeds
    model's maximum context length (M)", "The decoder prompt (length N) is longer than the
    maximum model length of M"); a longer ``max_tokens`` alone is clamped, not refused."""
    return "maximum context length" in error_text or "maximum model length" in error_text


def message_text(data: object) -> str:
    """The first choice's text; anything missing or non-text reads as empty output (which then
    parses as a malformed verdict) rather than failing the request."""
    try:
        content = data["choices"][0]["message"]["content"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        message = "judge model answered 200 without choices[0].message"
        raise JudgeUpstreamError(502, message) from None
    return content if isinstance(content, str) else ""


VERDICT_LINES = ("VERDICT: A", "VERDICT: B", "VERDICT: TIE")
# judge.logprobs: how many next tokens' log-probabilities to read (vLLM's default
# --max-logprobs is 20) and the largest scale read as a distribution over its numbers.
TOP_LOGPROBS = 20
MAX_PROBABILITY_SCALE = 10


def score_lines_regex(rubric: Rubric) -> str:
    """One ``SCORE <criterion>: <integer on the rubric's scale>`` line per criterion."""
    values = "|".join(str(v) for v in range(rubric.scale_max, rubric.scale_min - 1, -1))
    return "\n".join(f"SCORE {re.escape(c.name)}: ({values})" for c in rubric.criteria)


class LLMBackend:
    name = "llm"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        http: httpx.AsyncClient,
        max_tokens: int = 512,
        temperature: float = 0.0,
        attempts: int = 3,
        backoff_s: float = 0.25,
        constrained: bool = False,
        logprobs: bool = False,
    ) -> None:
        self.base_url = base_url
        self.url = chat_url(base_url)
        self.model = model
        self.api_key = api_key
        self.http = http
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.constrained = constrained
        self.logprobs = logprobs

    def identity(self) -> dict:
        """What a verdict depends on besides the inputs: part of the cache key."""
        identity: dict[str, object] = {
            "backend": self.name,
            "model": self.model,
            "prompt": PROMPT_VERSION,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        if self.constrained:  # (left out otherwise: free-form verdicts keep their cache keys)
            identity["constrained"] = True
        if self.logprobs:
            identity["logprobs"] = True
        return identity

    def check_rubric(self, rubric: Rubric) -> None:
        """A judge model can read any rubric."""

    async def complete(self, messages: list[dict], structured: dict | None = None) -> str:
        body: dict[str, object] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        if self.constrained and structured is not None:
            body["structured_outputs"] = structured
        data = await self._post(body)
        return "" if data is None else message_text(data)

    async def next_token(self, messages: list[dict], prefix: str,
                         structured: dict | None = None) -> list[tuple[str, float]] | None:
        """The top next tokens (text, probability) after the answer prefilled with ``prefix``;
        None when the prompt does not fit the judge model."""
        body: dict[str, object] = {
            "model": self.model,
            "messages": [*messages, {"role": "assistant", "content": prefix}],
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": True,
            "top_logprobs": TOP_LOGPROBS,
            "continue_final_message": True,
            "add_generation_prompt": False,
        }
        if self.constrained and structured is not None:
            body["structured_outputs"] = structured
        data = await self._post(body)
        if data is None:
            return None
        try:
            top = data["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            return [(str(t["token"]), math.exp(float(t["logprob"]))) for t in top]
        except (KeyError, IndexError, TypeError, ValueError):
            message = (f"judge model at {self.url} answered without choices[0].logprobs "
                       "(does it return logprobs?)")
            raise JudgeUpstreamError(502, message) from None

    async def _post(self, body: dict[str, object]) -> dict | None:
        """POST a chat completion (retrying connection errors and 5xx); its JSON, or None when
        the prompt is longer than the judge model's context."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        retrying = AsyncRetrying(
            retry=retry_if_exception_type((*RETRYABLE, _ServerError)),
            wait=wait_exponential(multiplier=self.backoff_s, max=4.0),
            stop=stop_after_attempt(self.attempts),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    resp = await self.http.post(self.url, json=body, headers=headers)
                    if resp.status_code >= 500:
                        raise _ServerError(resp)
        except _ServerError as err:
            raise JudgeUpstreamError(
                502, f"judge model at {self.url} failed after {self.attempts} attempts: {err}"
            ) from None
        except httpx.TimeoutException as err:
            if isinstance(err, httpx.ConnectTimeout):
                raise JudgeUpstreamError(502, f"judge model at {self.url} unreachable") from None
            message = f"judge model at {self.url} did not answer in time"
            raise JudgeUpstreamError(504, message) from None
        except httpx.HTTPError as err:
            message = f"judge model at {self.url} unreachable: {type(err).__name__}: {err}"
            raise JudgeUpstreamError(502, message) from None
        if resp.status_code == 400 and too_long(resp.text):
            # The judge model cannot read this one request (the story or transcript outgrew its
            # context): no verdict, which the caller scores as malformed, instead of a 502 that
            # would stall every episode holding such a turn.
            log.warning("judge model at %s: prompt longer than its context: %s", self.url,
                        resp.text[:300])
            return None
        if resp.status_code != 200:
            message = (
                f"judge model at {self.url} refused the request (HTTP {resp.status_code}): "
                f"{resp.text[:500]}"
            )
            raise JudgeUpstreamError(502, message)
        try:
            data = resp.json()
        except ValueError:
            raise JudgeUpstreamError(502, f"judge model at {self.url} answered non-JSON") from None
        if not isinstance(data, dict):
            raise JudgeUpstreamError(502, f"judge model at {self.url} answered non-JSON")
        return data

    async def judge_order(
        self, context: str, first: str, second: str, rubric: Rubric, order: str
    ) -> OrderVerdict:
        if self.logprobs:
            return await self._judge_order_by_probability(context, first, second, rubric, order)
        raw = await self.complete(
            pairwise_messages(context, first, second, rubric, reasoning=not self.constrained),
            {"choice": list(VERDICT_LINES)})
        slot = parse_verdict(raw)
        return OrderVerdict(
            order=order,
            raw=raw,
            verdict=slot,
            preferred=slot_to_candidate(slot, order),
            prob_first=slot_probability(slot),
        )

    async def _judge_order_by_probability(
        self, context: str, first: str, second: str, rubric: Rubric, order: str
    ) -> OrderVerdict:
        messages = pairwise_messages(context, first, second, rubric, reasoning=False)
        top = await self.next_token(messages, "VERDICT:", {"choice": [" A", " B", " TIE"]})
        slots = None if top is None else slot_distribution(top)
        if slots is None:
            return OrderVerdict(order=order, raw="", verdict=None, preferred=None)
        slot = max(slots, key=slots.__getitem__)
        return OrderVerdict(
            order=order,
            raw=" ".join(f"P({name})={p:.4f}" for name, p in slots.items()),
            verdict=slot,
            preferred=slot_to_candidate(slot, order),
            prob_first=slots["A"] + 0.5 * slots["TIE"],
        )

    async def score(
        self, context: str, response: str, rubric: Rubric
    ) -> tuple[str, dict[str, float | None]]:
        if self.logprobs and rubric.scale_max <= MAX_PROBABILITY_SCALE:
            return await self._score_by_probability(context, response, rubric)
        raw = await self.complete(
            score_messages(context, response, rubric, reasoning=not self.constrained),
            {"regex": score_lines_regex(rubric)})
        names = [c.name for c in rubric.criteria]
        parsed = parse_scores(raw, names, (rubric.scale_min, rubric.scale_max))
        return raw, {name: parsed.get(name) for name in names}

    async def _score_by_probability(
        self, context: str, response: str, rubric: Rubric
    ) -> tuple[str, dict[str, float | None]]:
        messages = score_messages(context, response, rubric, reasoning=False)
        scale = (rubric.scale_min, rubric.scale_max)
        numbers = "|".join(str(v) for v in range(rubric.scale_max, rubric.scale_min - 1, -1))

        async def one(name: str) -> float | None:
            prefix = f"SCORE {name}: "
            top = await self.next_token(messages, prefix, {"regex": f"({numbers})"})
            if top is None:
                return None
            first = number_distribution(top)
            ten_after_one = None
            if rubric.scale_max >= 10 and rubric.scale_min <= 1 and first.get(1, 0.0) > 0.0:
                after = await self.next_token(messages, prefix + "1", {"regex": "0?"})
                ten_after_one = 0.0 if after is None else number_distribution(after).get(0, 0.0)
            return expected_score(first, ten_after_one, scale)

        names = [c.name for c in rubric.criteria]
        values = await asyncio.gather(*(one(name) for name in names))
        scores = {name: None if v is None else round(v, 4)
                  for name, v in zip(names, values, strict=True)}
        raw = "\n".join(f"SCORE {name}: {'?' if v is None else v}" for name, v in scores.items())
        return raw, scores
