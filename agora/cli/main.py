"""The ``agora`` command line (typer + rich).

Every failure a user can cause (bad config, taken port, missing checkpoint, a service that dies)
ends in a one-paragraph message and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import time
from pathlib import Path

import httpx
import redis
import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from agora.cli.data import data_app
from agora.cli.keys import PEPPER_ENV, keys_app
from agora.cli.reflection import reflect_app
from agora.cli.results import results
from agora.cli.verifier import verifier_app
from agora.config.base import ConfigError
from agora.config.run import RunConfig, load_config
from agora.gateway.keys import KeyStore
from agora.ops.service_key import SERVICE_KEY_ENV, service_key
from agora.rollout.stream import RunKeys
from agora.serving.auth import API_KEY_ENV, vllm_api_key
from agora.stack.launcher import LaunchError, Stack, make_stack
from agora.stack.procs import ServiceFailed
from agora.stack.redis_client import fail_fast_redis
from agora.stack.redis_server import external_redis_url

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Post-train LLM agents with multi-agent RL.")
app.add_typer(verifier_app, name="verifier")
app.add_typer(keys_app, name="keys")
app.add_typer(reflect_app, name="reflect")
app.add_typer(data_app, name="data")
config_app = typer.Typer(no_args_is_help=True, help="The run config's reference and schema.")
app.add_typer(config_app, name="config")
app.command("results")(results)
console = Console()


@app.command("export")
def export(
    run: Path = typer.Argument(..., help="a run folder (runs/<id>)"),
    agent: str = typer.Option(..., help="the agent to export"),
    out: Path = typer.Option(..., help="the folder to write (new or empty)"),
    version: int = typer.Option(None, min=0, help="a saved version (default: the latest)"),
    merge: bool = typer.Option(False, help="fold the LoRA adapter into the base: a plain model"),
) -> None:
    """Write a trained agent as a PEFT adapter folder (or a merged model) with a model card."""
    from agora.train.export import ExportError, export_agent

    try:
        done = export_agent(run, agent, out, version=version, merge=merge)
    except (ExportError, ConfigError) as err:
        console.print(f"[bold red]cannot export[/]: {err}")
        raise typer.Exit(2) from None
    console.print(f"[green]exported[/] {agent} ({done.kind}, base {done.base}) to {done.path}")


@config_app.command("schema")
def config_schema() -> None:
    """Print the run config's JSON schema (for editors and validators)."""
    from agora.config.reference import schema

    print(schema())


@config_app.command("reference")
def config_reference() -> None:
    """Print the configuration reference in Markdown (docs/configuration.md is this output)."""
    from agora.config.reference import render

    print(render(), end="")


# Every command that reads a run config takes overrides of its fields.
SET_HELP = "override a config field, KEY.PATH=VALUE (YAML value; repeatable)"


def _load(config: Path, overrides: list[str] | None = None) -> RunConfig:
    try:
        return load_config(config, overrides or ())
    except ConfigError as err:
        console.print(f"[bold red]config error[/]: {err}")
        raise typer.Exit(2) from None


def progress_table(stack: Stack, started: float) -> Table:
    """Policy version, episodes/s, reward, legal and win rate per agent, from Redis."""
    client = fail_fast_redis(stack.redis_url, decode_responses=True)  # never stalls watch()
    keys = RunKeys(stack.run_id)
    state = client.hgetall(keys.state)
    stats = client.hgetall(keys.stats)
    elapsed = time.monotonic() - started
    episodes = int(stats.get("episodes", 0))
    table = Table(title=f"agora run {stack.run_id}  [{state.get('status', 'starting')}]",
                  caption=f"{elapsed / 60:.1f} min  |  updates {state.get('update', 0)}  |  "
                          f"episodes {episodes} ({episodes / max(elapsed, 1e-6):.2f}/s)  |  "
                          f"logs {stack.run_dir / 'logs'}")
    spec = stack.cfg.environment.spec
    if spec.evaluation == "discussion":
        columns = {"version": "policy_version", "reward": "reward_mean",
                   "acc turn 1": "accuracy_first", "acc last turn": "accuracy_last",
                   "answer parsed": "legal_rate", "KL": "kl", "update s": "update_s"}
        if stack.cfg.environment.answer != "text":  # per episode: programs run, and right
            columns |= {"programs": "programs_run", "programs right": "programs_right"}
    elif spec.metrics:  # Hanabi, negotiation, story, code_debug, support: their own metrics
        columns = {"version": "policy_version", "reward": "reward_mean", "legal": "legal_rate",
                   **{m.replace("_", " "): m for m in spec.metrics},
                   "KL": "kl", "update s": "update_s"}
        if "pool" in stack.cfg.environment.opponents:
            columns["pool Elo"] = "pool_elo"
        if int(stats.get("judge_requests", 0)):
            table.caption += (f"  |  judge calls {stats['judge_requests']} "
                              f"({stats.get('judge_malformed', 0)} malformed, "
                              f"{stats.get('judge_position_bias', 0)} position-biased)")
    else:
        columns = {"version": "policy_version", "reward": "reward_mean", "legal": "legal_rate",
                   "win vs random": "win_rate", "KL": "kl", "update s": "update_s"}
    if stack.cfg.curriculum.enabled:  # the difficulty level each agent plays at (0 = easiest)
        columns["level"] = "curriculum_level"
    table.add_column("agent", justify="right")
    for column in columns:
        table.add_column(column, justify="right")
    for agent in stack.cfg.agents:
        def get(key: str, agent: str = agent.name) -> str:
            value = state.get(f"{agent}:{key}")
            return "-" if value is None else f"{float(value):.3g}"
        table.add_row(agent.name, *(get(key) for key in columns.values()))
    return table


