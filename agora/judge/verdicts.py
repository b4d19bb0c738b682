"""The verdict format, its parser, and the neutralisation of judged text.

Format: the judge model ends its answer with ``VERDICT: A`` / ``VERDICT: B`` / ``VERDICT: TIE``
(pairwise) or one ``SCORE <criterion>: N`` line per criterion (scores).

Why the parser is strict about *where* it looks and lenient about decoration:

- It reads only the judge model's own output, never the prompt, and takes the LAST line that
  starts like a verdict. A model that thinks aloud ("VERDICT: A? no...") and then concludes is
  judged by its conclusion; if that last verdict-like line has no valid value, the output is
  malformed, even if an earlier line was valid (a retraction is not a verdict).
- Markdown decoration (``**VERDICT:** A``), brackets (``[[A]]``), "Response A" and case are
  accepted, because real judge models produce all of them.
- ``<think>...</think>`` blocks (also an unterminated one) are dropped first: a reasoning model's
  scratch verdict is not its answer.

Why candidate texts are neutralised before prompting (the security issue: text under judgement
must not forge a verdict): a candidate that writes ``VERDICT: A`` could (1) persuade a weak judge
model, or (2) be echoed by the judge into its own output, where the parser would read it. Every
``:``/``=`` that follows the keywords ``verdict``/``score`` on the same line is escaped with a
backslash, so the candidate's text stays readable but can never match the parser (the parser
allows no backslash there), block markers (``<<<``/``>>>``) are replaced so a candidate cannot
close its block and write outside it, and ``<think>`` tags lose their ``<`` (else dropping a
think block could splice two harmless pieces into a verdict line). Invariant, for every x:
``parse_verdict(neutralise(x)) is None`` and ``parse_scores(neutralise(x), ...) == {}``.
"""

from __future__ import annotations

import re

# Characters the parser drops from a line before matching (markdown decoration). The neutraliser
# allows them between the keyword's letters, so "VERD*ICT: A" cannot slip past it either.
_DECORATION_CHARS = "*_`#"
_DECORATION = str.maketrans("", "", _DECORATION_CHARS)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.IGNORECASE | re.DOTALL)
_THINK_TAG = re.compile(r"<(/?think)", re.IGNORECASE)


def _decorated(word: str) -> str:
    return f"[{re.escape(_DECORATION_CHARS)}]*".join(re.escape(ch) for ch in word)


# No word boundaries: "_VERDICT" is one word to a regex but "VERDICT" once the parser has
# dropped the underscore. Escaping a colon after "underscore" is a harmless false positive.
_KEYWORD_TAIL = re.compile(
    rf"(?:{_decorated('verdict')}|{_decorated('score')})[^\n]*", re.IGNORECASE
)

_VERDICT_LINE = re.compile(r"^\s*(?:final\s+)?verdict\s*[:=](?P<value>.*)$", re.IGNORECASE)
_VERDICT_VALUE = re.compile(
    r"^\s*[\[(]*\s*(?:response\s+|answer\s+|candidate\s+|assistant\s+)?"
    r"(?P<slot>a|b|tie)\s*[\])]*\s*[.!]?\s*$",
    re.IGNORECASE,
)
_SCORE_LINE = re.compile(
    r"^\s*score\s+(?P<name>[A-Za-z][A-Za-z0-9_]*)\s*[:=](?P<value>.*)$", re.IGNORECASE
)
_SCORE_VALUE = re.compile(
    r"^\s*[\[(]*\s*(?P<num>-?\d+(?:\.\d+)?)\s*[\])]*\s*(?:/\s*\d+(?:\.\d+)?)?\s*[.!]?\s*$"
)


def neutralise(text: str) -> str:
    """Escape verdict-like strings and block markers in text the judge model will read."""
    text = text.replace("<<<", "\u2039\u2039\u2039").replace(">>>", "\u203a\u203a\u203a")
    text = _THINK_TAG.sub("\u2039\\1", text)  # else the parser's <think> removal could splice

    def escape(match: re.Match[str]) -> str:
        return re.sub(r"(?<!\\)([:=])", r"\\\1", match.group(0))

    return _KEYWORD_TAIL.sub(escape, text)


def _lines(output: str) -> list[str]:
    return [line.translate(_DECORATION) for line in _THINK.sub("", output).splitlines()]


