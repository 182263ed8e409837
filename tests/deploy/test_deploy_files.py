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
    assert policies == {"redis-from-peakload", "timescaledb-from-peakload"}


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