def _interrupt(_signum, _frame) -> None:
    raise KeyboardInterrupt


def access_lines(stack: Stack) -> list[str]:
    """What the user of a fresh stack needs to reach it: how to make a gateway key and the
    policy servers' vLLM key when this start made it (for `agora eval --policy-url` or curl).
    Printed on the user's own terminal only. The Redis password is not printed: it opens every
    key and episode of the run and would stay in any log the output is piped to; `agora keys
    --run` reads it from the run's 0600 file instead."""
    lines = []
    if not stack.open_gateway:
        # Our own Redis: the run directory leads to its password. The user's REDIS_URL: theirs.
        where = ("--redis-url \"$REDIS_URL\"" if external_redis_url()
                 else f"--run {stack.run_dir}")
        lines.append(f"API keys required: agora keys create NAME {where} "
                     "(--scope admin for runs), or agora up --open")
    if not vllm_api_key():
        lines.append(f"policy servers' key: export {API_KEY_ENV}={stack.vllm_api_key}")
    if not service_key():
        lines.append(f"reward and judge services' key: export {SERVICE_KEY_ENV}="
                     f"{stack.service_key}")
    return lines


def run_stack(stack: Stack, keep_serving: tuple[str, ...] = ()) -> None:
    """Start the stack, show progress until the trainer finishes, stop (all but ``keep``)."""
    # Ctrl-C and SIGTERM both stop every service. Installed explicitly: a shell starting us in
    # the background sets SIGINT to "ignore", and SIGTERM's default would orphan the services.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    try:
        stack.start(on_phase=lambda msg: console.print(f"[cyan]>[/] {msg}"))
        console.print(f"[green]stack up[/] in {time.monotonic() - started:.0f}s; "
                      f"gateway http://{stack.cfg.services.host}:{stack.cfg.services.gateway_port}")
        for line in access_lines(stack):
            console.print(f"  {line}")
        with Live(progress_table(stack, started), console=console, refresh_per_second=1) as live:
            def tick() -> None:
                # Redis restarting (agora/stack/supervisor.py): keep the last view until it is back.
                with contextlib.suppress(redis.RedisError):
                    live.update(progress_table(stack, started))

            stack.watch(on_tick=tick,
                        on_event=lambda msg: console.print(f"[yellow]![/] {escape(msg)}"))
    except ServiceFailed as err:
        console.print(f"[bold red]service '{err.name}' failed[/]: {err}")
        if err.log_tail:
            console.print(f"[dim]--- last lines of {err.name}'s log ---[/]\n{err.log_tail}")
        stack.stop()
        raise typer.Exit(1) from None
    except LaunchError as err:
        console.print(f"[bold red]cannot start[/]: {err}")
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: stopping every service[/]")
        stack.stop()
        raise typer.Exit(130) from None
    except BaseException:
        stack.stop()
        raise
    stack.stop(keep=keep_serving)


@app.command()
def up(
    config: Path = typer.Argument(..., help="run config YAML"),
    run_id: str = typer.Option(None, help="run id (default: <name>-<timestamp>)"),
    resume: bool = typer.Option(False, help="continue run --run-id from its last checkpoint"),
    overrides: list[str] = typer.Option(None, "--set", help=SET_HELP),
    open_gateway: bool = typer.Option(False, "--open", help="let the gateway answer without "
                                      "API keys (local play); default: keys required"),
) -> None:
    """Start the whole system locally and train until the config's budget is spent."""
    cfg = _load(config, overrides)
    try:
        stack = make_stack(cfg, run_id, resume, open_gateway=open_gateway)
    except LaunchError as err:
        console.print(f"[bold red]cannot start[/]: {err}")
        raise typer.Exit(2) from None
    run_stack(stack)
    console.print(f"[green]done[/]: {stack.run_dir}")


