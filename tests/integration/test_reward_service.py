"""The reward service over real HTTP (uvicorn): replays games and assigns per-turn rewards,
and checks math / NLI responses against a task's ground truth."""

from __future__ import annotations

import json

import httpx
import pytest

# O takes the top row; X plays 3 and 4.
SEAT0_WINS = ["[0]", "[3]", "[1]", "[4]", "[2]"]
# X takes the middle column; O's three moves make no line.
SEAT1_WINS = ["[0]", "[1]", "[2]", "[4]", "[3]", "[7]"]
# A full board with no line (see tests/unit/test_tictactoe.py).
DRAW = ["[0]", "[1]", "[2]", "[4]", "[3]", "[5]", "[7]", "[6]", "[8]"]
# X plays onto O's cell 0 on its second move.
SEAT1_ILLEGAL = ["[4]", "[8]", "[0]", "[0]"]


def verify(url: str, actions: object, **extra) -> httpx.Response:
    return httpx.post(f"{url}/v1/verify", json={"env": "tictactoe", "actions": actions, **extra},
                      timeout=10)


def verdict(url: str, actions: list[str], **extra) -> dict:
    resp = verify(url, actions, **extra)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_health(reward_url):
    resp = httpx.get(f"{reward_url}/health", timeout=10)
    assert resp.status_code == 200
    body = resp.json()
    assert body.keys() == {"status", "sandbox_run_limits"} and body["status"] == "ok"
    # Whether a run's processes share one limit (a cgroup per run) or each has its own.
    assert body["sandbox_run_limits"].startswith(("cgroup v", "no cgroup per run")), body


def test_seat_0_win_rewards_every_move_of_each_seat(reward_url):
    v = verdict(reward_url, SEAT0_WINS)
    assert v["results"] == ["win", "loss"]
    assert v["seat_rewards"] == [1.0, -1.0]
    assert v["turn_rewards"] == [1.0, -1.0, 1.0, -1.0, 1.0]
    assert v["legal"] == [True] * 5
    assert v["finished"] is True
    assert "three in a row" in v["reason"]


def test_seat_1_win(reward_url):
    v = verdict(reward_url, SEAT1_WINS)
    assert v["results"] == ["loss", "win"]
    assert v["turn_rewards"] == [-1.0, 1.0, -1.0, 1.0, -1.0, 1.0]


def test_draw_gives_every_move_zero(reward_url):
    v = verdict(reward_url, DRAW)
    assert v["results"] == ["draw", "draw"]
    assert v["seat_rewards"] == [0.0, 0.0]
    assert v["turn_rewards"] == [0.0] * 9


def test_illegal_move_alone_pays_the_penalty(reward_url):
    """The offender's earlier legal moves get 0; the other seat gets its win on every move."""
    v = verdict(reward_url, SEAT1_ILLEGAL)
    assert v["results"] == ["win", "illegal"]
    assert v["legal"] == [True, True, True, False]
    assert v["seat_rewards"] == [1.0, -1.0]
    assert v["turn_rewards"] == [1.0, 0.0, 1.0, -1.0]
    assert "occupied" in v["reason"]


@pytest.mark.parametrize("bad", ["I pass", "[9]"])
def test_illegal_first_move(reward_url, bad):
    v = verdict(reward_url, [bad])
    assert v["results"] == ["illegal", "win"]
    assert v["turn_rewards"] == [-1.0]
    assert v["legal"] == [False]


def test_unfinished_game_gives_no_reward(reward_url):
    v = verdict(reward_url, ["[4]", "[0]"])
    assert v["finished"] is False
    assert v["results"] == ["unfinished", "unfinished"]
    assert v["turn_rewards"] == [0.0, 0.0]
    assert v["seat_rewards"] == [0.0, 0.0]


