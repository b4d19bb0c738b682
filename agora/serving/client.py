"""Client for the policy server, which is vLLM's own OpenAI server (never our code).

Rollouts call ``/v1/completions`` with a token-id prompt that we render ourselves (chat template
+ the assistant prefill, e.g. ``[``), asking for ``return_token_ids`` and per-token logprobs. Why
token ids and not the chat endpoint: the trainer must score exactly the tokens vLLM sampled,
and rendering the prompt here (with the same tokenizer the trainer uses) makes the prompt ids a
fact we control rather than a server-side detail. Turns whose messages carry images (a
vision-language agent, docs/vlm.md) go to ``/v1/chat/completions`` instead, the one vLLM route
that takes images: the server renders the template and expands each image to its placeholder
tokens, and returns those prompt ids (``return_token_ids``), which the learner then scores with
the same images.

Connection failures are retried with exponential backoff (tenacity): a policy server that is
restarting or hot-swapping should delay an episode, not lose it. A restarted server knows no
adapters until the trainer loads them again (agora/serving/adapter_keeper.py), so a client made
with ``adapter_wait_s`` also waits that long on "model does not exist" (404). Anything else
(other 4xx, 5xx) raises at once.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

import httpx
from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from agora.config.agents import SamplingConfig
from agora.envs.base import ChatMessage
from agora.envs.images import image_urls
from agora.serving.auth import vllm_headers
from agora.serving.requests import chat_request, completion_request

RETRYABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError)


class PolicyServerError(RuntimeError):
    """The policy server answered, but with an error (bad adapter name, bad request)."""


class PolicyUnavailable(RuntimeError):
    """The policy server could not be reached within the retry budget."""


class AdapterMissing(PolicyServerError):
    """The server answered 404 for the adapter name: not loaded (yet, or again after a restart)."""


def _is_missing_model(resp: httpx.Response) -> bool:
    return resp.status_code == 404 and "does not exist" in resp.text


_TOKENIZER_LOCK = threading.Lock()


@functools.lru_cache(maxsize=8)
def _load_tokenizer(model_path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


def load_tokenizer(model_path: str):
    """Cached per path. Locked because transformers' lazy imports are not thread-safe: the
    first concurrent calls from a threaded Celery pool raised ImportError for AutoTokenizer."""
    with _TOKENIZER_LOCK:
        return _load_tokenizer(model_path)


def render_prompt(tokenizer, messages: list[ChatMessage], prefill: str = "") -> list[int]:
    """Chat template + generation prompt + prefill, as token ids (no extra BOS: the template
    already starts with its own special tokens)."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text + prefill, add_special_tokens=False)


@dataclass
class Generation:
    text: str
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None
    # The images of the prompt, in order (data URLs): the learner needs them with the ids.
    images: list[str] = field(default_factory=list)


def _parse_chat(data: dict, images: list[str]) -> Generation:
    """A chat completion asked with ``return_token_ids`` and ``logprobs``: the prompt ids
    (image placeholders expanded) are top-level, the completion's on the choice."""
    choice = data["choices"][0]
    content = (choice.get("logprobs") or {}).get("content") or []
    token_logprobs = [float(entry["logprob"]) for entry in content]
    completion_ids = list(choice.get("token_ids") or [])
    prompt_ids = list(data.get("prompt_token_ids") or [])
    if len(token_logprobs) != len(completion_ids) or not prompt_ids:
        raise PolicyServerError(
            f"policy server returned {len(completion_ids)} tokens, {len(token_logprobs)} "
            f"logprobs and {len(prompt_ids)} prompt ids for a chat turn; is it vLLM with "
            "return_token_ids support?")
    return Generation(
        text=(choice.get("message") or {}).get("content") or "",
        prompt_token_ids=prompt_ids,
        completion_token_ids=completion_ids,
        logprobs=token_logprobs,
        finish_reason=choice.get("finish_reason"),
        images=images,
    )


def _parse_completion(data: dict, prompt_ids: list[int]) -> Generation:
    choice = data["choices"][0]
    logprobs = choice.get("logprobs") or {}
    token_logprobs = [float(x) for x in (logprobs.get("token_logprobs") or [])]
    completion_ids = list(choice.get("token_ids") or [])
    if len(token_logprobs) != len(completion_ids):
        raise PolicyServerError(
            f"policy server returned {len(completion_ids)} tokens but {len(token_logprobs)} "
            "logprobs; is it vLLM with return_token_ids support?"
        )
    return Generation(
        text=choice.get("text", ""),
        prompt_token_ids=list(choice.get("prompt_token_ids") or prompt_ids),
        completion_token_ids=completion_ids,
        logprobs=token_logprobs,
        finish_reason=choice.get("finish_reason"),
    )


