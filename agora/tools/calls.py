"""Tool calls in model text, and the results fed back.

The syntax, chosen to be learnable by a 135M model and unambiguous to parse:

    <tool>calculator: 12*7</tool>          one call: a tool name, a colon, its argument text
    <result>84</result>                    what the env feeds back, as the next (user) message

Only the environment writes ``<result>`` blocks. A model that writes one itself (to claim a
tool said something it did not) gets it cut out of its text before anything reads it: the
forged block never reaches the transcript, the answer or the metrics, and it is counted. The
chat template's special tokens (``<|im_start|>`` ...) are cut too, since a model could use
them to fake a whole user turn holding a result. Tool outputs are scrubbed the same way, so
``print("</result>...")`` in the python tool cannot close the real block early.

Malformed calls (an unclosed ``<tool>``, no ``name:``, a stray ``</tool>``) are returned as
calls with a ``problem``: the env answers them with an error result and counts them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agora.tools.registry import NAME_PATTERN, ToolResult

OPEN, CLOSE = "<tool>", "</tool>"
_BODY = re.compile(rf"\s*({NAME_PATTERN})\s*:\s*(.*?)\s*", re.DOTALL)
# A forged result: an opening tag up to its closing tag, or to the end of the text if unclosed.
_RESULT_BLOCK = re.compile(r"<\s*result\b[^>]*>.*?(?:<\s*/\s*result\s*>|\Z)",
                           re.IGNORECASE | re.DOTALL)
_RESULT_TAG = re.compile(r"<\s*/?\s*result\b[^>]*>", re.IGNORECASE)
_SPECIAL_TOKEN = re.compile(r"<\|[^|<>]{1,40}\|>")


@dataclass(frozen=True)
class ParsedCall:
    """One ``<tool>...</tool>`` in the text; ``problem`` is non-empty for a malformed one."""

    name: str
    args: str
    raw: str
    problem: str = ""

    @property
    def malformed(self) -> bool:
        return bool(self.problem)


@dataclass
class ParsedText:
    """A model's text with forged results removed, and the calls found in it."""

    clean: str
    calls: list[ParsedCall] = field(default_factory=list)
    forged_results: int = 0


def scrub(text: str) -> tuple[str, int]:
    """``text`` without result blocks/tags and special tokens; how many results were forged."""
    forged = len(_RESULT_BLOCK.findall(text))
    text = _RESULT_BLOCK.sub("", text)
    forged += len(_RESULT_TAG.findall(text))  # a stray closing tag is a forgery attempt too
    text = _RESULT_TAG.sub("", text)
    return _SPECIAL_TOKEN.sub("", text), forged


def parse_tool_calls(text: str) -> ParsedText:
    """Find every tool call in the model's text (after scrubbing forged results)."""
    clean, forged = scrub(text)
    lower = clean.lower()
    calls: list[ParsedCall] = []
    pos = 0
    while (start := lower.find(OPEN, pos)) >= 0:
        end = lower.find(CLOSE, start + len(OPEN))
        next_open = lower.find(OPEN, start + len(OPEN))
        if end < 0 or 0 <= next_open < end:
            stop = next_open if next_open >= 0 else len(clean)
            calls.append(ParsedCall("", "", clean[start:stop],
                                    f"unclosed {OPEN}: end each call with {CLOSE}"))
            pos = stop
            continue
        body = clean[start + len(OPEN):end]
        match = _BODY.fullmatch(body)
        raw = clean[start:end + len(CLOSE)]
        if match is None:
            calls.append(ParsedCall("", "", raw, f"expected {OPEN}name: arguments{CLOSE}"))
        else:
            calls.append(ParsedCall(match[1], match[2], raw))
        pos = end + len(CLOSE)
    opened = lower.count(OPEN)
    closed = lower.count(CLOSE)
    for _ in range(max(0, closed - opened)):
        calls.append(ParsedCall("", "", CLOSE, f"{CLOSE} without {OPEN}"))
    return ParsedText(clean, calls, forged)


def format_results(results: list[ToolResult]) -> str:
    """The message fed back: one ``<result>`` block per call, in call order."""
    return "\n".join(f"<result>{scrub(r.output)[0]}</result>" for r in results)
