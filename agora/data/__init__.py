"""Tasks for the math and NLI environments: one ``Task`` record, loaded from reasoning-gym, JSONL
files or Hugging Face datasets with a deterministic train/test split (``load_tasks``)."""

from agora.data.base import NLI_LABELS, Kind, NLILabel, Task, TaskError, TaskRef, gold_nli_label
from agora.data.formats import NLI_PROMPT, gsm8k_final_answer
from agora.data.loaders import load_tasks, parse_spec, split_tasks
from agora.data.specs import HFSpec, JsonlSpec, ReasoningGymSpec, Split, TaskSpec

__all__ = [
    "HFSpec",
    "JsonlSpec",
    "Kind",
    "NLILabel",
    "NLI_LABELS",
    "NLI_PROMPT",
    "ReasoningGymSpec",
    "Split",
    "Task",
    "TaskError",
    "TaskRef",
    "TaskSpec",
    "gold_nli_label",
    "gsm8k_final_answer",
    "load_tasks",
    "parse_spec",
    "split_tasks",
]
