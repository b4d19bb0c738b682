"""Stage (c): preference pairs from the oracle data, with no extra inference.

Every text was already checked against the ground truth (``oracle.jsonl``), so a pair is a
comparison of recorded texts. The value of each action follows the paper's estimates (DPSDP's
Q-values): a first answer or a refinement is worth its own correctness; a critique is worth the
correctness of the refinement written after it.

- actor, first turn (prompt: the question): chosen a right first answer, rejected a wrong
  first answer of the same problem (each wrong one once, the right ones in turn). A problem
  with no right first answer: chosen the oracle's first right refinement instead.
- actor, refinement (prompt: question + first answer + feedback): first answer wrong and
  refinement right -> chosen the refinement, rejected the first answer unchanged; first answer
  right and refinement wrong -> chosen the first answer kept, rejected the refinement (unless
  ``pairs.hold_right_answers`` is off); both right or both wrong -> no pair.
- actor, refinement after a true approval (``pairs.keep_approved_answers``; prompt: question +
  right first answer + a critique whose verdict is "correct"): chosen the answer kept,
  rejected a wrong answer to the same problem (the refinement written after that critique
  when it changed the answer, else another critique's wrong refinement, else a wrong first
  answer). Why: the rule above only covers a "wrong", so the actor learns to re-answer after
  any feedback; this one teaches it to stand by an answer the critic approves.
- critic (prompt: question + first answer): chosen a critique whose refinement is right,
  rejected one of the same answer whose refinement is wrong; between critiques with the same
  refinement outcome, one whose verdict matches the ground truth beats one whose does not.

With ``critic_judges_refinements`` the critic's rule also runs on the refinements judged again
as answers (``refined_answers.py``).

Critiques of one first answer are ranked by (refinement right, verdict right); the best-ranked
ones are paired with the worst-ranked ones (one pair each, in order) when the ranks differ.
Pairs whose chosen and rejected texts are identical are dropped; with ``balance_critic`` the
critic's pairs count right and wrong first answers equally (``balance.py``). The actor trains
on its two kinds together (the paper's D0 and D2), the critic on its own (D1).
"""

from __future__ import annotations

from collections.abc import Sequence

from agora.reflection.balance import balance_by_answer
from agora.reflection.config import ROLES, PairsConfig, ReflectionConfig
from agora.reflection.oracle import oracle_path
from agora.reflection.program_critic import critic_completion
from agora.reflection.prompts import CriticCheck, actor_messages, critic_messages, refine_messages
from agora.reflection.records import OracleRow, PreferencePair, read_rows, write_rows
from agora.reflection.refined_answers import extra_critic_rows


def _say(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text.strip()}]


def _pair(role: str, kind: str, rule: str, row: OracleRow, prompt: list, chosen: str,
          rejected: str) -> PreferencePair | None:
    if chosen.strip() == rejected.strip() or not chosen.strip() or not rejected.strip():
        return None
    return PreferencePair(role=role, kind=kind, rule=rule, task_id=row.task.task_id,
                          prompt=prompt, chosen=_say(chosen), rejected=_say(rejected))


def first_turn_pairs(task_rows: list[OracleRow]) -> list[PreferencePair]:
    """The actor's first answers of one problem (all rows share the task)."""
    question = task_rows[0].task.question
    right = [r for r in task_rows if r.initial_correct]
    wrong = [r for r in task_rows if not r.initial_correct]
    out = []
    if right:
        for i, bad in enumerate(wrong):
            good = right[i % len(right)]
            out.append(_pair("actor", "first_turn", "right first > wrong first", bad,
                             actor_messages(question), good.initial, bad.initial))
    else:
        borrowed = next((c.refined for r in task_rows for c in r.critiques
                         if c.refined_correct), None)
        if borrowed is not None:
            for bad in wrong:
                out.append(_pair("actor", "first_turn", "right refinement > wrong first", bad,
                                 actor_messages(question), borrowed, bad.initial))
    return [p for p in out if p is not None]


def refine_pairs(row: OracleRow, max_chars: int,
                 hold_right_answers: bool = True) -> list[PreferencePair]:
    """The actor's refinement turn: a refinement vs keeping the first answer unchanged."""
    out = []
    question = row.task.question
    for c in row.critiques:
        prompt = refine_messages(question, row.initial, c.feedback, max_chars)
        if not row.initial_correct and c.refined_correct:
            out.append(_pair("actor", "refine", "right refinement > wrong answer kept", row,
                             prompt, c.refined, row.initial))
        elif row.initial_correct and not c.refined_correct and hold_right_answers:
            out.append(_pair("actor", "refine", "right answer kept > wrong refinement", row,
                             prompt, row.initial, c.refined))
    return [p for p in out if p is not None]