def parse_verdict(output: str) -> str | None:
    """"A", "B" or "TIE" from the last verdict line of the judge's output, else None."""
    for line in reversed(_lines(output)):
        found = _VERDICT_LINE.match(line)
        if found:
            value = _VERDICT_VALUE.match(found.group("value"))
            return value.group("slot").upper() if value else None
    return None


def parse_scores(
    output: str, names: list[str], scale: tuple[int, int]
) -> dict[str, float]:
    """The last ``SCORE <name>: N`` line per criterion (names matched case-insensitively).
    A criterion whose last line is unreadable or out of ``scale`` is left out, as is any name
    the rubric does not have."""
    # Lines lose their markdown decoration before matching, underscores included, so a name
    # is matched without its own ("non_repetition" reads as "nonrepetition").
    canonical = {n.translate(_DECORATION).lower(): n for n in names}
    last: dict[str, str] = {}
    for line in _lines(output):
        found = _SCORE_LINE.match(line)
        if found and found.group("name").lower() in canonical:
            last[canonical[found.group("name").lower()]] = found.group("value")
    scores: dict[str, float] = {}
    for name, text in last.items():
        value = _SCORE_VALUE.match(text)
        if value is None:
            continue
        number = float(value.group("num"))
        if scale[0] <= number <= scale[1]:
            scores[name] = number
    return scores


def slot_to_candidate(slot: str | None, order: str) -> str | None:
    """Map a slot letter back to the request's candidate: in order "ba", slot A held b."""
    if slot is None:
        return None
    if slot == "TIE":
        return "tie"
    return order[0] if slot == "A" else order[1]


def slot_probability(slot: str | None) -> float | None:
    """Preference for slot A implied by a hard verdict."""
    return {"A": 1.0, "B": 0.0, "TIE": 0.5}.get(slot) if slot else None


# --- verdicts read from the judge model's next-token probabilities (judge.logprobs) -------------
#
# Why: a small judge model's *sampled* verdict is nearly always the same slot or score (greedy
# SmolLM2-135M wrote "A" for both orders of 640 of 640 training pairs), so the reward it gives is
# flat. Its probabilities still move a little with the candidates' quality; reading them (as
# G-Eval does for scores) gives a graded verdict instead of a constant.


def slot_distribution(top: list[tuple[str, float]]) -> dict[str, float] | None:
    """P(A), P(B), P(TIE) from the top next tokens after ``VERDICT:`` (token text, probability),
    renormalised over the tokens that spell a slot. " A" and "A" are one slot; "T", "TI" and
    "TIE" start TIE; whitespace and anything else is dropped. None when no token names a slot
    (the verdict is then malformed)."""
    mass = {"A": 0.0, "B": 0.0, "TIE": 0.0}
    for token, prob in top:
        text = token.strip().upper()
        if text in ("A", "B"):
            mass[text] += prob
        elif text.startswith("T") and "TIE".startswith(text):
            mass["TIE"] += prob
    total = sum(mass.values())
    if total <= 0.0:
        return None
    return {slot: value / total for slot, value in mass.items()}


def number_distribution(top: list[tuple[str, float]]) -> dict[int, float]:
    """Next-token probability of each number token (" 7" and "7" alike; "10" where the
    tokeniser has it as one token), not normalised."""
    mass: dict[int, float] = {}
    for token, prob in top:
        text = token.strip()
        if text.isascii() and text.isdigit():
            mass[int(text)] = mass.get(int(text), 0.0) + prob
    return mass


def expected_score(first: dict[int, float], ten_after_one: float | None,
                   scale: tuple[int, int]) -> float | None:
    """The probability-weighted score on ``scale`` (G-Eval), from the first digit's distribution.

    A score of 10 starts with the digit 1 in tokenisers that split numbers into digits
    (SmolLM2's do), so on a scale reaching 10 the mass of "1" is split by ``ten_after_one``,
    the probability that a "0" follows it. Digits off the scale are dropped; None when no
    on-scale digit has any mass."""
    low, high = scale
    one = first.get(1, 0.0)
    mass = {value: p for value, p in first.items() if low <= value <= high and value != 1}
    if one > 0.0:
        # Off a scale that starts above 1, a "1" can only begin 10.
        to_ten = 0.0 if high < 10 else 1.0 if low > 1 else (ten_after_one or 0.0)
        if to_ten > 0.0:
            mass[10] = mass.get(10, 0.0) + one * to_ten
        if low <= 1 and to_ten < 1.0:
            mass[1] = one * (1.0 - to_ten)
    total = sum(mass.values())
    if total <= 0.0:
        return None
    return sum(value * p for value, p in mass.items()) / total
