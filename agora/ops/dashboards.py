"""The Grafana dashboards, as data: each panel's title, what it shows, and its PromQL queries.

``python -m agora.ops.dashboards`` writes them to ``monitoring/grafana/dashboards/*.json``
(the files Grafana's provisioning loads; a test checks they match this module), ``--list`` prints
every panel with its queries as a Markdown table.

Why a generator and not JSON exported from Grafana's UI: the queries are the point, and here
they sit next to each other where a renamed metric is one search away; the tests read the
generated JSON (what Grafana actually loads) and check every metric name against
``agora.ops.metrics`` and every query against a live Prometheus. Why not grafana-foundation-sdk or
grafanalib: the subset used (time series panels, one template variable) is a dozen JSON fields,
and a build-only dependency for it would be heavier than the code below.

Every query uses ``$__rate_interval`` (Grafana picks a window of at least four scrapes) and the
one provisioned datasource (``DATASOURCE_UID``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

DATASOURCE_UID = "agora-prometheus"
DATASOURCE = {"type": "prometheus", "uid": DATASOURCE_UID}
ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = ROOT / "monitoring" / "grafana" / "dashboards"
RATE = "$__rate_interval"
NOT_PLUMBING = 'route!~"/metrics|/health"'  # scrapes and health checks are not traffic


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"


@dataclass(frozen=True)
class Variable:
    """A query variable: its values are a label's values on one metric (multi-select, All)."""

    name: str
    metric: str
    label: str

    @property
    def query(self) -> str:
        return f"label_values({self.metric}, {self.label})"


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    variables: tuple[Variable, ...] = field(default_factory=tuple)

    @property
    def filename(self) -> str:
        return self.uid.removeprefix("agora-") + ".json"


def q(expr: str, legend: str) -> Query:
    return Query(expr, legend)


def rate(metric: str, selector: str = "") -> str:
    return f"rate({metric}{{{selector}}}[{RATE}])" if selector else f"rate({metric}[{RATE}])"


def quantile(phi: float, bucket: str, by: str, selector: str = "") -> str:
    return f"histogram_quantile({phi}, sum by (le, {by}) ({rate(bucket, selector)}))"


# --- training, per agent --------------------------------------------------------------------

AGENT = 'agent=~"$agent"'


def agent_gauge(key: str) -> Query:
    return q(f"agora_trainer_{key}{{{AGENT}}}", "{{agent}}")


TRAINING = Dashboard(
    uid="agora-training",
    title="agora / training",
    description="PPO per trainable agent (template variable: agent), from the trainer.",
    variables=(Variable("agent", "agora_trainer_policy_version", "agent"),),
    panels=(
        Panel("Reward (mean per turn)", "Mean turn reward of the last update's batch.",
              (agent_gauge("reward_mean"),)),
        Panel("Win rate vs random bot", "Share of the last 100 games against the random bot "
              "that the agent won (games only).", (agent_gauge("win_rate"),), "percentunit"),
        Panel("Legal move rate", "Share of the last update's turns that were legal moves.",
              (agent_gauge("legal_rate"),), "percentunit"),
        Panel("KL to reference", "Mean per-token KL(behaviour || reference), the reference "
              "being the base model with the adapter disabled.", (agent_gauge("kl"),)),
        Panel("Entropy", "Mean policy entropy per action token.", (agent_gauge("entropy"),)),
        Panel("Losses", "PPO clipped policy-gradient loss and value-head MSE.",
              (q(f"agora_trainer_pg_loss{{{AGENT}}}", "{{agent}} policy"),
               q(f"agora_trainer_vf_loss{{{AGENT}}}", "{{agent}} value"))),
        Panel("Policy version", "Live adapter version (hot-swapped into vLLM after each "
              "update).", (agent_gauge("policy_version"),)),
        Panel("Staleness", "Mean versions between the policy that played a turn and the one "
              "it updated.", (agent_gauge("staleness"),)),
        Panel("Update and hot-swap time", "Wall time of the last PPO update and of the "
              "adapter hot-swap that followed it.",
              (q(f"agora_trainer_update_seconds{{{AGENT}}}", "{{agent}} update"),
               q(f"agora_trainer_hotswap_seconds{{{AGENT}}}", "{{agent}} hot-swap")), "s"),
        Panel("Updates per minute", "PPO updates per minute.",
              (q(f"60 * sum by (agent) ({rate('agora_trainer_updates_total', AGENT)})",
                 "{{agent}}"),)),
        Panel("Stale turns dropped", "Turns per second dropped for being more than "
              "max_staleness versions old.",
              (q(f"sum({rate('agora_trainer_stale_turns_dropped_total')})", "dropped/s"),)),
    ),
)

# --- rollout ----------------------------------------------------------------------------------

