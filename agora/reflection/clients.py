"""Who writes the texts: the oracle over any OpenAI-compatible chat endpoint, the actor and the
critic over the policy server (vLLM, one LoRA adapter each), and the answer checker.

Why two clients: the actor and critic go through ``PolicyClient`` (prompt rendered here with the
policy's own tokenizer, exactly the tokens the adapters were trained on); the oracle may be a
remote model whose tokenizer we do not have, so it gets the chat API and renders its own
template. Connection failures are retried with backoff (tenacity), anything else raises.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential

from agora.data import Task
from agora.envs.base import ChatMessage
from agora.rewards.verifiers.math import verify_math
from agora.serving.client import RETRYABLE, PolicyClient, PolicyServerError, PolicyUnavailable


class ChatClient:
    """``POST {base_url}/chat/completions`` with ``n`` samples per request."""

    def __init__(self, base_url: str, model: str, http: httpx.AsyncClient, *,
                 api_key: str | None = None, retry_for_s: float = 120.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.http = http
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.retry_for_s = retry_for_s

    async def sample(self, messages: list[ChatMessage], n: int, temperature: float,
                     max_tokens: int) -> list[str]:
        """``n`` completions; endpoints that ignore ``n`` (some hosted APIs return one choice)
        are asked again, one completion per request, for the rest."""
        texts = await self._request(messages, n, temperature, max_tokens)
        while len(texts) < n:
            texts += await self._request(messages, 1, temperature, max_tokens)
        return texts[:n]

    async def _request(self, messages: list[ChatMessage], n: int, temperature: float,
                       max_tokens: int) -> list[str]:
        body = {"model": self.model, "messages": messages, "n": n,
                "temperature": temperature, "max_tokens": max_tokens}
        url = self.base_url + "/chat/completions"
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(RETRYABLE), reraise=True,
                wait=wait_exponential(multiplier=0.5, max=10),
                stop=stop_after_delay(self.retry_for_s),
            ):
                with attempt:
                    resp = await self.http.post(url, json=body, headers=self.headers)
        except RETRYABLE as err:
            raise PolicyUnavailable(f"oracle endpoint {self.base_url} unreachable: {err}") from err
        if resp.status_code != 200:
            raise PolicyServerError(f"oracle {url} -> HTTP {resp.status_code}: {resp.text[:300]}")
        choices = resp.json().get("choices") or []
        if not choices:
            raise PolicyServerError(f"oracle {url} returned no choices: {resp.text[:300]}")
        return [(c.get("message") or {}).get("content") or "" for c in choices]


def oracle_api_key(env_name: str | None) -> str | None:
    """The key is read from the environment variable the config names, never from the YAML."""
    if env_name is None:
        return None
    key = os.environ.get(env_name)
    if not key:
        raise ValueError(f"oracle.api_key_env: environment variable {env_name} is not set")
    return key


@dataclass
class Agents:
    """The actor and the critic as served adapters (both 'base' for the untrained stage)."""

    actor: PolicyClient
    critic: PolicyClient


async def generate(client: PolicyClient, messages: list[ChatMessage]) -> str:
    return (await client.generate(messages)).text


@dataclass
class Checked:
    extracted: str | None
    correct: bool


async def check(text: str, task: Task) -> Checked:
    """The task's own verifier (reasoning-gym's scorer, else math-verify), off the event loop
    because math-verify may take a worker process round trip."""
    verdict = await asyncio.to_thread(verify_math, text, task)
    return Checked(verdict.extracted, verdict.correct)
