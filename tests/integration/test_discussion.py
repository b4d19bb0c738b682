"""The MAPoRL discussion env and its reward mixing, with scripted agents."""

from __future__ import annotations

from pathlib import Path

import pytest

from agora.envs.discussion import Discussion, DiscussionTask
from agora.rewards.discussion import discussion_rewards

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
TASK = DiscussionTask(task_id="t1", kind="math", question="What is 2 + 3?")


def test_rounds_are_simultaneous_and_later_rounds_show_previous_answers():
    env = Discussion(TASK, num_agents=2, rounds=2)
    env.reset(0)
    seen = []
    script = ["I think 6. Answer: 6", "2 + 3 = 5. Answer: 5", "Agent 2 is right. Answer: 5",
              "Answer: 5"]
    for text in script:
        seat = env.current_seat
        seen.append(env.observation(seat)[-1]["content"])
        assert env.step(text).legal
    assert env.done
    assert env.answers == [script[:2], script[2:]]
    # Round 1: nobody sees an answer, not even the one agent 1 gave just before agent 2 acts.
    assert "Answer from" not in seen[0] and "Answer: 6" not in seen[1]
    # Round 2: both answers of round 1, one's own marked "you".
    assert "Answer from you:\nI think 6. Answer: 6" in seen[2]
    assert "Answer from agent 2:\n2 + 3 = 5. Answer: 5" in seen[2]
    assert "Answer from you:\n2 + 3 = 5. Answer: 5" in seen[3]
    assert env.role(1) == "agent2"
    assert not env.step("late").legal


def test_single_agent_discussion_is_plain_answering():
    env = Discussion(TASK, num_agents=1, rounds=1)
    env.reset(0)
    system = env.observation(0)[0]["content"]
    assert "agent" not in system and "Answer: <number>" in system
    env.step("Answer: 5")
    assert env.done


def test_long_answers_are_clipped_to_their_end():
    env = Discussion(TASK, num_agents=1, rounds=2)
    env.reset(0)
    env.step("x" * 5000 + " Answer: 5")
    shown = env.observation(0)[-1]["content"]
    assert shown.count("x") < 1000 and "Answer: 5" in shown


def test_bad_task_kind_and_sizes_are_rejected():
    with pytest.raises(ValueError, match="task kind"):
        Discussion(DiscussionTask("t", "poetry", "?"))
    with pytest.raises(ValueError, match="at least one"):
        Discussion(TASK, num_agents=0)


def test_rewards_look_ahead_and_mix_teammates_by_alpha():
    # Round 1: agent 0 wrong, agent 1 right; round 2: both right.
    scores = [[0.0, 1.0], [1.0, 1.0]]
    selfish = discussion_rewards(scores, alpha=0.0)
    assert selfish == [[0.5, 1.0], [1.0, 1.0]]  # own score averaged over this and later rounds
    team = discussion_rewards(scores, alpha=0.5)
    assert team[0] == [0.5 + 0.5 * 1.0, 1.0 + 0.5 * 0.5]
    assert team[1] == [1.5, 1.5]
    assert discussion_rewards([[1.0]], alpha=1.0) == [[1.0]]  # alone: no team term
    assert discussion_rewards([], alpha=1.0) == []


def test_answer_credit_pays_each_answer_its_own_score():
    scores = [[0.0, 1.0], [1.0, 1.0]]
    # No look-ahead: alice's wrong first answer earns 0 although her second is right.
    assert discussion_rewards(scores, alpha=0.0, credit="answer") == scores
    team = discussion_rewards(scores, alpha=0.5, credit="answer")
    assert team == [[0.0 + 0.5 * 1.0, 1.0 + 0.5 * 0.0], [1.5, 1.5]]


# --- the rollout path: real reward service (and real vLLM on tiny-random) --------------------