def results_table(title: str, rows: dict[str, dict[str, dict]]) -> Table:
    """Before/after rows per opponent; a cooperative game's team score gets its own column."""
    scored = any("score" in r for by_opp in rows.values() for r in by_opp.values())
    table = Table(title=title)
    columns = ["policy", "opponent", "games", "legal moves", "win", "draw", "loss", "forfeits",
               "win 95% CI"]
    if scored:
        columns = [c for c in columns if c not in ("win", "draw", "loss", "win 95% CI")]
        columns.append("mean score (95% CI)")
    for column in columns:
        table.add_column(column, justify="right")
    for policy, by_opponent in rows.items():
        for opponent, r in by_opponent.items():
            lo, hi = r["win_ci95"]
            cells = [policy, opponent, str(r["games"]), f"{r['legal_rate']:.1%}"]
            if scored:
                cells += [str(r["forfeits"]), _score_cell(r)]
            else:
                cells += [f"{r['win']:.1%}", f"{r['draw']:.1%}", f"{r['loss']:.1%}",
                          str(r["forfeits"]), f"{lo:.0%}-{hi:.0%}"]
            table.add_row(*cells)
    return table


def _score_cell(row: dict) -> str:
    """Mean team score with its 95% interval: rows differ by noise alone at small counts."""
    ci = row.get("score_ci95")
    mean = f"{row.get('score', 0.0):.2f}"
    return f"{mean} ({ci[0]:.2f}-{ci[1]:.2f})" if ci else mean


def ask_gateway_for_move(stack: Stack, agent: str) -> None:
    """Show a position, ask the trained agent through the gateway's OpenAI API, print its move."""
    from agora.envs.base import legal_completions
    from agora.envs.images import text_of
    from agora.envs.tictactoe import TicTacToe, render_board
    from agora.rollout.seating import build_env
    from agora.serving.requests import chat_request

    cfg = stack.cfg
    env = build_env(cfg, {"seed": 1})  # as in training: an image view stays an image view
    if isinstance(env, TicTacToe):
        env.reset(seed=1, opening=[4, 0, 8])  # O centre, X corner, O opposite corner: X to move
    else:
        env.reset(1)
    seat = env.current_seat
    messages = env.observation(seat)
    sampling = cfg.agent(agent).sampling.model_copy(update={"temperature": 0.0})  # its best move
    prefill = cfg.environment.prefill
    choices = legal_completions(env, prefill) if sampling.legal_actions_only else None
    body = chat_request(agent, messages, sampling, prefill, choices)
    url = f"http://{stack.cfg.services.host}:{stack.cfg.services.gateway_port}/v1/chat/completions"
    # The gateway requires keys: the demo makes itself a chat key, as a user would.
    name = f"demo-{secrets.token_hex(3)}"
    key = KeyStore(redis.Redis.from_url(stack.redis_url),
                   os.environ.get(PEPPER_ENV, "")).create(name, scope="chat")
    console.print(f"[cyan]>[/] made the chat key '{name}' (agora keys create {name}) to ask "
                  "the gateway")
    resp = httpx.post(url, json=body, timeout=60, headers={"authorization": f"Bearer {key}"})
    resp.raise_for_status()
    answer = cfg.environment.prefill + resp.json()["choices"][0]["message"]["content"]
    position = (render_board(env.board) if isinstance(env, TicTacToe)
                else text_of(messages[-1]["content"]))
    legal = env.step(answer).legal
    console.print(f"\n[bold]Position[/] (agent '{agent}' plays {env.role(seat)}):\n"
                  f"{escape(position)}")
    console.print(f"POST {url} -> [bold]{escape(answer)}[/] ({'legal' if legal else 'illegal'})")


