"""The code-debugging problems: a spec, a signature, a reference solution, a known-buggy one
and hidden tests each.

Two sets, so that evaluation asks about bugs training never showed: training episodes (and
warm starts) play ``TRAINING_PROBLEMS``, evaluation episodes (the seeds of
agora.evaluation.seeds) ``HELD_OUT_PROBLEMS``, unless ``code_debug.eval_problems: training``.
With one set, as before 2026-12-07, "solved after training" measured the eight functions the
fixer had practised on. Every known bug is plausible (it passes some hidden tests, not all) and
every test name starts with ``test_<problem_id>``, so all problems can share one sandbox run
(tests/integration/test_code_debug.py checks both in the real sandbox).

Nine held-out problems, not eight: evaluation episode ``i`` plays held-out problem ``i mod 9``
and a switching author's strategy ``i mod 2`` (agora.evaluation.context_envs), and with a
problem count prime to the strategy count every problem meets every strategy (with eight, the
bug-planting author would only ever have met half of them).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    """A spec, its signature, a reference solution, a known-buggy one and hidden tests.

    ``preamble`` (imports such as ``from typing import List``) runs before any code for the
    problem, the author's and the fixer's, and is not shown: as HumanEval runs a completion
    after its prompt, so a fixer that leaves out an import its signature needs is not failed
    for that."""

    problem_id: str
    spec: str
    signature: str
    solution: str
    buggy: str
    tests: str
    preamble: str = ""

    @property
    def func_name(self) -> str:
        return self.signature.removeprefix("def ").split("(")[0].strip()

    def program(self, code: str) -> str:
        """The program the sandbox runs for ``code`` written for this problem."""
        return f"{self.preamble}\n{code}" if self.preamble else code


TRAINING_PROBLEMS: tuple[Problem, ...] = (
    Problem(
        "sum_evens",
        "Return the sum of the even numbers in the list nums.",
        "def sum_evens(nums: list[int]) -> int:",
        "def sum_evens(nums: list[int]) -> int:\n"
        "    return sum(n for n in nums if n % 2 == 0)\n",
        "def sum_evens(nums: list[int]) -> int:\n"
        "    total = 0\n"
        "    for n in nums[1:]:\n"
        "        if n % 2 == 0:\n"
        "            total += n\n"
        "    return total\n",
        "def test_sum_evens_mixed():\n    assert sum_evens([1, 2, 3, 4]) == 6\n\n"
        "def test_sum_evens_first_even():\n    assert sum_evens([2, 3, 4]) == 6\n\n"
        "def test_sum_evens_empty():\n    assert sum_evens([]) == 0\n\n"
        "def test_sum_evens_negative():\n    assert sum_evens([-4, 1, 7]) == -4\n",
    ),
    Problem(
        "reverse_words",
        "Return the words of s in reverse order, joined by single spaces. Words are separated "
        "by any amount of whitespace.",
        "def reverse_words(s: str) -> str:",
        "def reverse_words(s: str) -> str:\n"
        "    return ' '.join(reversed(s.split()))\n",
        "def reverse_words(s: str) -> str:\n"
        "    return ' '.join(reversed(s.split(' ')))\n",
        "def test_reverse_words_simple():\n"
        "    assert reverse_words('hello world') == 'world hello'\n\n"
        "def test_reverse_words_double_space():\n    assert reverse_words('a  b') == 'b a'\n\n"
        "def test_reverse_words_one():\n    assert reverse_words('one') == 'one'\n\n"
        "def test_reverse_words_padded():\n    assert reverse_words('  x y ') == 'y x'\n\n"
        "def test_reverse_words_empty():\n    assert reverse_words('') == ''\n",
    ),
    Problem(
        "is_palindrome",
        "Return True if s reads the same backwards, ignoring case and every character that is "
        "not a letter or digit.",
        "def is_palindrome(s: str) -> bool:",
        "def is_palindrome(s: str) -> bool:\n"
        "    chars = [c.lower() for c in s if c.isalnum()]\n"
        "    return chars == chars[::-1]\n",
        "def is_palindrome(s: str) -> bool:\n"
        "    chars = [c for c in s if c.isalnum()]\n"
        "    return chars == chars[::-1]\n",
        "def test_is_palindrome_word():\n    assert is_palindrome('racecar') is True\n\n"
        "def test_is_palindrome_sentence():\n"
        "    assert is_palindrome('A man, a plan, a canal: Panama') is True\n\n"
        "def test_is_palindrome_no():\n    assert is_palindrome('hello') is False\n\n"
        "def test_is_palindrome_case():\n    assert is_palindrome('Noon') is True\n\n"
        "def test_is_palindrome_empty():\n    assert is_palindrome('') is True\n",
    ),
    Problem(
        "fizzbuzz",
        "Return a list of strings for the numbers 1 to n: 'Fizz' for multiples of 3, 'Buzz' "
        "for multiples of 5, 'FizzBuzz' for multiples of both, otherwise the number itself.",
        "def fizzbuzz(n: int) -> list[str]:",
        "def fizzbuzz(n: int) -> list[str]:\n"
        "    out = []\n"
        "    for i in range(1, n + 1):\n"
        "        if i % 15 == 0:\n"
        "            out.append('FizzBuzz')\n"
        "        elif i % 3 == 0:\n"
        "            out.append('Fizz')\n"
        "        elif i % 5 == 0:\n"
        "            out.append('Buzz')\n"
        "        else:\n"
        "            out.append(str(i))\n"
        "    return out\n",
        "def fizzbuzz(n: int) -> list[str]:\n"
        "    out = []\n"
        "    for i in range(1, n + 1):\n"
        "        if i % 3 == 0:\n"
        "            out.append('Fizz')\n"
        "        elif i % 5 == 0:\n"
        "            out.append('Buzz')\n"
        "        elif i % 15 == 0:\n"
        "            out.append('FizzBuzz')\n"
        "        else:\n"
        "            out.append(str(i))\n"
        "    return out\n",
        "def test_fizzbuzz_five():\n"
        "    assert fizzbuzz(5) == ['1', '2', 'Fizz', '4', 'Buzz']\n\n"
        "def test_fizzbuzz_fifteen():\n    assert fizzbuzz(15)[-1] == 'FizzBuzz'\n\n"
        "def test_fizzbuzz_zero():\n    assert fizzbuzz(0) == []\n\n"
        "def test_fizzbuzz_thirty():\n"
        "    out = fizzbuzz(30)\n"
        "    assert len(out) == 30 and out[29] == 'FizzBuzz' and out[9] == 'Buzz'\n",
    ),
    Problem(
        "max_subarray",
        "Return the largest sum of a non-empty contiguous part of the list nums "
        "(nums is never empty).",
        "def max_subarray(nums: list[int]) -> int:",
        "def max_subarray(nums: list[int]) -> int:\n"
        "    best = cur = nums[0]\n"
        "    for x in nums[1:]:\n"
        "        cur = max(x, cur + x)\n"
        "        best = max(best, cur)\n"
        "    return best\n",
        "def max_subarray(nums: list[int]) -> int:\n"
        "    best = cur = 0\n"
        "    for x in nums:\n"
        "        cur = max(0, cur + x)\n"
        "        best = max(best, cur)\n"
        "    return best\n",
        "def test_max_subarray_classic():\n"
        "    assert max_subarray([-2, 1, -3, 4, -1, 2, 1, -5, 4]) == 6\n\n"
        "def test_max_subarray_all_negative():\n    assert max_subarray([-3, -1, -2]) == -1\n\n"
        "def test_max_subarray_single():\n    assert max_subarray([5]) == 5\n\n"
        "def test_max_subarray_single_negative():\n    assert max_subarray([-7]) == -7\n\n"
        "def test_max_subarray_dip():\n    assert max_subarray([2, -1, 2]) == 3\n",
    ),
    Problem(
        "count_vowels",
        "Return how many vowels (a, e, i, o, u, in upper or lower case) the string s contains.",
        "def count_vowels(s: str) -> int:",
        "def count_vowels(s: str) -> int:\n"
        "    return sum(1 for c in s.lower() if c in 'aeiou')\n",
        "def count_vowels(s: str) -> int:\n"
        "    return sum(1 for c in s.lower() if c in 'aeio')\n",
        "def test_count_vowels_hello():\n    assert count_vowels('hello') == 2\n\n"
        "def test_count_vowels_upper():\n    assert count_vowels('HELLO') == 2\n\n"
        "def test_count_vowels_queue():\n    assert count_vowels('queue') == 4\n\n"
        "def test_count_vowels_empty():\n    assert count_vowels('') == 0\n\n"
        "def test_count_vowels_ultra():\n    assert count_vowels('Ultra') == 2\n",
    ),
    Problem(
        "second_largest",
        "Return the second largest distinct value in the list nums, or None if nums has fewer "
        "than two distinct values.",
        "def second_largest(nums: list[int]) -> int | None:",
        "def second_largest(nums: list[int]) -> int | None:\n"
        "    distinct = sorted(set(nums))\n"
        "    return distinct[-2] if len(distinct) >= 2 else None\n",
        "def second_largest(nums: list[int]) -> int | None:\n"
        "    if len(nums) < 2:\n"
        "        return None\n"
        "    return sorted(nums)[-2]\n",
        "def test_second_largest_simple():\n    assert second_largest([3, 1, 2]) == 2\n\n"
        "def test_second_largest_duplicate_max():\n    assert second_largest([5, 5, 4]) == 4\n\n"
        "def test_second_largest_single():\n    assert second_largest([7]) is None\n\n"
        "def test_second_largest_all_same():\n    assert second_largest([2, 2]) is None\n\n"
        "def test_second_largest_negative():\n    assert second_largest([-1, -5, -3]) == -3\n",
    ),
    Problem(
        "binary_search",
        "nums is sorted in increasing order with no duplicates. Return the index of target in "
        "nums, or -1 if it is not there.",
        "def binary_search(nums: list[int], target: int) -> int:",
        "def binary_search(nums: list[int], target: int) -> int:\n"
        "    lo, hi = 0, len(nums) - 1\n"
        "    while lo <= hi:\n"
        "        mid = (lo + hi) // 2\n"
        "        if nums[mid] == target:\n"
        "            return mid\n"
        "        if nums[mid] < target:\n"
        "            lo = mid + 1\n"
        "        else:\n"
        "            hi = mid - 1\n"
        "    return -1\n",
        "def binary_search(nums: list[int], target: int) -> int:\n"
        "    lo, hi = 0, len(nums) - 1\n"
        "    while lo < hi:\n"
        "        mid = (lo + hi) // 2\n"
        "        if nums[mid] == target:\n"
        "            return mid\n"
        "        if nums[mid] < target:\n"
        "            lo = mid + 1\n"
        "        else:\n"
        "            hi = mid - 1\n"
        "    return -1\n",
        "def test_binary_search_middle():\n"
        "    assert binary_search([1, 3, 5, 7, 9], 7) == 3\n\n"
        "def test_binary_search_missing():\n"
        "    assert binary_search([1, 3, 5, 7, 9], 4) == -1\n\n"
        "def test_binary_search_single():\n    assert binary_search([5], 5) == 0\n\n"
        "def test_binary_search_last():\n"
        "    assert binary_search([1, 3, 5, 7, 9], 9) == 4\n\n"
        "def test_binary_search_empty():\n    assert binary_search([], 1) == -1\n",
    ),
)
HELD_OUT_PROBLEMS: tuple[Problem, ...] = (
    Problem(
        "running_max",
        "Return a list whose i-th item is the largest of nums[0], ..., nums[i].",
        "def running_max(nums: list[int]) -> list[int]:",
        "def running_max(nums: list[int]) -> list[int]:\n"
        "    out = []\n"
        "    for x in nums:\n"
        "        out.append(x if not out else max(out[-1], x))\n"
        "    return out\n",
        "def running_max(nums: list[int]) -> list[int]:\n"
        "    out = []\n"
        "    best = 0\n"
        "    for x in nums:\n"
        "        best = max(best, x)\n"
        "        out.append(best)\n"
        "    return out\n",
        "def test_running_max_rising():\n    assert running_max([1, 3, 2]) == [1, 3, 3]\n\n"
        "def test_running_max_empty():\n    assert running_max([]) == []\n\n"
        "def test_running_max_negative():\n    assert running_max([-2, -5]) == [-2, -2]\n\n"
        "def test_running_max_single():\n    assert running_max([4]) == [4]\n\n"
        "def test_running_max_from_below():\n    assert running_max([-1, 2]) == [-1, 2]\n",
    ),
    Problem(
        "count_words",
        "Return a dict mapping each word of s (split on whitespace, lower-cased) to how many "
        "times it appears.",
        "def count_words(s: str) -> dict[str, int]:",
        "def count_words(s: str) -> dict[str, int]:\n"
        "    counts = {}\n"
        "    for word in s.lower().split():\n"
        "        counts[word] = counts.get(word, 0) + 1\n"
        "    return counts\n",
        "def count_words(s: str) -> dict[str, int]:\n"
        "    counts = {}\n"
        "    for word in s.split():\n"
        "        counts[word] = counts.get(word, 0) + 1\n"
        "    return counts\n",
        "def test_count_words_repeat():\n"
        "    assert count_words('a b a') == {'a': 2, 'b': 1}\n\n"
        "def test_count_words_empty():\n    assert count_words('') == {}\n\n"
        "def test_count_words_case():\n    assert count_words('The the') == {'the': 2}\n\n"
        "def test_count_words_spaces():\n"
        "    assert count_words('x  y') == {'x': 1, 'y': 1}\n\n"
        "def test_count_words_upper():\n    assert count_words('Go') == {'go': 1}\n",
    ),
    Problem(
        "clamp",
        "Return x limited to the range from lo to hi (lo <= hi): lo if x is below it, hi if "
        "x is above it, else x.",
        "def clamp(x: int, lo: int, hi: int) -> int:",
        "def clamp(x: int, lo: int, hi: int) -> int:\n"
        "    return max(lo, min(x, hi))\n",
        "def clamp(x: int, lo: int, hi: int) -> int:\n"
        "    if x < lo:\n"
        "        return lo\n"
        "    if x > hi:\n"
        "        return lo\n"
        "    return x\n",
        "def test_clamp_inside():\n    assert clamp(5, 0, 10) == 5\n\n"
        "def test_clamp_below():\n    assert clamp(-1, 0, 10) == 0\n\n"
        "def test_clamp_above():\n    assert clamp(11, 0, 10) == 10\n\n"
        "def test_clamp_edge():\n    assert clamp(10, 0, 10) == 10\n\n"
        "def test_clamp_far_above():\n    assert clamp(99, -5, 5) == 5\n",
    ),
    Problem(
        "last_index",
        "Return the index of the last occurrence of target in nums, or -1 if it is not there.",
        "def last_index(nums: list[int], target: int) -> int:",
        "def last_index(nums: list[int], target: int) -> int:\n"
        "    for i in range(len(nums) - 1, -1, -1):\n"
        "        if nums[i] == target:\n"
        "            return i\n"
        "    return -1\n",
        "def last_index(nums: list[int], target: int) -> int:\n"
        "    for i in range(len(nums) - 1, 0, -1):\n"
        "        if nums[i] == target:\n"
        "            return i\n"
        "    return -1\n",
        "def test_last_index_repeat():\n    assert last_index([1, 2, 1], 1) == 2\n\n"
        "def test_last_index_missing():\n    assert last_index([1, 2, 3], 4) == -1\n\n"
        "def test_last_index_single():\n    assert last_index([5], 5) == 0\n\n"
        "def test_last_index_first():\n    assert last_index([3, 1, 2], 3) == 0\n\n"
        "def test_last_index_empty():\n    assert last_index([], 1) == -1\n",
    ),
    Problem(
        "is_leap_year",
        "Return True if year is a leap year of the Gregorian calendar: divisible by 4, except "
        "years divisible by 100 that are not divisible by 400.",
        "def is_leap_year(year: int) -> bool:",
        "def is_leap_year(year: int) -> bool:\n"
        "    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n",
        "def is_leap_year(year: int) -> bool:\n"
        "    return year % 4 == 0 and year % 100 != 0\n",
        "def test_is_leap_year_2024():\n    assert is_leap_year(2024) is True\n\n"
        "def test_is_leap_year_1900():\n    assert is_leap_year(1900) is False\n\n"
        "def test_is_leap_year_2000():\n    assert is_leap_year(2000) is True\n\n"
        "def test_is_leap_year_2023():\n    assert is_leap_year(2023) is False\n\n"
        "def test_is_leap_year_1600():\n    assert is_leap_year(1600) is True\n",
    ),
    Problem(
        "merge_sorted",
        "a and b are sorted in increasing order. Return one list of all their items, sorted in "
        "increasing order.",
        "def merge_sorted(a: list[int], b: list[int]) -> list[int]:",
        "def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n"
        "    out = []\n"
        "    i = j = 0\n"
        "    while i < len(a) and j < len(b):\n"
        "        if a[i] <= b[j]:\n"
        "            out.append(a[i])\n"
        "            i += 1\n"
        "        else:\n"
        "            out.append(b[j])\n"
        "            j += 1\n"
        "    out.extend(a[i:])\n"
        "    out.extend(b[j:])\n"
        "    return out\n",
        "def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n"
        "    out = []\n"
        "    i = j = 0\n"
        "    while i < len(a) and j < len(b):\n"
        "        if a[i] <= b[j]:\n"
        "            out.append(a[i])\n"
        "            i += 1\n"
        "        else:\n"
        "            out.append(b[j])\n"
        "            j += 1\n"
        "    out.extend(a[i:])\n"
        "    return out\n",
        "def test_merge_sorted_interleaved():\n"
        "    assert merge_sorted([1, 3], [2, 4]) == [1, 2, 3, 4]\n\n"
        "def test_merge_sorted_b_last():\n    assert merge_sorted([1, 2], [3]) == [1, 2, 3]\n\n"
        "def test_merge_sorted_empty():\n    assert merge_sorted([], []) == []\n\n"
        "def test_merge_sorted_a_last():\n"
        "    assert merge_sorted([4, 5], [1]) == [1, 4, 5]\n\n"
        "def test_merge_sorted_one_empty():\n    assert merge_sorted([1], []) == [1]\n",
    ),
    Problem(
        "digit_sum",
        "Return the sum of the decimal digits of the integer n; the sign is ignored.",
        "def digit_sum(n: int) -> int:",
        "def digit_sum(n: int) -> int:\n"
        "    return sum(int(c) for c in str(abs(n)))\n",
        "def digit_sum(n: int) -> int:\n"
        "    total = 0\n"
        "    while n > 0:\n"
        "        total += n % 10\n"
        "        n //= 10\n"
        "    return total\n",
        "def test_digit_sum_three():\n    assert digit_sum(123) == 6\n\n"
        "def test_digit_sum_zero():\n    assert digit_sum(0) == 0\n\n"
        "def test_digit_sum_negative():\n    assert digit_sum(-45) == 9\n\n"
        "def test_digit_sum_one_digit():\n    assert digit_sum(9) == 9\n\n"
        "def test_digit_sum_negative_one():\n    assert digit_sum(-7) == 7\n",
    ),
    Problem(
        "title_case",
        "Return s with the first letter of every word in upper case and the rest of the word "
        "in lower case; words are separated by single spaces.",
        "def title_case(s: str) -> str:",
        "def title_case(s: str) -> str:\n"
        "    return ' '.join(w[:1].upper() + w[1:].lower() for w in s.split(' '))\n",
        "def title_case(s: str) -> str:\n"
        "    return ' '.join(w[:1].upper() + w[1:] for w in s.split(' '))\n",
        "def test_title_case_two():\n"
        "    assert title_case('hello world') == 'Hello World'\n\n"
        "def test_title_case_shouting():\n    assert title_case('hELLO') == 'Hello'\n\n"
        "def test_title_case_empty():\n    assert title_case('') == ''\n\n"
        "def test_title_case_letters():\n    assert title_case('a b') == 'A B'\n\n"
        "def test_title_case_upper():\n    assert title_case('NEW YORK') == 'New York'\n",
    ),
    Problem(
        "remove_duplicates",
        "Return the items of nums without repeats: the first occurrence of each value, in the "
        "order they come.",
        "def remove_duplicates(nums: list[int]) -> list[int]:",
        "def remove_duplicates(nums: list[int]) -> list[int]:\n"
        "    seen = set()\n"
        "    out = []\n"
        "    for x in nums:\n"
        "        if x not in seen:\n"
        "            seen.add(x)\n"
        "            out.append(x)\n"
        "    return out\n",
        "def remove_duplicates(nums: list[int]) -> list[int]:\n"
        "    out = []\n"
        "    for i, x in enumerate(nums):\n"
        "        if x not in nums[i + 1:]:\n"
        "            out.append(x)\n"
        "    return out\n",
        "def test_remove_duplicates_order():\n"
        "    assert remove_duplicates([3, 1, 3, 2]) == [3, 1, 2]\n\n"
        "def test_remove_duplicates_empty():\n    assert remove_duplicates([]) == []\n\n"
        "def test_remove_duplicates_pair():\n    assert remove_duplicates([1, 1]) == [1]\n\n"
        "def test_remove_duplicates_distinct():\n"
        "    assert remove_duplicates([1, 2]) == [1, 2]\n\n"
        "def test_remove_duplicates_first_kept():\n"
        "    assert remove_duplicates([2, 1, 2]) == [2, 1]\n",
    ),
)
PROBLEMS_BY_ID: dict[str, Problem] = {
    p.problem_id: p for p in TRAINING_PROBLEMS + HELD_OUT_PROBLEMS}

# ----------------------------------------------------------------------------- problem sets
# ``code_debug.problems``: ``builtin`` (the problems above), ``humaneval`` (HUMANEVAL_FILE: a
# plausible bug planted in HumanEval functions, agora/envs/humaneval_debug.py) or the path of a
# JSONL file in that file's format, one problem per line: the ``Problem`` fields (``preamble``
# optional) and ``split`` (``training`` or ``held_out``).

HUMANEVAL_FILE = Path(__file__).parent / "data" / "humaneval_debug.jsonl"
BUILTIN, HUMANEVAL = "builtin", "humaneval"


class ProblemFileError(ValueError):
    """A problem file that cannot be used; the message names the line and field."""


@dataclass(frozen=True)
class ProblemSet:
    """Training problems (and warm starts') and held-out ones (evaluation's), by id too."""

    training: tuple[Problem, ...]
    held_out: tuple[Problem, ...]

    @functools.cached_property
    def by_id(self) -> dict[str, Problem]:
        return {p.problem_id: p for p in self.training + self.held_out}


def load_problem_file(path: Path) -> ProblemSet:
    """A problem file as a ``ProblemSet``; a bad line, a duplicate id or an empty split is
    named (``ProblemFileError``)."""
    names = [f.name for f in fields(Problem) if f.name != "preamble"]
    splits: dict[str, list[Problem]] = {"training": [], "held_out": []}
    seen: set[str] = set()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ProblemFileError(f"cannot read problem file {path}: {exc.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except ValueError:
            raise ProblemFileError(f"{where}: not JSON") from None
        if not isinstance(row, dict):
            raise ProblemFileError(f"{where}: not a JSON object")
        bad = [n for n in names if not isinstance(row.get(n), str) or not row[n].strip()]
        if bad:
            raise ProblemFileError(f"{where}: missing or empty field(s) {bad}")
        if row.get("split") not in splits:
            raise ProblemFileError(f"{where}: split must be 'training' or 'held_out', "
                                   f"not {row.get('split')!r}")
        if not isinstance(row.get("preamble", ""), str):
            raise ProblemFileError(f"{where}: preamble must be a string")
        problem = Problem(**{n: row[n] for n in names}, preamble=row.get("preamble", ""))
        if problem.problem_id in seen:
            raise ProblemFileError(f"{where}: problem_id {problem.problem_id!r} appears twice")
        seen.add(problem.problem_id)
        splits[row["split"]].append(problem)
    empty = [name for name, problems in splits.items() if not problems]
    if empty:
        raise ProblemFileError(f"{path}: no {' and no '.join(empty)} problems")
    return ProblemSet(tuple(splits["training"]), tuple(splits["held_out"]))


@functools.cache
def problem_set(source: str = BUILTIN) -> ProblemSet:
    """The problems of ``code_debug.problems`` (loaded once per process)."""
    if source == BUILTIN:
        return ProblemSet(TRAINING_PROBLEMS, HELD_OUT_PROBLEMS)
    return load_problem_file(HUMANEVAL_FILE if source == HUMANEVAL else Path(source))