def _discussion_config(reward_url: str, redis_url: str, vllm_port: int, **reward):
    from tests.stack_helpers import tiny_config

    return tiny_config(
        models={"tiny": {"model": "tiny-random", "port": vllm_port, "max_loras": 2,
                         "max_lora_rank": 16, "dtype": "float32"}},
        agents=[{"name": name, "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"max_tokens": 12, "stop": []}} for name in ("alice", "bob")],
        environment={"name": "discussion", "seats": ["alice", "bob"], "rounds": 2,
                     "prefill": "", "opponents": {"self": 1.0},
                     "task": {"source": "jsonl", "path": str(SAMPLES / "gsm8k_sample.jsonl"),
                              "format": "gsm8k"}},
        reward={"verifier": "math", **reward},
        services={"reward_port": int(reward_url.rsplit(":", 1)[1]),
                  "redis_port": int(redis_url.rsplit(":", 1)[1].split("/")[0])},
    )


def _task():
    from agora.data import load_tasks

    return load_tasks({"source": "jsonl", "path": str(SAMPLES / "gsm8k_sample.jsonl"),
                       "format": "gsm8k"}, split="train")[0]


def test_scripted_discussion_is_verified_and_rewarded_per_round(reward_url, redis_url):
    from agora.rollout.records import EpisodeRecord, Turn
    from agora.rollout.worker import apply_verdict, verification_request, verify

    cfg = _discussion_config(reward_url, redis_url, 8999, cooperation=0.5)
    task = _task()
    wrong = str(int(task.answer) + 1)
    texts = [f"Answer: {wrong}", f"So it is {task.answer}. Answer: {task.answer}",
             f"bob is right. Answer: {task.answer}", "I am not sure."]
    record = EpisodeRecord(
        run_id="r", episode_id="e", env="discussion", seed=0, seats=["alice", "bob"],
        turns=[Turn(seat=i % 2, agent=["alice", "bob"][i % 2], text=t)
               for i, t in enumerate(texts)])
    payload = {"task": task.model_dump(mode="json")}
    verdict = verify(cfg, verification_request(cfg, record, payload))
    apply_verdict(record, verdict, cfg.reward.cooperation)

    assert record.info["scores"] == [[0.0, 1.0], [1.0, 0.0]]
    assert record.results == ["correct", "wrong"]
    assert [t.legal for t in record.turns] == [True, True, True, False]  # bob's last: no answer
    expected = discussion_rewards([[0.0, 1.0], [1.0, 0.0]], alpha=0.5)
    assert [t.reward for t in record.turns] == [expected[0][0], expected[0][1],
                                                expected[1][0], expected[1][1]]
    # The same verdict with reward.discussion_credit = answer: each answer its own score.
    apply_verdict(record, verdict, 0.0, "answer")
    assert [t.reward for t in record.turns] == [0.0, 1.0, 1.0, 0.0]


def test_program_answers_are_run_by_the_reward_service_and_counted_per_agent(reward_url,
                                                                            redis_url):
    """environment.answer: either. The worker sends the mode; the reward service runs each
    answer's program in its sandbox; the episode counts programs run / failed / right."""
    from agora.rollout.records import EpisodeRecord, Turn
    from agora.rollout.worker import apply_verdict, verification_request, verify

    cfg = _discussion_config(reward_url, redis_url, 8999)
    cfg.environment.answer = "either"
    task = _task()
    program = "```python\nprint({})\n```"
    texts = [program.format(task.answer), f"Answer: {task.answer}",
             program.format("1 / 0"), program.format(f"{task.answer} + 1")]
    record = EpisodeRecord(
        run_id="r", episode_id="e", env="discussion", seed=0, seats=["alice", "bob"],
        turns=[Turn(seat=i % 2, agent=["alice", "bob"][i % 2], text=t)
               for i, t in enumerate(texts)])
    body = verification_request(cfg, record, {"task": task.model_dump(mode="json")})
    assert body["answer"] == "either"
    verdict = verify(cfg, body)
    assert [r["program"] for r in verdict["results"]] == ["ok", None, "error", "ok"]
    apply_verdict(record, verdict, cfg.reward.cooperation)
    assert record.info["scores"] == [[1.0, 1.0], [0.0, 0.0]]
    assert record.info["metrics"] == {
        "alice": {"programs_run": 2.0, "programs_failed": 1.0, "programs_right": 1.0},
        "bob": {"programs_run": 1.0, "programs_failed": 0.0, "programs_right": 0.0}}


def test_tiny_random_agents_discuss_through_vllm_into_the_stream(
        vllm_tiny, tiny_model, reward_url, redis_url, tmp_path):
    import random
    import uuid

    import redis

    from agora.algos.ppo import PPOLearner
    from agora.rollout.stream import EpisodeStream
    from agora.rollout.worker import episode_payload, play
    from agora.serving.client import PolicyAdmin

    url, _ = vllm_tiny
    cfg = _discussion_config(reward_url, redis_url, int(url.rsplit(":", 1)[1]))
    admin = PolicyAdmin(url)
    for name in ("alice", "bob"):
        learner = PPOLearner(tiny_model, cfg.agent(name), cfg.ppo, compute=cfg.trainer)
        admin.load_adapter(name, str(learner.save_adapter(tmp_path / name)))
    run_id = f"disc-{uuid.uuid4().hex[:6]}"
    payload = episode_payload(cfg, run_id, 1, random.Random(0), redis_url, _task())
    assert play(payload) == "added"
    assert play(payload) == "duplicate"  # a redelivered task adds nothing

    stream = EpisodeStream(redis.Redis.from_url(redis_url), run_id)
    stream.ensure_group()
    [(_, record)] = stream.read_new(count=10, block_ms=100)
    assert record.env == "discussion" and record.task_id == payload["task"]["task_id"]
    assert [(t.agent, t.role) for t in record.turns] == [
        ("alice", "agent1"), ("bob", "agent2"), ("alice", "agent1"), ("bob", "agent2")]
    assert all(t.completion_token_ids and len(t.completion_token_ids) ==
               len(t.behaviour_logprobs) for t in record.turns)
    assert len(record.info["scores"]) == 2 and set(record.rewards) == {"alice", "bob"}
    # The second round's prompts quote the first round's answers.
    tokenizer = PPOLearner(tiny_model, cfg.agent("alice"), cfg.ppo).tokenizer
    second = tokenizer.decode(record.turns[2].prompt_token_ids)
    assert "Answer from agent 2:" in second and record.turns[1].text.strip()[:20] in second

    # A pool episode (a league of both learners): the live learner discusses with the other
    # learner's snapshot, served under the snapshot's own name.
    league = cfg.model_copy(update={"environment": cfg.environment.model_copy(
        update={"opponents": {"pool": 1.0}})})

    def draw(rng, seat: int) -> dict:
        other = cfg.environment.seats[1 - seat]
        return {str(1 - seat): {"name": f"{other}@v0", "agent": other, "version": 0,
                                "path": str(tmp_path / other)}}

    pool_payload = episode_payload(league, run_id, 2, random.Random(0), redis_url, _task(), draw)
    assert play(pool_payload) == "added"
    [(_, pooled)] = stream.read_new(count=10, block_ms=100)
    live = cfg.environment.seats[pool_payload["learner_seat"]]
    snapshot = f"{cfg.environment.seats[1 - pool_payload['learner_seat']]}@v0"
    assert set(pooled.seats) == {live, snapshot} and set(pooled.rewards) == {live, snapshot}
    assert {t.agent for t in pooled.turns} == {live, snapshot} and len(pooled.turns) == 4
    assert snapshot in admin.models()
