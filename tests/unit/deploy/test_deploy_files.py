"""The deployment files parse, hang together, and chart only metrics the workers export.

No Docker engine is needed: compose, Prometheus and Grafana files are checked as data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

import workers.feedback.metrics
import workers.kafka.lag
import workers.metrics
import workers.profiles.metrics

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "modstream.json"
# Sample names a metric type exposes beyond its base name.
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def compose() -> Any:
    return load_yaml(ROOT / "docker-compose.yml")


@pytest.fixture(scope="module")
def dashboard() -> Any:
    return json.loads(DASHBOARD.read_text())


def exported_series() -> set[str]:
    """Every series name the moderation and feedback workers and the profile ingester can expose."""
    names = set()
    for module in (workers.metrics, workers.kafka.lag, workers.feedback.metrics, workers.profiles.metrics):
        for metric in vars(module).values():
            if isinstance(metric, MetricWrapperBase):
                names |= {d.name + s for d in metric.describe() for s in SUFFIXES[d.type]}
    return names


def exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from exprs(item)


def test_dashboard_charts_only_exported_metrics(dashboard: Any) -> None:
    referenced = {m for e in exprs(dashboard) for m in re.findall(r"\bmodstream_[a-z0-9_]+\b", e)}
    assert referenced, "the dashboard charts no modstream metric"
    assert referenced <= exported_series(), f"not exported: {sorted(referenced - exported_series())}"


def test_dashboard_covers_every_worker_metric_and_triton(dashboard: Any) -> None:
    text = " ".join(exprs(dashboard))
    bases = {re.sub(r"_(total|bucket|sum|count)$", "", s) for s in exported_series()}
    assert not [b for b in bases if b not in text], "metrics without a panel"
    for triton in (
        "nv_inference_request_success",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
    ):
        assert triton in text


def test_dashboard_panels_use_the_datasource_variable_defaulting_to_the_provisioned_one(dashboard: Any) -> None:
    (source,) = load_yaml(DEPLOY / "grafana/provisioning/datasources/prometheus.yml")["datasources"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["datasource"]["current"]["value"] == source["uid"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert {p["datasource"]["uid"] for p in panels} == {"${datasource}"}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_every_dashboard_query_is_scoped_by_the_namespace_and_job_variables(dashboard: Any) -> None:
    assert {"namespace", "job"} <= {v["name"] for v in dashboard["templating"]["list"]}
    for expr in exprs(dashboard):
        for name, matchers in re.findall(r"\b((?:modstream|nv)_[a-z0-9_]+)(\{[^}]*\})?", expr):
            assert 'namespace=~"$namespace"' in matchers, (name, expr)
            # Triton's series come from its own job: only the workers' are filtered by job.
            assert name.startswith("nv_") or 'job=~"$job"' in matchers, (name, expr)


def test_compose_stack_shape(compose: Any) -> None:
    services = compose["services"]
    assert {
        "kafka",
        "kafka-init",
        "redis",
        "triton",
        "worker",
        "feedback",
        "prometheus",
        "alertmanager",
        "grafana",
    } <= set(services)
    assert services["kafka"]["image"] == "apache/kafka:3.9.0"
    assert services["worker"]["deploy"]["replicas"] == 2
    assert services["worker"]["command"] == ["worker"] and services["feedback"]["command"] == ["feedback"]
    assert services["worker"]["healthcheck"]["test"][1:3] == ["modstream", "health"]
    assert "--no-models" in services["feedback"]["healthcheck"]["test"]
    (gpu,) = services["triton"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpu["driver"] == "nvidia"
    assert "./build/triton_repo:/models:ro" in services["triton"]["volumes"]
    # The same script as the Kubernetes Job's (test_k8s.py checks it creates every topic).
    assert "./deploy/k8s/kafka-init.sh:/kafka-init.sh:ro" in services["kafka-init"]["volumes"]
    assert services["kafka-init"]["command"] == ["/bin/bash", "/kafka-init.sh"]
    for name in ("worker", "feedback"):
        assert services[name]["depends_on"]["kafka-init"]["condition"] == "service_completed_successfully"
        assert services[name]["environment"]["MODSTREAM_KAFKA_BOOTSTRAP"] == "kafka:9092"
        assert services[name]["build"]["dockerfile"] == "deploy/Dockerfile"
    # Every mounted file or directory of ours exists.
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./") and not source.startswith("./build/"):
                assert (ROOT / source).exists(), source


def test_prometheus_scrapes_workers_and_triton_and_alerts_through_alertmanager(compose: Any) -> None:
    config = load_yaml(DEPLOY / "prometheus.yml")
    mounts = dict(v.split(":")[:2] for v in compose["services"]["prometheus"]["volumes"])
    assert config["rule_files"] == [mounts["./deploy/prometheus/rules.yml"]]
    (alertmanagers,) = config["alerting"]["alertmanagers"]
    assert alertmanagers["static_configs"][0]["targets"] == ["alertmanager:9093"]
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    for worker in ("modstream-worker", "modstream-feedback"):
        assert jobs[worker]["dns_sd_configs"][0]["port"] == 9400
    assert jobs["triton"]["static_configs"][0]["targets"] == ["triton:8002"]


def test_grafana_provider_points_at_the_mounted_dashboards(compose: Any) -> None:
    (provider,) = load_yaml(DEPLOY / "grafana/provisioning/dashboards/modstream.yml")["providers"]
    mounts = dict(v.split(":")[:2] for v in compose["services"]["grafana"]["volumes"])
    assert mounts["./deploy/grafana/dashboards"] == provider["options"]["path"]


def test_dockerfile_installs_no_training_stack() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in dockerfile
    assert 'ENTRYPOINT ["modstream"]' in dockerfile
    assert re.search(r"^USER (?!root|0\b)", dockerfile, re.M)
    install = next(line for line in dockerfile.splitlines() if "pip install" in line)
    # The feedback worker, and the Schema Registry formats the moderation worker may be set to read.
    assert "[feedback,registry]" in install and not re.search(r"train|torch|local|gpu", install)
