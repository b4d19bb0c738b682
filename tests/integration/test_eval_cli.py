"""`agora eval RUN_OR_CHECKPOINT` on real run folders built on tiny-random.

Run folders are built the way the trainer writes them: real PEFT LoRA adapters saved by
``PPOLearner.save_adapter`` under ``adapters/<agent>/v<N>`` (v0 zero-initialised = the base
model, later versions perturbed), a ``config.yaml``, a ``metrics.jsonl`` and a trainer
checkpoint. The CLI runs in-process (typer's CliRunner) against the session's vLLM server
(``--policy-url``); the judge and reward services are the session's or started by the eval
itself (then the test checks it stopped them). Where tiny-random's random text would make the
numbers meaningless, the assistant prefill writes the answer, so the expected rates are known
exactly (a discussion's ``\\boxed{4}``, a fixer's reference solution).

Statistics (Wilson, pass@k, majority vote, TrueSkill ordering) are unit-tested on synthetic data.
"""

from __future__ import annotations

import json
import math
import shutil
from itertools import product
from pathlib import Path

import psutil
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from agora.algos.ppo import PPOLearner
from agora.cli import main as cli
from agora.cli.main import app
from agora.data import load_tasks
from agora.envs.code_debug_problems import HELD_OUT_PROBLEMS, PROBLEMS_BY_ID
from agora.evaluation.context import evaluation_sampling
from agora.evaluation.discussion import Answer, round_metrics
from agora.evaluation.ratings import Game, trueskill_table
from agora.evaluation.runner import spaced
from agora.evaluation.seeds import held_out_seed
from agora.evaluation.stats import majority_vote, mean_interval, pass_at_k, rate, wilson
from agora.evaluation.target import Version
from agora.results.figures import train_eval_figures
from agora.serving.weights import adapter_dir
from tests.stack_helpers import tiny_config, write_config

PORT_BASE = 8320  # this file's range: 8320-8339
runner = CliRunner()


# --------------------------------------------------------------------------- run folders

@pytest.fixture(scope="module")
def learner(tiny_model) -> PPOLearner:
    cfg = tiny_config()
    return PPOLearner(tiny_model, cfg.agents[0], cfg.ppo, seed=0, compute=cfg.trainer)