@app.command()
def demo(
    config: Path = typer.Argument(Path("configs/tictactoe_warm.yaml")),
    minutes: float = typer.Option(None, help="PPO's budget, after any warm start (default: "
                                  "the config's trainer.max_minutes)"),
    games: int = typer.Option(None, help="evaluation games per opponent (default: config)"),
    run_id: str = typer.Option(None, help="run id (default: <name>-<timestamp>); an existing "
                               "run folder of that id is replaced"),
    overrides: list[str] = typer.Option(None, "--set", help=SET_HELP),
) -> None:
    """Train for a bounded budget (the config's warm start first, if any), then print a
    before/after table and query the gateway."""
    from agora.envs.registry import GAME_BOTS
    from agora.evaluation.games import evaluate
    from agora.serving.client import PolicyAdmin
    from agora.serving.vllm_server import SERVED_BASE_NAME
    from agora.serving.weights import adapter_dir

    cfg = _load(config, overrides)
    full = [a.name for a in cfg.agents if a.finetune == "full"]
    if full:
        console.print(f"[bold red]config error[/]: agents.{full[0]}.finetune: demo compares "
                      "adapter versions; train a full-weight agent with `agora up`")
        raise typer.Exit(2)
    if not cfg.environment.spec.is_game:
        console.print(f"[bold red]config error[/]: environment.name: demo evaluates games "
                      f"({sorted(GAME_BOTS)}); train '{cfg.environment.name}' with `agora up`, "
                      "compare discussions with `agora compare`")
        raise typer.Exit(2)
    if minutes is not None:
        cfg.trainer.max_minutes = minutes
    agent = cfg.trainable_agents[0].name
    try:
        stack = make_stack(cfg, run_id, False)
    except LaunchError as err:
        console.print(f"[bold red]cannot start[/]: {err}")
        raise typer.Exit(2) from None
    os.environ[API_KEY_ENV] = stack.vllm_api_key  # this process evaluates on its policy servers
    os.environ[SERVICE_KEY_ENV] = stack.service_key  # ... and the stack's judge and reward
    wall = time.monotonic()
    keep = ("redis", "gateway", *(f"policy-{k}" for k in cfg.models))
    run_stack(stack, keep_serving=keep)
    trained_s = time.monotonic() - wall
    try:
        admin = PolicyAdmin(cfg.policy_url(agent))
        baseline = f"{agent}-v0"
        admin.load_adapter(baseline, str(adapter_dir(stack.run_dir, agent, 0)))
        # v0 is a warm start (agents[].warm_start or init_adapter), not the untrained model:
        # the base gets a row of its own, so the table shows what the SFT and PPO each did.
        started_warm = bool(cfg.agent(agent).warm_start or cfg.agent(agent).init_adapter)
        decoding = ("" if cfg.eval.temperature is None
                    else f" at temperature {cfg.eval.temperature:g} (eval.temperature)")
        console.print(f"[cyan]>[/] evaluating {'the base model, ' if started_warm else ''}"
                      f"{agent}-v0 and {agent} (latest) "
                      f"over {games or cfg.eval.games} games per opponent{decoding}")
        rows = {}
        versions = ((("base (untrained)", SERVED_BASE_NAME),) if started_warm else ())
        for label, adapter in (*versions, ("before (v0)", baseline), ("after", agent)):
            results = evaluate(cfg, agent, adapter, games)
            rows[label] = {opp: r.as_dict() for opp, r in results.items()}
        title = f"{cfg.environment.name}: before vs after training{decoding}"
        console.print(results_table(title, rows))
        (stack.run_dir / "eval.json").write_text(json.dumps(rows, indent=2))
        ask_gateway_for_move(stack, agent)
        console.print(f"\ntraining wall time {trained_s / 60:.1f} min, total "
                      f"{(time.monotonic() - wall) / 60:.1f} min; run folder {stack.run_dir}")
    finally:
        stack.stop()


