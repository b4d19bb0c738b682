"""More critic data: the scripted oracle's refinements, judged again as proposed answers.

Why: the critic learns from critiques of the *base* actor's first answers, which at 135M are
long, rambling paragraphs. After SFT the actor answers in the refinements' short format
(``10 - 5 = 4.\\nAnswer: 4``), which no critic training example ever showed. Measured on
``reflection-math-verdict-keep-rpo`` (2026-12-05): the SFT critic called 46% of the SFT actor's
right answers and 49% of its wrong ones "wrong", i.e. it judged them at chance. The oracle
round already holds answers in that format, right and wrong alike: the right result written
after a true "wrong", and the result one off written after a misleading "wrong" on a right
answer. ``critic_judges_refinements: true`` turns each distinct refinement into a row of its
own, critiqued by the same script (a true critique and a misleading one), so the existing SFT
and pair rules give the critic examples of judging the format it will be shown.

Only the scripted oracle (``oracle.backend: reference``) can do this without inference: its
critiques follow from the ground truth, which every refinement was already checked against.
The derived rows feed the critic alone; the actor's data stays the oracle's own.
"""

from __future__ import annotations

from agora.reflection.config import ReflectionConfig
from agora.reflection.prompts import CriticCheck, parse_verdict
from agora.reflection.records import Critique, OracleRow
from agora.reflection.reference_oracle import critiques_and_refinements
from agora.reflection.task_programs import EquationForm


def refinement_rows(rows: list[OracleRow], samples: int, show_result: bool,
                    check: CriticCheck = "text",
                    equations: EquationForm = "root") -> list[OracleRow]:
    """One row per distinct (problem, refinement) that is not one of that problem's first
    answers (a refinement that kept the first answer adds no new text), with the scripted
    oracle's critiques of it. The critiques' own refinements are right exactly when the
    critique tells the truth (the script keeps a right answer or writes the reference; it
    keeps a wrong answer or writes a result one off), so no checker runs here."""
    firsts = {(r.task.task_id, r.initial.strip()) for r in rows}
    seen: set[tuple[str, str]] = set()
    out = []
    for row in rows:
        for c in row.critiques:
            key = (row.task.task_id, c.refined.strip())
            if not key[1] or key in firsts or key in seen:
                continue
            seen.add(key)
            texts = critiques_and_refinements(row.task, c.refined, c.refined_extracted,
                                              c.refined_correct, samples, show_result,
                                              check, equations)
            critiques = [
                Critique(feedback=feedback, verdict=parse_verdict(feedback), refined=refined,
                         refined_extracted=_answer_line(refined) or c.refined_extracted,
                         refined_correct=truthful)
                for truthful, (feedback, refined) in zip((True, False), texts, strict=False)
            ]
            out.append(OracleRow(task=row.task, sample=row.sample, initial=c.refined,
                                 initial_extracted=c.refined_extracted,
                                 initial_correct=c.refined_correct, critiques=critiques,
                                 oracle_model=row.oracle_model, actor_model="refinement"))
    return out


def _answer_line(refined: str) -> str | None:
    """The number on a refinement's ``Answer:`` line (None when it has none): recorded for
    readers of the rows, never used to score."""
    for line in reversed(refined.splitlines()):
        if line.startswith("Answer:"):
            return line.removeprefix("Answer:").strip()
    return None


def extra_critic_rows(cfg: ReflectionConfig, rows: list[OracleRow]) -> list[OracleRow]:
    """The derived rows the config asks for (none unless ``critic_judges_refinements``)."""
    if not cfg.critic_judges_refinements:
        return []
    return refinement_rows(rows, cfg.oracle.samples, cfg.oracle.critique == "worked",
                           cfg.critic_check, cfg.oracle.equation_program)
