"""The reward service over real HTTP (uvicorn): replays games and assigns per-turn rewards."""

from __future__ import annotations

import json

import httpx
import pytest

# O takes the top row; X plays 3 and 4.
SEAT0_WINS = ["[0]", "[3]", "[1]", "[4]", "[2]"]
# X takes the middle column; O's three moves make no line.
SEAT1_WINS = ["[0]", "[1]", "[2]", "[4]", "[3]", "[7]"]
# A full board with no line (see tests/test_tictactoe.py).
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
    assert resp.json() == {"status": "ok"}


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