class PolicyClient:
    """One agent's view of its policy server: base URL + the adapter name to ask for."""

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer,
        sampling: SamplingConfig,
        *,
        timeout_s: float = 120.0,
        retry_for_s: float = 120.0,
        adapter_wait_s: float = 0.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.timeout_s = timeout_s
        self.retry_for_s = retry_for_s
        # 0 (the default) fails at once on an unknown adapter name (evaluation, a typo);
        # rollout workers wait, since the name was valid until the server restarted.
        self.adapter_wait_s = adapter_wait_s
        self._http = http

    async def generate(
        self, messages: list[ChatMessage], prefill: str = "", choices: list[str] | None = None
    ) -> Generation:
        """One completion; with ``choices``, exactly one of them (see ``completion_request``)."""
        images = image_urls(messages)
        if images:
            body = chat_request(self.model, messages, self.sampling, prefill, choices)
            body.update(logprobs=True, top_logprobs=0, return_token_ids=True)
            path = "/v1/chat/completions"
        else:
            prompt_ids = render_prompt(self.tokenizer, messages, prefill)
            body = completion_request(self.model, prompt_ids, self.sampling, choices)
            path = "/v1/completions"
        if self.adapter_wait_s > 0:
            waiting = AsyncRetrying(
                retry=retry_if_exception_type(AdapterMissing),
                wait=wait_exponential(multiplier=0.25, max=2),
                stop=stop_after_delay(self.adapter_wait_s),
                reraise=True,
            )
            async for attempt in waiting:
                with attempt:
                    data = await self._post(path, body)
        else:
            data = await self._post(path, body)
        return _parse_chat(data, images) if images else _parse_completion(data, prompt_ids)

    async def _post(self, path: str, body: dict) -> dict:
        own = self._http is None
        http = self._http or httpx.AsyncClient(timeout=self.timeout_s)
        try:
            retrying = AsyncRetrying(
                retry=retry_if_exception_type(RETRYABLE),
                wait=wait_exponential(multiplier=0.5, max=10),
                stop=stop_after_delay(self.retry_for_s),
                reraise=True,
            )
            try:
                async for attempt in retrying:
                    with attempt:
                        resp = await http.post(self.base_url + path, json=body,
                                               headers=vllm_headers())
            except RETRYABLE as err:
                msg = f"policy server {self.base_url} unreachable: {err}"
                raise PolicyUnavailable(msg) from err
        finally:
            if own:
                await http.aclose()
        if resp.status_code != 200:
            error = AdapterMissing if _is_missing_model(resp) else PolicyServerError
            raise error(f"{path} -> HTTP {resp.status_code}: {resp.text[:500]}")
        return resp.json()


class PolicyAdmin:
    """The trainer's side of the contract: runtime LoRA loading (vLLM's own API)."""

    def __init__(self, base_url: str, timeout_s: float = 120.0, retry_for_s: float = 60.0):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.retry_for_s = retry_for_s

    def _post(self, path: str, body: dict) -> httpx.Response:
        for attempt in Retrying(
            retry=retry_if_exception_type(RETRYABLE),
            wait=wait_exponential(multiplier=0.5, max=10),
            stop=stop_after_delay(self.retry_for_s),
            reraise=True,
        ):
            with attempt:
                return httpx.post(self.base_url + path, json=body, timeout=self.timeout_s,
                                  headers=vllm_headers())
        raise AssertionError("unreachable")

    def load_adapter(self, name: str, path: str) -> None:
        """Load or hot-swap adapter ``name`` from ``path``.

        ``load_inplace`` replaces the weights under the same name, so requests keep using the
        name and nothing has to be unloaded; requests already running finish on the old weights.
        """
        resp = self._post(
            "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path, "load_inplace": True}
        )
        if resp.status_code != 200:
            raise PolicyServerError(f"load_lora_adapter({name}) -> {resp.status_code}: {resp.text}")

    def reload_weights(self) -> None:
        """A full-weight server re-reads its model folder (vLLM's ``/collective_rpc
        reload_weights``, development mode), then forgets the prefix-cache blocks the old
        weights computed (``/reset_prefix_cache``): a cached prompt must not be served with
        keys and values of the previous version."""
        resp = self._post("/collective_rpc", {"method": "reload_weights"})
        if resp.status_code != 200:
            raise PolicyServerError(f"reload_weights -> {resp.status_code}: {resp.text} (is "
                                    "the server in development mode, VLLM_SERVER_DEV_MODE=1?)")
        resp = self._post("/reset_prefix_cache", {})
        if resp.status_code != 200:
            raise PolicyServerError(f"reset_prefix_cache -> {resp.status_code}: {resp.text}")

    def unload_adapter(self, name: str) -> None:
        resp = self._post("/v1/unload_lora_adapter", {"lora_name": name})
        if resp.status_code != 200:
            raise PolicyServerError(
                f"unload_lora_adapter({name}) -> {resp.status_code}: {resp.text}")

    def models(self, timeout_s: float | None = None) -> list[str]:
        resp = httpx.get(self.base_url + "/v1/models", timeout=timeout_s or self.timeout_s,
                         headers=vllm_headers())
        resp.raise_for_status()
        return [m["id"] for m in resp.json()["data"]]

    def healthy(self) -> bool:
        try:
            return httpx.get(self.base_url + "/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False
