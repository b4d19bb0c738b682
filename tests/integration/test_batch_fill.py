"""When a multi-agent batch is complete (``ppo.batch_fill``), on a real Redis stream.

Two learners whose seats act unequally often, as in the research env (the researcher three
turns per episode, the writer one): ``every`` waits until the seat that acts least has
``batch_turns`` turns; ``any`` closes the batch once the busiest seat has, and the other trains
on its turns of the same episodes.
"""

from __future__ import annotations

import pytest
import redis

from agora.config.base import ConfigError
from agora.rollout.records import EpisodeRecord, Turn
from agora.rollout.stream import EpisodeStream
from agora.train.feed import EpisodeFeed
from tests.stack_helpers import feed_on_own_queue, tiny_config

BATCH = 6


def _feed(redis_url: str, fill: str) -> tuple[EpisodeFeed, EpisodeStream, str]:
    cfg = tiny_config(
        agents=[{"name": name, "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"temperature": 1.0, "max_tokens": 4, "stop": ["]"]}}
                for name in ("lead", "writer")],
        environment={"name": "tictactoe", "seats": ["lead", "writer"],
                     "opponents": {"self": 1.0}},
        ppo={"batch_turns": BATCH, "minibatch_turns": BATCH, "batch_fill": fill},
        workers={"queue_ahead": 4})
    return feed_on_own_queue(redis_url, cfg, "fill")


def _episode(feed: EpisodeFeed, n: int) -> EpisodeRecord:
    """The lead acts three times, the writer once."""
    def turn(seat: int, agent: str) -> Turn:
        return Turn(seat=seat, agent=agent, role=agent, text="[1]", policy_version=0,
                    prompt_token_ids=[1, 2], completion_token_ids=[3],
                    behaviour_logprobs=[-0.5], reward=1.0)
    return EpisodeRecord(run_id=feed.run_id, episode_id=f"{feed.run_id}-{n}", env="tictactoe",
                         seed=n, seats=["lead", "writer"],
                         turns=[turn(0, "lead"), turn(0, "lead"), turn(0, "lead"),
                                turn(1, "writer")])


@pytest.mark.parametrize(("fill", "episodes", "lead", "writer"),
                         [("every", 6, 18, 6), ("any", 2, 6, 2)])
def test_the_batch_closes_when_every_or_any_learner_has_batch_turns(
        redis_url, fill, episodes, lead, writer):
    feed, stream, queue = _feed(redis_url, fill)
    for n in range(8):
        assert stream.append_once(_episode(feed, n))
    got = feed.collect({"lead": 0, "writer": 0}, budget_spent=lambda: False)
    assert got is not None
    assert len(got.records) == episodes
    assert {a: len(t) for a, t in got.turns.items()} == {"lead": lead, "writer": writer}
    # The episodes read past the batch wait for the next one, in order.
    assert [r.episode_id for _, r in feed.backlog] == [
        f"{feed.run_id}-{n}" for n in range(episodes, 8)]
    redis.Redis.from_url(redis_url).delete(queue)


def test_any_still_waits_for_a_turn_of_every_learner(redis_url):
    """A batch never leaves a learner without a turn to update on: episodes where only the
    lead acted (the writer's turns stale, or not played) do not close it, however many."""
    feed, stream, queue = _feed(redis_url, "any")
    for n in range(3):  # 9 lead turns, none of the writer
        lead_only = _episode(feed, n)
        assert stream.append_once(lead_only.model_copy(update={"turns": lead_only.turns[:3]}))
    polls = 0

    def budget_spent() -> bool:  # a whole episode arrives once the feed has polled twice
        nonlocal polls
        polls += 1
        if polls == 3:
            assert stream.append_once(_episode(feed, 3))
        return polls > 10

    got = feed.collect({"lead": 0, "writer": 0}, budget_spent=budget_spent)
    assert got is not None and polls > 2
    assert {a: len(t) for a, t in got.turns.items()} == {"lead": 12, "writer": 1}
    redis.Redis.from_url(redis_url).delete(queue)


def test_a_misspelt_batch_fill_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="batch_fill"):
        tiny_config(ppo={"batch_fill": "all"})
