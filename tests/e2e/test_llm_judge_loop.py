"""A story trained against an LLM judge, end to end on tiny-random: the judge service asks the
run's base model (vLLM's chat API) for every score and preference, the episodes count its
requests, malformed verdicts and position-biased ones, and `agora eval` judges the learner's
latest version against v0 with the same model, in both orders.

tiny-random answers noise, so nearly every verdict is malformed: that is the point here (a judge
that answers garbage scores the midpoint and is counted, the run never stalls on it). What a
real model's verdicts do to a story is measured by `agora results --only story-llm-judge`.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys

import httpx
import redis

from agora.results.figures import train_eval_figures
from agora.rollout.stream import RunKeys
from agora.stack.launcher import make_stack
from tests.stack_helpers import processes_of_run, tiny_config, write_config


def judge_requests(metrics: str, endpoint: str) -> float:
    found = re.search(rf'agora_judge_requests_total{{backend="llm",endpoint="{endpoint}"}} '
                      r"([0-9.e+]+)", metrics)
    return float(found.group(1)) if found else 0.0


def test_story_trains_against_an_llm_judge_and_is_evaluated_by_it(tmp_path, vllm_tiny):
    url, policy = vllm_tiny  # the session's vLLM: policy server and judge model at once
    cfg = tiny_config(
        models={"tiny": policy.model_dump(mode="json")},
        agents=[{"name": "writer", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"temperature": 1.0, "max_tokens": 8, "stop": []}}],
        context_agents={"cowriter": {"cycle": ["template_writer", "short_writer"], "every": 1}},
        environment={"name": "story", "seats": ["writer", "context:cowriter"], "prefill": "",
                     "opponents": {"self": 1.0},
                     "story": {"rounds": 1, "judge": "both", "rubric": "story",
                               "baseline": "template_writer"}},
        reward={"verifier": "judge"},
        # The judge asks the base model of models.tiny, with a short reasoning budget.
        judge={"backend": "llm", "model": "tiny", "max_tokens": 16},
        ppo={"batch_turns": 2, "minibatch_turns": 2},
        trainer={"max_updates": 1},
        output_dir=str(tmp_path / "runs"))
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
        for record in records:
            judged = record["info"]["judge"]
            assert judged["requests"] == 5
            assert 0 <= judged["position_bias"] <= 2
            assert judged["malformed"] + judged["position_bias"] <= 5
        stats = redis.Redis.from_url(stack.redis_url, decode_responses=True).hgetall(
            RunKeys(stack.run_id).stats)
        assert int(stats["judge_requests"]) >= 5 * len(records)
        assert "judge_position_bias" in stats
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
    # tiny-random's 16 tokens of noise never hold a verdict line: every comparison is a
    # malformed tie, none position-biased (that needs both orders parsed).
    assert (preference["malformed"], preference["position_bias"], preference["ties"]) == (n, 0, n)
    assert preference["preference"]["rate"] == 0.5
    figures = {f.name: f for f in train_eval_figures(eval_json)}
    assert figures["judge verdicts malformed"].after.value == 1.0
    assert figures["judge verdicts position-biased"].after.value == 0.0