@app.command()
def compare(
    config: Path = typer.Argument(Path("configs/maporl_math.yaml")),
    minutes: float = typer.Option(None, min=0.1,
                                  help="wall-clock training budget per arm (default: config)"),
    updates: int = typer.Option(None, min=1, help="instead: PPO updates per arm"),
    tasks: int = typer.Option(None, help="discussions: held-out tasks (default: config)"),
    games: int = typer.Option(None, min=1, help="other envs: evaluation episodes per policy "
                                                "(default: the config's eval.games)"),
    run_id: str = typer.Option(None, help="the arms' run ids are <run-id>-single and "
                               "<run-id>-multi (default: <name>-<timestamp>); compare.json "
                               "goes in the multi arm's folder"),
    overrides: list[str] = typer.Option(None, "--set", help=SET_HELP),
) -> None:
    """Train the learner without and with learning partners, same budget; print curves and
    held-out scores (which arms each env has: docs/evaluation.md)."""
    from agora.evaluation import EvalInputError, EvalOptions
    from agora.evaluation.compare import (
        ArmResult,
        CompareInputError,
        arm_configs,
        compared_learner,
        evaluate_arm,
        evaluate_episodes_arm,
        sample_curve,
        with_budget,
    )

    cfg = _load(config, overrides)
    if minutes is not None and updates is not None:
        console.print("[bold red]error[/]: --minutes and --updates: give one budget, not both")
        raise typer.Exit(2)
    cfg = with_budget(cfg, minutes, updates)
    if cfg.trainer.max_minutes is None and cfg.trainer.max_updates is None:
        console.print("[bold red]config error[/]: trainer.max_minutes / trainer.max_updates: "
                      "the arms need a budget (or pass --minutes / --updates)")
        raise typer.Exit(2)
    try:
        learner = compared_learner(cfg)
        arms_cfgs = arm_configs(cfg)
    except (CompareInputError, ConfigError) as err:
        console.print(f"[bold red]config error[/]: {escape(str(err))}")
        raise typer.Exit(2) from None
    discussion = cfg.environment.spec.evaluation == "discussion"
    arms = []
    held: Stack | None = None  # the previous arm's stack: its policy servers, still up
    try:
        for index, (label, arm_cfg) in enumerate(arms_cfgs):
            arm_id = f"{run_id}-{label.split('-')[0]}" if run_id else None
            budget = (f"{arm_cfg.trainer.max_updates} updates" if arm_cfg.trainer.max_updates
                      else f"{arm_cfg.trainer.max_minutes} min")
            console.print(f"[bold cyan]== {label}[/]: {arm_cfg.environment.seats}, "
                          f"{arm_cfg.environment.rounds} round(s), {budget}")
            try:
                stack = make_stack(arm_cfg, arm_id, False)
            except LaunchError as err:
                console.print(f"[bold red]cannot start[/]: {err}")
                raise typer.Exit(2) from None
            if held is not None:  # the arms share a base: no second vLLM start-up
                if taken := stack.take_policies(held):
                    console.print(f"[cyan]>[/] {', '.join(taken)}: the {arms[-1].label} arm's, "
                                  "still running")
                held = None
            last = index == len(arms_cfgs) - 1
            # The next arm may use this arm's policy servers as they run (Stack.take_policies).
            keep_policies = () if last else stack.policy_names()
            os.environ[API_KEY_ENV] = stack.vllm_api_key  # the arm is evaluated on its servers
            os.environ[SERVICE_KEY_ENV] = stack.service_key
            if discussion:  # evaluated on the arm's own servers, in the arm's own format
                run_stack(stack, keep_serving=("redis", *stack.policy_names()))
                try:
                    before, after = evaluate_arm(arm_cfg, tasks)
                finally:
                    stack.stop(keep=keep_policies)
                    held = stack
                arms.append(ArmResult(label, stack.run_dir, before, after))
                continue
            # The arm's own servers stay up for its evaluation (no second vLLM start-up).
            run_stack(stack, keep_serving=("redis", "reward", "judge", *stack.policy_names()))
            console.print(f"[cyan]>[/] evaluating {learner}'s v0 and latest of the {label} arm "
                          f"on {config.name} as written")
            try:
                before, after, eval_dir = evaluate_episodes_arm(
                    cfg, stack.run_dir, learner,
                    EvalOptions(games=games, output=stack.run_dir / "compare-eval",
                                given=arm_servers(arm_cfg, learner)))
            except EvalInputError as err:
                console.print(f"[bold red]eval error[/]: {escape(str(err))}")
                raise typer.Exit(2) from None
            except ServiceFailed as err:
                console.print(f"[bold red]service '{err.name}' failed[/]: {escape(str(err))}")
                raise typer.Exit(1) from None
            finally:
                stack.stop(keep=keep_policies)
                held = stack
            arms.append(ArmResult(label, stack.run_dir, before, after, "episodes", eval_dir))
    finally:
        if held is not None:  # an arm that failed, or was interrupted: nothing outlives us
            held.stop()

    summary = {arm.label: arm.summary(learner) for arm in arms}
    curve_key = summary[arms[0].label]["curve_metric"]
    curves = Table(title=f"training {curve_key} of '{learner}' (last 100 episodes)")
    curves.add_column("arm")
    curves.add_column("minutes: value")
    for arm in arms:
        points = sample_curve(arm.curve(learner, curve_key))
        curves.add_row(arm.label, "  ".join(f"{m:.0f}: {a:.2f}" for m, a in points) or "-")
    console.print(curves)
    console.print(compare_table(arms, discussion))
    out = arms[-1].run_dir / "compare.json"
    out.write_text(json.dumps(summary, indent=2))
    console.print(f"written {out}")


def arm_servers(cfg: RunConfig, learner: str):
    """The URLs of an arm's policy server (the learner's base), reward and judge services, for
    its evaluation to use instead of starting its own."""
    from agora.evaluation import GivenUrls

    host, services = cfg.services.host, cfg.services
    policy = cfg.models[cfg.agent(learner).base].port
    return GivenUrls(policy=f"http://{host}:{policy}",
                     judge=f"http://{host}:{services.judge_port}",
                     reward=f"http://{host}:{services.reward_port}")


def compare_table(arms: list, discussion: bool) -> Table:
    """Held-out scores per arm: accuracy by turn for a discussion, else every metric of the
    learner (with its 95% interval where it has one), before -> after."""
    def shown(value: object) -> str:
        if isinstance(value, dict):  # agora eval's {"rate" | "mean", "n", "ci95"}
            value = value.get("rate", value.get("mean"))
        return "-" if value is None else f"{float(value):.3f}"

    if discussion:
        table = Table(title=f"held-out accuracy ({arms[0].after['tasks']} tasks)")
        for column in ("arm", "updates", "before: turn 1", "before: last turn",
                       "after: turn 1", "after: last turn"):
            table.add_column(column, justify="right")
        for arm in arms:
            b, a = arm.before, arm.after
            table.add_row(arm.label, str(arm.updates()), f"{b['turn1']:.1%}",
                          f"{b['last']:.1%}", f"{a['turn1']:.1%}", f"{a['last']:.1%}")
        return table
    table = Table(title="held-out scores of the learner (before -> after)")
    table.add_column("metric")
    for arm in arms:
        table.add_column(f"{arm.label} ({arm.updates()} updates)", justify="right")
    for key in arms[0].after:
        table.add_row(key, *(f"{shown(arm.before.get(key))} -> {shown(arm.after.get(key))}"
                             for arm in arms))
    return table


