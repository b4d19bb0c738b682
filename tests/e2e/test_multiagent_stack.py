"""Multi-model co-training end to end: a MAPoRL discussion between agents on two different base
models (a Llama and a Qwen2, each with its own tokenizer and chat template, one vLLM server
each) plus a frozen agent, through every real service."""

from __future__ import annotations

import json
from pathlib import Path

import redis
from transformers import AutoTokenizer

from agora.rollout.records import EpisodeRecord
from agora.rollout.stream import RunKeys
from agora.serving.model_folders import resolve_model
from agora.stack.launcher import make_stack
from agora.stack.procs import free_port
from tests.stack_helpers import descendants_alive, process_tree, processes_of_run, tiny_config

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _agent(name: str, base: str, trainable: bool = True) -> dict:
    return {"name": name, "base": base, "trainable": trainable, "lora_rank": 8, "lora_alpha": 16,
            "sampling": {"max_tokens": 8, "stop": []}}


def test_discussion_trains_each_model_its_own_learner_and_leaves_frozen_alone(tmp_path):
    # Two architectures and two tokenizers: a Llama with SmolLM2's tokenizer and ChatML, and a
    # Qwen2 with its own byte-level BPE and chat template (agora/serving/model_folders.py).
    server = {"max_loras": 2, "max_lora_rank": 8, "dtype": "float32", "max_model_len": 1024}
    cfg = tiny_config(
        models={"tiny": {**server, "model": "tiny-random", "port": free_port()},
                "other": {**server, "model": "tiny-random-qwen2", "port": free_port()}},
        agents=[_agent("alice", "tiny"), _agent("bob", "other"),
                _agent("carol", "tiny", trainable=False)],
        environment={"name": "discussion", "seats": ["alice", "bob", "carol"], "rounds": 2,
                     "prefill": "", "opponents": {"self": 1.0},
                     "task": {"source": "jsonl", "path": str(SAMPLES / "gsm8k_sample.jsonl"),
                              "format": "gsm8k"}},
        reward={"verifier": "math", "cooperation": 0.5},
        ppo={"batch_turns": 4, "minibatch_turns": 4}, trainer={"max_updates": 2},
        workers={"count": 1, "concurrency": 4, "queue_ahead": 4, "visibility_timeout": 30},
    )
    stack = make_stack(cfg, "multi", False, runs_root=tmp_path)
    pids: list[int] = []
    try:
        stack.start()
        assert {s.name for s in stack.services} >= {"policy-tiny", "policy-other", "judge"}
        pids = [p for s in stack.services for p in process_tree(s.pid)]
        stack.watch(period_s=1.0)

        client = redis.Redis.from_url(stack.redis_url)
        keys = RunKeys(stack.run_id)
        # Each trainable agent has its own learner, versions and adapters; the frozen one has
        # only its v0 (the base) and never moves.
        assert int(client.get(keys.version("alice"))) == 2
        assert int(client.get(keys.version("bob"))) == 2
        assert int(client.get(keys.version("carol"))) == 0
        adapters = stack.run_dir / "adapters"
        assert sorted(p.name for p in (adapters / "alice").iterdir()) == ["v0", "v1", "v2"]
        assert sorted(p.name for p in (adapters / "bob").iterdir()) == ["v0", "v1", "v2"]
        assert sorted(p.name for p in (adapters / "carol").iterdir()) == ["v0"]
        checkpoint = stack.run_dir / "checkpoints" / "ckpt-000002"
        # Every learner's state, and the stream entries the checkpoint holds (acked on resume).
        assert {p.name for p in checkpoint.iterdir()} == {"alice", "bob", "carol",
                                                          "consumed.json"}
        # alice and carol are LoRA agents of one base: the trainer holds it once for both
        # (trainer.share_base), yet each kept its own adapter and versions above.
        trainer_log = (stack.run_dir / "logs" / "trainer.log").read_text()
        assert "2 learners share one copy of" in trainer_log
        assert trainer_log.count("learners share one copy") == 1  # bob's base is his alone

        rows = [json.loads(x) for x in (stack.run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [r["update"] for r in rows] == [1, 2]
        for row in rows:
            assert set(row["agents"]) == {"alice", "bob"}
            for stats in row["agents"].values():
                assert stats["turns"] >= 4 and 0.0 <= stats["accuracy_last"] <= 1.0

        # Episodes: three agents x two rounds, every answer verified, rewards mixed per round.
        record = EpisodeRecord.model_validate_json(client.xrange(keys.stream)[0][1][b"record"])
        assert record.env == "discussion" and record.task_id
        assert [t.agent for t in record.turns] == ["alice", "bob", "carol"] * 2
        assert len(record.info["scores"]) == 2 and len(record.info["scores"][0]) == 3
        assert set(record.rewards) == {"alice", "bob", "carol"}
        # Each agent's prompts and completions are in its own base's tokens: bob's decode under
        # the Qwen2 tokenizer to its chat template, alice's under SmolLM2's to ChatML.
        tokenizers = {key: AutoTokenizer.from_pretrained(resolve_model(m.model))
                      for key, m in cfg.models.items()}
        for turn in record.turns:
            base = cfg.agent(turn.agent).base
            prompt = tokenizers[base].decode(turn.prompt_token_ids)
            ours = ("<|im_start|>",) if base == "tiny" else ("<|system|>", "<|user|>")
            assert prompt.startswith(ours), prompt
            assert max(turn.prompt_token_ids + turn.completion_token_ids) < len(tokenizers[base])
        assert len(tokenizers["other"]) < 1000 < len(tokenizers["tiny"])
    finally:
        stack.stop()
    assert descendants_alive(pids) == []
    assert processes_of_run("multi") == []


def test_vision_language_agent_trains_on_board_images_through_the_stack(tmp_path):
    # configs/tictactoe_vlm.yaml's setting on the tiny random Idefics3: the workers send the
    # board as an image to vLLM's chat route, the trainer learns from the same images and
    # hot-swaps the adapter of the VLM's language model. (Hanabi's pictures, legal-only, are
    # scored against vLLM in tests/integration/test_vlm.py; the stack path is the same.)
    cfg = tiny_config(
        models={"tiny": {"model": "tiny-random-vlm", "max_model_len": 1024}},
        agents=[{"name": "player", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "lora_targets": ["q_proj", "v_proj"],
                 "sampling": {"temperature": 1.0, "max_tokens": 4, "stop": ["]"]}}],
        environment={"observation": "image"}, trainer={"max_updates": 2},
        # GRPO (critic-free, groups of two games of one seed); test_vlm.py covers GAE + KL.
        ppo={"advantage": "grpo", "group_size": 2, "batch_turns": 8, "minibatch_turns": 8},
    )
    stack = make_stack(cfg, "vlm", False, runs_root=tmp_path)
    try:
        stack.start()
        stack.watch(period_s=1.0)
        client = redis.Redis.from_url(stack.redis_url)
        keys = RunKeys(stack.run_id)
        assert int(client.get(keys.version("player"))) == 2
        adapters = stack.run_dir / "adapters" / "player"
        assert sorted(p.name for p in adapters.iterdir()) == ["v0", "v1", "v2"]
        # Only the language model is adapted.
        config = json.loads((adapters / "v2" / "adapter_config.json").read_text())
        assert all("text_model" in name for name in config["target_modules"])
        rows = [json.loads(x) for x in (stack.run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [r["update"] for r in rows] == [1, 2]
        assert rows[-1]["agents"]["player"]["turns"] >= 8
        # Every LLM turn saw one board image, expanded to its 4 placeholder tokens in the ids
        # vLLM returned; bot turns have none. Episodes were scored (the reward service replays
        # the moves).
        tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny-random-vlm"))
        image_token = tokenizer.convert_tokens_to_ids("<image>")
        records = [EpisodeRecord.model_validate_json(fields[b"record"])
                   for _, fields in client.xrange(keys.stream)]
        llm_turns = [t for r in records for t in r.turns if t.is_llm]
        assert llm_turns and all(len(t.images) == 1 for t in llm_turns)
        assert all(t.prompt_token_ids.count(image_token) == 4 for t in llm_turns)
        assert all(not t.images for r in records for t in r.turns if not t.is_llm)
        assert all(r.results and "player" in r.rewards for r in records)
        assert len({t.images[0] for t in llm_turns}) > 1  # different positions, pictures
    finally:
        stack.stop()