ROLLOUT = Dashboard(
    uid="agora-rollout",
    title="agora / rollout",
    description="Celery rollout workers, the queue between them and the trainer, and the "
                "reward service's verdicts.",
    panels=(
        Panel("Episodes per second", "Episodes played, scored and appended to the stream, by "
              "environment and opponent (all workers).",
              (q(f"sum by (env, opponent) ({rate('agora_rollout_episodes_total')})",
                 "{{env}} vs {{opponent}}"),), "ops"),
        Panel("Queue depth and in flight", "Tasks waiting in the Celery queue, and episodes "
              "enqueued but not yet in the stream (waiting + being played).",
              (q("sum(agora_rollout_queue_depth)", "queued"),
               q("sum(agora_rollout_in_flight)", "in flight"))),
        Panel("Episode time", "Wall time of one episode (play, score, append): median and "
              "95th percentile.",
              (q(quantile(0.5, "agora_rollout_episode_seconds_bucket", "env"), "p50 {{env}}"),
               q(quantile(0.95, "agora_rollout_episode_seconds_bucket", "env"),
                 "p95 {{env}}")), "s"),
        Panel("Retries and failures", "Episode attempts retried (policy/reward server "
              "unreachable, or another error) and episodes given up on.",
              (q(f"sum by (reason) ({rate('agora_rollout_retries_total')})", "retry {{reason}}"),
               q(f"sum({rate('agora_rollout_failures_total')})", "failed"),
               q(f"sum({rate('agora_rollout_duplicate_episodes_total')})", "duplicate")), "ops"),
        Panel("Trainer consumption", "Episodes per second the trainer reads from the stream.",
              (q(f"sum({rate('agora_trainer_episodes_consumed_total')})", "consumed/s"),),
              "ops"),
        Panel("Verifications", "Reward-service verdicts per second, by kind and result.",
              (q(f"sum by (kind, result) ({rate('agora_verifications_total')})",
                 "{{kind}} {{result}}"),), "ops"),
    ),
)

# --- serving: vLLM and the gateway -----------------------------------------------------------

GATEWAY = f'service="gateway", {NOT_PLUMBING}'
SERVING = Dashboard(
    uid="agora-serving",
    title="agora / serving",
    description="The vLLM policy (and judge-model) servers, the gateway, and the request "
                "metrics of every agora HTTP service.",
    panels=(
        Panel("Gateway requests", "Gateway requests per second by route and status.",
              (q(f"sum by (route, status) ({rate('agora_http_requests_total', GATEWAY)})",
                 "{{route}} {{status}}"),), "reqps"),
        Panel("Gateway latency", "Gateway request latency by route: median and 99th "
              "percentile (includes the upstream vLLM call).",
              (q(quantile(0.5, "agora_http_request_seconds_bucket", "route", GATEWAY),
                 "p50 {{route}}"),
               q(quantile(0.99, "agora_http_request_seconds_bucket", "route", GATEWAY),
                 "p99 {{route}}")), "s"),
        Panel("Gateway errors", "Gateway responses with a 4xx or 5xx status, per second.",
              (q("sum by (route, status) ("
                 + rate("agora_http_requests_total", 'service="gateway", status=~"[45].."')
                 + ")", "{{route}} {{status}}"),), "reqps"),
        Panel("vLLM requests running and waiting", "Requests in the vLLM engine's batch and "
              "in its queue, per server.",
              (q("sum by (server) (vllm:num_requests_running)", "{{server}} running"),
               q("sum by (server) (vllm:num_requests_waiting)", "{{server}} waiting"))),
        Panel("vLLM request latency", "End-to-end request latency inside vLLM: median and "
              "99th percentile, per server.",
              (q(quantile(0.5, "vllm:e2e_request_latency_seconds_bucket", "server"),
                 "p50 {{server}}"),
               q(quantile(0.99, "vllm:e2e_request_latency_seconds_bucket", "server"),
                 "p99 {{server}}")), "s"),
        Panel("vLLM time to first token", "Median time to the first generated token.",
              (q(quantile(0.5, "vllm:time_to_first_token_seconds_bucket", "server"),
                 "p50 {{server}}"),), "s"),
        Panel("vLLM tokens per second", "Prompt and generated tokens per second, per server.",
              (q(f"sum by (server) ({rate('vllm:prompt_tokens_total')})", "{{server}} prompt"),
               q(f"sum by (server) ({rate('vllm:generation_tokens_total')})",
                 "{{server}} generated"))),
        Panel("vLLM KV cache usage", "Share of the KV cache in use, per server.",
              (q("max by (server) (vllm:kv_cache_usage_perc)", "{{server}}"),), "percentunit"),
        Panel("vLLM finished requests", "Finished requests per second by finish reason "
              "(stop, length, abort).",
              (q(f"sum by (finished_reason) ({rate('vllm:request_success_total')})",
                 "{{finished_reason}}"),), "reqps"),
        Panel("Service requests", "Requests per second to each agora HTTP service (reward, "
              "judge, gateway).",
              (q(f"sum by (service) ({rate('agora_http_requests_total', NOT_PLUMBING)})",
                 "{{service}}"),), "reqps"),
        Panel("Service latency (p99)", "99th percentile request latency per agora service.",
              (q(quantile(0.99, "agora_http_request_seconds_bucket", "service", NOT_PLUMBING),
                 "{{service}}"),), "s"),
        Panel("Service errors", "4xx and 5xx responses per second, per agora service.",
              (q("sum by (service, status) ("
                 + rate("agora_http_requests_total", 'status=~"[45].."') + ")",
                 "{{service}} {{status}}"),), "reqps"),
    ),
)

