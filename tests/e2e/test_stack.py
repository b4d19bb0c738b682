"""The embedded stack end to end on tiny-random: every service real, the loop closed."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys

import httpx
import psutil
import pytest
import redis
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from agora.cli.main import access_lines
from agora.cli.main import app as cli_app
from agora.ops.service_key import SERVICE_KEY_ENV
from agora.rollout.records import EpisodeRecord
from agora.rollout.stream import RunKeys
from agora.serving.auth import API_KEY_ENV
from agora.stack.launcher import make_stack
from agora.stack.procs import ServiceFailed
from tests.stack_helpers import (
    descendants_alive,
    process_tree,
    processes_of_run,
    tiny_config,
    wait_for,
    write_config,
)


def test_full_loop_trains_publishes_and_serves(tmp_path):
    # The learner spans two processes (torchrun + FSDP2 over gloo: a multi-GPU trainer's code
    # path); the other stack tests run the one-process trainer. Critic-free (rloo, groups of 4
    # episodes per seed, groups that all ended alike filtered out) here; the other stack and
    # env tests train with the critic (gae).
    cfg = tiny_config(trainer={"max_updates": 3, "device": "cpu", "dtype": "fp32",
                               "processes": 2},
                      # A self-play group of 4 games is ~34 of the player's turns: the default
                      # cap (4 batches of 8 turns) is one alike group, after which turns join
                      # unfiltered and two alike groups in a row (~1 in 70) fill a batch with
                      # no signal. 64 batches is ~15 alike groups in a row before the cap.
                      ppo={"advantage": "rloo", "group_size": 4, "filter_groups": True,
                           "max_filtered_batches": 64},
                      # Legal moves only: the tiny random model's free text is never a legal
                      # move, so every game would be lost alike and leave rloo nothing to compare.
                      agents=[{"name": "player", "base": "tiny", "lora_rank": 8,
                               "lora_alpha": 16,
                               "sampling": {"temperature": 1.0, "max_tokens": 4, "stop": ["]"],
                                            "legal_actions_only": True}}],
                      tracking={"report_to": ["tensorboard"]})
    stack = make_stack(cfg, "loop", False, runs_root=tmp_path)
    pids: list[int] = []
    try:
        stack.start()
        pids = [p for s in stack.services for p in process_tree(s.pid)]
        scraped: list[str] = []

        def scrape_trainer() -> None:
            url = f"http://127.0.0.1:{cfg.services.trainer_metrics_port}/metrics"
            # The trainer exits (and its endpoint with it) once the budget is spent.
            with contextlib.suppress(httpx.HTTPError):
                scraped.append(httpx.get(url, timeout=5).text)

        stack.watch(on_tick=scrape_trainer, period_s=1.0)  # returns when the trainer is done

        client = redis.Redis.from_url(stack.redis_url)
        keys = RunKeys(stack.run_id)
        # The embedded Redis wants the stack's password (issue 18), and no process shows it on
        # its command line (ps shows those to every user).
        password = client.connection_pool.connection_kwargs["password"]
        assert password and len(password) >= 24
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=cfg.services.redis_port).ping()
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                cmdline = " ".join(psutil.Process(pid).cmdline())
                for secret in (password, stack.vllm_api_key, stack.service_key):
                    assert secret not in cmdline, pid
        # vLLM wants the stack's key on /v1 (no one else may load or swap adapters); the
        # trainer, workers and gateway all sent it, or nothing above would have worked.
        policy = f"http://127.0.0.1:{cfg.models['tiny'].port}"
        assert httpx.get(policy + "/v1/models").status_code == 401
        assert httpx.post(policy + "/v1/load_lora_adapter", json={
            "lora_name": "intruder", "lora_path": str(stack.run_dir)}).status_code == 401
        # The key `agora up` prints for its user (agora eval --policy-url) opens it.
        printed = access_lines(stack)
        # The key hint names the run, not Redis' password (it would stay in piped logs); the
        # CLI reads the password from the run's files and makes a key on this stack's Redis.
        assert f"keys create NAME --run {stack.run_dir}" in printed[0]
        assert not any(password in line for line in printed)
        made = CliRunner().invoke(cli_app, ["keys", "create", "tester", "--run",
                                            str(stack.run_dir)])
        assert made.exit_code == 0, made.output
        cli_key = re.search(r"^agora-\S{40,}$", made.output, re.MULTILINE).group(0)
        exported = printed[1].removeprefix(f"policy servers' key: export {API_KEY_ENV}=")
        assert httpx.get(policy + "/v1/models", headers={
            "authorization": f"Bearer {exported}"}).status_code == 200
        # The reward and judge services want the stack's service key on /v1 (the sandbox runs
        # code for whoever reaches it); the workers sent it, or no episode would be scored.
        # Health stays open for probes. With the key a bad body gets past the guard: 422.
        service = printed[2].removeprefix(f"reward and judge services' key: export "
                                          f"{SERVICE_KEY_ENV}=")
        assert service == stack.service_key
        for port, route in ((cfg.services.reward_port, "/v1/sandbox/run"),
                            (cfg.services.judge_port, "/v1/judge/score")):
            url = f"http://127.0.0.1:{port}"
            assert httpx.get(url + "/health").status_code == 200
            assert httpx.post(url + route, json={}).status_code == 401
            wrong = {"authorization": "Bearer not-the-key"}
            assert httpx.post(url + route, json={}, headers=wrong).status_code == 401
            right = {"authorization": f"Bearer {service}"}
            assert httpx.post(url + route, json={}, headers=right).status_code == 422
        # Three updates -> version 3 live in Redis, three adapters beside v0, a checkpoint.
        assert int(client.get(keys.version("player"))) == 3
        for v in range(4):
            assert (stack.run_dir / "adapters" / "player" / f"v{v}" /
                    "adapter_model.safetensors").is_file()
        assert (stack.run_dir / "checkpoints" / "latest").read_text() == "ckpt-000003"
        rows = [json.loads(x) for x in (stack.run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [r["update"] for r in rows] == [1, 2, 3]
        assert all(r["agents"]["player"]["turns"] >= 8 for r in rows)
        # rloo has no signal in a group whose games all ended alike: filter_groups left those
        # out of each batch (counted) and read on, so every update compared games that differ.
        assert all("filtered_turns" in r["agents"]["player"] for r in rows)
        assert all(r["agents"]["player"]["adv_zero"] < 1 for r in rows)
        assert all(r["agents"]["player"]["grad_norm"] > 0 for r in rows)
        # The same rows, at step = update, in TensorBoard's files under the run folder.
        events = EventAccumulator(str(stack.run_dir / "tensorboard"))
        events.Reload()
        assert [e.step for e in events.Scalars("player/reward_mean")] == [1, 2, 3]
        trainer_log = (stack.run_dir / "logs" / "trainer.log").read_text()
        assert "rank 1: rank 0 finished after" in trainer_log  # the follower ran every call

        # Episodes in the stream carry tokens, behaviour logprobs and verified rewards.
        entries = client.xrange(keys.stream)
        assert len(entries) >= 3
        record = EpisodeRecord.model_validate_json(entries[0][1][b"record"])
        llm_turns = [t for t in record.turns if t.is_llm]
        assert llm_turns and all(
            len(t.completion_token_ids) == len(t.behaviour_logprobs) > 0 for t in llm_turns)
        assert record.results and all(r in {"win", "loss", "draw", "illegal"}
                                      for r in record.results)
        # Every episode an update used is acked; what stays pending is only what no update
        # used (members of a group still waiting for its siblings when the budget ran out).
        by_id = dict(entries)
        pending = {EpisodeRecord.model_validate_json(by_id[p["message_id"]][b"record"]).episode_id
                   for p in client.xpending_range(keys.stream, "trainer", "-", "+", 1000)}
        used = {json.loads(x)["episode_id"]
                for x in (stack.run_dir / "episodes.jsonl").read_text().splitlines()}
        assert used and not used & pending
        # Sent in groups of four episodes of one seed; no critic trained.
        seeds_of_group: dict[str, list[int]] = {}
        for _, fields in entries:
            episode = EpisodeRecord.model_validate_json(fields[b"record"])
            seeds_of_group.setdefault(str(episode.info["group"]), []).append(episode.seed)
        assert all(len(set(seeds)) == 1 for seeds in seeds_of_group.values())
        assert max(len(seeds) for seeds in seeds_of_group.values()) == 4
        assert all(r["agents"]["player"]["vf_loss"] == 0 for r in rows)

        # The trained agent answers through the gateway by name, with the latest adapter. The
        # embedded gateway requires keys even before one exists (no `agora up --open` here); a
        # chat key may talk to agents but not touch runs.
        gw = f"http://127.0.0.1:{cfg.services.gateway_port}"
        assert httpx.get(gw + "/v1/models").status_code == 401
        auth = {"authorization": f"Bearer {cli_key}"}  # the key the CLI made above
        assert "player" in [m["id"] for m in
                            httpx.get(gw + "/v1/models", headers=auth).json()["data"]]
        resp = httpx.post(gw + "/v1/chat/completions", timeout=60, headers=auth, json={
            "model": "player", "messages": [{"role": "user", "content": "Your move?"}],
            "max_tokens": 4})
        assert resp.status_code == 200 and resp.json()["model"] == "player"
        assert httpx.get(gw + "/v1/runs", headers=auth).status_code == 403
        # The judge service runs beside them (rubric backend, verdicts cached in the run's Redis).
        judge = f"http://127.0.0.1:{cfg.services.judge_port}"
        assert httpx.get(judge + "/health").json()["cache"] == "ok"
        verdict = httpx.post(judge + "/v1/judge/pairwise", timeout=30, json={
            "context": "Name a prime.", "a": "7 is a prime number.", "b": "",
            "rubric": "helpfulness"}, headers={"authorization": f"Bearer {service}"}).json()
        assert verdict["winner"] == "a"
        # The trainer exported its per-agent metrics, and kept the final values up after its
        # last update long enough for a scrape (services.trainer_final_scrape_s).
        final = [text for text in scraped
                 if 'agora_trainer_policy_version{agent="player"} 3.0' in text]
        assert final, "no scrape saw the trainer's final version"
        assert 'agora_trainer_kl{agent="player"}' in final[-1]
        assert 'agora_trainer_filtered_turns{agent="player"}' in final[-1]
    finally:
        stack.stop()
    assert descendants_alive(pids) == [], "processes left behind after stop()"
    assert processes_of_run("loop") == []


def _agora(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agora.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_up_with_bad_config_names_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodels: {m: {model: tiny-random}}\nagents: [{name: a, base: m}]\n"
                   "environment: {seats: [a, a]}\nppo: {learning_rte: 0.1}\n")
    proc = _agora("up", str(bad), cwd=tmp_path)
    assert proc.returncode == 2
    assert "ppo.learning_rte" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


def test_up_on_taken_port_fails_clearly_and_starts_nothing(tmp_path):
    import socket

    cfg = tiny_config()
    holder = socket.socket()
    holder.bind(("127.0.0.1", cfg.services.gateway_port))
    holder.listen()
    try:
        before = set(p.pid for p in __import__("psutil").process_iter())
        proc = _agora("up", str(write_config(cfg, tmp_path / "c.yaml")), cwd=tmp_path)
        after = set(p.pid for p in __import__("psutil").process_iter())
    finally:
        holder.close()
    assert proc.returncode == 2
    assert f"gateway port {cfg.services.gateway_port}" in proc.stdout
    assert "already in use" in proc.stdout
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.log"))
    # Only what `agora up` started counts (its children inherit its cwd, tmp_path): other
    # processes of the machine come and go in the same window.
    assert [pid for pid in descendants_alive(sorted(after - before))
            if _cwd_of(pid).startswith(str(tmp_path))] == []


def _cwd_of(pid: int) -> str:
    try:
        return __import__("psutil").Process(pid).cwd()
    except Exception:  # gone, or not ours to inspect: not a process `agora up` left behind
        return ""


def test_service_failing_at_start_stops_everything_and_shows_its_log(tmp_path):
    cfg = tiny_config()
    broken = tmp_path / "no-such-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # a folder vLLM cannot load
    cfg.models["tiny"].model = str(broken)
    stack = make_stack(cfg, "fail-at-start", False, runs_root=tmp_path)
    try:
        stack.start()
    except ServiceFailed as err:
        assert err.name == "policy-tiny"
        assert err.log_tail  # the failing service's last log lines, for the CLI to print
    else:
        stack.stop()
        raise AssertionError("stack started with a broken model")
    assert stack.services == []
    wait_for(lambda: not processes_of_run("fail-at-start"), 30, "all processes to exit")