@app.command("eval")
def eval_(
    path: Path = typer.Argument(..., help="a run folder (runs/<id>) or an adapter checkpoint"),
    config: Path = typer.Option(None, help="run config, when none sits next to the checkpoint"),
    games: int = typer.Option(None, min=1, help="games per pairing / episodes per policy "
                                                "(default: the config's eval.games)"),
    k: int = typer.Option(4, min=1, help="discussions: samples per task for pass@k, maj@k"),
    snapshots: int = typer.Option(4, min=1, help="games: versions of the run in the round robin"),
    tasks: int = typer.Option(None, min=1, help="discussions: held-out tasks (default: config)"),
    agent: str = typer.Option(None, help="whose adapter a bare checkpoint folder is"),
    output: Path = typer.Option(None, help="where to write (default: <run>/eval)"),
    seed: int = typer.Option(0, help="first episode seed"),
    temperature: float = typer.Option(None, min=0.0, max=5.0,
                                      help="every evaluated agent's sampling temperature, 0 = "
                                           "greedy (default: the config's eval.temperature, "
                                           "else the agents' own)"),
    policy_url: str = typer.Option(None, help="use this running vLLM instead of starting one"),
    judge_url: str = typer.Option(None, help="use this running judge service"),
    reward_url: str = typer.Option(None, help="use this running reward service"),
    port_base: int = typer.Option(None, min=1024, max=65000,
                                  help="servers it starts listen from this port on "
                                       "(default: any free ports)"),
) -> None:
    """Evaluate a run's snapshots (or one checkpoint): games vs bots and each other with
    TrueSkill, pass@k / maj@k, judge preference, success rate; writes eval.json, eval.md and
    training_curves.png (logic: agora/evaluation/)."""
    from agora.evaluation import (
        EvalInputError,
        EvalOptions,
        GivenUrls,
        resolve_target,
        run_evaluation,
    )
    from agora.evaluation.context import terminal_progress

    options = EvalOptions(games=games, k=k, snapshots=snapshots, tasks=tasks, seed=seed,
                          temperature=temperature, output=output, port_base=port_base,
                          given=GivenUrls(policy_url, judge_url, reward_url))
    # SIGTERM, like Ctrl-C, must stop the servers it started (restored after: tests call this
    # in-process).
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        target = resolve_target(path, config, agent)
        with terminal_progress() as on_progress:  # bars per phase when stderr is a terminal
            report, out_dir = run_evaluation(
                target, options, on_phase=lambda msg: console.print(f"[cyan]>[/] {msg}"),
                on_progress=on_progress)
    except EvalInputError as err:
        console.print(f"[bold red]eval error[/]: {escape(str(err))}")
        raise typer.Exit(2) from None
    except ServiceFailed as err:
        console.print(f"[bold red]service '{err.name}' failed[/]: {escape(str(err))}")
        if err.log_tail:
            console.print(f"[dim]--- last lines of {err.name}'s log ---[/]\n"
                          f"{escape(err.log_tail)}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: the servers it started are stopped[/]")
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    console.print((out_dir / "eval.md").read_text(), markup=False, highlight=False)
    console.print(f"[green]written[/] {out_dir}/eval.json, eval.md"
                  + (", training_curves.png" if report["training_curves"].get("path") else ""))


@app.command("eval-diff")
def eval_diff_(
    a: Path = typer.Argument(..., help="A: an eval.json, its folder, or a run folder"),
    b: Path = typer.Argument(..., help="B: the same, evaluated on the same seeds"),
    agent: str = typer.Option(None, help="whose metrics (default: the one agent both scored)"),
    a_policy: str = typer.Option("evaluated", help="A's policy: evaluated (its latest) or "
                                                   "baseline (its v0)"),
    b_policy: str = typer.Option("evaluated", help="B's policy: evaluated or baseline"),
) -> None:
    """A minus B, paired by held-out seed: two runs' episode evaluations (two recipes, each
    evaluated by `agora eval` on the same seeds), per metric with a 95% interval, as eval.md
    pairs a run's latest version with its v0 (logic: agora/evaluation/diff.py)."""
    from agora.evaluation.diff import EvalDiffError, eval_diff, eval_diff_markdown

    for flag, value in (("--a-policy", a_policy), ("--b-policy", b_policy)):
        if value not in ("evaluated", "baseline"):
            console.print(f"[bold red]eval-diff error[/]: {flag}: '{escape(value)}' is not "
                          "evaluated or baseline")
            raise typer.Exit(2)
    try:
        diff = eval_diff(a, b, agent, a_policy, b_policy)  # type: ignore[arg-type]
    except EvalDiffError as err:
        console.print(f"[bold red]eval-diff error[/]: {escape(str(err))}")
        raise typer.Exit(2) from None
    console.print(eval_diff_markdown(diff), markup=False, highlight=False, soft_wrap=True)


