"""The deploy files parse and keep the security defaults (S5): Redis and PostgreSQL never
published, passwords only from the environment or a Secret, a worker per region, JSON-only
Celery (enforced in workers/app.py and checked here), the UI behind authentication."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"
K8S = sorted((DEPLOY / "k8s").glob("*.yaml"))
REGIONS = {"eu-west", "us-east", "ap-south"}


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict) and "services" in data
    return data


def _k8s_docs() -> list[dict[str, Any]]:
    docs = []
    for path in K8S:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                assert {"apiVersion", "kind", "metadata"} <= set(doc), f"{path.name}: {doc}"
                assert doc["metadata"].get("name"), f"{path.name}: a resource without a name"
                docs.append(doc)
    return docs


def _env_list(value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    return dict(item.split("=", 1) for item in value or [])


def test_compose_does_not_publish_redis_or_postgres() -> None:
    services = _compose()["services"]
    for name in ("redis", "timescaledb"):
        for port in services[name].get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port}"
        assert services[name]["networks"] == ["backend"]
    assert _compose()["networks"]["backend"]["internal"] is True
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond localhost"


def test_compose_passwords_come_from_the_environment() -> None:
    text = COMPOSE.read_text()
    services = _compose()["services"]
    assert "--requirepass" in services["redis"]["command"]
    for name, svc in services.items():
        for key, value in _env_list(svc.get("environment")).items():
            if "PASSWORD" in key or "API_KEY" in key or key.endswith("_URL"):
                if key.endswith("_URL") and "@" not in value:
                    continue
                assert "${" in value, f"{name}.{key} holds a literal secret"
    # every secret interpolation is required (fails loudly when unset) or an optional API key
    for m in re.finditer(r"\$\{([A-Z_]+)(:[?-][^}]*)?\}", text):
        var, mod = m.group(1), m.group(2) or ""
        assert mod.startswith(":?") or var.endswith("API_KEY"), f"${{{var}}} has no :? guard"


def test_compose_has_a_worker_per_region_control_and_beat() -> None:
    services = _compose()["services"]
    regions = set()
    for svc in services.values():
        cmd = svc.get("command") or []
        if cmd[:2] == ["worker", "--region"]:
            regions.add(cmd[2])
            assert "redis:6379" in _env_list(svc["environment"])["PEAKLOAD_REDIS_URL"]
    assert regions == REGIONS
    assert services["beat"]["command"] == ["worker", "--beat"]
    assert services["control"]["command"][:2] == ["worker", "--control"]
    assert _env_list(services["ui"]["environment"])["PEAKLOAD_UI_REQUIRE_AUTH"] == "1"


def test_k8s_services_are_cluster_internal_and_secrets_are_referenced() -> None:
    docs = _k8s_docs()
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Service", "redis") in kinds and ("Service", "timescaledb") in kinds
    assert not any(d["kind"] == "Secret" for d in docs), "a Secret with values is committed"
    for d in docs:
        if d["kind"] == "Service":
            assert d["spec"].get("type", "ClusterIP") == "ClusterIP", d["metadata"]["name"]
        if d["kind"] in ("Deployment", "StatefulSet"):
            for c in d["spec"]["template"]["spec"]["containers"]:
                for p in c.get("ports", []):
                    assert "hostPort" not in p
                for e in c.get("env", []):
                    if "PASSWORD" in e["name"] or "API_KEY" in e["name"]:
                        assert "valueFrom" in e and "value" not in e, (c["name"], e["name"])
    policies = {d["metadata"]["name"] for d in docs if d["kind"] == "NetworkPolicy"}
    expected = {"redis-from-peakload", "timescaledb-from-peakload", "pgbouncer-from-peakload"}
    assert policies == expected


POOL_LIMIT = 40  # issue 28: at most this many client connections at the database, any fleet size


LOGIN_RETRY_LIMIT_S = 2


def _pool_settings(env: dict[str, str], where: str) -> None:
    assert env["POOL_MODE"] == "transaction", where
    assert 1 <= int(env["DEFAULT_POOL_SIZE"]) <= POOL_LIMIT, where
    assert int(env["MAX_CLIENT_CONN"]) >= 1000, f"{where}: room for every shard of a fleet"
    assert env["DB_HOST"].split(".")[0] == "timescaledb", where
    # after the database restarts, clients get through within a second or two: PgBouncer
    # otherwise refuses every login for server_login_retry (15 s in 1.18) after one failed
    # attempt, which a 3-s restart turned into 18 s of outage for a fleet (tests/.../test_fleet)
    assert float(env["SERVER_LOGIN_RETRY"]) <= LOGIN_RETRY_LIMIT_S, where


def test_region_workers_reach_the_store_through_one_bounded_pool() -> None:
    """The shards' connections go through PgBouncer, so what TimescaleDB sees is bounded by the
    pool, not by workers x shards; what holds few connections (migrations, control, beat, UI,
    KEDA) goes straight to the database."""
    services = _compose()["services"]
    _pool_settings(_env_list(services["pgbouncer"]["environment"]), "compose pgbouncer")
    assert services["pgbouncer"]["networks"] == ["backend"] and "ports" not in services["pgbouncer"]
    for name, svc in _compose_peakload_services().items():
        url = _env_list(svc.get("environment"))["PEAKLOAD_DATABASE_URL"]
        host = url.split("@", 1)[1].split(":", 1)[0]
        region_worker = (svc.get("command") or [])[:2] == ["worker", "--region"]
        assert host == ("pgbouncer" if region_worker else "timescaledb"), (name, host)
        if region_worker:
            assert svc["depends_on"]["pgbouncer"]["condition"] == "service_healthy", name
    docs = _k8s_docs()
    pool = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "pgbouncer"
    )
    assert pool["spec"]["replicas"] == 1, "each replica is a pool of its own at the database"
    (c,) = pool["spec"]["template"]["spec"]["containers"]
    _pool_settings({e["name"]: str(e.get("value", "")) for e in c["env"]}, "k8s pgbouncer")
    assert ("Service", "pgbouncer") in {(d["kind"], d["metadata"]["name"]) for d in docs}
    for name, c in _k8s_peakload_containers():
        ref = next(e for e in c["env"] if e["name"] == "PEAKLOAD_DATABASE_URL")
        key = ref["valueFrom"]["secretKeyRef"]["key"]
        expected = "pooled-database-url" if name.startswith("worker-") else "database-url"
        assert key == expected, (name, key)
    secrets_doc = (DEPLOY / "k8s" / "00-namespace.yaml").read_text()
    assert "pooled-database-url=postgresql://peakload:DBPW@pgbouncer." in secrets_doc


def test_k8s_worker_per_region_with_grace_for_a_soft_stop() -> None:
    regions = set()
    for d in _k8s_docs():
        if d["kind"] != "Deployment" or not d["metadata"]["name"].startswith("worker-"):
            continue
        spec = d["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        assert c["args"][:2] == ["worker", "--region"]
        regions.add(c["args"][2])
        assert spec["terminationGracePeriodSeconds"] >= 60
        assert spec["nodeSelector"]["topology.kubernetes.io/region"] == c["args"][2]
    assert regions == REGIONS


def test_celery_app_is_json_only() -> None:
    from workers.app import make_app

    conf = make_app("redis://127.0.0.1:1/0").conf
    assert conf.accept_content == ["json"]
    assert conf.task_serializer == conf.result_serializer == conf.event_serializer == "json"
    assert conf.worker_prefetch_multiplier == 1
    assert conf.worker_disable_prefetch is True
    assert conf.task_acks_late is False
    assert conf.broker_connection_retry_on_startup is True
    assert conf.broker_connection_max_retries is None


# ---------------------------------------------------------------- cross-checks with the code

ROOT = DEPLOY.parent
PEAKLOAD_IMAGE = re.compile(r"^peakload:")
SECRET_NAME = re.compile(r"PASSWORD|API_KEY|TOKEN|SECRET", re.IGNORECASE)
KEY_CONSUMERS = ("worker-eu-west", "worker-us-east", "worker-ap-south", "control", "ui", "cli")


def peakload_variables() -> set[str]:
    """Every PEAKLOAD_ variable the code reads (named as a string literal somewhere in the four
    packages), test-only ones left out."""
    names: set[str] = set()
    for pkg in ("loadgen", "workers", "analysis", "ui"):
        for path in (ROOT / pkg).rglob("*.py"):
            names |= set(re.findall(r"[\"'](PEAKLOAD_[A-Z0-9_]+)[\"']", path.read_text()))
    return {n for n in names if not n.startswith("PEAKLOAD_TEST_")}


def _compose_peakload_services() -> dict[str, dict[str, Any]]:
    return {
        n: s
        for n, s in _compose()["services"].items()
        if PEAKLOAD_IMAGE.match(str(s.get("image", "")))
    }


def _k8s_peakload_containers() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for d in _k8s_docs():
        if d["kind"] in ("Deployment", "StatefulSet"):
            for c in d["spec"]["template"]["spec"]["containers"]:
                if PEAKLOAD_IMAGE.match(c["image"]):
                    out.append((d["metadata"]["name"], c))
    return out


def _parse_cli(args: list[str]) -> None:
    """Resolve `peakload ARGS` to its command (through groups such as `db`) and parse its
    options the way click would, without running it."""
    import click

    from ui.cli import cli

    cmd: click.Command = cli
    ctx = click.Context(cli, info_name="peakload")
    rest = list(args)
    while isinstance(cmd, click.Group):
        assert rest, f"`peakload {' '.join(args)}` names no command"
        sub = cmd.get_command(ctx, rest[0])
        assert sub is not None, f"`peakload {' '.join(args)}`: no command {rest[0]!r}"
        ctx = click.Context(sub, info_name=rest[0], parent=ctx)
        cmd, rest = sub, rest[1:]
    cmd.make_context(ctx.info_name, rest, parent=ctx.parent)


def test_every_command_in_the_files_is_a_peakload_command() -> None:
    commands = [s["command"] for s in _compose_peakload_services().values() if "command" in s]
    commands += [c["args"] for _, c in _k8s_peakload_containers()]
    assert len(commands) >= 12
    for args in commands:
        assert "command" not in args and "entrypoint" not in args
        _parse_cli([str(a) for a in args])
    for name, svc in _compose_peakload_services().items():
        assert "entrypoint" not in svc, f"{name} bypasses the peakload command"
    for name, c in _k8s_peakload_containers():
        assert "command" not in c, f"{name} bypasses the peakload command"


def test_every_variable_in_the_files_is_one_peakload_reads() -> None:
    known = peakload_variables()
    assert {"PEAKLOAD_DATABASE_URL", "PEAKLOAD_REDIS_URL", "PEAKLOAD_UI_PASSWORD"} <= known
    seen: set[str] = set()
    for name, svc in _compose_peakload_services().items():
        for var in _env_list(svc.get("environment")):
            assert var in known, f"compose {name} sets {var}, which peakload never reads"
            seen.add(var)
    for name, c in _k8s_peakload_containers():
        for e in c.get("env", []):
            assert e["name"] in known, f"k8s {name} sets {e['name']}, which peakload never reads"
            seen.add(e["name"])
    assert {"PEAKLOAD_DATABASE_URL", "PEAKLOAD_REDIS_URL"} <= seen


def test_readme_configuration_table_is_every_variable() -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Configuration", 1)[1].split("\n#", 1)[0]
    listed = set(re.findall(r"^\| `(PEAKLOAD_[A-Z0-9_]+)`", section, re.MULTILINE))
    assert listed == peakload_variables(), listed ^ peakload_variables()


def test_no_published_port_but_the_uis() -> None:
    published = {n for n, s in _compose()["services"].items() if s.get("ports")}
    assert published == {"ui"}
    for d in _k8s_docs():
        assert d["kind"] != "Ingress", "an Ingress is the operator's to add, with authentication"
        if d["kind"] == "Service":
            assert d["spec"].get("type", "ClusterIP") == "ClusterIP"


def test_no_plain_text_secret_in_any_file() -> None:
    for name, svc in _compose()["services"].items():
        for key, value in _env_list(svc.get("environment")).items():
            if SECRET_NAME.search(key) or ("://" in value and "@" in value):
                assert re.search(r"\$\{[A-Z_]+:\?", value), f"compose {name}.{key} is literal"
    for d in _k8s_docs():
        if d["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for c in d["spec"]["template"]["spec"]["containers"]:
            for e in c.get("env", []):
                if SECRET_NAME.search(e["name"]) or "@" in str(e.get("value", "")):
                    assert "valueFrom" in e and "value" not in e, (c["name"], e["name"])
    example = DEPLOY / "compose" / "keys.env.example"
    for line in example.read_text().splitlines():
        if line and not line.startswith("#"):
            name, value = line.split("=", 1)
            assert name.endswith("_API_KEY") and value == "", line
    ignored = (ROOT / ".gitignore").read_text().split()
    assert {"deploy/compose/keys.env", "deploy/compose/.env"} <= set(ignored)


def test_every_process_that_sends_requests_gets_every_key() -> None:
    services = _compose()["services"]
    for name in KEY_CONSUMERS:
        assert services[name]["env_file"] == ["keys.env"], name
    assert services["beat"]["env_file"] == []
    k8s = dict(_k8s_peakload_containers())
    for name in ("worker-eu-west", "worker-us-east", "worker-ap-south", "control", "ui"):
        assert k8s[name]["envFrom"] == [{"secretRef": {"name": "peakload-api-keys"}}], name


def test_ui_submits_to_the_workers_and_flower_stays_private() -> None:
    services = _compose()["services"]
    assert "redis:6379" in _env_list(services["ui"]["environment"])["PEAKLOAD_REDIS_URL"]
    assert services["flower"]["networks"] == ["backend"] and "ports" not in services["flower"]
    k8s = dict(_k8s_peakload_containers())
    assert "PEAKLOAD_REDIS_URL" in {e["name"] for e in k8s["ui"]["env"]}
    kinds = {(d["kind"], d["metadata"]["name"]) for d in _k8s_docs()}
    assert ("Service", "flower") in kinds and ("Deployment", "flower") in kinds


def test_keda_scales_each_region_worker_on_its_queue_and_its_running_shards() -> None:
    from workers.app import region_queue

    docs = _k8s_docs()
    scaled = {d["spec"]["scaleTargetRef"]["name"]: d for d in docs if d["kind"] == "ScaledObject"}
    workers = {
        d["metadata"]["name"]: d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"].startswith("worker-")
    }
    assert set(scaled) == set(workers)
    for name, obj in scaled.items():
        region = workers[name]["spec"]["template"]["spec"]["containers"][0]["args"][2]
        triggers = {t["type"]: t for t in obj["spec"]["triggers"]}
        assert triggers["redis"]["metadata"]["listName"] == region_queue(region)
        query = triggers["postgresql"]["metadata"]["query"]
        assert f"region = '{region}'" in query and "'running'" in query
        assert obj["spec"]["minReplicaCount"] >= 1  # a run's shards check in within 60 s
    auth = next(d for d in docs if d["kind"] == "TriggerAuthentication")
    assert all("secretTargetRef" in auth["spec"] for _ in [0])


def test_kubernetes_runs_the_commands_compose_runs() -> None:
    """So starting compose's processes natively (test_deploy_native) covers both files."""
    compose = {tuple(s["command"]) for s in _compose_peakload_services().values() if "command" in s}
    k8s = {tuple(c["args"]) for _, c in _k8s_peakload_containers()}
    assert k8s <= compose, k8s - compose