def test_custom_reward_scheme_is_honoured(reward_url):
    scheme = {"win": 2.0, "draw": 0.25, "loss": -3.0, "illegal": -7.0}
    won = verdict(reward_url, SEAT0_WINS, rewards=scheme)
    assert won["turn_rewards"] == [2.0, -3.0, 2.0, -3.0, 2.0]
    drawn = verdict(reward_url, DRAW, rewards=scheme)
    assert drawn["turn_rewards"] == [0.25] * 9
    illegal = verdict(reward_url, SEAT1_ILLEGAL, rewards=scheme)
    assert illegal["seat_rewards"] == [2.0, -7.0]
    assert illegal["turn_rewards"] == [2.0, 0.0, 2.0, -7.0]


def test_partial_reward_scheme_keeps_the_other_defaults(reward_url):
    v = verdict(reward_url, SEAT1_ILLEGAL, rewards={"illegal": -0.5})
    assert v["turn_rewards"] == [1.0, 0.0, 1.0, -0.5]


def test_same_actions_same_verdict(reward_url):
    assert verdict(reward_url, SEAT0_WINS, seed=1) == verdict(reward_url, SEAT0_WINS, seed=2)


def post_raw(url: str, body: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/verify", content=body,
                      headers={"content-type": "application/json"}, timeout=10)


def good(**changes) -> str:
    return json.dumps({"env": "tictactoe", "actions": SEAT0_WINS, **changes})


BAD_REQUESTS = {
    "unknown env": (good(env="chess"), "unknown env 'chess'"),
    "actions after the end": (good(actions=SEAT0_WINS + ["[5]"]), "after the game ended"),
    "unknown field": (good(actoins=["[4]"]), "actoins"),
    "unknown reward key": (good(rewards={"wn": 5.0}), "wn"),
    "NaN reward": (good(rewards={"win": float("nan")}), "finite"),
    "action too long": (good(actions=["[4]" + " " * 5000]), "exceed 4096 characters"),
    "too many actions": (good(actions=["x"] * 513), "at most 512"),
    "actions not a list": (good(actions="[0] [3] [1]"), "valid list"),
    "action not a string": (good(actions=[0, 3, 1]), "valid string"),
    "wrong task": (good(task="math"), "game_outcome"),
    "missing env": (json.dumps({"actions": ["[4]"]}), "Field required"),
    "seed not an int": (good(seed="abc"), "valid integer"),
    "NaN seed": (good(seed=float("nan")), "finite"),
    "number too long to parse": (good()[:-1] + ', "seed": ' + "1" * 5000 + "}", "parsing"),
    "top-level list": (json.dumps([1, 2]), "dictionary"),
    "not JSON": ("{env: tictactoe", "JSON"),
}


@pytest.mark.parametrize("case", BAD_REQUESTS)
def test_bad_request_gets_a_4xx_with_a_json_message(reward_url, case):
    body, fragment = BAD_REQUESTS[case]
    resp = post_raw(reward_url, body)
    assert 400 <= resp.status_code < 500, (resp.status_code, resp.text)
    detail = resp.json()["detail"]
    assert fragment in json.dumps(detail, ensure_ascii=False)


def metric_samples(url: str, name: str) -> list[str]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return [line for line in text.splitlines() if line.startswith(name + "{")]


def test_metrics_count_requests_by_service_route_and_status(reward_url):
    verify(reward_url, SEAT0_WINS)
    verify(reward_url, SEAT0_WINS + ["[5]"])
    samples = metric_samples(reward_url, "agora_http_requests_total")
    ok = [s for s in samples if 'route="/v1/verify"' in s and 'status="200"' in s]
    rejected = [s for s in samples if 'route="/v1/verify"' in s and 'status="422"' in s]
    assert ok and rejected
    assert all('service="reward"' in s for s in samples)
    assert float(ok[0].rsplit(" ", 1)[1]) >= 1


def server_errors(url: str) -> float:
    """5xx responses the server has counted so far, over all routes."""
    samples = metric_samples(url, "agora_http_errors_total")
    return sum(float(s.rsplit(" ", 1)[1]) for s in samples if 'service="reward"' in s)


