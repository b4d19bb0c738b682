"""`agora results` without running anything: the plan's checks, the commands it builds, the
figures it reads from the commands' own result objects, targets, and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agora.config.base import ConfigError
from agora.config.run import load_config
from agora.evaluation.compare import DiscussionResult
from agora.evaluation.games import MatchResult
from agora.evaluation.learner import learner_summary
from agora.results.commands import check_configs, outputs, steps
from agora.results.figures import Estimate, Figure, compare_figures, demo_figures
from agora.results.plan import Target, load_plan
from agora.results.report import change, markdown
from agora.results.runner import check, kept_outcome, run_plan, training_curve

ROOT = Path(__file__).resolve().parents[2]


def write_plan(tmp_path: Path, *experiments: dict) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"experiments": list(experiments)}))
    return path


def experiment(**fields) -> dict:
    return {"name": "ttt", "recipe": "Tic-Tac-Toe", "kind": "demo",
            "config": str(ROOT / "configs/tictactoe_selfplay.yaml"), **fields}


def test_the_shipped_plan_names_every_recipe_and_its_commands(tmp_path):
    plan = load_plan(ROOT / "configs/results.yaml")
    kinds = {e.kind for e in plan.experiments}
    assert kinds == {"demo", "compare", "train_eval", "reflect"}
    runs = tmp_path / "runs"
    for exp in plan.experiments:
        commands = [s.shell() for s in steps(exp, runs)]
        assert commands and all(c.startswith("agora ") for c in commands)
        assert all(str(exp.config) in c or "eval" in c for c in commands)
        assert exp.targets, f"{exp.name} holds its figures to nothing"
    warm = next(e for e in plan.experiments if e.warm_start)
    first, second = steps(warm, runs)
    assert first.args[0] == "warm-start" and second.args[0] == "demo"
    adapter = first.args[first.args.index("--out") + 1]
    assert f"agents.0.init_adapter={adapter}" in second.args  # PPO starts from the SFT
    assert outputs(warm, runs).figures == runs / warm.name / "eval.json"


def test_every_shipped_experiment_is_a_valid_run_config_with_its_overrides(tmp_path):
    """A typo in an override (a field that does not exist, a value out of range) is refused
    before the plan starts, naming the experiment and the field."""
    check_configs(load_plan(ROOT / "configs/results.yaml").experiments)
    bad = load_plan(write_plan(tmp_path, experiment(name="ok"),
                               experiment(name="typo", overrides=["ppo.filter_group=true"])))
    with pytest.raises(ConfigError, match="(?s)experiment typo: .*ppo.filter_group"):
        check_configs(bad.experiments)


def test_budgets_become_the_commands_options(tmp_path):
    plan = load_plan(write_plan(
        tmp_path, experiment(name="a", updates=3, games=10),
        experiment(name="b", kind="compare", config=str(ROOT / "configs/maporl_math.yaml"),
                   minutes=2.5, tasks=7),
        experiment(name="c", kind="train_eval", config=str(ROOT / "configs/negotiation.yaml"),
                   minutes=4, games=5, overrides=["ppo.kl_coef=0"])))
    runs = tmp_path / "runs"
    (demo,) = steps(plan.experiments[0], runs)
    assert demo.args[:4] == ["demo", str(ROOT / "configs/tictactoe_selfplay.yaml"),
                             "--run-id", "a"]
    assert "trainer.max_updates=3" in demo.args and "trainer.max_minutes=null" in demo.args
    assert demo.args[demo.args.index("--games") + 1] == "10"
    assert f"output_dir={runs}" in demo.args
    (compare,) = steps(plan.experiments[1], runs)
    assert compare.args[compare.args.index("--minutes") + 1] == "2.5"
    assert compare.args[compare.args.index("--tasks") + 1] == "7"
    train, evaluate = steps(plan.experiments[2], runs)
    assert "trainer.max_minutes=4" in train.args and "ppo.kl_coef=0" in train.args
    assert evaluate.args == ["eval", str(runs / "c"), "--games", "5"]
    # A discussion's evaluation: held-out tasks and samples per task (agora eval's --k).
    discussion = load_plan(write_plan(tmp_path, experiment(
        name="d", kind="train_eval", config=str(ROOT / "configs/maporl_two_base.yaml"),
        updates=2, tasks=100, eval_k=1)))
    _, evaluate = steps(discussion.experiments[0], runs)
    assert evaluate.args == ["eval", str(runs / "d"), "--tasks", "100", "--k", "1"]


def test_a_train_eval_experiment_warm_starts_its_learner(tmp_path):
    plan = load_plan(write_plan(tmp_path, experiment(
        name="n", kind="train_eval", config=str(ROOT / "configs/negotiation.yaml"), minutes=4,
        warm_start={"episodes": 3, "max_steps": 5})))
    warm, train, evaluate = steps(plan.experiments[0], runs := tmp_path / "runs")
    assert warm.args[:2] == ["warm-start", str(ROOT / "configs/negotiation.yaml")]
    assert warm.args[warm.args.index("--out") + 1] == str(runs / "n-sft")
    assert warm.args[warm.args.index("--max-steps") + 1] == "5"
    assert f"agents.0.init_adapter={runs / 'n-sft'}" in train.args and train.args[0] == "up"
    assert "init_adapter" not in " ".join(evaluate.args)  # eval reads the run's own adapters


def test_a_warm_start_may_name_its_demonstrator_and_a_bad_one_is_refused_first(tmp_path):
    tictactoe = str(ROOT / "configs/tictactoe_selfplay.yaml")
    plan = load_plan(write_plan(tmp_path, experiment(
        name="t", kind="demo", config=tictactoe, minutes=1,
        warm_start={"episodes": 3, "demonstrator": "minimax_canonical"})))
    check_configs(plan.experiments)
    warm, _ = steps(plan.experiments[0], tmp_path / "runs")
    assert warm.args[warm.args.index("--demonstrator") + 1] == "minimax_canonical"
    bad = load_plan(write_plan(tmp_path, experiment(
        name="t", kind="demo", config=tictactoe, minutes=1,
        warm_start={"episodes": 3, "demonstrator": "random"})))
    with pytest.raises(ConfigError, match="experiment t: warm_start.demonstrator: 'random' is "
                                          "not one of tictactoe's demonstrators"):
        check_configs(bad.experiments)


def test_a_warm_start_of_every_position_is_passed_on_and_refused_where_the_game_is_big(
        tmp_path):
    plan = load_plan(write_plan(tmp_path, experiment(
        name="t", kind="demo", config=str(ROOT / "configs/tictactoe_selfplay.yaml"), minutes=1,
        warm_start={"every_position": True, "demonstrator": "minimax_canonical"})))
    check_configs(plan.experiments)
    warm, _ = steps(plan.experiments[0], tmp_path / "runs")
    assert "--every-position" in warm.args
    bad = load_plan(write_plan(tmp_path, experiment(
        name="h", kind="demo", config=str(ROOT / "configs/hanabi_selfplay.yaml"), minutes=1,
        warm_start={"every_position": True})))
    with pytest.raises(ConfigError, match="experiment h: warm_start.every_position: hanabi is "
                                          "not a small game without chance"):
        check_configs(bad.experiments)


def test_a_compare_warm_starts_its_learner_before_both_arms(tmp_path):
    research = str(ROOT / "configs/research.yaml")
    plan = load_plan(write_plan(tmp_path, experiment(
        name="r", kind="compare", config=research, updates=2, games=5,
        warm_start={"episodes": 3, "max_steps": 5})))
    warm, arms = steps(plan.experiments[0], runs := tmp_path / "runs")
    assert warm.args[:2] == ["warm-start", research] and warm.product == runs / "r-sft"
    assert arms.args[:2] == ["compare", research]
    assert f"agents.0.init_adapter={runs / 'r-sft'}" in arms.args


def test_a_warm_starts_own_overrides_reach_the_sft_only(tmp_path):
    """The research compare's SFT seats the learner in both seats (researcher and writer), so
    the learning peer that takes the writer's seat starts from an adapter that has written
    answers; the two arms train the config as written."""
    research = str(ROOT / "configs/research.yaml")
    both = "environment.seats=[researcher,researcher]"
    plan = load_plan(write_plan(tmp_path, experiment(
        name="r", kind="compare", config=research, updates=2, overrides=["ppo.kl_coef=0.05"],
        warm_start={"episodes": 3, "overrides": [both]})))
    check_configs(plan.experiments)
    warm, arms = steps(plan.experiments[0], tmp_path / "runs")
    assert warm.args[-4:] == ["--set", "ppo.kl_coef=0.05", "--set", both]
    assert both not in arms.args and "ppo.kl_coef=0.05" in arms.args
    # A bad SFT setting, or one that unseats the learner, is named before anything runs.
    for overrides, message in (
            (["ppo.filter_group=true"], "warm_start.overrides: .*ppo.filter_group"),
            (["environment.seats=[context:writer,context:writer]"],
             "warm_start.overrides: .*cannot play the researcher seat")):
        bad = load_plan(write_plan(tmp_path, experiment(
            name="b", kind="compare", config=research, updates=2,
            warm_start={"episodes": 3, "overrides": overrides})))
        with pytest.raises(ConfigError, match=f"(?s)experiment b: {message}"):
            check_configs(bad.experiments)


def test_a_warm_start_can_train_a_named_teammate_and_its_variants_start_it_too(tmp_path):
    """Two learners (alice on SmolLM2, bob on Gemma): the SFT trains bob, PPO starts bob's
    adapter from it, alice from her base; a variant from that warm start sets bob's too."""
    two_base = str(ROOT / "configs/maporl_two_base.yaml")
    first = experiment(name="tb", kind="train_eval", config=two_base, updates=2,
                       warm_start={"episodes": 3, "agent": "bob"})
    variant = experiment(name="tb-rloo", kind="train_eval", config=two_base, updates=2,
                         warm_start_from="tb", overrides=["ppo.kl_coef=0"])
    plan = load_plan(write_plan(tmp_path, first, variant))
    check_configs(plan.experiments)
    warm, train, _ = steps(plan.experiments[0], runs := tmp_path / "runs")
    assert warm.args[warm.args.index("--agent") + 1] == "bob"
    assert f"agents.1.init_adapter={runs / 'tb-sft'}" in train.args  # bob is agents[1]
    assert not any(a.startswith("agents.0.init_adapter") for a in train.args)
    train, _ = steps(plan.experiments[1], runs)
    assert f"agents.1.init_adapter={runs / 'tb-sft'}" in train.args
    # A teammate the config does not have is named before anything runs.
    bad = load_plan(write_plan(tmp_path, {**first, "warm_start": {"agent": "carol"}}))
    with pytest.raises(ConfigError, match="experiment tb: warm_start.agent: no agent 'carol'"):
        check_configs(bad.experiments)