@app.command("support-eval")
def support_eval(
    config: Path = typer.Argument(..., help="a support run config (environment.name: support)"),
    episodes: int = typer.Option(50, min=1, help="episodes per level"),
    level: list[int] = typer.Option([1], help="level(s) 1-3; repeat for several"),
    adapter: Path = typer.Option(None, help="a LoRA adapter folder (default: the base model)"),
    port: int = typer.Option(None, min=1024, max=65535, help="port for the vLLM it starts"),
    policy_url: str = typer.Option(None, help="use this running vLLM instead of starting one"),
    split: str = typer.Option("all", help="all | test | train: questions of that share only "
                                          "(support-sft trains on 'train')"),
    overrides: list[str] = typer.Option(None, "--set", help=SET_HELP),
) -> None:
    """Task success, tool-call accuracy and calls per episode of one policy in every desk of
    the support task, straight through vLLM (logic: agora/evaluation/support.py)."""
    from agora.evaluation.support import run_support_eval

    cfg = _load(config, overrides)
    options = getattr(cfg.environment, "support", None)  # a config has its own env's only
    if options is None or any(lv not in (1, 2, 3) for lv in level):
        console.print("[bold red]support-eval[/]: needs a support config and --level 1, 2 or 3")
        raise typer.Exit(2)
    if split not in ("all", "test", "train"):
        console.print(f"[bold red]support-eval[/]: --split: '{escape(split)}' is not all, test "
                      "or train")
        raise typer.Exit(2)
    results = run_support_eval(cfg, episodes, list(level), adapter, port, policy_url,
                               None if split == "all" else split)
    for result in results:
        console.print_json(json.dumps({**result.as_dict(), "split": split,
                                       "examples": result.examples}))


# The SFT stages' shared options (support-sft, warm-start): TRL SFT of an agent's LoRA adapter.
SFT_LEARNING_RATE = typer.Option(1e-3, min=1e-7, max=1.0)
SFT_BATCH_SIZE = typer.Option(8, min=1)
SFT_MAX_STEPS = typer.Option(None, min=1, help="stop after this many optimizer steps")
SFT_THREADS = typer.Option(None, min=1, help="torch threads (default: torch's)")


def _sft_stage(epochs: float, learning_rate: float, batch_size: int, max_steps: int | None,
               threads: int | None):  # -> agora.reflection.config.TrainStageConfig
    from agora.reflection.config import TrainStageConfig

    return TrainStageConfig(learning_rate=learning_rate, epochs=epochs, batch_size=batch_size,
                            max_steps=max_steps, threads=threads, max_length=1024)


@app.command("support-sft")
def support_sft(
    config: Path = typer.Argument(..., help="a support run config (environment.name: support)"),
    out: Path = typer.Option(..., help="where to write the adapter folder"),
    episodes: int = typer.Option(300, min=1, help="oracle episodes per level"),
    level: list[int] = typer.Option([1], help="level(s) 1-3; repeat for several"),
    epochs: float = typer.Option(3.0, min=0.01, help="passes over the examples"),
    # Measured on SmolLM2 (level 1, held-out questions): 1e-3 x 3 epochs x 300 episodes
    # reached 82% success; 2e-4 x 2 x 200 only 10% (it had not learned to copy the result).
    learning_rate: float = SFT_LEARNING_RATE,
    batch_size: int = SFT_BATCH_SIZE,
    max_steps: int = SFT_MAX_STEPS,
    threads: int = SFT_THREADS,
    overrides: list[str] = typer.Option(None, "--set", help=SET_HELP),
) -> None:
    """SFT the config's first agent on the scripted oracle desks' transcripts (train-share
    questions only), for PPO to start from (agents[].init_adapter); logic:
    agora/train/support_sft.py."""
    from agora.train.support_sft import oracle_examples, train_support_sft

    cfg = _load(config, overrides)
    if getattr(cfg.environment, "support", None) is None or any(lv not in (1, 2, 3)
                                                                for lv in level):
        console.print("[bold red]support-sft[/]: needs a support config and --level 1, 2 or 3")
        raise typer.Exit(2)
    examples = oracle_examples(cfg, episodes, list(level))
    console.print(f"[cyan]>[/] {len(examples)} oracle turns from {episodes * len(level)} "
                  f"episodes (train-share questions)")
    stage = _sft_stage(epochs, learning_rate, batch_size, max_steps, threads)
    summary = train_support_sft(cfg, examples, out, stage,
                                log=lambda line: console.print(escape(line)))
    console.print_json(json.dumps(summary))
    console.print(f"[green]written[/] {out}; measure it with `agora support-eval {config} "
                  f"--adapter {out} --split test`")