def test_bad_requests_never_cause_a_5xx(reward_url):
    """Counted by the server itself, so a 500 turned into something else by a proxy or client
    would still show."""
    before = server_errors(reward_url)
    statuses = [post_raw(reward_url, body).status_code for body, _ in BAD_REQUESTS.values()]
    assert all(400 <= code < 500 for code in statuses), statuses
    assert server_errors(reward_url) == before
    assert metric_samples(reward_url, "agora_http_requests_total")


# --- task verification (kind "math" / "nli") ------------------------------------------------
# The first task request imports reasoning-gym and starts math-verify workers (~2-6 s).
TASK_TIMEOUT = 60


def verify_task(url: str, kind: str, task: dict, responses: object, **extra) -> httpx.Response:
    body = {"kind": kind, "task": task, "responses": responses, **extra}
    return httpx.post(f"{url}/v1/verify", json=body, timeout=TASK_TIMEOUT)


def task_verdict(url: str, kind: str, task: dict, responses: list[str], **extra) -> dict:
    resp = verify_task(url, kind, task, responses, **extra)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["kind"] == kind
    assert len(body["results"]) == len(responses)
    return body


@pytest.fixture(scope="module")
def arithmetic_task() -> dict:
    from agora.data import load_tasks

    task = load_tasks({"source": "reasoning_gym", "name": "basic_arithmetic", "size": 1,
                       "seed": 11, "config": {"max_terms": 3}})[0]
    return task.ref().model_dump(mode="json")


def test_game_request_with_explicit_kind_is_the_same_game(reward_url):
    assert verdict(reward_url, SEAT0_WINS, kind="game") == verdict(reward_url, SEAT0_WINS)


def test_math_with_a_reasoning_gym_task_uses_its_scorer(reward_url, arithmetic_task):
    answer = arithmetic_task["answer"]
    responses = [f"Let me compute.\n\\boxed{{{answer}}}", f"The answer is {answer}.",
                 f"\\boxed{{{int(answer) + 7}}}", "I cannot do this."]
    body = task_verdict(reward_url, "math", arithmetic_task, responses)
    results = body["results"]
    assert [r["correct"] for r in results] == [True, True, False, False]
    assert [r["reward"] for r in results] == [1.0, 1.0, 0.0, 0.0]
    assert [r["extracted"] for r in results] == [answer, answer, str(int(answer) + 7), None]
    assert [r["parsable"] for r in results] == [True, True, True, False]
    assert {r["method"] for r in results} == {"reasoning_gym:basic_arithmetic"}
    assert body["accuracy"] == 0.5


def test_math_with_a_plain_answer_uses_math_verify(reward_url):
    responses = ["\\boxed{\\frac{1}{2}}", "#### 0.5", "The answer is 1/2.", "0.6", ""]
    body = task_verdict(reward_url, "math", {"answer": "0.5"}, responses)
    assert [r["correct"] for r in body["results"]] == [True, True, True, False, False]
    assert body["results"][0]["method"] == "math_verify"


def test_custom_task_rewards(reward_url):
    rewards = {"correct": 2.0, "wrong": -0.5, "unparsable": -1.0}
    body = task_verdict(reward_url, "math", {"answer": "42"}, ["42", "41", "no idea"],
                        rewards=rewards)
    assert [r["reward"] for r in body["results"]] == [2.0, -0.5, -1.0]
    body = task_verdict(reward_url, "nli", {"answer": "neutral"}, ["neutral", "hmm"],
                        rewards={"wrong": -0.25})
    assert [r["reward"] for r in body["results"]] == [1.0, -0.25]  # unparsable defaults to wrong


def test_nli_responses(reward_url):
    task = {"answer": "contradiction", "source": "jsonl:anli_sample.jsonl"}
    responses = ["[contradiction]", "Answer: Contradiction", "It entails it.",
                 "neutral or contradiction?"]
    body = task_verdict(reward_url, "nli", task, responses)
    assert [r["correct"] for r in body["results"]] == [True, True, False, False]
    assert [r["predicted"] for r in body["results"]] == [
        "contradiction", "contradiction", "entailment", None]
    assert [r["parsable"] for r in body["results"]] == [True, True, True, False]