def test_a_variant_starts_from_an_earlier_experiments_warm_start(tmp_path):
    negotiation = str(ROOT / "configs/negotiation.yaml")
    first = experiment(name="n", kind="train_eval", config=negotiation, minutes=4,
                       warm_start={"episodes": 3})
    variant = experiment(name="n-rloo", kind="train_eval", config=negotiation, minutes=4,
                         warm_start_from="n",
                         overrides=["ppo.advantage=rloo", "ppo.group_size=4"])
    plan = load_plan(write_plan(tmp_path, first, variant))
    train, evaluate = steps(plan.experiments[1], runs := tmp_path / "runs")  # no SFT of its own
    assert train.args[0] == "up" and f"agents.0.init_adapter={runs / 'n-sft'}" in train.args
    assert evaluate.args[0] == "eval"
    # A compare from the same SFT: both arms' learner (and the multi arm's peer, its copy).
    versus = experiment(name="n-cmp", kind="compare", config=negotiation, updates=3, games=9,
                        warm_start_from="n")
    (arms,) = steps(load_plan(write_plan(tmp_path, first, versus)).experiments[1], runs)
    assert arms.args[:2] == ["compare", negotiation]
    assert f"agents.0.init_adapter={runs / 'n-sft'}" in arms.args
    assert arms.args[arms.args.index("--games") + 1] == "9"
    # A source without a warm start of any kind (not in the plan, not in its config).
    bare = load_plan(write_plan(tmp_path, {**first, "warm_start": None}, variant))
    with pytest.raises(ConfigError, match="experiment n-rloo: warm_start_from: 'n' is no "
                                          "earlier experiment with a warm_start"):
        check_configs(bare.experiments)
    for bad, message in (
            ([variant, first], "'n' is no earlier experiment with a warm_start"),
            ([first, {**variant, "config": str(ROOT / "configs/story.yaml")}],
             "an adapter fits its own config"),
            ([first, {**variant, "warm_start": {"episodes": 3}}], "not both")):
        with pytest.raises(ConfigError, match=message):
            load_plan(write_plan(tmp_path, *bad))


