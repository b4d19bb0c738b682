"""The support desks' SFT warm start: oracle transcripts on the train share of the questions,
TRL SFT of an adapter of the agent's LoRA shape, PPO starting from it, and evaluation on the
held-out share through the real vLLM server (tiny-random)."""

from __future__ import annotations

import json
import uuid

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from agora.algos.ppo import PPOLearner
from agora.cli.main import app
from agora.envs.support_tasks import FACTS, make_task, task_split
from agora.evaluation.support import eval_seeds, run_support_eval
from agora.reflection.config import TrainStageConfig
from agora.stack.preflight import model_problems
from agora.train.support_sft import oracle_examples, train_support_sft
from agora.train.tracking import TrackingConfig
from tests.stack_helpers import completion_logprob, tiny_config

runner = CliRunner()


def support_cfg(vllm_port: int = 8100, **agent):
    return tiny_config(
        models={"tiny": {"model": "tiny-random", "port": vllm_port, "max_model_len": 512,
                         "max_loras": 2, "max_lora_rank": 16, "dtype": "float32"}},
        agents=[{"name": "desk", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"max_tokens": 12, "stop": ["</tool>", "<result>"]}, **agent}],
        environment={"name": "support", "seats": ["desk"] * 3, "prefill": "",
                     "opponents": {"self": 1.0},
                     "support": {"levels": [1], "max_turns": 4, "history": 2,
                                 "result_chars": 120}},
        trainer={"pin_cpus": False, "nice": 0, "dtype": "fp32"},
    )


def test_split_holds_out_whole_facts_and_eval_picks_only_its_share():
    test_facts = {f for f in FACTS.values() if task_split(f.question) == "test"}
    assert 0.15 < len(test_facts) / len(FACTS) < 0.45  # about TEST_FRACTION of 65 facts
    assert task_split(make_task(1, 7).question) == task_split(make_task(1, 7).question)
    seeds = eval_seeds(level=1, episodes=30, seed=30_000, split="test")
    assert len(seeds) == 30 == len(set(seeds))
    assert all(task_split(make_task(1, s).question) == "test" for s in seeds)


def test_oracle_examples_are_train_share_demonstrations_of_the_protocol():
    examples = oracle_examples(support_cfg(), episodes=20, levels=[1, 2])
    assert len(examples) >= 40  # a search and an answer at least, per episode
    texts = [e["completion"][0]["content"] for e in examples]
    assert any(t.startswith("<tool>search: ") and t.endswith("</tool>") for t in texts)
    assert any(t.startswith("<tool>calculator: ") for t in texts)  # level 2 at billing
    assert any("HANDOFF billing" in t for t in texts)  # level 2 arrives at triage
    assert any(t.startswith("ANSWER: ") for t in texts)
    # Every prompt is a desk's observation of a train-share question.
    questions = {make_task(1, s).question for s in range(2000)} | \
        {make_task(2, s).question for s in range(2000)}
    for example in examples:
        seen = "\n".join(m["content"] for m in example["prompt"])
        asked = [q for q in questions if f"Customer question: {q}" in seen]
        assert asked and all(task_split(q) == "train" for q in asked)


def test_sft_adapter_imitates_the_oracle_starts_ppo_and_is_served(
        vllm_tiny, tiny_model, tmp_path):
    url, _ = vllm_tiny
    port = int(url.rsplit(":", 1)[1])
    cfg = support_cfg(port)
    examples = oracle_examples(cfg, episodes=6, levels=[1])
    stage = TrainStageConfig(learning_rate=5e-3, epochs=30, batch_size=4, max_steps=40,
                             threads=1, max_length=512, logging_steps=5)
    out = tmp_path / "sft"
    tracked = cfg.model_copy(update={"tracking": TrackingConfig(report_to=["tensorboard"])})
    summary = train_support_sft(tracked, examples, out, stage, log=lambda _: None)
    assert summary["steps"] == 40 and summary["final_loss"] < summary["first_loss"]
    # TRL's TensorBoard events outlive the stage's scratch folder, beside the adapter.
    events = EventAccumulator(str(tmp_path / "tensorboard" / "sft"))
    events.Reload()
    assert len(events.Scalars("train/loss")) == 40 // stage.logging_steps
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 8

    # PPO starts from it: the learner's first policy is the SFT adapter, not the base.
    fresh = PPOLearner(tiny_model, cfg.agents[0], cfg.ppo, compute=cfg.trainer)
    warm_cfg = support_cfg(port, init_adapter=str(out))
    assert model_problems(warm_cfg) == []
    warm = PPOLearner(tiny_model, warm_cfg.agents[0], warm_cfg.ppo, compute=warm_cfg.trainer)
    gained = [completion_logprob(warm, e) - completion_logprob(fresh, e) for e in examples[:6]]
    assert min(gained) > 0.5, gained  # nats per token: the oracle's turns became likely

    # vLLM serves it, and the held-out evaluation runs through it.
    [result] = run_support_eval(cfg, episodes=2, levels=[1], adapter=out, policy_url=url,
                                split="test")
    assert result.episodes == 2 and result.llm_turns >= 2


def test_init_adapter_problems_are_named_before_anything_starts(tmp_path):
    missing = support_cfg(init_adapter=str(tmp_path / "nowhere"))
    [problem] = model_problems(missing)
    assert problem.startswith("agents.desk.init_adapter:") and "no adapter_config.json" in problem
    other = tmp_path / "rank4"
    other.mkdir()
    (other / "adapter_config.json").write_text(json.dumps(
        {"r": 4, "target_modules": ["q_proj", "v_proj"]}))
    [problem] = model_problems(support_cfg(init_adapter=str(other)))
    assert "rank 4" in problem and "lora_rank 8" in problem


def test_cli_support_sft_writes_an_adapter_and_refuses_bad_input(tmp_path):
    cfg_path = tmp_path / "support.yaml"
    cfg_path.write_text(json.dumps(support_cfg().model_dump(mode="json")))
    out = tmp_path / f"sft-{uuid.uuid4().hex[:4]}"
    result = runner.invoke(app, ["support-sft", str(cfg_path), "--out", str(out),
                                 "--episodes", "3", "--max-steps", "2", "--batch-size", "2"])
    assert result.exit_code == 0, result.output
    assert "oracle turns" in result.output and (out / "adapter_model.safetensors").is_file()
    bad = runner.invoke(app, ["support-sft", str(cfg_path), "--out", str(out), "--level", "4"])
    assert bad.exit_code == 2 and "--level 1, 2 or 3" in bad.output
    bad = runner.invoke(app, ["support-eval", str(cfg_path), "--split", "holdout"])
    assert bad.exit_code == 2 and "--split" in bad.output
