"""The learned verifier end to end, nothing mocked: episodes of a discussion run (built from real
reasoning-gym tasks and labelled by the real math verifier) -> ``agora verifier gen-data`` ->
``balance`` -> ``train`` (TRL RewardTrainer on tiny-random) -> the reward service under uvicorn
with ``AGORA_REWARD_MODEL`` serving ``/v1/score`` and learned/blended ``/v1/verify``."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from agora.cli.verifier import verifier_app
from agora.data import Task, load_tasks
from agora.rewards.verifiers.learned import (
    LazyVerifier,
    LearnedVerifier,
    VerifierUnavailable,
    encode,
)
from agora.rewards.verifiers.learned_data import (
    VerifierRow,
    balance,
    build_pairs,
    difficulty_proxy,
    read_rows,
)
from agora.rewards.verifiers.math import verify_math
from agora.rollout.records import EpisodeRecord, Turn
from agora.serving.model_folders import TINY_RANDOM
from agora.stack.procs import free_port
from tests.conftest import ROOT, uvicorn_service

SPEC = {"source": "reasoning_gym", "name": "basic_arithmetic", "size": 10, "test_size": 2,
        "seed": 5, "config": {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 3,
                              "operators": ["+", "-"], "allow_parentheses": False,
                              "allow_negation": False}}
SEATS = ["alice", "bob"]
runner = CliRunner()


def invoke(*args: str) -> str:
    result = runner.invoke(verifier_app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def answer_text(task: Task, right: bool, style: int) -> str:
    value = int(task.answer) + (0 if right else 1 + style)
    return [f"Adding up the terms.\nAnswer: {value}", f"So the result is {value}.",
            f"Let me check: {value}\nAnswer: {value}"][style % 3]


def discussion(run_id: str, index: int, task: Task, pattern: list[list[bool]],
               dup: bool) -> tuple[EpisodeRecord, list[list[bool]]]:
    """A verified two-round discussion: scores come from the real math verifier."""
    texts = [[answer_text(task, right, index + 2 * r + s) for s, right in enumerate(row)]
             for r, row in enumerate(pattern)]
    if dup:  # seat 1 repeats seat 0 in the last round: the row must be kept once
        texts[-1][1] = texts[-1][0]
        pattern = [pattern[0], [pattern[-1][0], pattern[-1][0]]]
    turns = [Turn(seat=s, agent=SEATS[s], role=f"agent{s + 1}", text=texts[r][s])
             for r in range(len(texts)) for s in range(len(SEATS))]
    scores = [[1.0 if verify_math(t, task.ref()).correct else 0.0 for t in row] for row in texts]
    record = EpisodeRecord(run_id=run_id, episode_id=f"{run_id}-{index:08d}", env="discussion",
                           seed=index, task_id=task.task_id, seats=SEATS, turns=turns,
                           info={"scores": scores, "rounds": 2, "task_id": task.task_id})
    return record, pattern


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return load_tasks(SPEC, split="train")


@pytest.fixture(scope="module")
def run(tmp_path_factory, tasks) -> tuple[Path, dict[tuple[str, str], int]]:
    """A run folder: config.yaml (the math discussion with SPEC as its task) and an
    episodes.jsonl of discussions plus one game; returns it and the intended labels."""
    run_dir = tmp_path_factory.mktemp("runs") / "disc"
    run_dir.mkdir()
    cfg = yaml.safe_load((ROOT / "configs" / "maporl_math.yaml").read_text())
    cfg["environment"]["task"] = SPEC
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    expected: dict[tuple[str, str], int] = {}
    lines = []
    for i, task in enumerate(tasks):
        pattern = [[i % 2 == 0, i % 3 != 0], [True, i % 4 == 0]]
        record, pattern = discussion("disc", i, task, pattern, dup=i % 5 == 0)
        for turn, right in zip(record.turns, [x for row in pattern for x in row], strict=True):
            expected.setdefault((task.question, turn.text), int(right))
        lines.append(record.model_dump_json())
    game = EpisodeRecord(run_id="disc", episode_id="disc-game", env="tictactoe", seed=0,
                         seats=["alice", "bot:random"],
                         turns=[Turn(seat=0, agent="alice", text="[4]")])
    lines.insert(3, game.model_dump_json())
    (run_dir / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir, expected


@pytest.fixture(scope="module")
def data(run, tmp_path_factory) -> Path:
    run_dir, _ = run
    out = tmp_path_factory.mktemp("data") / "verifier.jsonl"
    invoke("gen-data", run_dir, "--out", out)
    return out


def test_gen_data_labels_every_answer_once_with_question_and_difficulty(run, data, tasks):
    _, expected = run
    rows = read_rows(data)
    by_id = {t.task_id: t for t in tasks}
    assert {(r.question, r.answer): r.label for r in rows} == expected
    assert len(rows) == len(expected)  # duplicates dropped, the game skipped
    for row in rows:
        task = by_id[row.task_id]
        assert row.question == task.question
        assert row.difficulty == difficulty_proxy(task.question)
        assert row.round in (0, 1)
    labels = Counter(r.label for r in rows)
    assert labels[0] and labels[1] and labels[1] > labels[0]  # unbalanced on purpose
    assert len({r.difficulty for r in rows}) >= 2


def test_difficulty_proxy_counts_digits():
    assert difficulty_proxy("What is 3 + 4?") == "proxy:digits 0-2"
    assert difficulty_proxy("What is 312 - 45?") == "proxy:digits 5-8"
    assert difficulty_proxy("1,234,567 + 8,901,234,567") == "proxy:digits 17+"
    assert difficulty_proxy("Does the premise entail it?") == "proxy:digits 0-2"


def test_gen_data_task_difficulty_and_explicit_config(run, tmp_path):
    """--config reloads tasks for a run without config.yaml; a spec difficulty is used."""
    run_dir, _ = run
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "episodes.jsonl").write_text((run_dir / "episodes.jsonl").read_text())
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    cfg["environment"]["task"] = {**SPEC, "difficulty": "easy"}
    config = tmp_path / "labelled.yaml"
    config.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "rows.jsonl"
    invoke("gen-data", bare, "--out", out, "--config", config, "--difficulty", "task")
    assert {r.difficulty for r in read_rows(out)} == {"easy"}


def bad_run(tmp_path: Path, lines: list[str], config: bool = True, name: str = "bad") -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir(exist_ok=True)
    (run_dir / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    if config:
        cfg = yaml.safe_load((ROOT / "configs" / "maporl_math.yaml").read_text())
        cfg["environment"]["task"] = SPEC
        (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    return run_dir


def test_gen_data_errors_name_the_file_and_line(run, tmp_path):
    run_dir, _ = run
    good = (run_dir / "episodes.jsonl").read_text().splitlines()[0]
    record = json.loads(good)
    no_scores = {**record, "info": {}}
    short = {**record, "info": {"scores": [[1.0, 0.0]]}}
    odd = {**record, "info": {"scores": [[1.0, 0.5], [1.0, 1.0]]}}
    unknown = {**record, "task_id": "rg:nope:train:0:0"}
    cases = {
        "{not json": "line 2: invalid JSON",
        json.dumps({"run_id": "x"}): "line 2: not an episode record",
        json.dumps(no_scores): "has no info['scores']",
        json.dumps(short): "1 rounds x 2 seats but the episode has 4 turns",
        json.dumps(odd): "info['scores'][0][1] is 0.5",
        json.dumps(unknown): "task 'rg:nope:train:0:0' is not among the tasks of",
    }
    for line, fragment in cases.items():
        run_dir_bad = bad_run(tmp_path, [good, line])
        result = runner.invoke(verifier_app, ["gen-data", str(run_dir_bad), "--out",
                                              str(tmp_path / "x.jsonl")])
        assert result.exit_code == 2, result.output
        assert fragment in " ".join(result.output.split()), (fragment, result.output)
        assert "episodes.jsonl" in result.output
    no_config = bad_run(tmp_path, [good], config=False, name="no-config")
    result = runner.invoke(verifier_app, ["gen-data", str(no_config), "--out",
                                          str(tmp_path / "x.jsonl")])
    assert result.exit_code == 2 and "--config" in result.output
    result = runner.invoke(verifier_app, ["gen-data", str(tmp_path / "missing"), "--out",
                                          str(tmp_path / "x.jsonl")])
    assert result.exit_code == 2 and "no episodes.jsonl" in result.output


@pytest.fixture(scope="module")
def balanced(data, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("balanced") / "balanced.jsonl"
    output = invoke("balance", data, "--out", out, "--seed", "3")
    return out, output


def test_balance_gives_equal_labels_in_every_bucket(data, balanced):
    out, output = balanced
    before, after = read_rows(data), read_rows(out)
    per_bucket: dict[str, Counter] = {}
    for row in after:
        per_bucket.setdefault(row.bucket, Counter())[row.label] += 1
    assert per_bucket and all(c[0] == c[1] > 0 for c in per_bucket.values())
    kept = {(r.question, r.answer) for r in after}
    assert kept <= {(r.question, r.answer) for r in before}
    assert "kept right" in output and "total" in output
    # every bucket with both labels is kept, at the minority's size
    counts: dict[str, Counter] = {}
    for row in before:
        counts.setdefault(row.bucket, Counter())[row.label] += 1
    assert {b: min(c[0], c[1]) for b, c in counts.items() if min(c[0], c[1])} == {
        b: c[0] for b, c in per_bucket.items()}


def row(question: str, answer: str, label: int, difficulty: str = "d") -> VerifierRow:
    return VerifierRow(question=question, answer=answer, label=label, difficulty=difficulty)


def test_balance_drops_single_label_buckets_and_pairs_prefer_the_same_question():
    rows = [row("q1", "a", 1), row("q1", "b", 0), row("q1", "c", 1), row("q2", "d", 1),
            row("q3", "e", 0), row("q4", "f", 1, "only-right")]
    kept, counts = balance(rows, seed=0)
    assert {c.bucket: (c.kept_right, c.kept_wrong) for c in counts} == {
        "d": (2, 2), "only-right": (0, 0)}
    assert len(kept) == 4 and all(r.difficulty == "d" for r in kept)
    pairs, unpaired = build_pairs(rows, seed=0)
    same = [p for p in pairs if p.same_question]
    assert {(p.chosen.answer, p.rejected.answer) for p in same} == {("a", "b"), ("c", "b")}
    assert {(p.chosen.answer, p.rejected.answer) for p in pairs if not p.same_question} == {
        ("d", "e")}
    assert unpaired == 1  # "f": no wrong answer at its difficulty
    assert all(p.chosen.label == 1 and p.rejected.label == 0 for p in pairs)


def test_balance_rejects_bad_rows(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "a", "label": 1, "difficulty": 1})
                    + "\n" + json.dumps({"question": "q", "answer": "b", "label": 2,
                                         "difficulty": 1}) + "\n")
    result = runner.invoke(verifier_app, ["balance", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "line 2" in result.output and "label" in result.output


@pytest.fixture(scope="module")
def model_dir(balanced, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("verifier") / "rm"
    output = invoke("train", balanced[0], "--model", TINY_RANDOM, "--out", out,
                    "--max-steps", "4", "--batch-size", "4", "--max-length", "96",
                    "--lr", "1e-3", "--threads", "1")
    return out, output


def test_train_saves_a_classifier_that_loads_and_reports_accuracy(model_dir, balanced):
    out, output = model_dir
    assert (out / "config.json").is_file() and (out / "agora_verifier.json").is_file()
    assert json.loads((out / "agora_verifier.json").read_text())["max_length"] == 96
    assert "pair accuracy" in output and "held out" in output and "4 steps" in output
    verifier = LearnedVerifier.load(out)
    rows = read_rows(balanced[0])
    scores = verifier.score(rows[0].question, [r.answer for r in rows[:5]])
    assert len(scores) == 5 and all(math.isfinite(s) for s in scores)
    assert len(set(scores)) > 1  # the answer matters, not just the question


def test_train_with_lora_saves_a_merged_plain_classifier(balanced, tmp_path):
    out = tmp_path / "lora"
    output = invoke("train", balanced[0], "--model", TINY_RANDOM, "--out", out,
                    "--max-steps", "2", "--batch-size", "2", "--max-length", "64",
                    "--lora-rank", "4", "--lr", "1e-2", "--threads", "1")
    assert "2 steps" in output
    assert not (out / "adapter_config.json").exists()  # merged: transformers alone loads it
    assert json.loads((out / "config.json").read_text())["architectures"] == [
        "LlamaForSequenceClassification"]
    scores = LearnedVerifier.load(out).score("What is 1 + 1?", ["Answer: 2", "Answer: 3"])
    assert all(math.isfinite(s) for s in scores)


def test_train_without_pairs_fails_clearly(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "a", "label": 1, "difficulty": 1})
                    + "\n")
    result = runner.invoke(verifier_app, ["train", str(path), "--model", TINY_RANDOM,
                                          "--out", str(tmp_path / "m")])
    assert result.exit_code == 2 and "no (right, wrong) pair" in result.output


def test_encode_keeps_the_answer_end_and_the_suffix(model_dir):
    tok = LearnedVerifier.load(model_dir[0]).tokenizer
    long_answer = "blah " * 500 + "Answer: 4242"
    ids = encode(tok, "What is 4000 + 242?", long_answer, 64)
    text = tok.decode(ids)
    assert len(ids) <= 64
    assert text.startswith("Question: What is") and "Answer: 4242" in text
    assert text.endswith("Is this answer correct?")


def test_lazy_verifier_reports_a_bad_path_clearly(tmp_path):
    lazy = LazyVerifier(str(tmp_path / "nothing"))
    for _ in range(2):  # the failure is remembered, and reported the same way
        with pytest.raises(VerifierUnavailable, match="could not be loaded: FileNotFound"):
            lazy.get()
    with pytest.raises(VerifierUnavailable, match="AGORA_REWARD_MODEL"):
        LazyVerifier(None).get()


# --- served ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def learned_url(model_dir, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("logs") / "reward-learned.log"
    svc = uvicorn_service("reward-learned", "services.reward.app:app", port, log,
                          env={"AGORA_REWARD_MODEL": str(model_dir[0]),
                               "AGORA_REWARD_BLEND": "0.25"})
    svc.start()
    try:
        svc.wait_healthy(60)
        yield f"http://127.0.0.1:{port}"
    finally:
        svc.stop()


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_score_endpoint_scores_every_answer(learned_url, model_dir, tasks):
    task = tasks[0]
    answers = [f"Answer: {task.answer}", "Answer: 7", "I do not know."]
    resp = httpx.post(f"{learned_url}/v1/score", json={"question": task.question,
                                                       "answers": answers}, timeout=120)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert len(body["scores"]) == len(body["probs"]) == 3
    assert all(math.isfinite(s) for s in body["scores"])
    assert body["probs"] == pytest.approx([sigmoid(s) for s in body["scores"]])
    local = LearnedVerifier.load(model_dir[0]).score(task.question, answers)
    assert body["scores"] == pytest.approx(local, abs=1e-4)  # same ids as in training


def verify_mode(url: str, task: Task, responses: list[str], **extra) -> dict:
    ref = {**task.ref().model_dump(mode="json"), "question": task.question}
    resp = httpx.post(f"{url}/v1/verify", json={"kind": "math", "task": ref,
                                                 "responses": responses, **extra}, timeout=120)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_verify_learned_and_blend_report_rule_learned_and_final(learned_url, tasks):
    task = tasks[1]
    responses = [f"Answer: {task.answer}", f"Answer: {int(task.answer) + 3}"]
    learned = verify_mode(learned_url, task, responses, mode="learned")
    assert learned["mode"] == "learned" and learned["blend_weight"] is None
    assert [r["rule_reward"] for r in learned["results"]] == [1.0, 0.0]
    for r in learned["results"]:
        assert r["learned_prob"] == pytest.approx(sigmoid(r["learned_score"]))
        assert r["reward"] == r["learned_reward"] == pytest.approx(r["learned_prob"])
    blend = verify_mode(learned_url, task, responses, mode="blend", blend_weight=0.7)
    for r in blend["results"]:
        assert r["reward"] == pytest.approx(0.7 * r["rule_reward"] + 0.3 * r["learned_reward"])
    default = verify_mode(learned_url, task, responses, mode="blend")
    assert default["blend_weight"] == 0.25  # AGORA_REWARD_BLEND
    for r in default["results"]:
        assert r["reward"] == pytest.approx(0.25 * r["rule_reward"] + 0.75 * r["learned_reward"])
    # on a custom reward scale the learned probability is mapped onto it
    scaled = verify_mode(learned_url, task, responses, mode="learned",
                         rewards={"correct": 1.0, "wrong": -1.0})
    for r in scaled["results"]:
        assert r["reward"] == pytest.approx(-1.0 + 2.0 * r["learned_prob"])
    rule = verify_mode(learned_url, task, responses)
    assert [r["reward"] for r in rule["results"]] == [1.0, 0.0]
    assert all(r["learned_reward"] is None for r in rule["results"])


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"mode": "learned", "task": {"answer": "3"}}, "needs task.question"),
    ({"mode": "rule", "blend_weight": 0.5}, "blend_weight applies to mode 'blend' only"),
    ({"mode": "blend", "blend_weight": 1.5}, "less than or equal to 1"),
    ({"mode": "judge"}, "'rule', 'learned' or 'blend'"),
])
def test_bad_mode_requests_are_422(learned_url, extra, fragment):
    body = {"kind": "math", "task": {"answer": "3", "question": "1 + 2?"},
            "responses": ["3"], **extra}
    resp = httpx.post(f"{learned_url}/v1/verify", json=body, timeout=60)
    assert resp.status_code == 422, resp.text
    assert fragment in json.dumps(resp.json()["detail"])


def test_without_a_model_score_and_learned_modes_are_422(reward_url):
    # 422, not 503: no retry can succeed on a service started without a model.
    resp = httpx.post(f"{reward_url}/v1/score", json={"question": "1 + 1?", "answers": ["2"]},
                      timeout=30)
    assert resp.status_code == 422
    assert "AGORA_REWARD_MODEL" in resp.json()["detail"]
    resp = httpx.post(f"{reward_url}/v1/verify", timeout=60, json={
        "kind": "math", "task": {"answer": "2", "question": "1 + 1?"}, "responses": ["2"],
        "mode": "blend"})
    assert resp.status_code == 422 and "no learned verifier" in resp.json()["detail"]
    bad = httpx.post(f"{reward_url}/v1/score", json={"question": "q", "answers": []},
                     timeout=30)
    assert bad.status_code == 422