def save_versions(learner: PPOLearner, run_dir: Path, agents: list[str], count: int) -> None:
    """v0 = the zero-initialised adapter (the base model), v1.. = ever larger perturbations
    of the same LoRA, saved by the trainer's own save_adapter."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                param.zero_()
    for version in range(count):
        if version:
            with torch.no_grad():
                for name, param in learner.model.named_parameters():
                    if "lora_B" in name:
                        param.add_(torch.randn(param.shape, generator=gen) * 0.2)
        for agent in agents:
            learner.save_adapter(adapter_dir(run_dir, agent, version))


def write_metrics(run_dir: Path, agents: list[str], updates: int) -> None:
    """Rows as Trainer.report writes them, plus a cut last line (a killed trainer)."""
    with (run_dir / "metrics.jsonl").open("w") as fh:
        for u in range(1, updates + 1):
            stats = {a: {"reward_mean": -1 + u / updates, "legal_rate": u / updates,
                         "win_rate": 0.1 * u, "kl": 0.01 * u, "pg_loss": 0.5 / u,
                         "vf_loss": 1.0 / u, "policy_version": float(u)} for a in agents}
            fh.write(json.dumps({"update": u, "elapsed_s": 10.0 * u, "episodes": 8,
                                 "dropped_stale": 0, "agents": stats}) + "\n")
        fh.write('{"update": 99, "agen')


def make_run(root: Path, cfg, learner: PPOLearner, versions: int = 3) -> Path:
    run_dir = root / "runs" / f"{cfg.name}-20260101-000000"
    run_dir.mkdir(parents=True)
    write_config(cfg, run_dir / "config.yaml")
    agents = [a.name for a in cfg.agents]
    save_versions(learner, run_dir, agents, versions)
    write_metrics(run_dir, agents, updates=versions - 1)
    ckpt = run_dir / "checkpoints" / f"ckpt-{versions - 1:06d}"
    for agent in agents:
        shutil.copytree(adapter_dir(run_dir, agent, versions - 1), ckpt / agent / "adapter")
    (run_dir / "checkpoints" / "latest").write_text(ckpt.name)
    return run_dir


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """Messages on one line each: rich would wrap them at 80 columns under CliRunner."""
    monkeypatch.setattr(cli.console, "_width", 1000)


def agora_eval(*args: object) -> tuple[int, str]:
    result = runner.invoke(app, ["eval", *map(str, args)])
    out = result.output
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in out
    return result.exit_code, out


def read_eval(out_dir: Path) -> tuple[dict, str]:
    return json.loads((out_dir / "eval.json").read_text()), (out_dir / "eval.md").read_text()


def assert_rate(value: dict) -> None:
    """A rate dict: within [0, 1] and inside its own 95% interval."""
    lo, hi = value["ci95"]
    assert 0.0 <= lo <= value["rate"] <= hi <= 1.0, value


def assert_png(path: Path, size: tuple[int, int]) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == size


# --------------------------------------------------------------------------- statistics

def test_cooperative_match_rows_carry_the_mean_score_interval_into_the_table():
    from rich.console import Console

    from agora.evaluation.games import MatchResult

    rows = {}
    for name, scores in (("v0", [2.0, 4.0, 3.0, 3.0]), ("after", [5.0])):
        result = MatchResult("self", len(scores), 0, 0, 0, 0, 4, 4, scores=scores)
        rows[name] = {"self": result.as_dict()}
    before, after = rows["v0"]["self"], rows["after"]["self"]
    lo, hi = before["score_ci95"]
    assert before["score"] == 3.0 and math.isclose(hi - 3.0, 3.0 - lo)
    assert math.isclose(hi - lo, 2 * 1.959964 * math.sqrt(2 / 3) / 2, rel_tol=1e-5)
    assert after["score"] == 5.0 and after["score_ci95"] is None  # one game: no spread
    console = Console(width=200, record=True)
    console.print(cli.results_table("hanabi", rows))
    text = console.export_text()
    assert f"3.00 ({lo:.2f}-{hi:.2f})" in text and "5.00" in text
    no_scores = MatchResult("random", 2, 1, 0, 1, 0, 4, 4).as_dict()
    assert "score" not in no_scores and "score_ci95" not in no_scores


def test_wilson_interval_contains_the_rate_and_narrows_with_n():
    for successes, n in [(0, 10), (3, 10), (10, 10), (30, 100), (1, 1)]:
        lo, hi = wilson(successes, n)
        assert 0.0 <= lo <= successes / n <= hi <= 1.0
    assert wilson(30, 100)[1] - wilson(30, 100)[0] < wilson(3, 10)[1] - wilson(3, 10)[0]
    lo, hi = wilson(5, 10)  # the textbook value for 5/10: 0.2366-0.7634
    assert math.isclose(lo, 0.2366, abs_tol=1e-4) and math.isclose(hi, 0.7634, abs_tol=1e-4)
    assert rate(0, 0) == {"rate": 0.0, "n": 0, "ci95": [0.0, 0.0]}


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # c / n
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))  # 0.7
    assert pass_at_k(5, 0, 3) == 0.0 and pass_at_k(5, 3, 3) == 1.0  # n - c < k
    assert pass_at_k(4, 1, 4) == 1.0 and pass_at_k(4, 0, 4) == 0.0
    for n in range(1, 9):
        for c in range(n + 1):
            values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
            assert values == sorted(values)  # more tries never hurt
            for k, value in enumerate(values, start=1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert value == pytest.approx(exact, abs=1e-12)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_majority_vote_ignores_abstentions_and_breaks_ties_by_first_seen():
    assert majority_vote(["4", "5", "4", None, None, None]) == "4"
    assert majority_vote(["5", "4", "4", "5"]) == "5"  # tie: the answer seen first
    assert majority_vote([None, None]) is None and majority_vote([]) is None
    summary = mean_interval([10.0, 12.0, 14.0])
    assert summary["mean"] == pytest.approx(12.0)
    lo, hi = summary["ci95"]
    assert lo == pytest.approx(12 - 1.959964 * 2 / math.sqrt(3), abs=1e-5) and hi > 12
    assert mean_interval([3.0])["ci95"] is None
    assert mean_interval([0.0, 0.0, 1.0], 0.0, 1.0)["ci95"][0] == 0.0  # a share stays >= 0
    assert mean_interval([0.0, 0.0, 1.0])["ci95"][0] < 0.0


def test_round_metrics_pass_and_majority_on_known_answers():
    right, wrong, none = Answer(True, "4"), Answer(False, "5"), Answer(False, None)
    # answers[task][sample][round][seat]: 2 tasks, k = 3, 1 round, 1 seat.
    answers = [
        [[[right]], [[wrong]], [[wrong]]],  # c = 1: pass@3 yes, majority "5" wrong
        [[[right]], [[none]], [[none]]],    # c = 1: majority of the answers given: "4"
    ]
    m = round_metrics(answers, 0, k=3)
    assert m["pass@1"]["rate"] == pytest.approx(2 / 6)
    assert m["pass@k"]["rate"] == 1.0 and m["maj@k"]["rate"] == 0.5
    assert m["pass@j"] == pytest.approx([1 / 3, 1 - math.comb(2, 2) / math.comb(3, 2), 1.0])


def test_trueskill_ranks_synthetic_players_by_strength_and_lists_everyone():
    # strong beats mid 80%, mid beats weak 80%, strong beats weak 95%; 'idle' never plays.
    games = []
    for i in range(40):
        games.append(Game("strong", "mid", 1.0 if i % 5 else 0.0))
        games.append(Game("mid", "weak", 1.0 if i % 5 else 0.0))
        games.append(Game("weak", "strong", 1.0 if i == 0 else 0.0))
        games.append(Game("mid", "strong", 0.5))  # some draws too
    rows = trueskill_table(["weak", "idle", "mid", "strong"], games)
    order = [r["player"] for r in rows]
    assert order.index("strong") < order.index("mid") < order.index("weak")
    assert {r["player"] for r in rows} == {"weak", "idle", "mid", "strong"}
    idle = next(r for r in rows if r["player"] == "idle")
    assert idle["games"] == 0 and idle["score"] is None and idle["sigma"] > 8
    strong = next(r for r in rows if r["player"] == "strong")
    assert strong["games"] == 120 and strong["conservative"] == pytest.approx(
        strong["mu"] - 3 * strong["sigma"])
    with pytest.raises(ValueError):
        trueskill_table(["a"], [Game("a", "b", 1.0)])


def test_snapshots_are_evenly_spaced_with_first_and_last():
    versions = [Version("p", f"p@v{i}", Path(f"/v{i}"), i) for i in range(11)]
    assert [v.number for v in spaced(versions, 3)] == [0, 5, 10]
    assert [v.number for v in spaced(versions, 4)] == [0, 3, 7, 10]
    assert len(spaced(versions, 50)) == 11 and spaced(versions, 1)[0].number == 10


# --------------------------------------------------------------------------- bad input

def test_evaluation_temperature_replaces_only_the_agents_temperature():
    cfg = tiny_config()
    agent = cfg.agents[0].name
    assert evaluation_sampling(cfg, agent) == cfg.agents[0].sampling  # None: as in training
    greedy = tiny_config(**{"eval": {"temperature": 0.0}})
    sampling = evaluation_sampling(greedy, agent)
    assert sampling.temperature == 0.0 and greedy.agents[0].sampling.temperature != 0.0
    assert sampling.model_dump(exclude={"temperature"}) == \
        greedy.agents[0].sampling.model_dump(exclude={"temperature"})


def test_bad_paths_and_runs_are_clear_cli_errors(tmp_path, learner):
    code, out = agora_eval(tmp_path / "nope")
    assert code == 2 and "nope: no such file or folder" in out
    (tmp_path / "file.txt").write_text("x")
    code, out = agora_eval(tmp_path / "file.txt")
    assert code == 2 and "file.txt: not a folder" in out
    (tmp_path / "empty").mkdir()
    code, out = agora_eval(tmp_path / "empty")
    assert code == 2 and "neither a run folder" in out
    run_dir = make_run(tmp_path, tiny_config(), learner, versions=1)
    code, out = agora_eval(run_dir, "--agent", "nobody")
    assert code == 2 and "--agent nobody: not an agent of the run" in out
    (run_dir / "config.yaml").write_text("name: [unclosed")
    code, out = agora_eval(run_dir)
    assert code == 2 and "not valid YAML" in out
    (run_dir / "config.yaml").unlink()
    code, out = agora_eval(run_dir)
    assert code == 2 and "without config.yaml; pass --config" in out
    bare = tmp_path / "bare"
    shutil.copytree(adapter_dir(run_dir, "player", 0), bare)
    code, out = agora_eval(bare)
    assert code == 2 and "bare: no config.yaml next to the checkpoint" in out
    code, out = agora_eval(run_dir, "--games", "0")
    assert code == 2 and "--games" in out


# --------------------------------------------------------------------------- games

def test_eval_tictactoe_run_round_robin_ratings_and_curves(tmp_path, vllm_tiny, learner):
    url, _ = vllm_tiny
    cfg = tiny_config(name="ttt")
    run_dir = make_run(tmp_path, cfg, learner, versions=4)
    code, out = agora_eval(run_dir, "--games", 4, "--snapshots", 3, "--policy-url", url,
                           "--temperature", 0)
    assert code == 0, out
    report, md = read_eval(run_dir / "eval")
    assert report["options"]["temperature"] == 0.0
    assert "sampled at temperature 0 (greedy), not its training temperature" in md
    games = report["sections"]["games"]
    players = ["player@v0", "player@v2", "player@v3", "random", "minimax"]  # 3 of 4, spaced
    assert games["players"] == players and games["evaluated"] == "player@v3"
    assert games["seeds"] == [held_out_seed(0, 0), held_out_seed(0, 3)]  # the bots' dice too
    assert report["services"]["started"] == []  # vLLM given; a game needs no judge or reward
    assert sorted(r["player"] for r in games["ratings"]) == sorted(players)
    assert sum(r["games"] for r in games["ratings"]) == 2 * 10 * 4  # 10 pairings x 4 games
    rows = {(r["player"], r["opponent"]): r for r in games["head_to_head"]}
    assert len(rows) == 3 * 4  # every snapshot against every other player
    for row in rows.values():
        assert row["games"] == 4
        for key in ("win", "draw", "loss"):
            assert_rate(row[key])
        assert row["win"]["rate"] + row["draw"]["rate"] + row["loss"]["rate"] == pytest.approx(1)
        assert row["forfeits"] <= round(row["loss"]["rate"] * 4)
        assert 0.0 <= row["legal_rate"] <= 1.0
    # Both sides of a pairing add up, and the perfect bot never loses to the random one.
    matrix = games["score_matrix"]
    for a, b in product(players, players):
        if a != b:
            assert matrix[a][b] + matrix[b][a] == pytest.approx(1.0)
    assert matrix["minimax"]["random"] >= 0.5
    for header in ("### Metric definitions", "Wilson score interval", "TrueSkill",
                   "## Games: player@v3 against every player", "| minimax |"):
        assert header in md
    assert "![training curves](training_curves.png)" in md
    curves = report["training_curves"]
    assert curves["updates"] == 3 and curves["unreadable_lines"] == 1
    assert "player:reward_mean" in curves["panels"]["mean turn reward"]
    assert "player:kl" in curves["panels"]["KL(behaviour || reference) per token"]
    assert_png(run_dir / "eval" / "training_curves.png", (1200, 800))
    assert "written" in out and "eval.json" in out


def test_eval_hanabi_checkpoint_scores_by_partner_with_duplicate_ratings(tmp_path, vllm_tiny,
                                                                        learner):
    url, _ = vllm_tiny
    cfg = tiny_config(
        name="hanabi",
        agents=[{"name": "player", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"temperature": 1.0, "max_tokens": 2, "stop": ["\n"]}}],
        environment={"name": "hanabi", "seats": ["player", "player"], "prefill": "[Play] ",
                     "opponents": {"self": 1.0}},
    )
    run_dir = make_run(tmp_path, cfg, learner, versions=2)
    # A bare copy of the checkpoint's adapter and its config, away from the run: the adapter
    # needs --config, and without a run folder there is no metrics.jsonl to draw.
    bare = tmp_path / "exported" / "my-adapter"
    shutil.copytree(run_dir / "checkpoints" / "ckpt-000001" / "player" / "adapter", bare)
    config = shutil.copy(run_dir / "config.yaml", tmp_path / "exported" / "hanabi.yaml")
    out_dir = tmp_path / "out"
    code, out = agora_eval(bare, "--config", config, "--games", 3,
                           "--policy-url", url, "--output", out_dir)
    assert code == 0, out
    report, md = read_eval(out_dir)
    assert report["target"]["kind"] == "checkpoint"
    assert report["target"]["versions"] == {"player": ["base", "player@my-adapter"]}
    section = report["sections"]["games"]
    players = ["base", "player@my-adapter", "hanabi_random", "hanabi_simple"]
    assert section["players"] == players and section["partners"] == ["self", "hanabi_random",
                                                                    "hanabi_simple"]
    assert len(section["scores"]) == 4 * 3
    # The decks dealt are held out: none is one training (seeds from 0) dealt.
    assert section["seeds"] == [held_out_seed(0, 0), held_out_seed(0, 2)]
    for row in section["scores"]:
        assert row["games"] == 3 and 0.0 <= row["score"]["mean"] <= 25.0
        assert_rate(row["forfeit"])
        if row["score"]["ci95"]:
            lo, hi = row["score"]["ci95"]
            assert lo <= row["score"]["mean"] <= hi
    simple = next(r for r in section["scores"] if r["player"] == r["partner"] == "hanabi_simple")
    assert simple["forfeit"]["rate"] == 0.0 and simple["score"]["mean"] > 5  # it never misplays
    # Duplicate comparisons: every pair of players on each of the 3 x 3 (partner, deal) boards.
    assert {r["player"] for r in section["ratings"]} == set(players)
    assert all(r["games"] == 3 * 9 for r in section["ratings"])
    assert "mean team score by partner" in md and "duplicate" in md
    # Not a run folder: no curves, said so.
    assert report["training_curves"]["path"] is None and "Not drawn" in md
    # The same checkpoint inside its run finds the run's config by itself, and its report goes
    # beside the run's own eval.
    code, out = agora_eval(run_dir / "checkpoints" / "ckpt-000001", "--games", 1,
                           "--policy-url", url)
    assert code == 0, out
    report, _ = read_eval(run_dir / "eval" / "ckpt-000001")
    assert report["target"]["versions"] == {"player": ["base", "player@ckpt-000001"]}
    assert_png(run_dir / "eval" / "ckpt-000001" / "training_curves.png", (1200, 800))


# --------------------------------------------------------------------------- discussion

def test_eval_discussion_pass_at_k_and_majority_per_round(tmp_path, vllm_tiny, learner):
    url, _ = vllm_tiny
    # Arithmetic tasks whose answer is 4 or 5; every answer is prefilled with \boxed{4}, so
    # exactly the tasks whose answer is 4 are right, in every sample and round.
    rows = [{"question": f"What is {a} + {4 + i % 2 - a}?", "answer": f"#### {4 + i % 2}"}
            for i, a in enumerate([1, 2, 3, 1, 2, 3, 0, 1])]
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = {"source": "jsonl", "path": str(data), "format": "gsm8k", "test_fraction": 0.5}
    sampling = {"temperature": 1.0, "max_tokens": 1, "stop": ["\n"]}
    cfg = tiny_config(
        name="disc",
        agents=[{"name": n, "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": sampling} for n in ("alice", "bob")],
        environment={"name": "discussion", "seats": ["alice", "bob"], "rounds": 2,
                     "prefill": "The answer is \\boxed{4}", "task": task,
                     "opponents": {"self": 1.0}},
        reward={"verifier": "math"},
    )
    run_dir = make_run(tmp_path, cfg, learner, versions=2)
    code, out = agora_eval(run_dir, "--k", 3, "--tasks", 4, "--policy-url", url)
    assert code == 0, out
    report, md = read_eval(run_dir / "eval")
    tasks = load_tasks(cfg.environment.task, split="test", limit=4)
    expected = sum(t.answer == "4" for t in tasks) / len(tasks)
    assert 0 < expected < 1  # the check below can tell right from wrong
    section = report["sections"]["discussion"]
    assert section["tasks"] == len(tasks) and section["k"] == 3
    assert section["policies"]["evaluated"]["label"] == "alice@v1, bob@v1"
    assert section["policies"]["baseline"]["label"] == "alice@v0, bob@v0"
    for policy in section["policies"].values():
        assert policy["rounds"] == 2 and policy["final_answer_rate"] == 1.0
        for turn in ("turn1", "last"):
            m = policy[turn]
            for key in ("pass@1", "pass@k", "maj@k"):
                assert m[key]["rate"] == pytest.approx(expected)
                assert_rate(m[key])
            assert m["pass@1"]["n"] == len(tasks) * 2 * 3 and m["pass@k"]["n"] == len(tasks) * 2
            assert m["pass@k"]["rate"] >= m["pass@1"]["rate"]
            assert m["pass@j"] == sorted(m["pass@j"]) and len(m["pass@j"]) == 3
    assert "| pass@1 | pass@3 | maj@3 |" in md and "unbiased estimator" in md
    # Both policies answer every task alike, so paired by task they never differ.
    for turn in ("turn1", "last"):
        paired = section["paired"][turn]
        assert paired["n"] == len(tasks) and paired["difference"] == 0.0
        assert paired["better"] == paired["worse"] == 0
    assert "| last turn | +0.0 [+0.0, +0.0] | 0 / 0 / 4 |" in md


# --------------------------------------------------------------------------- judged / task envs

def test_eval_story_judge_preference_starts_and_stops_its_judge(tmp_path, vllm_tiny, learner):
    url, _ = vllm_tiny
    cfg = tiny_config(
        name="story",
        agents=[{"name": "writer", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"temperature": 1.0, "max_tokens": 12, "stop": ["\n\n"]}}],
        context_agents={"cowriter": {"cycle": ["template_writer", "short_writer"], "every": 1}},
        environment={"name": "story", "seats": ["writer", "context:cowriter"], "prefill": "",
                     "opponents": {"self": 1.0},
                     "story": {"rounds": 1, "judge": "both", "baseline": "template_writer"}},
        reward={"verifier": "judge"},
        judge={"backend": "rubric"},
    )
    run_dir = make_run(tmp_path, cfg, learner, versions=2)
    code, out = agora_eval(run_dir, "--games", 3, "--policy-url", url,
                           "--port-base", PORT_BASE)
    assert code == 0, out
    report, md = read_eval(run_dir / "eval")
    (judge,) = report["services"]["started"]  # the judge only: vLLM was given
    assert judge["name"] == "judge" and not psutil.pid_exists(judge["pid"])
    section = report["sections"]["episodes"]
    # The switching co-writer plays each of its strategies in turn, by seed, for both policies.
    assert section["partners"] == {"cowriter": ["template_writer", "short_writer"]}
    for policy in section["policies"].values():
        metrics = policy["agents"]["writer"]
        assert metrics["reward"]["n"] == 3
        by_partner = policy["by_partner"]
        assert {p: m["writer"]["reward"]["n"] for p, m in by_partner.items()} == {
            "template_writer": 2, "short_writer": 1}
        for key in ("judge_score", "story_score", "preference"):
            assert 0.0 <= metrics[key]["mean"] <= 1.0
    pref = section["preference"]
    assert pref["a"] == "writer@v1" and pref["b"] == "writer@v0"
    assert pref["comparisons"] == 3 and pref["wins"] + pref["ties"] + pref["losses"] == 3
    assert pref["rubric"] == "story"
    assert_rate(pref["preference"])
    assert "## Judge preference: evaluated vs baseline" in md and "position bias" in md
    assert "### By partner strategy" in md and "| short_writer | evaluated (writer@v1) |" in md
    # `agora results` reads the same file: the writer's metrics and the preference
    figures = {f.name: f for f in train_eval_figures(run_dir / "eval" / "eval.json")}
    assert {"reward", "judge_score", "preference", "judge preference (latest vs v0)"} \
        <= set(figures)
    judged = figures["judge preference (latest vs v0)"]
    assert judged.before.value == 0.5 and judged.after.value == pref["preference"]["rate"]
    assert judged.after.n == 3 and not figures["reward"].share


def test_eval_research_team_against_its_writer_with_success_and_preference(
        tmp_path, vllm_tiny, learner):
    """The research env's researcher (tiny-random: its notes are noise) with the scripted
    copy writer: scored through the judge service like training, success = every fact
    stated, and the judge's preference compares the two teams' answers."""
    url, _ = vllm_tiny
    cfg = tiny_config(
        name="research",
        agents=[{"name": "researcher", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"temperature": 1.0, "max_tokens": 12,
                              "stop": ["</tool>", "<result>"]}}],
        context_agents={"writer": {"strategy": "copy_writer"}},
        environment={"name": "research", "seats": ["researcher", "context:writer"],
                     "prefill": "", "opponents": {"self": 1.0},
                     "research": {"facts": 2, "max_searches": 1}},
        reward={"verifier": "judge"},
        judge={"backend": "rubric"},
    )
    run_dir = make_run(tmp_path, cfg, learner, versions=2)
    code, out = agora_eval(run_dir, "--games", 2, "--policy-url", url,
                           "--port-base", PORT_BASE)
    assert code == 0, out
    report, md = read_eval(run_dir / "eval")
    section = report["sections"]["episodes"]
    assert section["partners"] == {"writer": ["copy_writer"]}
    for policy in section["policies"].values():
        metrics = policy["agents"]["researcher"]
        assert metrics["reward"]["n"] == 2
        # Noise finds no fact; success is the share of episodes with every fact stated.
        assert metrics["success"] == metrics["solved"] and metrics["solved"]["rate"] == 0.0
        for key in ("facts_found", "relevance", "faithfulness", "pages_found"):
            assert 0.0 <= metrics[key]["mean"] <= 1.0
        assert metrics["searches"]["mean"] <= 1.0  # max_searches: 1
    pref = section["preference"]
    assert pref["comparisons"] == 2 and pref["a"] == "researcher@v1"


def test_eval_code_debug_success_rate_through_the_reward_sandbox(tmp_path, vllm_tiny,
                                                                reward_url, learner):
    url, _ = vllm_tiny
    solved = HELD_OUT_PROBLEMS[0]
    # The prefill hands in the reference solution of held-out problem 0: evaluation episodes
    # 0..3 play held-out problems 0..3 (never a training one), so exactly one in four is solved.
    assert len(HELD_OUT_PROBLEMS) >= 4 and PROBLEMS_BY_ID[solved.problem_id] is solved
    cfg = tiny_config(
        name="code",
        agents=[{"name": "fixer", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"temperature": 1.0, "max_tokens": 1, "stop": ["```"]}}],
        environment={"name": "code_debug", "seats": ["fixer"], "opponents": {"self": 1.0},
                     "prefill": f"```python\n{solved.solution}```\n",
                     "code_debug": {"mode": "fixer"}},
        reward={"verifier": "code_tests"},
    )
    run_dir = make_run(tmp_path, cfg, learner, versions=2)
    code, out = agora_eval(run_dir, "--games", 4, "--policy-url", url, "--reward-url",
                           reward_url)
    assert code == 0, out
    report, md = read_eval(run_dir / "eval")
    assert report["services"]["started"] == []
    assert report["sections"]["episodes"]["seeds"] == [held_out_seed(0, 0), held_out_seed(0, 3)]
    for policy in report["sections"]["episodes"]["policies"].values():
        metrics = policy["agents"]["fixer"]
        assert metrics["success"] == metrics["solved"]
        assert metrics["success"]["rate"] == pytest.approx(0.25) and metrics["success"]["n"] == 4
        assert_rate(metrics["success"])
        assert 0.25 <= metrics["pass_rate"]["mean"] < 1.0
    assert "preference" not in report["sections"]["episodes"]  # not a judged env
    assert "| solved | success |" in md
    # The same seed is solved by both versions (the prefill), the others by neither.
    paired = report["sections"]["episodes"]["paired"]["fixer"]["solved"]
    assert (paired["n"], paired["both"], paired["neither"], paired["difference"]) == (4, 1, 3, 0)
    # Four distinct held-out problems: no task repeats, so the pairing's unit is the seed.
    assert paired["unit"] == "seed"
    # Each episode's outcome is kept: seed, task (problem | partner), metrics per agent.
    outcomes = report["sections"]["episodes"]["outcomes"]
    for policy in ("evaluated", "baseline"):
        rows = outcomes[policy]
        assert [r["seed"] for r in rows] == [held_out_seed(0, i) for i in range(4)]
        assert [r["metrics"]["fixer"]["solved"] for r in rows] == [1.0, 0.0, 0.0, 0.0]
        assert rows[0]["task"] == f"{solved.problem_id}|"
    assert "| fixer | solved | +0.0 [" in md
    # The share of tests passed, a mean, is paired by seed too: per-seed differences.
    pass_rate = report["sections"]["episodes"]["paired"]["fixer"]["pass_rate"]
    rates = {p: [r["metrics"]["fixer"]["pass_rate"] for r in outcomes[p]] for p in outcomes}
    assert pass_rate["unit"] == "seed" and pass_rate["n"] == 4
    assert pass_rate["difference"] == pytest.approx(
        sum(rates["evaluated"]) / 4 - sum(rates["baseline"]) / 4)
    assert pass_rate["better"] + pass_rate["worse"] <= 4
    assert "| fixer | pass_rate |" in md
    figures = {f.name: f for f in train_eval_figures(run_dir / "eval" / "eval.json")}
    solved_figure = figures["solved"]
    gain = figures["solved: latest - v0, paired by seed"]
    assert "pass_rate: latest - v0, paired by seed" in figures
    assert (gain.before.value, gain.after.value, gain.after.n) == (0.0, 0.0, 4)
    assert gain.after.lo < 0.0 < gain.after.hi
    assert solved_figure.before.value == solved_figure.after.value == pytest.approx(0.25)
    assert solved_figure.after.n == 4 and solved_figure.share