@app.command("warm-start")
def warm_start(
    config: Path = typer.Argument(..., help="a run config"),
    out: Path = typer.Option(None, help="where to write the adapter folder"),
    read: str = typer.Option(None, help="train nothing: read how well this adapter folder "
                             "(or 'base') plays the demonstrations: the answer's mean "
                             "probability and how often greedy decoding writes it"),
    agent: str = typer.Option(None, help="the agent to warm-start (default: the learner)"),
    # Each flag left out comes from the agent's `warm_start:` in the config (what the trainer
    # would run), else from WarmStartConfig's defaults.
    episodes: int = typer.Option(None, min=1, help="demonstration episodes [200]"),
    opponents: bool = typer.Option(None, help="games: the agent's seat plays the config's "
                                   "opponents mix (bots) as in training; --no-opponents: "
                                   "demonstrators in every seat [on]"),
    demonstrator: str = typer.Option(None, help="one of the env's demonstrators (default: "
                                     "the first that fits each seat), e.g. tictactoe's "
                                     "minimax_canonical"),
    every_position: bool = typer.Option(None, "--every-position/--no-every-position",
                                        help="a small game without chance (tictactoe): one "
                                        "example per position the demonstrator can meet, each "
                                        "other seat playing every legal move, instead of "
                                        "--episodes games [off]"),
    epochs: float = typer.Option(None, min=0.01, help="passes over the examples [2]"),
    learning_rate: float = typer.Option(None, min=1e-7, max=1.0, help="[1e-3]"),
    batch_size: int = typer.Option(None, min=1, help="[8]"),
    max_steps: int = SFT_MAX_STEPS,
    threads: int = SFT_THREADS,
    overrides: list[str] = typer.Option(None, "--set", help=SET_HELP),
) -> None:
    """SFT an agent on the env's demonstrators (a game's best bot, a context agent, a task's
    answer), for PPO to start from: --set agents.N.init_adapter=OUT (agora/train/warm_start.py).
    Settings not given as flags come from the agent's `warm_start:` in the config, so this
    trains the adapter the trainer would."""
    from agora.config.warm_start import WarmStartConfig
    from agora.train.warm_start import (
        configured_examples,
        read_imitation,
        sft_stage,
        train_sft_adapter,
    )

    if (out is None) == (read is None):
        console.print("[bold red]warm-start[/]: give --out (train an adapter there) or --read "
                      "(read an adapter's imitation), one of them")
        raise typer.Exit(2)
    adapter = None if read in (None, "base") else Path(read)
    if adapter is not None and not (adapter / "adapter_config.json").is_file():
        console.print(f"[bold red]warm-start[/]: --read: {escape(read)} is not a LoRA adapter "
                      "folder (no adapter_config.json) nor 'base'")
        raise typer.Exit(2)
    cfg = _load(config, overrides)
    name = agent or cfg.learner or cfg.agents[0].name
    flags = {"episodes": episodes, "opponents": opponents, "demonstrator": demonstrator,
             "every_position": every_position, "epochs": epochs,
             "learning_rate": learning_rate, "batch_size": batch_size, "max_steps": max_steps,
             "threads": threads}
    try:
        configured = cfg.agent(name).warm_start or WarmStartConfig()
        ws = configured.model_copy(update={k: v for k, v in flags.items() if v is not None})
        examples = configured_examples(cfg, name, ws)
    except KeyError:
        console.print(f"[bold red]warm-start[/]: --agent: no agent '{escape(name)}' "
                      f"({[a.name for a in cfg.agents]})")
        raise typer.Exit(2) from None
    except ValueError as err:
        console.print(f"[bold red]warm-start[/]: {escape(str(err))}")
        raise typer.Exit(2) from None
    source = "every position" if ws.every_position else f"{ws.episodes} episodes"
    console.print(f"[cyan]>[/] {len(examples)} demonstrated turns of {name} from {source}")
    if read is not None:
        fit = read_imitation(cfg, name, examples, adapter)
        console.print_json(json.dumps({"adapter": read, **fit}))
        return
    stage = sft_stage(ws)
    summary = train_sft_adapter(cfg, name, examples, out, stage, "warm start",
                                log=lambda line: console.print(escape(line)))
    console.print_json(json.dumps(summary))
    index = [a.name for a in cfg.agents].index(name)
    console.print(f"[green]written[/] {out}; train from it with `agora up {config} --set "
                  f"agents.{index}.init_adapter={out}`")


if __name__ == "__main__":
    app()