def test_concurrent_task_requests_are_all_right(reward_url, arithmetic_task):
    """The endpoint runs in FastAPI's thread pool: math-verify must work off the main thread."""
    from concurrent.futures import ThreadPoolExecutor

    def one(n: int) -> list[bool]:
        responses = [f"\\boxed{{\\frac{{{n}}}{{{4 * n}}}}}", f"{n}/{n + 1}"]
        math_ok = task_verdict(reward_url, "math", {"answer": "0.25"}, responses)
        rg_ok = task_verdict(reward_url, "math", arithmetic_task, [arithmetic_task["answer"]])
        return [r["correct"] for r in math_ok["results"] + rg_ok["results"]]

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, range(1, 17))) == [[True, False, True]] * 16


def task_body(kind: str = "math", **changes) -> str:
    return json.dumps({"kind": kind, "task": {"answer": "42"}, "responses": ["42"], **changes})


BAD_TASK_REQUESTS = {
    "unknown kind": (task_body("chess"), "expected tags: 'game', 'math', 'nli', 'code'"),
    "kind not a string": (task_body(["math"]), "does not match any of the expected tags"),
    "no responses": (task_body(responses=[]), "at least 1 item"),
    "too many responses": (task_body(responses=["1"] * 257), "at most 256"),
    "response too long": (task_body(responses=["1" * 40000]), "at most 32768 characters"),
    "response not a string": (task_body(responses=[42]), "valid string"),
    "missing task": (json.dumps({"kind": "nli", "responses": ["x"]}), "Field required"),
    "task without answer": (task_body(task={"source": "x"}), "answer"),
    "unknown task field": (task_body(task={"answer": "1", "anwser": "1"}), "anwser"),
    "game fields on a math request": (task_body(env="tictactoe"), "env"),
    "unknown reward key": (task_body(rewards={"right": 1.0}), "right"),
    "NaN reward": (task_body(rewards={"wrong": float("nan")}), "finite"),
    "bad NLI gold": (task_body("nli", task={"answer": "maybe"}), "label 'maybe' is not one of"),
    "unknown rg dataset": (task_body(task={"answer": "1", "source": "reasoning_gym:nope"}),
                           "unknown reasoning-gym dataset 'nope'"),
    "rg metadata its scorer cannot use": (
        task_body(task={"answer": "1", "source": "reasoning_gym:word_ladder"}),
        "cannot score this task"),
    "bad rg knobs": (task_body(task={"answer": "1", "source": "reasoning_gym:basic_arithmetic",
                                     "metadata": {"rg_config": {"max_terms": 0}}}), "max_terms"),
}


@pytest.mark.parametrize("case", BAD_TASK_REQUESTS)
def test_bad_task_request_gets_a_422_with_a_clear_message(reward_url, case):
    body, fragment = BAD_TASK_REQUESTS[case]
    before = server_errors(reward_url)
    resp = httpx.post(f"{reward_url}/v1/verify", content=body,
                      headers={"content-type": "application/json"}, timeout=TASK_TIMEOUT)
    assert resp.status_code == 422, (resp.status_code, resp.text)
    assert fragment in json.dumps(resp.json()["detail"], ensure_ascii=False)
    assert server_errors(reward_url) == before


def verifications(url: str) -> dict[tuple[str, str], float]:
    counts = {}
    for sample in metric_samples(url, "agora_verifications_total"):
        labels, value = sample.rsplit(" ", 1)
        kind = labels.split('kind="')[1].split('"')[0]
        result = labels.split('result="')[1].split('"')[0]
        counts[(kind, result)] = float(value)
    return counts


