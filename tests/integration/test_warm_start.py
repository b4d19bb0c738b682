"""Warm starts from demonstrations for every env (agora/train/warm_start.py): each env's spec
names who demonstrates it, the transcripts are what the agent's seats would write, and the SFT
adapter is what PPO then starts from."""

from __future__ import annotations

import json
import random
import uuid

import pytest
import torch
from typer.testing import CliRunner

from agora.algos.ppo import PPOLearner
from agora.cli.main import app
from agora.envs.negotiation import Negotiation, find_proposal, parse_allocation
from agora.envs.registry import BUILTIN, make_bot
from agora.envs.tictactoe import TicTacToe
from agora.reflection.config import TrainStageConfig
from agora.serving.client import render_prompt
from agora.stack.preflight import model_problems
from agora.train.imitation_fit import answer_ids, imitation_fit, score_answers
from agora.train.warm_start import (
    demonstrations,
    every_position_demonstrations,
    train_sft_adapter,
)
from tests.stack_helpers import completion_logprob, tiny_config

runner = CliRunner()
ARITHMETIC = {"source": "reasoning_gym", "name": "basic_arithmetic", "size": 40}
ENVIRONMENTS = {  # the smallest runnable section of each built-in env
    "tictactoe": {"seats": ["player", "player"]},
    "hanabi": {"seats": ["player", "player"]},
    "discussion": {"seats": ["player", "player"], "task": ARITHMETIC, "rounds": 1},
    "negotiation": {"seats": ["player", "player"]},
    "story": {"seats": ["player", "player"]},
    "code_debug": {"seats": ["player"], "code_debug": {"mode": "fixer"}},
    "support": {"seats": ["player", "player", "player"]},
    "research": {"seats": ["player", "player"]},
}
VERIFIER = {"discussion": "math"}


def env_config(name: str, **agent):
    return tiny_config(environment={"name": name, "opponents": {"self": 1.0},
                                    **ENVIRONMENTS[name]},
                       agents=[{"name": "player", "base": "tiny", "lora_rank": 8,
                                "lora_alpha": 16, **agent}],
                       reward={"verifier": VERIFIER.get(name)})


def test_every_built_in_env_has_demonstrators():
    assert set(ENVIRONMENTS) == {spec.name for spec in BUILTIN}
    assert all(spec.demonstrators for spec in BUILTIN)


@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_demonstrations_are_the_agents_turns_played_by_the_envs_demonstrator(name):
    examples = demonstrations(env_config(name), "player", episodes=2)
    assert examples
    for example in examples:
        assert example["prompt"] and example["prompt"][-1]["role"] in ("user", "system")
        (completion,) = example["completion"]
        assert completion["role"] == "assistant" and completion["content"].strip()
    if name == "discussion":  # the task's ground truth, in the format the verifier reads
        assert all(e["completion"][0]["content"].startswith("Answer: ") for e in examples)


def test_an_agent_in_every_research_seat_learns_both_the_research_and_the_answer():
    """What a compare's learning writer starts from when its SFT seats the learner twice: the
    oracle researcher's searches and notes, then the copy writer's answer from those notes."""
    examples = demonstrations(env_config("research"), "player", episodes=3)
    texts = [e["completion"][0]["content"] for e in examples]
    notes = [t.removeprefix("NOTES: ") for t in texts if t.startswith("NOTES: ")]
    answers = [t for t, e in zip(texts, examples, strict=True)
               if "researcher's notes" in e["prompt"][-1]["content"]]
    assert len(notes) == len(answers) == 3 and answers == notes  # one answer per episode
    assert all(t.startswith("<tool>search: ") for t in texts if t not in answers
               and not t.startswith("NOTES: "))


def test_tictactoe_demonstrations_are_minimax_moves_from_both_seats():
    examples = demonstrations(env_config("tictactoe"), "player", episodes=4, seed=3)
    # Minimax against itself draws: every game fills the board, 9 moves, all of them ours.
    assert len(examples) == 4 * 9
    env = TicTacToe()
    env.reset(3)
    first = examples[0]["completion"][0]["content"]
    assert first in env.legal_actions()


def test_game_demonstrations_meet_the_opponents_training_meets():
    """Against the config's random bot, minimax plays the agent's seat (alternating) and the
    bot the other: short games of minimax moves only; --no-opponents: minimax everywhere."""
    cfg = tiny_config(environment={"name": "tictactoe", "seats": ["player", "player"],
                                   "opponents": {"random": 1.0}})
    examples = demonstrations(cfg, "player", episodes=6, seed=11)
    assert 6 * 3 <= len(examples) < 6 * 9  # only the agent's seat; minimax wins early
    minimax = make_bot("minimax")
    env = TicTacToe()
    env.reset(11)  # episode 0: the agent holds seat 0 and opens, with the episode's rng
    assert examples[0]["prompt"] == env.observation(0)
    assert examples[0]["completion"][0]["content"] == minimax.act(env, random.Random(11))
    # episode 1: the bot (seat 0) opens, so the agent's first example is a reply
    replies = [e for e in examples if e["prompt"] != env.observation(0)]
    assert replies
    everywhere = demonstrations(cfg, "player", episodes=6, seed=11, opponents=False)
    assert len(everywhere) == 6 * 9