def test_a_variant_starts_from_the_warm_start_an_earlier_runs_trainer_made(tmp_path):
    """make demo's config warm-starts in its trainer (agents[].warm_start): a variant of it
    (60 minutes of PPO) points init_adapter at that run's warm-start folder and trains no
    SFT of its own (a given init_adapter wins over the config's warm start)."""
    warm = str(ROOT / "configs/tictactoe_warm.yaml")
    demo = experiment(name="demo", kind="demo", config=warm, minutes=15)
    longer = experiment(name="demo-60", kind="demo", config=warm, minutes=60,
                        warm_start_from="demo")
    plan = load_plan(write_plan(tmp_path, demo, longer))
    check_configs(plan.experiments)
    (own,) = steps(plan.experiments[0], runs := tmp_path / "runs")
    assert not any("init_adapter" in a for a in own.args)  # the source runs its own SFT
    (train,) = steps(plan.experiments[1], runs)
    assert train.args[:2] == ["demo", warm]
    assert f"agents.0.init_adapter={runs / 'demo' / 'warm-start' / 'player'}" in train.args
    assert train.args[train.args.index("--minutes") + 1] == "60"
    # The variant's run really takes it: the trainer's warm start sees a given init_adapter.
    cfg = load_config(warm, [a for a in train.args if "init_adapter" in a])
    assert cfg.agents[0].init_adapter == str(runs / "demo" / "warm-start" / "player")


