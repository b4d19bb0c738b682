"""k8s/: the kustomize base and its gpu overlay, built by kustomize (kubectl kustomize), every
resource validated by kubernetes-validate against the Kubernetes 1.31 schemas in strict mode
(unknown fields are errors), and checked against what the code serves, like docker-compose.yml
in tests/integration/test_compose.py: ports, probes, commands, the run config the pods mount and
where it says the services are. No cluster is needed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from agora.config.run import load_config
from agora.gateway.settings import GatewaySettings
from agora.judge.settings import JudgeSettings
from agora.ops.metrics import ROLLOUT_QUEUE_DEPTH, WORKER_METRICS_PORT_ENV
from agora.stack.deployment import SERVICES_ENV
from tests.deploy_checks import (
    CONFIGS,
    MODEL_SWITCHED,
    ROOT,
    build_app,
    check_policy_server,
    get_routes,
    health_url,
    policy_servers,
    served,
    trainer_flags,
    uvicorn_command,
    vllm_flags,
    worker_args,
)

K8S = ROOT / "k8s"
KUBERNETES_VERSION = "1.31.0"
GPU_WORKLOADS = {"policy", "policy-2", "judge-model", "reward", "trainer"}
# k8s/overlays/<variant> (base: k8s/base); the two-base ones add a second policy server.
VARIANTS = ("base", "gpu", "two-base", "gpu-two-base", "gvisor", "vlm")
GPU_VARIANTS = {"gpu", "gpu-two-base"}
# The shipped run configs the default deployment serves as it is (MODEL_SWITCHED: another
# model in the policy server).
RUN_CONFIGS = [p for p in CONFIGS if "agents" in (yaml.safe_load(p.read_text()) or {})
               and p.name not in MODEL_SWITCHED]
SECRET_VALUE = "secret-for-tests"


def kubectl() -> str:
    found = shutil.which("kubectl") or str(ROOT / ".venv" / "bin" / "kubectl")
    assert Path(found).is_file(), "kubectl is missing: run scripts/ensure_deploy_tools.sh"
    return found


def kustomize(path: Path) -> list[dict]:
    result = subprocess.run([kubectl(), "kustomize", str(path)], capture_output=True, text=True,
                            timeout=60, check=False, env={**os.environ, "KUBECONFIG": "/dev/null"})
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def built() -> dict[str, list[dict]]:
    return {variant: kustomize(K8S / "base" if variant == "base" else K8S / "overlays" / variant)
            for variant in VARIANTS}


def find(resources: list[dict], kind: str, name: str) -> dict:
    matches = [r for r in resources if r["kind"] == kind and r["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def config_map(resources: list[dict], prefix: str) -> dict:
    """A generated ConfigMap (its name carries kustomize's content hash)."""
    (found,) = [r for r in resources
                if r["kind"] == "ConfigMap" and r["metadata"]["name"].startswith(prefix + "-")]
    return found


def workloads(resources: list[dict]) -> dict[str, dict]:
    """The Deployments, StatefulSets and Jobs by name."""
    found = [r for r in resources if r["kind"] in ("Deployment", "StatefulSet", "Job")]
    names = [r["metadata"]["name"] for r in found]
    assert len(names) == len(set(names)), names
    return dict(zip(names, found, strict=True))


def workload(resources: list[dict], name: str) -> dict:
    """The pod spec of the Deployment, StatefulSet or Job called ``name``."""
    return workloads(resources)[name]["spec"]["template"]["spec"]


def container_env(resources: list[dict], container: dict) -> dict[str, str]:
    """The environment a container gets: its ConfigMaps' data, then its own env (secrets are
    test values here)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_map(resources, "agora-env")["data"]
                   if source["configMapRef"]["name"].startswith("agora-env") else {})
    for item in container.get("env", []):
        value = item.get("value", SECRET_VALUE)
        # Kubernetes expands $(NAME) from the variables defined before it.
        env[item["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                   lambda m: env.get(m.group(1), m.group(0)), value)
    return env


def port_of(container: dict, port: int | str) -> int:
    """A probe's or Service's port, named or numbered, as the container's number."""
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container["ports"] if p["name"] == port]
    return number