def test_context_seats_play_their_schedule_in_demonstrations():
    """A negotiator whose partner switches fair -> greedy -> conceder is shown answering each:
    the fair demonstrator opens, answers counter-offers, and accepts an offer good enough.
    --no-opponents: the demonstrator sits in the partner's seat too, which accepts the
    opening split at once."""
    cfg = tiny_config(agents=[{"name": "alice", "base": "tiny", "lora_rank": 8,
                               "lora_alpha": 16}],
                      context_agents={"partner": {"cycle": ["fair", "greedy", "conceder"],
                                                  "every": 1}},
                      environment={"name": "negotiation", "seats": ["alice", "context:partner"],
                                   "opponents": {"self": 1.0}},
                      reward={"verifier": "deal"})
    examples = demonstrations(cfg, "alice", episodes=12, seed=5)
    texts = [e["completion"][0]["content"] for e in examples]
    assert any(t.endswith("ACCEPT") for t in texts)
    assert len(examples) > 12  # alice also answers counter-offers, not only opens
    assert all(e["prompt"][-1]["content"].rstrip().endswith("alice:") for e in examples)
    alone = demonstrations(cfg, "alice", episodes=12, seed=5, opponents=False)
    assert len(alone) == 12 and all("PROPOSE:" in e["completion"][0]["content"] for e in alone)


def test_a_negotiator_can_be_warm_started_on_the_conceder_instead():
    """warm_start.demonstrator: conceder: alice's opening asks for 0.9 of what the pool is worth
    to her (the fair negotiator's asks for an even split), and the SFT examples are the
    conceder's turns, against the partner schedule as before."""
    cfg = tiny_config(agents=[{"name": "alice", "base": "tiny", "lora_rank": 8,
                               "lora_alpha": 16, "warm_start": {"demonstrator": "conceder"}}],
                      context_agents={"partner": {"cycle": ["fair", "greedy", "conceder"],
                                                  "every": 1}},
                      environment={"name": "negotiation", "seats": ["alice", "context:partner"],
                                   "opponents": {"self": 1.0}},
                      reward={"verifier": "deal"})
    examples = demonstrations(cfg, "alice", episodes=9, seed=5, only="conceder")
    openings = [e for e in examples if e["prompt"][-1]["content"].split()[-1] == "alice:"
                and "PROPOSE" not in e["prompt"][-1]["content"]]
    assert len(openings) == 9
    env = Negotiation(2, 4)
    for index, example in enumerate(openings):
        env.reset(5 + index)
        text = example["completion"][0]["content"]
        assert text.startswith("I can give a little more this time.")
        offer = parse_allocation(find_proposal(text), env.agents, env.pool)
        assert env.utility(0, offer) >= 0.9 - 1e-9
    fair = demonstrations(cfg, "alice", episodes=9, seed=5)  # the default: the first, fair
    assert all("evenly" in e["completion"][0]["content"] or "ACCEPT" in
               e["completion"][0]["content"] for e in fair)


def test_a_named_demonstrator_plays_every_demonstrator_seat():
    """--demonstrator minimax_canonical: one move per position (centre, corners, edges first
    among minimax's best), so the same games whatever the episode's random stream; against
    itself every game is the same draw."""
    cfg = env_config("tictactoe")
    canonical = demonstrations(cfg, "player", episodes=3, seed=3, only="minimax_canonical")
    assert len(canonical) == 3 * 9
    moves = [e["completion"][0]["content"] for e in canonical]
    assert moves[:9] == moves[9:18] == moves[18:] and moves[0] == "[4]"
    shuffled = demonstrations(cfg, "player", episodes=3, seed=3)  # minimax: random ties
    assert len({tuple(e["completion"][0]["content"] for e in shuffled[i:i + 9])
                for i in (0, 9, 18)}) > 1
    with pytest.raises(ValueError, match="--demonstrator: 'random' is not one of tictactoe's "
                                         "demonstrators"):
        demonstrations(cfg, "player", episodes=1, only="random")