def test_metrics_count_verifications_by_kind_and_result(reward_url):
    before = verifications(reward_url)
    task_verdict(reward_url, "math", {"answer": "3"}, ["\\boxed{3}", "4", "?", "3"])
    task_verdict(reward_url, "nli", {"answer": "neutral"}, ["neutral", "maybe"])
    verdict(reward_url, SEAT0_WINS)
    verdict(reward_url, ["[4]"])
    after = verifications(reward_url)

    def added(kind: str, result: str) -> float:
        return after.get((kind, result), 0.0) - before.get((kind, result), 0.0)

    assert added("math", "correct") == 2 and added("math", "wrong") == 1
    assert added("math", "unparsable") == 1
    assert added("nli", "correct") == 1 and added("nli", "unparsable") == 1
    assert added("game", "finished") == 1 and added("game", "unfinished") == 1


def test_math_program_answers_run_in_the_sandbox_and_are_counted(reward_url):
    def programs() -> dict[str, float]:
        samples = metric_samples(reward_url, "agora_reward_program_answers_total")
        return {line.split('outcome="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
                for line in samples}

    before = programs()
    responses = ["```python\nprint(6 * 7)\n```", "```python\nprint(41)\n```",
                 "```python\nwhile True: pass\n```", "Answer: 42"]
    body = task_verdict(reward_url, "math", {"answer": "42"}, responses, answer="either",
                        # 1 CPU second ends the loop; the wall clock is far above it, so a
                        # loaded machine still reports cpu_limit and runs the rest in time
                        program_limits={"cpu_seconds": 1, "wall_seconds": 30})
    assert body["answer"] == "either"
    results = body["results"]
    assert [r["correct"] for r in results] == [True, False, False, True]
    assert [r["program"] for r in results] == ["ok", "ok", "cpu_limit", None]
    assert [r["printed"] for r in results] == ["42", "41", None, None]
    after = programs()
    for outcome, n in (("right", 1), ("wrong", 1), ("cpu_limit", 1)):
        assert after.get(outcome, 0.0) - before.get(outcome, 0.0) == n, outcome
    text = task_verdict(reward_url, "math", {"answer": "42"}, responses[:1])
    assert text["results"][0]["program"] is None  # answer: text (the default) runs nothing
    bad = verify_task(reward_url, "math", {"answer": "42"}, ["x"], answer="code")
    assert bad.status_code == 422 and "answer" in bad.text


# --- code verification (kind "code"): programs against hidden tests, in the sandbox ---------
CODE_TESTS = (
    "def test_small():\n    assert add(1, 2) == 3\n\n"
    "def test_negative():\n    assert add(-4, 1) == -3\n\n"
    "def test_big():\n    assert add(10**6, 1) == 10**6 + 1\n"
)
GOOD_CODE = "def add(a, b):\n    return a + b\n"
# Right only for small positive numbers: passes one test of three.
BUGGY_CODE = "def add(a, b):\n    return abs(a) + abs(b) if a < 100 else a\n"
FAST_LIMITS = {"cpu_seconds": 1, "wall_seconds": 4}


def code_verdict(url: str, **body) -> dict:
    resp = httpx.post(f"{url}/v1/verify", json={"kind": "code", "tests": CODE_TESTS, **body},
                      timeout=TASK_TIMEOUT)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["kind"] == "code"
    return out


def test_code_correct_program_passes_every_test(reward_url):
    body = code_verdict(reward_url, code=GOOD_CODE)
    [result] = body["results"]
    assert result["passed"] is True and result["status"] == "ok"
    assert (result["tests_passed"], result["tests_total"]) == (3, 3)
    assert result["reward"] == 1.0 and body["pass_rate"] == 1.0


def test_code_responses_are_extracted_and_rewarded_by_pass_rate(reward_url):
    responses = [f"Here is my fix:\n```python\n{GOOD_CODE}```\nDone.",
                 f"```python\n{BUGGY_CODE}```",
                 "I would rather not.",
                 "```python\ndef add(a, b)\n    return a + b\n```"]  # a syntax error
    body = code_verdict(reward_url, responses=responses)
    results = body["results"]
    assert [r["passed"] for r in results] == [True, False, False, False]
    assert [r["tests_passed"] for r in results] == [3, 1, 0, 0]
    assert [r["reward"] for r in results] == pytest.approx([1.0, 1 / 3, 0.0, 0.0])
    assert "test_negative" in results[1]["failures"]
    assert "could not load" in results[3]["reason"]
    assert body["pass_rate"] == 0.25
    strict = code_verdict(reward_url, responses=responses[:2],
                          rewards={"partial": False, "passed": 2.0, "failed": -1.0})
    assert [r["reward"] for r in strict["results"]] == [2.0, -1.0]


def test_code_infinite_loops_are_contained_and_reported(reward_url):
    """A busy loop hits the CPU limit, a sleeping one the wall clock; both are verdicts."""
    before = server_errors(reward_url)
    spin = GOOD_CODE + "while True:\n    pass\n"
    sleep = GOOD_CODE + "import time\nwhile True:\n    time.sleep(1)\n"
    hang_in_test = "def add(a, b):\n    while True:\n        pass\n"
    body = code_verdict(reward_url, responses=[spin, sleep, hang_in_test], limits=FAST_LIMITS)
    statuses = [r["status"] for r in body["results"]]
    assert statuses[0] in ("cpu_limit", "timeout") and statuses[1] == "timeout", statuses
    assert statuses[2] in ("cpu_limit", "timeout"), statuses
    assert all(not r["passed"] and r["reward"] == 0.0 for r in body["results"])
    assert server_errors(reward_url) == before


BAD_CODE_REQUESTS = {
    "neither code nor responses": ({"tests": CODE_TESTS}, "exactly one of 'code'"),
    "both code and responses": ({"tests": CODE_TESTS, "code": GOOD_CODE,
                                 "responses": [GOOD_CODE]}, "exactly one of 'code'"),
    "no tests": ({"code": GOOD_CODE}, "Field required"),
    "empty tests": ({"code": GOOD_CODE, "tests": ""}, "at least 1 character"),
    "tests do not parse": ({"code": GOOD_CODE, "tests": "def test_x(:\n"}, "does not parse"),
    "too many responses": ({"tests": CODE_TESTS, "responses": ["x"] * 33}, "at most 32"),
    "limits too generous": ({"code": GOOD_CODE, "tests": CODE_TESTS,
                             "limits": {"wall_seconds": 600}}, "less than or equal to 60"),
    "unknown limit": ({"code": GOOD_CODE, "tests": CODE_TESTS,
                       "limits": {"seccomp_filter": False}}, "seccomp_filter"),
    "NaN reward": ({"code": GOOD_CODE, "tests": CODE_TESTS, "rewards": {"passed": "NaN"}},
                   "finite"),
    "code not a string": ({"code": 42, "tests": CODE_TESTS}, "valid string"),
}


@pytest.mark.parametrize("case", BAD_CODE_REQUESTS)
def test_bad_code_request_gets_a_422(reward_url, case):
    body, fragment = BAD_CODE_REQUESTS[case]
    before = server_errors(reward_url)
    resp = httpx.post(f"{reward_url}/v1/verify", json={"kind": "code", **body},
                      timeout=TASK_TIMEOUT)
    assert resp.status_code == 422, (resp.status_code, resp.text)
    assert fragment in json.dumps(resp.json()["detail"], ensure_ascii=False)
    assert server_errors(reward_url) == before


def test_metrics_count_code_verifications(reward_url):
    before = verifications(reward_url)
    code_verdict(reward_url, responses=[GOOD_CODE, BUGGY_CODE, "while True:\n    pass\n"],
                 limits=FAST_LIMITS)
    after = verifications(reward_url)

    def added(result: str) -> float:
        return after.get(("code", result), 0.0) - before.get(("code", result), 0.0)

    assert added("passed") == 1 and added("failed") == 1
    assert added("cpu_limit") + added("timeout") == 1