def approved_keep_pairs(task_rows: list[OracleRow], max_chars: int,
                        hold_right_answers: bool = True) -> list[PreferencePair]:
    """The actor's refinement turn after a critique that rightly says "correct" (all rows share
    the task): keep the answer rather than change it to a wrong one."""
    wrong_firsts = [r.initial for r in task_rows if not r.initial_correct]
    out = []
    for row in task_rows:
        if not row.initial_correct:
            continue
        question = row.task.question
        for c in row.critiques:
            if c.verdict != "correct":
                continue
            if not c.refined_correct:
                if hold_right_answers:
                    continue  # refine_pairs already pairs this very refinement
                rejected = c.refined
            else:
                others = [o.refined for o in row.critiques
                          if o is not c and not o.refined_correct]
                candidates = others + wrong_firsts
                if not candidates:
                    continue
                rejected = candidates[0]
            prompt = refine_messages(question, row.initial, c.feedback, max_chars)
            out.append(_pair("actor", "refine",
                             "answer kept after a true 'correct' > changed to a wrong answer",
                             row, prompt, row.initial, rejected))
    return [p for p in out if p is not None]


def critique_pairs(row: OracleRow, max_chars: int,
                   check: CriticCheck = "text") -> list[PreferencePair]:
    """The critic's turn: critiques of the same answer, ranked by what they led to (a program
    critic's pair is of its programs: the check's lines are not its own)."""
    if len(row.critiques) < 2:
        return []

    def rank(c) -> tuple[bool, bool]:  # noqa: ANN001
        return (c.refined_correct, row.verdict_right(c))

    ranks = [rank(c) for c in row.critiques]
    best, worst = max(ranks), min(ranks)
    if best == worst:
        return []
    top = [c for c, r in zip(row.critiques, ranks, strict=True) if r == best]
    bottom = [c for c, r in zip(row.critiques, ranks, strict=True) if r == worst]
    prompt = critic_messages(row.task.question, row.initial, max_chars, check)
    rule = ("critique -> right refinement > critique -> wrong refinement" if best[0] != worst[0]
            else "right verdict > wrong verdict (same refinement outcome)")
    out = [_pair("critic", "critique", rule, row, prompt, critic_completion(good.feedback, check),
                 critic_completion(bad.feedback, check))
           for good, bad in zip(top, bottom, strict=False)]
    return [p for p in out if p is not None]


def build_pairs(rows: list[OracleRow], max_chars: int, rules: PairsConfig | None = None,
                balance_critic: bool = False, seed: int = 0,
                critic_rows: Sequence[OracleRow] = (),
                check: CriticCheck = "text") -> dict[str, list[PreferencePair]]:
    """All pairs of each role, by the rules in the module docstring; ``critic_rows`` are
    further answers for the critic's rule alone; ``check``: how the critic checks."""
    rules = rules or PairsConfig()
    by_task: dict[str, list[OracleRow]] = {}
    for row in rows:
        by_task.setdefault(row.task.task_id, []).append(row)
    out: dict[str, list[PreferencePair]] = {role: [] for role in ROLES}
    critic_answer_right: list[bool] = []

    def add_critic_pairs(row: OracleRow) -> None:
        critiqued = critique_pairs(row, max_chars, check)
        out["critic"].extend(critiqued)
        critic_answer_right.extend([row.initial_correct] * len(critiqued))

    for task_rows in by_task.values():
        out["actor"] += first_turn_pairs(task_rows)
        if rules.keep_approved_answers:
            out["actor"] += approved_keep_pairs(task_rows, max_chars, rules.hold_right_answers)
        for row in task_rows:
            out["actor"] += refine_pairs(row, max_chars, rules.hold_right_answers)
            add_critic_pairs(row)
    for row in critic_rows:
        add_critic_pairs(row)
    if balance_critic:
        out["critic"] = balance_by_answer(out["critic"], critic_answer_right, seed)
    return out


def pairs_path(cfg: ReflectionConfig, role: str):  # -> Path
    return cfg.run_dir / "pairs" / f"{role}.jsonl"


def write_pairs(cfg: ReflectionConfig) -> dict[str, dict[str, int]]:
    """``<run>/pairs/{actor,critic}.jsonl`` from the oracle round ``dpo.data_from`` names;
    returns the count of pairs per role and rule."""
    stage = cfg.dpo.data_from
    hint = "agora reflect oracle CONFIG" + ("" if stage == "base" else f" --stage {stage}")
    rows = read_rows(oracle_path(cfg, stage), OracleRow, hint)
    pairs = build_pairs(rows, cfg.max_shown_chars, cfg.pairs, cfg.balance_critic, cfg.seed,
                        extra_critic_rows(cfg, rows), cfg.critic_check)
    counts = {}
    for role in ROLES:
        write_rows(pairs_path(cfg, role), pairs[role])
        by_rule: dict[str, int] = {}
        for p in pairs[role]:
            by_rule[p.rule] = by_rule.get(p.rule, 0) + 1
        counts[role] = by_rule
    return counts
