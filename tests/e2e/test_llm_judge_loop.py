"""A story trained against an LLM judge, end to end on tiny-random: the judge service asks the
run's base model (vLLM's chat API) for every score and preference, the episodes count its
requests, malformed verdicts and position-biased ones, and `agora eval` judges the learner's
latest version against v0 with the same model, in both orders.

tiny-random answers noise: free-form, every verdict would be malformed (scored as the midpoint
and counted: tests/integration/test_judge.py's real-vLLM garbage case). Constrained
(``judge.constrained``: vLLM's structured outputs allow only verdict and score lines), every
verdict parses, and what is left of the noise shows as position bias. What a real model's
verdicts do to a story is measured by `agora results --only story-llm-judge`.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys

import httpx
import redis

from agora.rollout.stream import RunKeys
from agora.stack.launcher import make_stack
from tests.stack_helpers import processes_of_run, tiny_config, write_config


def judge_requests(metrics: str, endpoint: str) -> float:
    found = re.search(rf'agora_judge_requests_total{{backend="llm",endpoint="{endpoint}"}} '
                      r"([0-9.e+]+)", metrics)
    return float(found.group(1)) if found else 0.0


def story_config(tmp_path, policy, constrained: bool):
    return tiny_config(
        models={"tiny": policy.model_dump(mode="json")},
        agents=[{"name": "writer", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"temperature": 1.0, "max_tokens": 8, "stop": []}}],
        context_agents={"cowriter": {"cycle": ["template_writer", "short_writer"], "every": 1}},
        environment={"name": "story", "seats": ["writer", "context:cowriter"], "prefill": "",
                     "opponents": {"self": 1.0},
                     "story": {"rounds": 1, "judge": "both", "rubric": "story",
                               "baseline": "template_writer"}},
        reward={"verifier": "judge"},
        # The judge asks the base model of models.tiny; constrained, room for the story
        # rubric's four score lines.
        judge={"backend": "llm", "model": "tiny", "max_tokens": 64 if constrained else 16,
               "constrained": constrained},
        ppo={"batch_turns": 2, "minibatch_turns": 2},
        trainer={"max_updates": 1},
        output_dir=str(tmp_path / "runs"))


def train_and_evaluate(tmp_path, vllm_tiny, constrained: bool) -> tuple[list[dict], dict, dict]:
    """One update of the story against the LLM judge, then `agora eval` with it: the
    episodes' records, the run's rollout counters and the eval's preference section."""
    url, policy = vllm_tiny  # the session's vLLM: policy server and judge model at once
    cfg = story_config(tmp_path, policy, constrained)
    stack = make_stack(cfg, "llm-judge", False, runs_root=tmp_path / "runs")
    judge_metrics: list[str] = []

    def scrape_judge() -> None:
        with contextlib.suppress(httpx.HTTPError):
            judge_metrics.append(httpx.get(
                f"http://127.0.0.1:{cfg.services.judge_port}/metrics", timeout=5).text)

    try:
        stack.start(policy_running=True)
        health = httpx.get(f"http://127.0.0.1:{cfg.services.judge_port}/health").json()
        assert health["backend"] == "llm" and health["model"] == "base"
        stack.watch(on_tick=scrape_judge, period_s=1.0)  # returns when the trainer is done
        assert stack.service("trainer").process.returncode == 0
        scrape_judge()

        # Every score and preference of the episodes went to the model: 1 story score, the
        # learner's and the co-writer's paragraph scores, 2 preferences (2 chat calls each).
        records = [json.loads(line) for line in
                   (stack.run_dir / "episodes.jsonl").read_text().splitlines()]
        assert records, "no episode reached the update"
        stats = redis.Redis.from_url(stack.redis_url, decode_responses=True).hgetall(
            RunKeys(stack.run_id).stats)
        assert judge_requests(judge_metrics[-1], "pairwise") >= 2 * len(records)
        assert judge_requests(judge_metrics[-1], "score") >= 3 * len(records)
        rows = [json.loads(x) for x in (stack.run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [r["update"] for r in rows] == [1]
    finally:
        stack.stop()
    assert processes_of_run(stack.run_id) == []

    # agora eval: the same LLM judge compares latest with v0 on each seed, in both orders.
    config_path = write_config(cfg, tmp_path / "story.yaml")
    proc = subprocess.run(
        [sys.executable, "-m", "agora.cli", "eval", str(stack.run_dir), "--config",
         str(config_path), "--games", "2", "--policy-url", url],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    eval_json = stack.run_dir / "eval" / "eval.json"
    preference = json.loads(eval_json.read_text())["sections"]["episodes"]["preference"]
    n = preference["comparisons"]
    assert n >= 2 and preference["wins"] + preference["ties"] + preference["losses"] == n
    return records, stats, preference


def test_a_constrained_llm_judge_always_gives_a_verdict(tmp_path, vllm_tiny):
    records, stats, preference = train_and_evaluate(tmp_path, vllm_tiny, constrained=True)
    for record in records:
        judged = record["info"]["judge"]
        # Structured outputs: every score and verdict parses, noise or not.
        assert (judged["requests"], judged["malformed"]) == (5, 0)
        assert 0 <= judged["position_bias"] <= 2
        assert 0.0 <= record["info"]["story_scores"]["story"] <= 1.0
    assert stats["judge_malformed"] == "0"
    assert preference["malformed"] == 0
    assert preference["position_bias"] <= preference["comparisons"]
