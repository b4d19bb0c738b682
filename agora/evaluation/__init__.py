"""``agora eval RUN_OR_CHECKPOINT``: evaluate a run's adapters or one checkpoint.

Modules, one job each: ``target`` (what the path is and which versions to compare),
``serving`` (start/stop only the servers needed, load adapters), ``games`` (round robin,
Hanabi by partner), ``discussion`` (pass@k, maj@k), ``context_envs`` (env metrics, success
rate, judge preference), ``ratings`` (TrueSkill), ``stats`` (intervals, pass@k, majority
vote), ``curves`` (training_curves.png), ``report`` + ``definitions`` (eval.json, eval.md),
``runner`` (puts them together).
"""

from agora.evaluation.runner import EvalOptions, run_evaluation
from agora.evaluation.serving import GivenUrls
from agora.evaluation.target import EvalInputError, EvalTarget, resolve_target

__all__ = ["EvalInputError", "EvalOptions", "EvalTarget", "GivenUrls", "resolve_target",
           "run_evaluation"]
