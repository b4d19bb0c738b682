"""grpo / rloo need samples of the same prompt in one batch: the trainer's feed sends
``ppo.group_size`` episodes of one seed (and task, opponent, seat) together, and labels each turn
with its group, role and turn number. On a real Redis and Celery publisher."""

from __future__ import annotations

import redis

from agora.rollout.delivery import Delivery
from agora.rollout.records import EpisodeRecord, Turn
from agora.rollout.stream import EpisodeStream
from agora.rollout.worker import TASK_NAME
from agora.train.feed import EpisodeFeed
from tests.stack_helpers import feed_on_own_queue, tiny_config


def _feed(redis_url: str, **ppo) -> tuple[EpisodeFeed, EpisodeStream, str]:
    cfg = tiny_config(ppo={"batch_turns": 4, "minibatch_turns": 4, **ppo},
                      workers={"queue_ahead": 6})
    return feed_on_own_queue(redis_url, cfg, "groups")


def test_a_group_is_sent_together_with_one_seed_opponent_and_seat(redis_url):
    feed, stream, queue = _feed(redis_url, advantage="rloo", group_size=3)
    feed.top_up()
    payloads = sorted((e["payload"] for e in stream.unfinished_sent().values()),
                      key=lambda p: p["episode_id"])
    assert len(payloads) == 6 and len({p["episode_id"] for p in payloads}) == 6
    groups: dict[str, list[dict]] = {}
    for payload in payloads:
        groups.setdefault(payload["group"], []).append(payload)
    assert sorted(len(g) for g in groups.values()) == [3, 3]
    for members in groups.values():
        assert len({(p["seed"], p["opponent"], p["learner_seat"]) for p in members}) == 1
    assert len({p["seed"] for p in payloads}) == 2  # the two groups: two seeds
    redis.Redis.from_url(redis_url).delete(queue)


def test_without_groups_every_episode_has_its_own_seed(redis_url):
    feed, stream, queue = _feed(redis_url)
    feed.top_up()
    payloads = [e["payload"] for e in stream.unfinished_sent().values()]
    assert len(payloads) == 6 and len({p["seed"] for p in payloads}) == 6
    assert not any("group" in p for p in payloads)
    redis.Redis.from_url(redis_url).delete(queue)


def _turn(seat: int, role: str, reward: float) -> Turn:
    return Turn(seat=seat, agent="player", role=role, text="[1]", policy_version=0,
                prompt_token_ids=[1, 2], completion_token_ids=[3], behaviour_logprobs=[-0.5],
                reward=reward)


def test_collected_turns_are_labelled_by_group_role_and_turn_number(redis_url):
    feed, stream, queue = _feed(redis_url, advantage="grpo", group_size=2)
    for n, reward in enumerate((1.0, -1.0)):
        record = EpisodeRecord(run_id=feed.run_id, episode_id=f"{feed.run_id}-{n}",
                               env="tictactoe", seed=7, seats=["player", "player"],
                               turns=[_turn(0, "X", reward), _turn(1, "O", -reward),
                                      _turn(0, "X", reward)],
                               info={"group": "1"})
        assert stream.append_once(record)
    got = feed.collect({"player": 0}, budget_spent=lambda: False)
    assert got is not None
    groups = [t.group for t in got.turns["player"]]
    assert groups == ["1/X/1", "1/O/1", "1/X/2"] * 2
    redis.Redis.from_url(redis_url).delete(queue)


def _grouped_record(feed: EpisodeFeed, n: int, group: str, reward: float) -> EpisodeRecord:
    return EpisodeRecord(run_id=feed.run_id, episode_id=f"{feed.run_id}-{n}", env="tictactoe",
                         seed=7, seats=["player", "player"],
                         turns=[_turn(0, "X", reward), _turn(1, "O", -reward)],
                         info={"group": group})


