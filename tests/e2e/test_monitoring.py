"""Monitoring: the Grafana dashboards, their datasource and the Prometheus configs, checked
statically and against a real Prometheus scraping a running embedded stack on tiny-random."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid

import httpx
import pytest
import redis
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from agora.config.base import ConfigError
from agora.ops.dashboards import DASHBOARD_DIR, DASHBOARDS, render
from agora.ops.metrics import WORKER_METRICS_PORT_ENV, exported_names
from agora.ops.prometheus import dump, render_compose, render_embedded
from agora.rollout.queue_metrics import RolloutQueueCollector, queue_depth, queue_keys
from agora.rollout.settings import serve_worker_metrics
from agora.rollout.stream import EpisodeStream
from agora.rollout.worker import QUEUE, TASK_NAME, make_celery
from agora.stack.launcher import make_stack
from agora.stack.procs import Service, free_port, http_ok, tail
from tests.monitoring_checks import dashboards, instant, panels_without_data, send_traffic
from tests.stack_helpers import tiny_config, wait_for

ROOT = DASHBOARD_DIR.parents[2]
PROMETHEUS_YML = ROOT / "monitoring" / "prometheus" / "prometheus.yml"
DATASOURCES = ROOT / "monitoring" / "grafana" / "provisioning" / "datasources"
DASHBOARD_PROVIDERS = ROOT / "monitoring" / "grafana" / "provisioning" / "dashboards"
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                "unless", "offset", "bool", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects: identifiers that are not functions (followed
    by "("), keywords, label names (inside {} or by/without lists), strings or durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values can hold anything
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"(?<![\w:.])[A-Za-z_:][\w:]*", text):  # not "5m" of a duration
        after = text[match.end():].lstrip()
        if after.startswith("(") or match.group().lower() in PROMQL_WORDS:
            continue
        names.add(match.group())
    return names


def is_exported(name: str, exported: set[str]) -> bool:
    if name.startswith("vllm:"):
        return True
    return name in exported or any(
        name.endswith(s) and name.removesuffix(s) in exported for s in SUFFIXES)


# --- static checks ------------------------------------------------------------------------------


def test_metric_name_parser_finds_every_selected_metric():
    expr = ('sum by (le, route) (rate(agora_http_request_seconds_bucket{service="gateway", '
            'route!~"/metrics|/health"}[$__rate_interval])) / on(job) group_left '
            "vllm:num_requests_running offset 5m")
    assert metric_names(expr) == {"agora_http_request_seconds_bucket", "vllm:num_requests_running"}


def test_dashboard_files_are_the_generated_ones():
    """The JSON Grafana loads is exactly what agora/ops/dashboards.py renders (no hand edits)."""
    assert set(dashboards()) == {d.filename for d in DASHBOARDS}
    for dash in DASHBOARDS:
        assert (DASHBOARD_DIR / dash.filename).read_text() == render(dash), (
            f"{dash.filename} is stale: run python -m agora.ops.dashboards")


def test_panels_use_the_provisioned_datasource_and_exported_metrics():
    provisioned = [ds for f in sorted(DATASOURCES.glob("*.yml"))
                   for ds in yaml.safe_load(f.read_text())["datasources"]]
    assert len(provisioned) == 1 and provisioned[0]["type"] == "prometheus"
    source = {"type": "prometheus", "uid": provisioned[0]["uid"]}
    providers = [p for f in sorted(DASHBOARD_PROVIDERS.glob("*.yml"))
                 for p in yaml.safe_load(f.read_text())["providers"]]
    assert [p["type"] for p in providers] == ["file"]

    exported = exported_names()
    queried: set[str] = set()
    for filename, dash in dashboards().items():
        assert dash["uid"] and dash["title"] and dash["panels"], filename
        assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"]), filename
        for var in dash["templating"]["list"]:
            assert var["datasource"] == source, f"{filename} variable {var['name']}"
            queried |= metric_names(var["definition"].removeprefix("label_values("))
        for panel in dash["panels"]:
            where = f"{filename} / {panel['title']}"
            assert panel["datasource"] == source, where
            assert panel["targets"], where
            for target in panel["targets"]:
                assert target["datasource"] == source, where
                names = metric_names(target["expr"])
                assert names, f"{where}: no metric in {target['expr']!r}"
                unknown = sorted(n for n in names if not is_exported(n, exported))
                assert not unknown, f"{where}: {unknown} are not exported (agora/ops/metrics.py)"
                queried |= names
    # The list: each of these is on some panel.
    wanted = {
        "agora_trainer_reward_mean", "agora_trainer_win_rate", "agora_trainer_kl",
        "agora_trainer_entropy", "agora_trainer_pg_loss", "agora_trainer_vf_loss",
        "agora_trainer_policy_version", "agora_trainer_staleness",
        "agora_trainer_update_seconds", "agora_rollout_episodes_total",
        "agora_rollout_queue_depth", "agora_rollout_failures_total",
        "agora_http_requests_total", "agora_http_request_seconds_bucket",
        "agora_judge_cache_hits_total", "agora_judge_position_bias_total",
    }
    assert wanted <= queried, sorted(wanted - queried)
    assert any(n.startswith("vllm:") for n in queried)


def test_prometheus_configs_are_valid_and_scrape_every_service(tmp_path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run scripts/ensure_prometheus.sh"
    assert PROMETHEUS_YML.read_text() == dump(render_compose()), (
        "monitoring/prometheus/prometheus.yml is stale: "
        "python -m agora.ops.prometheus --compose -o monitoring/prometheus/prometheus.yml")
    cfg = tiny_config(workers={"count": 2})
    embedded = tmp_path / "embedded.yml"
    embedded.write_text(dump(render_embedded(cfg)))
    for path in (PROMETHEUS_YML, embedded):
        proc = subprocess.run([promtool, "check", "config", str(path)], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    targets = {t for job in render_embedded(cfg)["scrape_configs"]
               for group in job["static_configs"] for t in group["targets"]}
    ports = {p for name, p in cfg.all_ports().items() if name != "redis"}  # redis: no exporter
    ports |= set(cfg.workers.metrics_ports())
    assert len(cfg.workers.metrics_ports()) == 2
    assert targets == {f"127.0.0.1:{p}" for p in ports}
    assert ({j["job_name"] for j in render_compose()["scrape_configs"]}
            == {j["job_name"] for j in render_embedded(cfg)["scrape_configs"]})


def test_worker_metrics_server_serves_rollout_counters_and_survives_a_taken_port(monkeypatch):
    import socket

    port = free_port()
    monkeypatch.setenv(WORKER_METRICS_PORT_ENV, str(port))
    monkeypatch.setenv("AGORA_WORKER_METRICS_ADDR", "127.0.0.1")
    assert serve_worker_metrics() == port
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    assert 'agora_rollout_retries_total{reason="unavailable"} 0.0' in text
    assert "agora_rollout_failures_total 0.0" in text
    # A second server on the same port: logged, not raised (rollouts go on without metrics).
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", free_port()))
        holder.listen()
        monkeypatch.setenv(WORKER_METRICS_PORT_ENV, str(holder.getsockname()[1]))
        assert serve_worker_metrics() is None
    monkeypatch.setenv(WORKER_METRICS_PORT_ENV, "")
    assert serve_worker_metrics() is None
    monkeypatch.setenv(WORKER_METRICS_PORT_ENV, "eighty")  # a typo is named, not ignored
    with pytest.raises(ConfigError, match="AGORA_WORKER_METRICS_PORT must be a number"):
        serve_worker_metrics()


def test_queue_collector_counts_the_celery_queue_and_skips_a_dead_redis(redis_url):
    queue = f"monitoring-test-{uuid.uuid4().hex[:8]}"  # no worker of another test listens
    client = redis.Redis.from_url(redis_url)
    stream = EpisodeStream(client, queue)
    client.set(stream.keys.episodes_enqueued, 5)
    celery = make_celery(redis_url, 10)
    try:
        for priority in (None, None, 9):  # kombu keeps each priority step in its own list
            celery.send_task(TASK_NAME, args=[{}], queue=queue, priority=priority)
        assert queue_depth(client, queue) == 3
        registry = CollectorRegistry()
        registry.register(RolloutQueueCollector(stream, queue))
        text = generate_latest(registry).decode()
        assert "agora_rollout_queue_depth 3.0" in text
        assert "agora_rollout_in_flight 5.0" in text
    finally:
        client.delete(*queue_keys(queue), stream.keys.episodes_enqueued)
    dead = EpisodeStream(redis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0"), "x")
    registry = CollectorRegistry()
    registry.register(RolloutQueueCollector(dead, QUEUE))
    assert generate_latest(registry) == b""  # no sample, and no error for the whole scrape


# --- live: a real Prometheus scraping a running stack -----------------------------------------


def prometheus_service(tmp_path, config: dict) -> tuple[Service, str]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus missing: run scripts/ensure_prometheus.sh (make test does)"
    port = free_port()
    config_path = tmp_path / "prometheus.yml"
    config_path.write_text(dump(config))
    url = f"http://127.0.0.1:{port}"
    svc = Service(
        name="prometheus",
        command=[binary, f"--config.file={config_path}",
                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        log_path=tmp_path / "prometheus.log",
        health=http_ok(url + "/-/ready"),
    )
    return svc, url


def test_every_dashboard_query_returns_data_from_a_running_stack(tmp_path, vllm_tiny):
    # The whole embedded stack, except that its policy server is the session's vLLM (one
    # start-up less); stopped below once the data is in, long before max_updates.
    _url, policy = vllm_tiny
    cfg = tiny_config(trainer={"max_updates": 200}, models={"tiny": policy.model_dump(mode="json")})
    # A 1 s scrape interval: a minute of running gives every rate() window many samples.
    prom, prom_url = prometheus_service(tmp_path, render_embedded(cfg, interval="1s"))
    stack = make_stack(cfg, "monitor", False, runs_root=tmp_path / "runs",
                       open_gateway=True)  # `agora up --open`: the traffic sends no key
    metrics_jsonl = stack.run_dir / "metrics.jsonl"
    try:
        prom.start()
        prom.wait_healthy(60)
        stack.start(policy_running=True)

        def updates() -> int:
            return len(metrics_jsonl.read_text().splitlines()) if metrics_jsonl.exists() else 0

        wait_for(lambda: updates() >= 1 or stack.failed() is not None, 240, "a PPO update")
        assert stack.failed() is None, tail(stack.failed().log_path, 40)
        # Two waves a few scrapes apart: a series born in the first wave has grown by the
        # second, so rates and quantiles over it are numbers, not NaN.
        host = cfg.services.host
        urls = (f"http://{host}:{cfg.services.gateway_port}",
                f"http://{host}:{cfg.services.judge_port}",
                f"http://{host}:{cfg.services.reward_port}")
        send_traffic(*urls, 1, stack.service_key)
        time.sleep(3)
        send_traffic(*urls, 2, stack.service_key)

        # The template variable's values (Grafana's label_values) feed the per-agent queries.
        agents = httpx.get(prom_url + "/api/v1/label/agent/values", timeout=10,
                           params={"match[]": "agora_trainer_policy_version"}).json()["data"]
        assert agents == ["player"]

        empty: list[str] = []

        def all_have_data() -> bool:
            empty[:] = panels_without_data(prom_url, agents)
            return not empty

        wait_for(all_have_data, 60, lambda: f"data for every panel; none for: {empty}",
                 period_s=2)
        # The scrape targets are all up (one per process of the stack, plus vLLM). A single
        # scrape may time out (1 s here) while the niced trainer is mid-update on its one core,
        # so each target must answer within a few scrapes, not on every one.
        up = instant(prom_url, "up")
        assert {s["metric"]["job"] for s in up} == {
            "agora-trainer", "agora-rollout", "agora-reward", "agora-judge", "agora-gateway",
            "vllm"}
        down: list[dict] = []

        def all_up() -> bool:
            down[:] = [s["metric"] for s in instant(prom_url, "up") if s["value"][1] != "1"]
            return not down

        wait_for(all_up, 30, lambda: f"every scrape target up; down: {down}", period_s=1)
    finally:
        stack.stop()
        prom.stop()