def test_every_position_shows_each_position_the_demonstrator_can_meet_once():
    """--every-position: the canonical minimax's whole policy, each position once (68 as the
    first player, 267 as the second), so no game of it, whatever the opponent plays, reaches
    a position the SFT was not shown, and there the move shown is the one it plays."""
    cfg = env_config("tictactoe")
    examples = every_position_demonstrations(cfg, "player", only="minimax_canonical")
    shown = {json.dumps(e["prompt"]): e["completion"][0]["content"] for e in examples}
    assert len(examples) == len(shown) == 68 + 267
    canonical = cfg.environment.spec.bot("minimax_canonical")
    rng = random.Random(0)
    for game in range(60):
        env, seat_of_canonical = TicTacToe(), game % 2
        env.reset(game)
        while not env.done:
            seat = env.current_seat
            if seat == seat_of_canonical:
                move = canonical.act(env, rng)
                assert shown[json.dumps(env.observation(seat))] == move
            else:
                move = make_bot("random").act(env, rng)
            env.step(move)
    # The default demonstrator (minimax, random ties) meets more positions, each shown once.
    tied = every_position_demonstrations(cfg, "player")
    assert len({json.dumps(e["prompt"]) for e in tied}) == len(tied) > len(examples)
    with pytest.raises(ValueError, match="--every-position: environment.name 'hanabi' is not "
                                         "a small game without chance"):
        every_position_demonstrations(env_config("hanabi"), "player")
    with pytest.raises(ValueError, match="--agent: 'nobody' sits in no seat"):
        every_position_demonstrations(cfg, "nobody")


def test_unknown_or_unseated_agent_is_refused():
    with pytest.raises(ValueError, match="--agent: 'nobody' sits in no seat"):
        demonstrations(env_config("tictactoe"), "nobody", episodes=1)


def test_a_warm_started_learner_starts_from_the_demonstrators_moves(tiny_model, tmp_path):
    cfg = env_config("tictactoe")
    examples = demonstrations(cfg, "player", episodes=4)
    stage = TrainStageConfig(learning_rate=5e-3, epochs=30, batch_size=4, max_steps=30,
                             threads=1, max_length=512, logging_steps=5)
    out = tmp_path / "warm"
    summary = train_sft_adapter(cfg, "player", examples, out, stage, "warm start",
                                log=lambda _: None)
    assert summary["steps"] == 30 and summary["final_loss"] < summary["first_loss"]
    assert 0 <= summary["first_token_accuracy"] < summary["final_token_accuracy"] <= 1
    warm_cfg = env_config("tictactoe", init_adapter=str(out))
    assert model_problems(warm_cfg) == []  # the adapter fits the agent's LoRA shape
    fresh = PPOLearner(tiny_model, cfg.agents[0], cfg.ppo, compute=cfg.trainer)
    warm = PPOLearner(tiny_model, warm_cfg.agents[0], warm_cfg.ppo, compute=warm_cfg.trainer)
    gained = [completion_logprob(warm, e) - completion_logprob(fresh, e) for e in examples[:6]]
    assert min(gained) > 0.5, gained  # nats per token: the demonstrated moves became likely
    # The imitation read after the prefill: the SFT made the moves likelier than the base did,
    # and "greedy match" is what greedy generation from the prefill actually writes.
    fit = summary["imitation"]
    assert fit["read"] == len(examples)
    before = imitation_fit(fresh.model, fresh.tokenizer, examples, "[")
    after = imitation_fit(warm.model, warm.tokenizer, examples, "[")
    assert after["mean_logprob"] > before["mean_logprob"] + 1.0, (before, after)
    assert after["mean_logprob"] == pytest.approx(fit["mean_logprob"], abs=0.05)


def test_the_answer_read_is_the_demonstration_after_the_prefill(tiny_model):
    from agora.serving.client import load_tokenizer

    tokenizer = load_tokenizer(tiny_model)
    example = demonstrations(env_config("tictactoe"), "player", episodes=1)[0]
    move = example["completion"][0]["content"]
    context, answer = answer_ids(tokenizer, example, "[")
    assert context == render_prompt(tokenizer, example["prompt"], "[")
    assert context + answer == render_prompt(tokenizer, example["prompt"], move)
    assert tokenizer.decode(answer) == move.removeprefix("[")
    with pytest.raises(ValueError, match="no examples"):
        imitation_fit(None, tokenizer, [])