def run_config(resources: list[dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The run config the pods mount, with the AGORA_SERVICES they get applied."""
    path = tmp_path / "run.yaml"
    path.write_text(config_map(resources, "agora-run-config")["data"]["run.yaml"])
    monkeypatch.setenv(SERVICES_ENV, config_map(resources, "agora-env")["data"][SERVICES_ENV])
    return load_config(path)


# --- built and valid -------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_resource_is_valid_kubernetes(built, variant):
    kinds = {r["kind"] for r in built[variant]}
    assert {"Deployment", "Service", "PersistentVolumeClaim", "ConfigMap", "Job",
            "HorizontalPodAutoscaler", "StatefulSet", "Namespace"} <= kinds
    for resource in built[variant]:
        assert kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
        if resource["kind"] not in ("Namespace", "RuntimeClass"):  # cluster-scoped
            assert resource["metadata"]["namespace"] == "agora"


def test_the_validator_rejects_what_a_cluster_would(built):
    """The control: the same validation fails on a misspelt field and on a wrong type."""
    deployment = find(built["base"], "Deployment", "gateway")
    typo = yaml.safe_load(yaml.safe_dump(deployment))
    container = typo["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, KUBERNETES_VERSION, strict=True)
    wrong = yaml.safe_load(yaml.safe_dump(deployment))
    wrong["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, KUBERNETES_VERSION, strict=True)


# --- ports, probes and commands against the code ---------------------------------------------


@pytest.mark.parametrize("variant", ["base", "two-base"])
def test_services_listen_and_probe_where_the_code_says(built, variant, tmp_path, monkeypatch):
    resources = built[variant]
    cfg = run_config(resources, tmp_path, monkeypatch)
    assert cfg.services.host == "0.0.0.0", "the trainer must bind its metrics for Prometheus"
    if variant == "two-base":  # the shipped two-base config, each agent asking its base's server
        assert config_map(resources, "agora-run-config")["data"]["run.yaml"] == (
            ROOT / "configs" / "maporl_two_base.yaml").read_text()
        assert {cfg.policy_url(agent.name) for agent in cfg.agents} == {
            "http://policy:8100", "http://policy-2:8101"}
    for name, want in served(cfg).items():
        host, port = cfg.service_url(name).removeprefix("http://").split(":")
        service = find(resources, "Service", host)  # the config's host is the Service's name
        (service_port,) = service["spec"]["ports"]
        assert service_port["port"] == int(port) == want.port, name
        pod = workload(resources, host)
        (container,) = pod["containers"]
        assert port_of(container, service_port["targetPort"]) == want.port, name
        for probe in ("readinessProbe", "livenessProbe"):
            check = container[probe]
            if name == "redis":
                assert f"-p {want.port} ping" in " ".join(check["exec"]["command"])
                continue
            assert check["httpGet"]["path"] == want.health, f"{name} {probe}"
            assert port_of(container, check["httpGet"]["port"]) == want.port, f"{name} {probe}"
        if want.app:
            assert container["args"] == uvicorn_command(cfg, want.app, want.port)
            assert "command" not in container, "keep the image's tini entrypoint"
            env = container_env(resources, container)
            env["AGORA_CONFIG"] = str(tmp_path / "run.yaml")
            app = build_app(want.app, env, monkeypatch)
            assert want.health in get_routes(app), f"{want.app} has no GET {want.health}"
        elif name.startswith("policy-"):
            assert int(vllm_flags(container["args"])["--port"]) == want.port


def test_trainer_workers_and_volumes(built, tmp_path, monkeypatch):
    resources = built["base"]
    cfg = run_config(resources, tmp_path, monkeypatch)
    trainer_pod = workload(resources, "trainer")
    (trainer,) = trainer_pod["containers"]
    args = trainer["args"]
    assert args[:3] == ["python", "-m", "services.trainer.main"]
    assert [a for a in args if a.startswith("--")] == trainer_flags(cfg)
    value = {flag: args[args.index(flag) + 1] for flag in ("--config", "--run-dir", "--run-id")}
    env = container_env(resources, trainer)
    assert value["--config"] == env["AGORA_CONFIG"] == "/configs/run.yaml"
    # Issue 18: Redis' URL, with the Secret's password, from the environment (not argv), the
    # same in every pod that talks to Redis; no ConfigMap holds a password-less one.
    redis_url = f"redis://:{SECRET_VALUE}@redis:6390/0"
    assert "--redis-url" not in args and env["AGORA_REDIS_URL"] == redis_url
    for name in ("gateway", "judge", "rollout", "trainer"):
        (container,) = workload(resources, name)["containers"]
        client_env = container_env(resources, container)
        assert client_env["AGORA_REDIS_URL"] == client_env["REDIS_URL"] == redis_url, name
    assert "AGORA_REDIS_URL" not in config_map(resources, "agora-env")["data"]
    (server,) = workload(resources, "redis")["containers"]
    assert "requirepass $AGORA_REDIS_PASSWORD" in server["command"][-1]
    assert "REDISCLI_AUTH=$AGORA_REDIS_PASSWORD" in server["readinessProbe"]["exec"]["command"][-1]
    assert value["--run-dir"] == f"/runs/{value['--run-id']}"
    assert trainer_pod["restartPolicy"] == "OnFailure"
    job = find(resources, "Job", "trainer")["spec"]
    assert job["parallelism"] == 1, "two trainers must never share a run"

    def mounts(pod: dict) -> dict[str, str]:
        claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName")
                  or v.get("configMap", {}).get("name") for v in pod["volumes"]}
        (container,) = pod["containers"]
        return {m["mountPath"]: claims[m["name"]] for m in container["volumeMounts"]}

    policy_pod = workload(resources, "policy")
    # Adapters are hot-swapped by path: the policy server sees the trainer's /runs.
    assert mounts(trainer_pod)["/runs"] == mounts(policy_pod)["/runs"] == "runs"
    assert mounts(trainer_pod)["/configs"].startswith("agora-run-config-")
    runs = find(resources, "PersistentVolumeClaim", "runs")
    assert runs["spec"]["accessModes"] == ["ReadWriteMany"]
    gateway = workload(resources, "gateway")["containers"][0]
    gateway_env = container_env(resources, gateway)
    assert gateway_env["AGORA_RUN_DIR"] == value["--run-dir"]
    assert gateway_env["AGORA_RUN_ID"] == value["--run-id"]
    settings = GatewaySettings.from_env(gateway_env)
    assert settings.require_keys and settings.key_pepper == SECRET_VALUE
    # Workers: the launcher's Celery command; metrics where Prometheus looks (headless Service).
    (worker,) = workload(resources, "rollout")["containers"]
    assert worker["args"] == ["python", *worker_args(cfg)]
    assert "-A services.rollout.worker inspect ping" in " ".join(
        worker["livenessProbe"]["exec"]["command"])
    metrics_port = int(container_env(resources, worker)[WORKER_METRICS_PORT_ENV])
    # Issue 18: a worker only reads models and runs; nothing it runs may overwrite an adapter.
    assert {m["mountPath"]: m.get("readOnly", False) for m in worker["volumeMounts"]} == {
        "/configs": True, "/cache": True, "/runs": True}
    rollout_service = find(resources, "Service", "rollout")
    assert rollout_service["spec"]["clusterIP"] == "None"
    assert port_of(worker, rollout_service["spec"]["ports"][0]["targetPort"]) == metrics_port


def test_vllm_servers_and_the_judge(built, monkeypatch):
    """Every shipped config's bases are served, routed as the two-base variant's pods route
    them (its AGORA_SERVICES sends maporl_two_base's `gemma` to policy-2, all else to policy)."""
    resources = built["two-base"]
    monkeypatch.setenv(SERVICES_ENV, config_map(resources, "agora-env")["data"][SERVICES_ENV])
    servers = policy_servers(RUN_CONFIGS)
    assert set(servers) == {"policy", "policy-2"}
    for host, models in servers.items():
        policy_pod = workload(resources, host)
        (vllm,) = policy_pod["containers"]
        check_policy_server(vllm["args"], models)
        assert vllm["command"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
        env = container_env(resources, vllm)
        assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
        assert env["VLLM_API_KEY"] == SECRET_VALUE, host  # issue 18: /v1 wants the key
        (init,) = policy_pod["initContainers"]
        assert vllm_flags(vllm["args"])["--model"] == f"/cache/models/{init['command'][-1]}"
        (service_port,) = find(resources, "Service", host)["spec"]["ports"]
        assert service_port["port"] == int(vllm_flags(vllm["args"])["--port"])
    assert workload(built["base"], "policy") == workload(resources, "policy")
    judge = workload(resources, "judge")["containers"][0]
    settings = JudgeSettings.from_env(container_env(resources, judge))
    host, port, path = health_url(settings.base_url + "/")
    judge_model = workload(resources, "judge-model")["containers"][0]
    flags = vllm_flags(judge_model["args"])
    (service_port,) = find(resources, "Service", host)["spec"]["ports"]
    assert port == service_port["port"] == int(flags["--port"]) and path == "/v1/"
    assert settings.model == flags["--served-model-name"]
    assert container_env(resources, judge_model)["VLLM_API_KEY"] == settings.api_key
    for name in ("gateway", "rollout", "trainer", "judge"):
        (container,) = workload(resources, name)["containers"]
        assert container_env(resources, container)["AGORA_VLLM_API_KEY"] == SECRET_VALUE, name
    # The reward and judge services want the service key; the workers and trainer send it.
    for name in ("reward", "judge", "rollout", "trainer"):
        (container,) = workload(resources, name)["containers"]
        assert container_env(resources, container)["AGORA_SERVICE_KEY"] == SECRET_VALUE, name


def test_vlm_overlay_serves_the_vlm_config(built, monkeypatch):
    """k8s/overlays/vlm: its run is configs/tictactoe_vlm.yaml, its policy pod builds the VLM
    and serves it with the flags the embedded stack uses (MODEL_SWITCHED's config)."""
    resources = built["vlm"]
    [config] = MODEL_SWITCHED
    assert config_map(resources, "agora-run-config")["data"]["run.yaml"] == (
        ROOT / "configs" / config).read_text()
    monkeypatch.setenv(SERVICES_ENV, config_map(resources, "agora-env")["data"][SERVICES_ENV])
    [(host, models)] = policy_servers([ROOT / "configs" / config]).items()
    pod = workload(resources, host)
    (vllm,) = pod["containers"]
    check_policy_server(vllm["args"], models)
    (init,) = pod["initContainers"]
    assert all(model.model in init["command"][-1].split() for _, model in models)
    # Everything else is the base's: the same workloads, the same security settings.
    assert {r["metadata"]["name"] for r in resources if r["kind"] == "Deployment"} == {
        r["metadata"]["name"] for r in built["base"] if r["kind"] == "Deployment"}


def test_gpu_overlay_asks_for_gpus_and_the_cuda_image(built):
    for variant in VARIANTS:
        for resource in built[variant]:
            if resource["kind"] not in ("Deployment", "StatefulSet", "Job"):
                continue
            name = resource["metadata"]["name"]
            for container in resource["spec"]["template"]["spec"]["containers"]:
                limits = container.get("resources", {}).get("limits", {})
                wants = limits.get("nvidia.com/gpu") == "1"
                gpu = variant in GPU_VARIANTS
                assert wants == (gpu and name in GPU_WORKLOADS), f"{variant}/{name}"
                if name in ("policy", "policy-2", "judge-model"):
                    cuda = container["image"].startswith("vllm/vllm-openai:")
                    assert cuda == gpu, f"{variant}/{name}: {container['image']}"
                if name == "trainer":  # the image built with flash-attn
                    gpu_image = container["image"].startswith("agora-trainer-gpu")
                    assert gpu_image == gpu, container["image"]
                    # NCCL between trainer.processes needs a memory-backed /dev/shm.
                    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
                    volumes = {v["name"]: v for v in resource["spec"]["template"]["spec"]
                               ["volumes"]}
                    shm = volumes.get(mounts.get("/dev/shm"), {}).get("emptyDir", {})
                    assert (shm.get("medium") == "Memory") == gpu
                    assert {"/configs", "/cache", "/runs"} <= set(mounts)


def test_rollout_autoscales_on_queue_depth(built):
    resources = built["gpu"]
    hpa = find(resources, "HorizontalPodAutoscaler", "rollout")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    find(resources, target["kind"], target["name"])
    (metric,) = hpa["spec"]["metrics"]
    # The trainer exports the depth (one series), so it is External, not a per-pod metric.
    assert metric["type"] == "External"
    assert metric["external"]["metric"]["name"] == ROLLOUT_QUEUE_DEPTH
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    adapter = yaml.safe_load((K8S / "prometheus-adapter-values.yaml").read_text())
    served_names = [rule["name"]["as"] for rule in adapter["rules"]["external"]]
    assert ROLLOUT_QUEUE_DEPTH in served_names


def test_secrets_are_referenced_not_committed(built):
    readme = (ROOT / "docs" / "operations.md").read_text()  # the deploy guide
    for resource in built["gpu"]:
        assert resource["kind"] != "Secret", "secrets are created by the operator, not the repo"
        if resource["kind"] not in ("Deployment", "StatefulSet", "Job"):
            continue
        for container in resource["spec"]["template"]["spec"]["containers"]:
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] == "agora-secrets" and ref["key"] == item["name"]
                    assert f"--from-literal={ref['key']}=" in readme, "say how in the docs"


# --- who may reach whom -------------------------------------------------------------------------

# Each server's clients in the code: the trainer loads adapters into the policy servers and
# reads/writes Redis; rollout workers generate (policy), verify (reward), judge (judge) and write
# the stream (Redis); the gateway proxies chats (policy), plays and scores episodes (reward,
# judge) and keeps keys, episodes and runs in Redis; the judge caches verdicts in Redis and asks
# its model (judge-model, or a policy server's base).
CLIENTS = {
    "redis": {"trainer", "rollout", "gateway", "judge"},
    "policy": {"trainer", "rollout", "gateway", "judge"},
    "policy-2": {"trainer", "rollout", "gateway", "judge"},
    "reward": {"trainer", "rollout", "gateway"},
    "judge": {"trainer", "rollout", "gateway"},
    "judge-model": {"judge"},
}
PODS = {"redis", "policy", "policy-2", "reward", "judge", "judge-model", "gateway", "trainer",
        "rollout"}


def _selects(selector: dict, labels: dict[str, str]) -> bool:
    """A label selector (matchLabels and In / NotIn / Exists expressions) against labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        value, op = labels.get(expr["key"]), expr["operator"]
        if (op == "In" and value not in expr["values"]) or (
                op == "NotIn" and value in expr["values"]) or (op == "Exists" and value is None):
            return False
    return True


def reachable(resources: list[dict], source: str | None, source_namespace: str, target: str,
              port: int) -> bool:
    """Whether NetworkPolicy lets pod ``source`` (None: outside the cluster) of
    ``source_namespace`` open ``port`` of pod ``target``, as Kubernetes reads the policies:
    allowed when no policy selects the target, else when one of their rules admits it."""
    pod = workload(resources, target)
    labels = workloads(resources)[target]["spec"]["template"]["metadata"]["labels"]
    (container,) = pod["containers"]
    names = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    policies = [r["spec"] for r in resources if r["kind"] == "NetworkPolicy"
                and _selects(r["spec"]["podSelector"], labels)
                and "Ingress" in r["spec"].get("policyTypes", ["Ingress"])]
    if not policies:
        return True
    for spec in policies:
        for rule in spec.get("ingress") or []:
            ports = [names.get(p["port"], p["port"]) for p in rule.get("ports") or []]
            if ports and port not in ports:
                continue
            peers = rule.get("from")
            if peers is None:
                return True
            for peer in peers:
                in_namespace = _selects(peer.get("namespaceSelector", {}),
                                        {"kubernetes.io/metadata.name": source_namespace}) \
                    if "namespaceSelector" in peer else source_namespace == "agora"
                pod_ok = ("podSelector" not in peer or source is not None and _selects(
                    peer["podSelector"], {"app.kubernetes.io/name": source}))
                if source is not None and in_namespace and pod_ok:
                    return True
                if source is None and "ipBlock" in peer:
                    return True
    return False


def service_port(resources: list[dict], name: str) -> int:
    (container,) = workload(resources, name)["containers"]
    return container["ports"][0]["containerPort"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_network_policies_let_each_server_be_reached_by_its_clients_only(built, variant):
    resources = built[variant]
    pods = PODS & set(workloads(resources))
    assert ("policy-2" in pods) == ("two-base" in variant)
    for server in pods - {"gateway", "trainer", "rollout"}:
        port = service_port(resources, server)
        for client in pods:
            allowed = reachable(resources, client, "agora", server, port)
            assert allowed == (client in CLIENTS[server]), f"{client} -> {server}:{port}"
        assert not reachable(resources, None, "outside", server, port), f"outside -> {server}"
        assert not reachable(resources, "gateway", "other-team", server, port)
    # The public door, and the metrics Prometheus scrapes from its namespace.
    assert reachable(resources, None, "outside", "gateway", service_port(resources, "gateway"))
    for name in pods:
        assert reachable(resources, "prometheus", "monitoring", name,
                         service_port(resources, name)), name
    assert not reachable(resources, "rollout", "agora", "trainer",
                         service_port(resources, "trainer"))


def test_agoras_own_pods_run_unprivileged(built):
    """gateway, judge, rollout workers and trainer: non-root, no privilege escalation, no
    capability, the runtime's default seccomp profile. (vLLM's and Redis' images start as root
    and the reward service's sandbox needs root and SYS_ADMIN: not these.)"""
    for variant in VARIANTS:
        for name in ("gateway", "judge", "rollout", "trainer"):
            pod = workload(built[variant], name)
            assert pod["securityContext"]["runAsNonRoot"] is True, (variant, name)
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            (container,) = pod["containers"]
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, (variant, name)
            assert context["capabilities"] == {"drop": ["ALL"]}, (variant, name)


def test_the_gvisor_overlay_puts_only_the_reward_pod_under_runsc(built):
    """k8s/components/gvisor: model-written code runs in the reward pod, so that pod (and only
    it) gets gVisor's user-space kernel beneath the sandbox."""
    resources = built["gvisor"]
    runtime = find(resources, "RuntimeClass", "gvisor")
    assert runtime["handler"] == "runsc" and "namespace" not in runtime["metadata"]
    with_runtime = {r["metadata"]["name"] for r in resources
                    if r["kind"] in ("Deployment", "StatefulSet", "Job")
                    and r["spec"]["template"]["spec"].get("runtimeClassName")}
    assert with_runtime == {"reward"}
    assert workload(resources, "reward")["runtimeClassName"] == "gvisor"
    assert not any(r["kind"] == "RuntimeClass" for r in built["base"])
