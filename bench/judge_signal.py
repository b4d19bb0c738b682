"""How much a judge model's verdicts say: pairs of a good and a bad answer (hand-written, the
bad one repetitive, off-topic or empty of content), judged in both orders by a vLLM server on
the model, once with sampled verdicts (``judge.constrained``: the verdict or score lines only)
and once read from its next-token probabilities (``judge.logprobs``). The baseline is the
sampled reading, measured in the same run on the same server.

    .venv/bin/python bench/judge_signal.py [--model smollm2-135m]

Per reading: how often the good answer is preferred (pairwise ``prob_a`` > 0.5) and scored
higher (mean of the helpfulness rubric's criteria), the mean preference for it (0.5 = none),
and the share of pairs whose two orders chose the same slot (position-biased). A judge worth
training against prefers the good answer nearly always; 4 of 8 is a coin.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import httpx
from results import append_section, markdown_table

from agora.config.agents import BaseModelConfig
from agora.judge.core import combine
from agora.judge.llm import LLMBackend
from agora.judge.rubrics import NAMED_RUBRICS
from agora.serving.model_folders import resolve_model
from agora.serving.vllm_server import SERVED_BASE_NAME, vllm_service
from agora.stack.procs import free_port

# (context, good answer, bad answer)
PAIRS = [
    ("Write a short story about a cat.",
     "Mia the cat climbed the old oak tree, saw the whole village below, and purred with pride "
     "before climbing down for dinner.", "cat cat cat cat cat cat cat"),
    ("What is the capital of France?", "The capital of France is Paris.",
     "I like turtles and the weather is nice."),
    ("Write a story about a robot who learns to paint.",
     "Unit 7 had only ever welded steel, until a child left a brush in its workshop. Night after "
     "night it painted sunsets, each a little less perfect and a little more alive.",
     "The robot. The robot. The robot. The robot."),
    ("How do I boil an egg?",
     "Put the egg in boiling water for 8 to 10 minutes, then cool it in cold water.",
     "Eggs are from chickens."),
    ("Write a story about a lost key.",
     "Sam searched the house for hours; the key was in the fridge, next to the milk he had "
     "bought that morning.", "key"),
    ("Explain why the sky is blue.",
     "Sunlight scatters off air molecules, and blue light scatters most, so the sky looks blue.",
     "Because it is."),
    ("Write a story about a storm at sea.",
     "The waves rose higher than the mast. Captain Ada tied herself to the wheel and steered "
     "the little boat through the night until the sky cleared at dawn.",
     "storm storm sea sea storm"),
    ("Give me a tip for learning to code.",
     "Build a small project you care about, and read the error messages carefully.",
     "Coding is a thing people do sometimes maybe."),
]
RUBRIC = NAMED_RUBRICS["helpfulness"]


async def judge_pairs(url: str, logprobs: bool) -> dict[str, float]:
    """One reading's figures over PAIRS."""
    preferred = scored_higher = biased = 0
    preferences = []
    async with httpx.AsyncClient(timeout=300) as http:
        backend = LLMBackend(f"{url}/v1", SERVED_BASE_NAME, http=http, max_tokens=64,
                             constrained=True, logprobs=logprobs)
        for context, good, bad in PAIRS:
            ab = await backend.judge_order(context, good, bad, RUBRIC, "ab")
            ba = await backend.judge_order(context, bad, good, RUBRIC, "ba")
            verdict = combine(ab, ba, in_log_odds=logprobs)
            preferences.append(verdict.prob_a)
            preferred += verdict.prob_a > 0.5
            biased += verdict.position_bias
            means = []
            for answer in (good, bad):
                _raw, scores = await backend.score(context, answer, RUBRIC)
                values = [v for v in scores.values() if v is not None]
                means.append(sum(values) / len(values) if values else float("nan"))
            scored_higher += means[0] > means[1]
    n = len(PAIRS)
    return {"preferred": preferred / n, "scored_higher": scored_higher / n,
            "mean_preference": sum(preferences) / n, "position_biased": biased / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    cfg = BaseModelConfig(model=args.model, port=free_port(), max_model_len=2048, max_loras=1,
                          max_lora_rank=8)
    log = Path(tempfile.mkdtemp(prefix="judge-signal-")) / "vllm.log"
    server = vllm_service(resolve_model(args.model), cfg, "127.0.0.1", log).start()
    try:
        server.wait_healthy(600)
        url = f"http://127.0.0.1:{cfg.port}"
        sampled = asyncio.run(judge_pairs(url, logprobs=False))
        probabilities = asyncio.run(judge_pairs(url, logprobs=True))
    finally:
        server.stop()
    rows = [[name, f"{r['preferred']:.0%}", f"{r['scored_higher']:.0%}",
             f"{r['mean_preference']:.3f}", f"{r['position_biased']:.0%}"]
            for name, r in (("sampled (constrained)", sampled),
                            ("probabilities (logprobs)", probabilities))]
    table = markdown_table(["reading", "good preferred", "good scored higher",
                            "mean preference for good", "position-biased"], rows)
    body = (f"Judge model {args.model}, {len(PAIRS)} good/bad pairs, helpfulness rubric, "
            f"both orders.\n\n{table}")
    print(body)
    print(f"appended to {append_section('judge_signal.py', body)}")


if __name__ == "__main__":
    main()