def test_greedy_match_counts_the_answers_greedy_generation_writes(tiny_model):
    """An answer is matched when it is what greedy generation writes after the context: the
    model's own continuations count, the same with any one token changed does not."""
    from transformers import AutoModelForCausalLM

    from agora.serving.client import load_tokenizer

    tokenizer = load_tokenizer(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    own, changed = [], []
    for example in demonstrations(env_config("tictactoe"), "player", episodes=1)[:3]:
        context = render_prompt(tokenizer, example["prompt"], "[")
        out = model.generate(input_ids=torch.tensor([context]), do_sample=False,
                             max_new_tokens=3, min_new_tokens=3,
                             pad_token_id=tokenizer.eos_token_id)[0, len(context):].tolist()
        own.append((context, out))
        for i in range(3):
            other = list(out)
            other[i] = (other[i] + 1) % len(tokenizer)
            changed.append((context, other))
    assert score_answers(model, own)["greedy_match"] == 1.0
    assert score_answers(model, changed)["greedy_match"] == 0.0
    both = score_answers(model, own + changed + [(own[0][0], [])])
    assert both["read"] == 12 and both["greedy_match"] == pytest.approx(3 / 12)
    assert score_answers(model, own)["mean_logprob"] > both["mean_logprob"]
    demos = demonstrations(env_config("tictactoe"), "player", episodes=2)
    assert imitation_fit(model, tokenizer, demos, "[", max_read=4)["read"] <= 4


def test_cli_warm_start_writes_an_adapter_and_names_bad_input(tmp_path):
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text(json.dumps(env_config("tictactoe").model_dump(mode="json")))
    out = tmp_path / f"warm-{uuid.uuid4().hex[:4]}"
    result = runner.invoke(app, ["warm-start", str(cfg_path), "--out", str(out),
                                 "--episodes", "2", "--max-steps", "2", "--batch-size", "2"])
    assert result.exit_code == 0, result.output
    assert "demonstrated turns of player" in result.output
    assert (out / "adapter_model.safetensors").is_file()
    assert "agents.0.init_adapter=" in result.output
    for adapter in (str(out), "base"):  # read, not trained: the same 2 episodes' moves
        read = runner.invoke(app, ["warm-start", str(cfg_path), "--read", adapter,
                                   "--episodes", "2"])
        assert read.exit_code == 0, read.output
        fit = json.loads(read.output[read.output.index("{"):])
        assert fit["adapter"] == adapter and fit["read"] > 0
        assert 0 <= fit["greedy_match"] <= 1 and fit["mean_logprob"] < 0
    for flags, message in ((["--read", str(tmp_path)], "is not a LoRA adapter folder"),
                           ([], "give --out (train an adapter there) or --read"),
                           (["--read", "base", "--out", str(out)], "one of them")):
        bad = runner.invoke(app, ["warm-start", str(cfg_path), *flags])
        assert bad.exit_code == 2 and message in " ".join(bad.output.split()), bad.output
    bad = runner.invoke(app, ["warm-start", str(cfg_path), "--out", str(out),
                              "--agent", "ghost"])
    assert bad.exit_code == 2 and "no agent 'ghost'" in bad.output
    bad = runner.invoke(app, ["warm-start", str(cfg_path), "--out", str(out),
                              "--demonstrator", "alphazero"])
    assert bad.exit_code == 2 and "--demonstrator: 'alphazero'" in bad.output
    every = runner.invoke(app, ["warm-start", str(cfg_path), "--out", str(tmp_path / "every"),
                                "--every-position", "--demonstrator", "minimax_canonical",
                                "--max-steps", "1", "--batch-size", "2"])
    assert every.exit_code == 0, every.output
    assert "335 demonstrated turns of player from every position" in every.output
    hanabi_path = tmp_path / "hanabi.yaml"
    hanabi_path.write_text(json.dumps(env_config("hanabi").model_dump(mode="json")))
    bad = runner.invoke(app, ["warm-start", str(hanabi_path), "--out", str(out),
                              "--every-position"])
    assert bad.exit_code == 2 and "--every-position: environment.name 'hanabi'" in bad.output


def test_cli_warm_start_takes_what_the_flags_leave_out_from_the_configs_warm_start(tmp_path):
    """The adapter `agora warm-start CONFIG` trains is the one the trainer would (the agent's
    `warm_start:`); a flag still wins over it."""
    data = env_config("tictactoe").model_dump(mode="json")
    data["agents"][0]["warm_start"] = {"every_position": True,
                                       "demonstrator": "minimax_canonical"}
    cfg_path = tmp_path / "warm.yaml"
    cfg_path.write_text(json.dumps(data))
    read = runner.invoke(app, ["warm-start", str(cfg_path), "--read", "base"])
    assert read.exit_code == 0, read.output
    assert "335 demonstrated turns of player from every position" in read.output
    assert json.loads(read.output[read.output.index("{"):])["read"] == 335
    sampled = runner.invoke(app, ["warm-start", str(cfg_path), "--read", "base",
                                  "--no-every-position", "--episodes", "2"])
    assert sampled.exit_code == 0, sampled.output
    assert "from 2 episodes" in sampled.output