# --- judge ------------------------------------------------------------------------------------

JUDGE = Dashboard(
    uid="agora-judge",
    title="agora / judge",
    description="The judge service: load, verdict cache, position bias, malformed verdicts.",
    panels=(
        Panel("Judge requests", "Valid judge requests per second, by endpoint and backend.",
              (q(f"sum by (endpoint, backend) ({rate('agora_judge_requests_total')})",
                 "{{endpoint}} {{backend}}"),), "reqps"),
        Panel("Cache hit rate", "Share of verdicts served from the Redis cache.",
              (q(f"sum({rate('agora_judge_cache_hits_total')}) / (sum("
                 f"{rate('agora_judge_cache_hits_total')}) + sum("
                 f"{rate('agora_judge_cache_misses_total')}))", "hit rate"),), "percentunit"),
        Panel("Position-bias rate", "Share of pairwise judgments (both orders parsed) whose "
              "two presentation orders disagreed.",
              (q(f"sum by (backend) ({rate('agora_judge_position_bias_total')}) / sum by "
                 f"(backend) ({rate('agora_judge_order_checks_total')})", "{{backend}}"),),
              "percentunit"),
        Panel("Judge latency", "Time to answer a judge request (cached or judged afresh): "
              "median and 99th percentile.",
              (q(quantile(0.5, "agora_judge_seconds_bucket", "endpoint, cached"),
                 "p50 {{endpoint}} cached={{cached}}"),
               q(quantile(0.99, "agora_judge_seconds_bucket", "endpoint, cached"),
                 "p99 {{endpoint}} cached={{cached}}")), "s"),
        Panel("Malformed verdicts and cache errors", "Judge outputs that did not parse, and "
              "Redis errors of the verdict cache (served as misses), per second.",
              (q(f"sum by (endpoint, backend) ({rate('agora_judge_malformed_verdicts_total')})",
                 "malformed {{endpoint}} {{backend}}"),
               q(f"sum by (op) ({rate('agora_judge_cache_errors_total')})",
                 "cache error {{op}}")), "ops"),
        Panel("Judge HTTP errors", "Judge service responses with a 4xx or 5xx status.",
              (q("sum by (route, status) ("
                 + rate("agora_http_requests_total", 'service="judge", status=~"[45].."')
                 + ")", "{{route}} {{status}}"),), "reqps"),
    ),
)

DASHBOARDS = (TRAINING, ROLLOUT, SERVING, JUDGE)


# --- Grafana JSON -----------------------------------------------------------------------------

WIDTH, HEIGHT = 12, 8  # two panels per row


def panel_json(panel: Panel, index: int) -> dict:
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": HEIGHT, "w": WIDTH, "x": (index % 2) * WIDTH, "y": (index // 2) * HEIGHT},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "none"}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": query.expr,
             "legendFormat": query.legend, "range": True}
            for i, query in enumerate(panel.queries)
        ],
    }


def variable_json(var: Variable) -> dict:
    return {
        "name": var.name,
        "label": var.name,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": var.query,
        "query": {"query": var.query, "refId": f"{var.name}-values"},
        "refresh": 2,  # on time range change: new agents appear without a reload
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def dashboard_json(dash: Dashboard) -> dict:
    return {
        "uid": dash.uid,
        "title": dash.title,
        "description": dash.description,
        "tags": ["agora"],
        "editable": False,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-30m", "to": "now"},
        "refresh": "10s",
        "timezone": "",
        "annotations": {"list": []},
        "templating": {"list": [variable_json(v) for v in dash.variables]},
        "panels": [panel_json(p, i) for i, p in enumerate(dash.panels)],
    }


def render(dash: Dashboard) -> str:
    return json.dumps(dashboard_json(dash), indent=2) + "\n"


def write_all(folder: Path = DASHBOARD_DIR) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for dash in DASHBOARDS:
        path = folder / dash.filename
        path.write_text(render(dash))
        paths.append(path)
    return paths


def markdown() -> str:
    """Every panel and its queries, for docs and issue notes."""
    lines = []
    for dash in DASHBOARDS:
        lines += [f"**{dash.title}** (`{dash.filename}`)", "", "| panel | query |", "|---|---|"]
        for panel in dash.panels:
            for query in panel.queries:
                expr = query.expr.replace("|", "\\|")
                lines.append(f"| {panel.title} | `{expr}` |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agora.ops.dashboards",
                                     description="Write (or list) agora's Grafana dashboards.")
    parser.add_argument("--out", type=Path, default=DASHBOARD_DIR)
    parser.add_argument("--list", action="store_true", help="print panels and queries")
    args = parser.parse_args(argv)
    if args.list:
        sys.stdout.write(markdown())
        return 0
    for path in write_all(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