@pytest.mark.parametrize(("fields", "message"), [
    ({"kind": "train"}, "experiments.0.kind"),
    ({"name": "../x"}, "experiments.0.name"),
    ({"minutes": 1, "updates": 2}, "minutes or updates, not both"),
    ({"kind": "compare", "eval_k": 1}, "eval_k: only a train_eval experiment"),
    ({"kind": "train_eval", "eval_k": 0}, "experiments.0.eval_k"),
    ({"kind": "reflect", "minutes": 3}, "reflect runs its config's stages"),
    ({"targets": ["wins vs random 0.7"]}, "is not 'FIGURE OP BOUND'"),
    ({"config": "configs/nothing.yaml"}, "experiments.ttt.config: no file"),
    ({"colour": "red"}, "experiments.0.colour"),
])
def test_a_bad_plan_names_the_field(tmp_path, fields, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_plan(write_plan(tmp_path, experiment(**fields)))


def test_names_are_unique_and_only_must_name_experiments(tmp_path):
    with pytest.raises(ConfigError, match="unique"):
        load_plan(write_plan(tmp_path, experiment(), experiment()))
    plan = load_plan(write_plan(tmp_path, experiment(name="a"), experiment(name="b")))
    assert [e.name for e in plan.select(["b"])] == ["b"]
    assert [e.name for e in plan.select([])] == ["a", "b"]
    with pytest.raises(ConfigError, match="--only: no experiment"):
        plan.select(["c"])


def test_targets_parse_figures_that_contain_operators():
    target = Target.parse("wrong->right > right->wrong")
    assert (target.figure, target.op, target.other) == ("wrong->right", ">", "right->wrong")
    target = Target.parse("losses vs random <= 0.05")
    assert (target.figure, target.op, target.number) == ("losses vs random", "<=", 0.05)
    assert not target.higher_is_better


def test_targets_are_held_against_the_after_value_and_its_interval():
    wins = Figure("wins", Estimate.proportion(40, 200), Estimate.proportion(150, 200))
    single = Figure("single", None, Estimate.proportion(140, 200))
    flat = Figure("flat", Estimate.proportion(100, 200), Estimate.proportion(104, 200))
    figures = [wins, single, flat]
    # 75% of 200 is >= 70%, but its interval (69-80%) reaches below: met, not clear.
    met = check(Target.parse("wins >= 0.70"), figures)
    assert met["met"] and met["value"] == 0.75 and wins.after.lo < 0.70
    assert met["clear"] is False
    above = check(Target.parse("wins > 0.5"), figures)
    assert above["met"] and above["clear"]
    missed = check(Target.parse("wins >= 0.8"), figures)
    assert missed["met"] is False
    versus = check(Target.parse("wins > single"), figures)  # 75% vs 70%: overlapping
    assert versus["met"] and versus["clear"] is False and versus["bound"] == 0.70
    noise = check(Target.parse("flat > before"), figures)
    assert noise["met"] and noise["clear"] is False
    gain = check(Target.parse("wins > before"), figures)
    assert gain["met"] and gain["clear"]
    lower = check(Target.parse("flat <= 0.4"), figures)
    assert lower["met"] is False
    missing = check(Target.parse("draws > 0.3"), figures)
    assert missing["met"] is None and "no figure 'draws'" in missing["why"]
    assert check(Target.parse("wins > nothing"), figures)["met"] is None
    # Against its own before, a paired difference decides whether the change is clear: the
    # two intervals of `flat` overlap, its paired gain lies above zero (the seeds agree).
    paired = Figure("flat: latest - v0, paired by seed", Estimate(0.0, 0.0, 0.0),
                    Estimate(0.02, 0.005, 0.035, 200))
    noise_paired = check(Target.parse("flat > before"), [*figures, paired])
    assert noise_paired["met"] and noise_paired["clear"]
    assert noise_paired["clear_by"] == "flat: latest - v0, paired by seed"
    # ... and a paired interval that reaches below zero is not clear, however far apart the
    # two rates' own intervals are.
    paired_wins = Figure("wins: latest - v0, paired by task", Estimate(0.0, 0.0, 0.0),
                         Estimate(0.55, -0.02, 0.9, 11))
    assert check(Target.parse("wins > before"), [*figures, paired_wins])["clear"] is False


def test_change_says_up_or_down_only_beyond_both_intervals():
    assert change(Figure("a", Estimate.proportion(20, 200), Estimate.proportion(120, 200))) == "up"
    assert change(Figure("a", Estimate.proportion(120, 200), Estimate.proportion(20, 200))) \
        == "down"
    assert change(Figure("a", Estimate.proportion(100, 200), Estimate.proportion(110, 200))) \
        == "within noise"
    assert change(Figure("a", None, Estimate(3.0))) == "-"


def test_demo_figures_are_counts_with_wilson_intervals(tmp_path):
    """From the rows `agora demo` writes (MatchResult.as_dict)."""
    def rows(wins: int, draws: int) -> dict:
        return {"random": MatchResult("random", 50, wins, 0, 50 - wins, 0, 200, 190).as_dict(),
                "minimax": MatchResult("minimax", 40, 0, draws, 40 - draws, 1, 160, 160)
                .as_dict()}
    path = tmp_path / "eval.json"
    path.write_text(json.dumps({"before (v0)": rows(10, 2), "after": rows(35, 12)}))
    figures = {f.name: f for f in demo_figures(path)}
    assert {"wins vs random", "draws vs minimax", "losses vs random",
            "legal moves vs random"} <= set(figures)
    wins = figures["wins vs random"]
    assert wins.before.value == 0.2 and wins.after.value == 0.7 and wins.after.n == 50
    assert wins.after.lo < 0.7 < wins.after.hi
    assert figures["draws vs minimax"].after.value == pytest.approx(0.3)
    assert figures["legal moves vs random"].after.value == pytest.approx(0.95)
    assert change(wins) == "up"


def test_cooperative_demo_figures_are_mean_scores(tmp_path):
    def row(scores: list[float]) -> dict:
        return MatchResult("self", len(scores), 0, 0, 0, 0, 10, 10, scores).as_dict()
    path = tmp_path / "eval.json"
    path.write_text(json.dumps({"before (v0)": {"self": row([1.0, 2.0, 3.0])},
                                "after": {"self": row([4.0, 6.0, 5.0])}}))
    (figure,) = demo_figures(path)
    assert figure.name == "score with self" and not figure.share
    assert figure.before.value == 2.0 and figure.after.value == 5.0
    assert figure.after.lo < 5.0 < figure.after.hi


def test_reflect_figures_read_the_papers_metrics_and_what_the_critic_did(tmp_path):
    """From `agora reflect eval`'s rows (reflection_metrics + critic_effects); an evaluation
    written before critic_effects existed still reads, without the critic's figures."""
    from agora.reflection.critic_effects import critic_effects
    from agora.reflection.records import Transcript, Turn
    from agora.reflection.scores import reflection_metrics
    from agora.results.figures import reflect_figures

    def stage(verdicts: list[tuple[bool, str, bool]]) -> dict:
        """Per problem: (first answer right?, the critic's verdict, did the actor change?)."""
        transcripts = []
        for i, (right, verdict, changed) in enumerate(verdicts):
            first = Turn(answer="a", extracted="7" if right else "6", correct=right)
            later = [Turn(answer="b", extracted="5" if changed else first.extracted,
                          correct=right and not changed, feedback=f"Verdict: {verdict}",
                          verdict=verdict) for _ in range(4)]
            transcripts.append(Transcript(task_id=str(i), question="q", reference="7",
                                          turns=[first, *later]))
        return {**reflection_metrics(transcripts, 5).as_dict(),
                "critic": critic_effects(transcripts)}

    before = stage([(True, "wrong", True), (False, "correct", False)])
    after = stage([(True, "correct", False), (False, "wrong", True), (True, "correct", False)])
    (tmp_path / "base.json").write_text(json.dumps(before))
    (tmp_path / "dpo.json").write_text(json.dumps(after))
    figures = {f.name: f for f in reflect_figures(tmp_path)}
    right = figures["critic verdicts right"]
    # before: turn 2 of problem 0 judges 7 (right) "wrong", its later turns judge 5 "wrong"
    assert (right.before.value, right.before.n) == (0.375, 8)
    assert (right.after.value, right.after.n) == (1.0, 12) and right.after.lo < 1.0
    kept = figures["actor changed after 'correct'"]
    assert (kept.before.value, kept.after.value, kept.after.n) == (0.0, 0.0, 8)
    changed = figures["actor changed after 'wrong'"]
    assert (changed.before.value, changed.after.value, changed.after.n) == (0.25, 0.25, 4)
    assert figures["maj1@turn5"].after.value == after["maj1@turn5"]
    for name in ("base.json", "dpo.json"):
        old = json.loads((tmp_path / name).read_text())
        del old["critic"]
        (tmp_path / name).write_text(json.dumps(old))
    assert not [f for f in reflect_figures(tmp_path) if "critic" in f.name or "actor" in f.name]


def test_compare_figures_per_arm_and_round(tmp_path):
    """From the arms `agora compare` writes (DiscussionResult.as_dict)."""
    def result(rounds: int, correct: list[list[int]]) -> dict:
        return DiscussionResult(rounds=rounds, seats=len(correct[0]), tasks=20,
                                correct=correct).as_dict()
    path = tmp_path / "compare.json"
    path.write_text(json.dumps({
        "single-agent": {"updates": 8, "before": result(1, [[4]]), "after": result(1, [[6]])},
        "multi-agent": {"updates": 3, "before": result(2, [[4, 4], [5, 5]]),
                        "after": result(2, [[6, 6], [9, 9]])}}))
    figures = {f.name: f for f in compare_figures(path)}
    assert set(figures) == {"single-agent: last turn", "single-agent: updates",
                            "multi-agent: turn 1", "multi-agent: last turn",
                            "multi-agent: updates"}
    last = figures["multi-agent: last turn"]
    assert last.before.value == 0.25 and last.after.value == 0.45 and last.after.n == 40
    assert figures["multi-agent: updates"].after.value == 3
    verdict = check(Target.parse("multi-agent: last turn > single-agent: last turn"),
                    list(figures.values()))
    assert verdict["met"] and verdict["bound"] == 0.3


def test_compare_figures_of_an_episodes_env_are_the_learners_metrics(tmp_path):
    """A negotiation compare's arms: agora eval's metrics of the learner, v0 and latest."""
    def metrics(deals: int, reward: float) -> dict:
        return {"reward": {"mean": reward, "n": 20, "ci95": [reward - 0.1, reward + 0.1]},
                "legal_rate": 1.0, "deal_rate": {"rate": deals / 20, "n": 20, "ci95": [0, 1]},
                "success": {"rate": deals / 20, "n": 20, "ci95": [0, 1]}}
    path = tmp_path / "compare.json"
    path.write_text(json.dumps({
        arm: {"updates": updates, "evaluation": "episodes", "before": metrics(5, 0.1),
              "after": metrics(deals, 0.4)}
        for arm, updates, deals in (("single-agent", 6, 10), ("multi-agent", 4, 15))}))
    figures = {f.name: f for f in compare_figures(path)}
    assert set(figures) == {f"{arm}: {key}" for arm in ("single-agent", "multi-agent")
                            for key in ("reward", "legal_rate", "deal_rate", "updates")}
    deals = figures["multi-agent: deal_rate"]
    assert (deals.before.value, deals.after.value, deals.after.n) == (0.25, 0.75, 20)
    assert not figures["single-agent: reward"].share and figures["single-agent: deal_rate"].share
    assert figures["single-agent: updates"].after.value == 6
    verdict = check(Target.parse("multi-agent: deal_rate > single-agent: deal_rate"),
                    list(figures.values()))
    # Met on the values (0.75 > 0.5), not clear of the intervals ([0, 1] both).
    assert verdict["met"] is True and verdict["bound"] == 0.5 and verdict["clear"] is False


def test_the_learner_summary_and_curve_read_metrics_rows(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"update": u, "elapsed_s": 30.0 * u,
             "agents": {"p": {"reward_mean": u / 8, "reward_std": 0.5, "entropy": 1 - u / 10,
                              "win_rate": u / 10}}} for u in range(1, 9)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{cut")
    summary = learner_summary(path)["p"]
    assert summary["reward_mean"] == {"first": pytest.approx(1.5 / 8),
                                      "last": pytest.approx(7.5 / 8)}
    assert "kl" not in summary  # never logged
    curve = training_curve(path)
    assert curve["key"] == "win_rate" and curve["points"][0] == [1, 0.5, 0.1]
    assert learner_summary(tmp_path / "none.jsonl") == {} and training_curve(tmp_path / "x") == {}


def test_the_markdown_lists_targets_commands_and_failures():
    wins = Figure("wins vs random", Estimate.proportion(10, 100), Estimate.proportion(60, 100))
    done = {"name": "ttt", "recipe": "Tic-Tac-Toe", "kind": "demo", "status": "done",
            "commands": ["agora demo x.yaml --run-id ttt"], "log": "logs/ttt.log",
            "wall_s": 60, "figures": [wins.as_dict()],
            "targets": [check(Target.parse("wins vs random >= 0.7"), [wins])],
            "learner": {"ttt": {"p": {"reward_std": {"first": 0.0, "last": 0.25}}}}}
    failed = {"name": "m", "recipe": "MAPoRL", "kind": "compare", "status": "failed",
              "commands": ["agora compare m.yaml"], "log": "logs/m.log", "wall_s": 3,
              "error": "'two arms' exited 2", "log_tail": "config error: environment.name"}
    text = markdown([done, failed], Path("plan.yaml"), "2 cores")
    assert "| Tic-Tac-Toe | wins vs random | 10.0% [" in text and "| >= 0.7 | **no** |" in text
    assert "| MAPoRL | - | - | - | - | **failed**: 'two arms' exited 2 |" in text
    assert "agora demo x.yaml --run-id ttt" in text and "config error: environment.name" in text
    assert "| turn reward spread | 0 | 0.25 |" in text
    assert "| wins vs random | 10.0% [" in text and "| up |" in text


def test_the_table_keeps_every_experiment_done_before_whatever_only_chose(tmp_path):
    """`--only b` runs b; a, done before with the same commands, stays in the table; c, never
    run and not chosen, is not in it; an outcome made by other commands is not kept."""
    plan = load_plan(write_plan(tmp_path, experiment(name="a", updates=1),
                                experiment(name="b", updates=1), experiment(name="c")))
    out = tmp_path / "results"
    out.mkdir()
    a, b, c = plan.experiments
    for exp in (a, b):
        (out / f"{exp.name}.json").write_text(json.dumps(
            {"name": exp.name, "status": "done", "figures": [],
             "commands": [s.shell() for s in steps(exp, out / "runs")]}))
    assert kept_outcome(c, out) is None
    ran: list[str] = []
    outcomes = run_plan(plan.experiments, out, rerun=False, log=ran.append, chosen={"b"})
    assert [o["name"] for o in outcomes] == ["a", "b"]
    assert ran == [f"b: done before ({out / 'b.json'}); --rerun to run it again"]
    changed = load_plan(write_plan(tmp_path, experiment(name="a", updates=2))).experiments[0]
    assert kept_outcome(changed, out) is None  # a budget change means a new experiment
    # --reread runs nothing, not even a chosen entry whose commands changed: a fresh run would
    # clear the folder of the run it was asked to read (c has no outcome: it must not start).
    ran.clear()
    outcomes = run_plan([a, changed.model_copy(update={"name": "b"}), c], out, rerun=False,
                        log=ran.append, chosen={"b", "c"}, reread=True, probe_machine=False)
    assert [o["name"] for o in outcomes] == ["a"]
    assert ran == ["a: done before; reading its figures again", *(
        f"{name}: not done with these commands (never run, failed, or its plan entry "
                   "changed since); --reread runs nothing, run it without --reread"
                   for name in ("b", "c"))]


def test_an_experiment_done_with_the_folder_spelt_otherwise_is_the_same(tmp_path, monkeypatch):
    """`--out results` and `--out /abs/results` name one folder: an experiment done through
    either is done for the other (a mismatch re-ran a 17-minute SFT)."""
    monkeypatch.chdir(tmp_path)
    (exp,) = load_plan(write_plan(tmp_path, experiment(name="a", updates=1))).experiments
    absolute = tmp_path / "results"
    absolute.mkdir()
    (absolute / "a.json").write_text(json.dumps(
        {"name": "a", "status": "done", "figures": [],
         "commands": [s.shell() for s in steps(exp, absolute / "runs")]}))
    assert kept_outcome(exp, Path("results")) is not None
    assert kept_outcome(exp, absolute) is not None
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "a.json").write_text((absolute / "a.json").read_text())
    assert kept_outcome(exp, other) is None  # another folder's commands are not this one's


def test_judge_quality_figures_show_a_judge_models_noise_and_stay_out_for_the_rubric():
    from agora.results.figures import judge_quality_figures

    llm = {"comparisons": 40, "position_bias": 10, "malformed": 4}
    figures = {f.name: f for f in judge_quality_figures(llm)}
    assert figures["judge verdicts position-biased"].after.value == 0.25
    assert figures["judge verdicts malformed"].after.value == 0.1
    assert figures["judge verdicts malformed"].after.n == 40
    assert all(f.share and f.before is None for f in figures.values())
    assert judge_quality_figures({"comparisons": 40, "position_bias": 0, "malformed": 0}) == []
    assert judge_quality_figures({"comparisons": 0}) == []


def test_train_eval_figures_of_a_discussion_are_its_held_out_accuracy(tmp_path):
    from agora.evaluation.stats import rate
    from agora.results.figures import train_eval_figures

    def policy(turn1: int, last: int) -> dict:
        return {"label": "x", "tasks": 50, "k": 1, "rounds": 2,
                "turn1": {"pass@1": rate(turn1, 100)}, "last": {"pass@1": rate(last, 100)}}

    path = tmp_path / "eval.json"
    section = {"tasks": 50, "k": 1, "policies": {"evaluated": policy(30, 40),
                                                 "baseline": policy(10, 12)}}
    path.write_text(json.dumps({"sections": {"discussion": section}}))
    figures = {f.name: f for f in train_eval_figures(path)}
    assert set(figures) == {"turn 1 accuracy", "last turn accuracy"}  # an eval.json of before
    last = figures["last turn accuracy"]
    assert (last.before.value, last.after.value, last.after.n) == (0.12, 0.4, 100)
    assert last.after.lo < 0.4 < last.after.hi and last.share

    # With the paired section: the gains against zero, "up" only when their interval is.
    from agora.results.report import change

    section["paired"] = {
        "turn1": {"difference": 0.02, "ci95": [-0.01, 0.05], "n": 50, "better": 5, "worse": 3},
        "last": {"difference": 0.28, "ci95": [0.2, 0.36], "n": 50, "better": 30, "worse": 2}}
    path.write_text(json.dumps({"sections": {"discussion": section}}))
    figures = {f.name: f for f in train_eval_figures(path)}
    gain = figures["last turn accuracy: latest - v0, paired by task"]
    assert (gain.before.value, gain.after.value, gain.after.lo, gain.after.n) == (0, 0.28, 0.2, 50)
    assert change(gain) == "up"
    assert change(figures["turn 1 accuracy: latest - v0, paired by task"]) == "within noise"


def test_episode_metrics_paired_by_task_are_read_over_tasks(tmp_path):
    """Where seeds repeat tasks (code_debug's 300 seeds over 46), the figure of a 0/1 metric
    takes its rate over tasks, so a gain that the seeds' Wilson intervals call clear but the
    tasks do not reads within noise."""
    from agora.evaluation.stats import mean_interval, rate
    from agora.results.figures import train_eval_figures
    from agora.results.report import change

    def policy(solved: int) -> dict:
        return {"labels": {"fixer": "fixer"},
                "agents": {"fixer": {"solved": rate(solved, 300), "success": rate(solved, 300)}}}

    section = {"episodes": 300, "policies": {"evaluated": policy(165), "baseline": policy(120)}}
    path = tmp_path / "eval.json"
    path.write_text(json.dumps({"sections": {"episodes": section}}))
    figures = {f.name: f for f in train_eval_figures(path)}
    assert change(figures["solved"]) == "up"  # 55% vs 40% of 300 independent seeds
    evaluated = mean_interval([1.0] * 6 + [0.0] * 4 + [0.5])  # 11 tasks
    baseline = mean_interval([1.0] * 4 + [0.0] * 6 + [0.5])
    section["paired"] = {"fixer": {"solved": {
        "difference": 0.18, "ci95": [-0.05, 0.41], "n": 11, "better": 3, "worse": 1,
        "unit": "task", "seeds": 300, "evaluated": evaluated, "baseline": baseline}}}
    path.write_text(json.dumps({"sections": {"episodes": section}}))
    figures = {f.name: f for f in train_eval_figures(path)}
    solved = figures["solved"]
    assert (solved.after.n, solved.before.n) == (11, 11)
    assert solved.after.value == pytest.approx(evaluated["mean"])
    assert change(solved) == "within noise"
    assert change(figures["solved: latest - v0, paired by task"]) == "within noise"
    # A judge's preference over repeated premises is read over them too.
    section["preference"] = {"comparisons": 300, "preference": rate(195, 300), "wins": 150,
                             "ties": 90, "losses": 60, "position_bias": 0, "malformed": 0,
                             "preference_by_task": {**mean_interval([0.9, 0.4, 0.6, 0.7]),
                                                    "seeds": 300}}
    path.write_text(json.dumps({"sections": {"episodes": section}}))
    judged = {f.name: f for f in train_eval_figures(path)}["judge preference (latest vs v0)"]
    assert (judged.after.value, judged.after.n) == (pytest.approx(0.65), 4)
    # Over the 4 tasks its interval takes in 0.5; over 300 comparisons it would lie above it.
    assert judged.after.lo < 0.5 < rate(195, 300)["ci95"][0]
