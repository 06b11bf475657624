"""deploy/k8s renders with kustomize, every object is valid against the Kubernetes, KEDA and
prometheus-operator schemas, and the manifests agree with the code and with each other.

Offline: ``kubectl kustomize`` renders (skipped where kubectl is missing; the resources are
then validated as written), kubernetes-validate checks the built-in kinds against the
Kubernetes OpenAPI schemas it bundles (strict: unknown fields fail), and the
kubernetes-models npm packages installed by ``make setup`` check every kind, the KEDA
ScaledObject and the ServiceMonitor included, with validators generated from their CRDs.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from workers.config import Settings
from workers.feedback.settings import FeedbackSettings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
VALIDATOR = ROOT / "tests" / "k8s"
KUBERNETES_VERSION = "1.31.0"  # the oldest minor the manifests target (policy/v1, seccompProfile, appProtocol)
# Kinds only the CRD validators know (kubernetes-validate has no schema for them).
CUSTOM = {("keda.sh/v1alpha1", "ScaledObject"), ("monitoring.coreos.com/v1", "ServiceMonitor")}
# The drain after SIGTERM: delivery reports for the batch in hand, then commit and leave the group.
DRAIN_MARGIN_S = 10


def render() -> list[dict[str, Any]]:
    """``kubectl kustomize deploy/k8s``; where kubectl is missing, the resources as written."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        files = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
        return [d for f in files for d in yaml.safe_load_all((K8S / f).read_text()) if d]
    out = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return render()


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def crd_errors(objects: list[dict[str, Any]]) -> list[list[str]]:
    node = shutil.which("node")
    if node is None or not (VALIDATOR / "node_modules").is_dir():
        pytest.skip("the kubernetes-models validators are not installed: `make setup` (npm ci in tests/k8s)")
    out = subprocess.run(
        [node, str(VALIDATOR / "validate.mjs")],
        input=json.dumps(objects),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    errors: list[list[str]] = json.loads(out.stdout)
    return errors


def test_kustomize_renders_into_the_namespace_with_the_release_images() -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH: cannot render the kustomization")
    objects = render()
    assert {o["metadata"].get("namespace") for o in objects if o["kind"] != "Namespace"} == {"modstream"}
    images = {c["image"] for o in objects if o["kind"] == "Deployment" for c in containers(o)}
    assert "registry.example.com/modstream:0.1.0" in images and "registry.example.com/modstream-models:0.1.0" in images


def test_builtin_kinds_match_the_kubernetes_schemas_strictly(objects: list[dict[str, Any]]) -> None:
    for o in objects:
        if (o["apiVersion"], o["kind"]) not in CUSTOM:
            kubernetes_validate.validate(o, KUBERNETES_VERSION, strict=True)
    typo = copy.deepcopy(by_kind(objects, "Deployment")["moderation"])
    typo["spec"]["template"]["spec"]["terminationGracePeriod"] = 45
    with pytest.raises(kubernetes_validate.ValidationError, match="terminationGracePeriod"):
        kubernetes_validate.validate(typo, KUBERNETES_VERSION, strict=True)


def test_every_object_matches_its_schema_keda_and_prometheus_operator_included(objects: list[dict[str, Any]]) -> None:
    assert {(o["apiVersion"], o["kind"]) for o in objects} >= CUSTOM
    broken = copy.deepcopy(by_kind(objects, "ScaledObject")["moderation"])
    broken["spec"]["maxReplicaCount"] = "12"
    *errors, caught = crd_errors([*objects, broken])
    assert {f"{o['kind']}/{o['metadata']['name']}": e for o, e in zip(objects, errors, strict=True) if e} == {}
    assert caught == ["data/spec/maxReplicaCount must be integer"]


def containers(o: dict[str, Any]) -> list[dict[str, Any]]:
    spec = o["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_pods_run_unprivileged_with_resources(objects: list[dict[str, Any]]) -> None:
    for name, deployment in by_kind(objects, "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        assert pod["automountServiceAccountToken"] is False, name
        for c in containers(deployment):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, (name, c["name"])
            assert sc["capabilities"]["drop"] == ["ALL"], (name, c["name"])
            assert {"requests", "limits"} <= set(c["resources"]), (name, c["name"])


def test_workers_drain_within_the_grace_period_and_probe_with_modstream_health(objects: list[dict[str, Any]]) -> None:
    config = by_kind(objects, "ConfigMap")["modstream"]["data"]
    publish_timeout_s = float(config.get("MODSTREAM_PUBLISH_TIMEOUT_S", Settings().publish_timeout_s))
    deployments = by_kind(objects, "Deployment")
    for name, flags in (("moderation", []), ("feedback", ["--no-models"])):
        pod = deployments[name]["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] >= publish_timeout_s + DRAIN_MARGIN_S, name
        (worker,) = pod["containers"]
        command = worker["readinessProbe"]["exec"]["command"]
        assert command[:2] == ["modstream", "health"] and all(f in command for f in flags), name
        assert worker["livenessProbe"]["httpGet"]["port"] == "metrics", name
        assert worker["args"] == ["worker" if name == "moderation" else "feedback"]


def test_config_names_only_settings_the_code_reads(objects: list[dict[str, Any]]) -> None:
    known = {f"MODSTREAM_{f.upper()}" for f in Settings.model_fields} | {
        f"MODSTREAM_FEEDBACK_{f.upper()}" for f in FeedbackSettings.model_fields
    }
    given = set(by_kind(objects, "ConfigMap")["modstream"]["data"]) | set(
        by_kind(objects, "Secret")["modstream"]["stringData"]
    )
    assert given <= known, sorted(given - known)


def test_keda_scales_the_moderation_group_on_posts_up_to_the_partition_count(objects: list[dict[str, Any]]) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    partitions = dict(re.findall(r"^\s*create (\S+) (\d+)$", compose["services"]["kafka-init"]["command"][0], re.M))
    scaled = by_kind(objects, "ScaledObject")["moderation"]["spec"]
    (trigger,) = scaled["triggers"]
    defaults = Settings()
    assert trigger["type"] == "kafka"
    assert trigger["metadata"]["topic"] == defaults.input_topic
    assert trigger["metadata"]["consumerGroup"] == defaults.group_id
    assert scaled["maxReplicaCount"] == int(partitions[defaults.input_topic])
    assert trigger["metadata"]["allowIdleConsumers"] == "false"
    assert scaled["scaleTargetRef"]["name"] in by_kind(objects, "Deployment")


def test_every_deployment_has_a_disruption_budget_and_a_scraped_metrics_port(objects: list[dict[str, Any]]) -> None:
    deployments = by_kind(objects, "Deployment")
    budgets = [p["spec"]["selector"]["matchLabels"] for p in by_kind(objects, "PodDisruptionBudget").values()]
    (monitor,) = by_kind(objects, "ServiceMonitor").values()
    selector = monitor["spec"]["selector"]["matchLabels"]
    (endpoint,) = monitor["spec"]["endpoints"]
    scraped = [
        s["spec"]["selector"]
        for s in by_kind(objects, "Service").values()
        if selector.items() <= s["metadata"]["labels"].items()
        and endpoint["port"] in {p["name"] for p in s["spec"]["ports"]}
    ]
    for name, d in deployments.items():
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert any(b.items() <= labels.items() for b in budgets), f"{name} has no PodDisruptionBudget"
        assert any(s.items() <= labels.items() for s in scraped), f"{name} is not scraped"
        ports = {p["name"] for c in d["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        assert endpoint["port"] in ports, name