def test_a_group_joins_a_batch_whole_and_a_late_one_is_released_as_it_is(redis_url):
    feed, stream, queue = _feed(redis_url, advantage="rloo", group_size=2)
    polls = iter(range(3))
    stop_soon = lambda: next(polls, None) is None  # noqa: E731  (the budget ends after 3 polls)
    assert stream.append_once(_grouped_record(feed, 0, "a", 1.0))
    assert stream.append_once(_grouped_record(feed, 1, "b", 1.0))
    # Two episodes of two groups, each waiting for its sibling: no batch yet (budget ends).
    assert feed.collect({"player": 0}, budget_spent=stop_soon) is None
    assert sorted(feed.held) == ["a", "b"]
    assert stream.append_once(_grouped_record(feed, 2, "a", -1.0))
    # a's sibling arrives; b waited too long (a member failed for good): released alone.
    feed.held_since["b"] -= 3 * feed.cfg.workers.visibility_timeout + 1
    got = feed.collect({"player": 0}, budget_spent=lambda: False)
    assert got is not None and not feed.held
    assert sorted(r.episode_id.rsplit("-", 1)[1] for r in got.records) == ["0", "1", "2"]
    assert sorted(t.group for t in got.turns["player"]) == ["a/O/1", "a/O/1", "a/X/1", "a/X/1",
                                                            "b/O/1", "b/X/1"]
    redis.Redis.from_url(redis_url).delete(queue)


def test_a_restarted_feed_numbers_on_from_the_run_without_a_gap(redis_url):
    """The feed keeps the last episode index itself and writes it with the episodes it
    numbers; a trainer started again on the run (--resume) reads it back."""
    feed, stream, queue = _feed(redis_url)
    feed.top_up()
    run_id = feed.run_id
    for n in (1, 2):  # two finished for good: room for two more
        stream.mark_failed(f"{run_id}-{n:08d}")
    again = EpisodeFeed(feed.cfg, run_id, redis_url, feed.r, stream)
    again.delivery = Delivery(stream, again.celery, TASK_NAME, queue)
    again.top_up()
    assert sorted(stream.unfinished_sent()) == [f"{run_id}-{n:08d}" for n in range(3, 9)]
    assert stream.last_episode_index() == 8
    assert redis.Redis.from_url(redis_url).get(stream.keys.episodes_enqueued) == b"8"
    redis.Redis.from_url(redis_url).delete(queue)


def test_filtered_groups_leave_the_batch_and_more_episodes_are_read(redis_url):
    """ppo.filter_groups (DAPO's dynamic sampling): a group whose episodes all scored alike
    teaches nothing and leaves the batch (counted); the batch fills with groups that differ."""
    feed, stream, queue = _feed(redis_url, advantage="rloo", group_size=2, filter_groups=True)
    # Group a: both episodes won (alike, every turn of it filtered); b: one won, one lost.
    for n, (group, reward) in enumerate([("a", 1.0), ("a", 1.0), ("b", 1.0), ("b", -1.0)]):
        assert stream.append_once(_grouped_record(feed, n, group, reward))
    got = feed.collect({"player": 0}, budget_spent=lambda: False)
    assert got is not None
    assert sorted(t.group for t in got.turns["player"]) == ["b/O/1", "b/O/1", "b/X/1", "b/X/1"]
    assert got.filtered == {"player": 4}
    assert len(got.entry_ids) == 4  # the filtered episodes are consumed (acked) all the same
    redis.Redis.from_url(redis_url).delete(queue)


def test_after_max_filtered_batches_groups_are_taken_as_they_come(redis_url):
    """A policy whose groups all end alike still trains: once max_filtered_batches x
    batch_turns turns were left out of one batch, the rest join it unfiltered."""
    feed, stream, queue = _feed(redis_url, advantage="rloo", group_size=2, filter_groups=True,
                                max_filtered_batches=1)
    for n, group in enumerate(["a", "a", "b", "b"]):
        assert stream.append_once(_grouped_record(feed, n, group, 1.0))
    got = feed.collect({"player": 0}, budget_spent=lambda: False)
    assert got is not None and got.filtered == {"player": 4}  # a's 4 turns: the cap (1 x 4)
    assert sorted(t.group for t in got.turns["player"]) == ["b/O/1", "b/O/1", "b/X/1", "b/X/1"]
    redis.Redis.from_url(redis_url).delete(queue)
