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
from workers.runtime.probes import LIVEZ, READYZ

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "deploy" / "k8s"
VALIDATOR = ROOT / "tests" / "k8s"
KAFKA_INIT = K8S / "kafka-init.sh"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "modstream.json"
KUBERNETES_VERSION = "1.31.0"  # the oldest minor the manifests target (policy/v1, seccompProfile, appProtocol)
# Kinds only the CRD validators know (kubernetes-validate has no schema for them).
CUSTOM = {
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
WORKLOADS = ("Deployment", "StatefulSet", "Job")
# The shared models volume (models.yaml): mounted here by every pod, since links hold absolute paths.
MODELS = "/models"
# The drain after SIGTERM: delivery reports for the batch in hand, then commit and leave the group.
DRAIN_MARGIN_S = 10


def render() -> list[dict[str, Any]]:
    """``kubectl kustomize deploy/k8s``; where kubectl is missing, the resource files as written
    (the generated ConfigMaps, and the directories they come from, are then missing)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        files = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
        return [d for f in files if (K8S / f).is_file() for d in yaml.safe_load_all((K8S / f).read_text()) if d]
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


def needs_generated(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """A ConfigMap kustomize generates (its name may carry a hash suffix)."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH: the generated ConfigMaps are not rendered")
    (generated,) = [c for n, c in by_kind(objects, "ConfigMap").items() if re.fullmatch(rf"{name}(-[a-z0-9]+)?", n)]
    return generated


def test_kustomize_renders_into_the_namespace_with_the_release_images() -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH: cannot render the kustomization")
    objects = render()
    assert {o["metadata"].get("namespace") for o in objects if o["kind"] != "Namespace"} == {"modstream"}
    images = {c["image"] for o in objects if o["kind"] in WORKLOADS for c in containers(o)}
    assert "registry.example.com/modstream:0.1.0" in images and "registry.example.com/modstream-models:0.1.0" in images


def test_builtin_kinds_match_the_kubernetes_schemas_strictly(objects: list[dict[str, Any]]) -> None:
    for o in objects:
        if (o["apiVersion"], o["kind"]) not in CUSTOM:
            kubernetes_validate.validate(o, KUBERNETES_VERSION, strict=True)
    typo = copy.deepcopy(by_kind(objects, "StatefulSet")["moderation"])
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


def workloads(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: o for kind in WORKLOADS for name, o in by_kind(objects, kind).items()}


def test_pods_run_unprivileged_with_resources(objects: list[dict[str, Any]]) -> None:
    for name, deployment in workloads(objects).items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        assert pod["automountServiceAccountToken"] is False, name
        for c in containers(deployment):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, (name, c["name"])
            assert sc["capabilities"]["drop"] == ["ALL"], (name, c["name"])
            assert {"requests", "limits"} <= set(c["resources"]), (name, c["name"])


def test_workers_drain_within_the_grace_period_and_probe_in_process(objects: list[dict[str, Any]]) -> None:
    config = by_kind(objects, "ConfigMap")["modstream"]["data"]
    publish_timeout_s = float(config.get("MODSTREAM_PUBLISH_TIMEOUT_S", Settings().publish_timeout_s))
    workers = {
        "moderation": by_kind(objects, "StatefulSet")["moderation"],
        **{name: by_kind(objects, "Deployment")[name] for name in ("feedback", "profiles")},
    }
    for name, args in (("moderation", "worker"), ("feedback", "feedback"), ("profiles", "ingest-profiles")):
        pod = workers[name]["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] >= publish_timeout_s + DRAIN_MARGIN_S, name
        (worker,) = pod["containers"]
        assert worker["args"] == [args]
        # Served by the worker's own event loop (workers/runtime/probes.py), never a process per probe.
        assert worker["readinessProbe"]["httpGet"] == {"path": READYZ, "port": "metrics"}, name
        assert worker["livenessProbe"]["httpGet"] == {"path": LIVEZ, "port": "metrics"}, name
        assert not any("exec" in worker.get(p, {}) for p in ("startupProbe", "readinessProbe", "livenessProbe"))


def test_moderation_workers_keep_their_identity_and_leave_the_replica_count_to_keda(
    objects: list[dict[str, Any]],
) -> None:
    workers = by_kind(objects, "StatefulSet")["moderation"]
    assert "replicas" not in workers["spec"] and "moderation" not in by_kind(objects, "Deployment")
    assert workers["spec"]["serviceName"] in by_kind(objects, "Service")
    (worker,) = workers["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in worker["env"]}
    assert env["MODSTREAM_INSTANCE_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_bundles_and_the_triton_repository_share_one_volume_so_promotion_works(objects: list[dict[str, Any]]) -> None:
    (claim,) = by_kind(objects, "PersistentVolumeClaim").values()
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    config = by_kind(objects, "ConfigMap")["modstream"]["data"]
    model_dir = config["MODSTREAM_MODEL_DIR"]
    mounts = {}
    for name, o in workloads(objects).items():
        pod = o["spec"]["template"]["spec"]
        volumes = {
            v["name"]
            for v in pod.get("volumes", [])
            if v.get("persistentVolumeClaim", {}).get("claimName") == claim["metadata"]["name"]
        }
        for c in pod["containers"]:
            for m in c.get("volumeMounts", []):
                if m["name"] in volumes:
                    mounts[name, c["name"]] = (m["mountPath"], m.get("readOnly", False))
    # The workers swap the `current` link (`modstream models promote`); Triton only reads.
    assert mounts["moderation", "worker"] == (MODELS, False)
    assert mounts["triton", "triton"] == (MODELS, True)
    assert model_dir.startswith(f"{MODELS}/")
    (triton,) = by_kind(objects, "Deployment")["triton"]["spec"]["template"]["spec"]["containers"]
    assert f"--model-repository={MODELS}/triton_repo" in triton["args"]
    # Each Triton replica loads a promoted text model's version from the shared repository itself.
    assert "--model-control-mode=poll" in triton["args"]
    assert config["MODSTREAM_TRITON_REPO"] == f"{MODELS}/triton_repo"
    # Nothing copies models into a pod any more: the volume is the one copy.
    assert not [c for o in workloads(objects).values() for c in containers(o) if c.get("command", [""])[0] == "cp"]


def test_triton_survives_a_node_drain(objects: list[dict[str, Any]]) -> None:
    triton = by_kind(objects, "Deployment")["triton"]
    labels = triton["spec"]["template"]["metadata"]["labels"]
    assert triton["spec"]["replicas"] >= 2
    (budget,) = [
        b
        for b in by_kind(objects, "PodDisruptionBudget").values()
        if b["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ]
    assert budget["spec"]["minAvailable"] == 1
    (term,) = triton["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()


def expected_topics() -> set[str]:
    """Every topic the code reads or writes: the settings' topics and the feedback worker's DLQ."""
    s = Settings()
    return {getattr(s, f) for f in Settings.model_fields if f.endswith("_topic")} | {f"{s.feedback_topic}.dlq"}


def test_kafka_init_creates_every_topic_the_code_uses(objects: list[dict[str, Any]]) -> None:
    assert set(kafka_init_partitions()) == expected_topics()
    job = by_kind(objects, "Job")["kafka-init"]["spec"]["template"]["spec"]
    (script,) = [v["configMap"]["name"] for v in job["volumes"] if "configMap" in v]
    generated = needs_generated(objects, script)
    assert generated["data"]["kafka-init.sh"] == KAFKA_INIT.read_text()


def test_profile_ingester_is_deployed_and_scraped(objects: list[dict[str, Any]]) -> None:
    profiles = by_kind(objects, "Deployment")["profiles"]
    (worker,) = profiles["spec"]["template"]["spec"]["containers"]
    assert worker["args"] == ["ingest-profiles"] and worker["image"].endswith("modstream:0.1.0")


def test_prometheus_operator_objects_carry_the_release_label_and_the_rules_and_dashboard_are_the_files(
    objects: list[dict[str, Any]],
) -> None:
    (monitor,) = by_kind(objects, "ServiceMonitor").values()
    (rule,) = by_kind(objects, "PrometheusRule").values()
    assert monitor["metadata"]["labels"]["release"] == rule["metadata"]["labels"]["release"]
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"], (
        "deploy/k8s/alerts.yaml differs from deploy/prometheus/rules.yml: copy the groups over"
    )
    dashboard = needs_generated(objects, "modstream-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"] == {DASHBOARD.name: DASHBOARD.read_text()}


def test_config_names_only_settings_the_code_reads(objects: list[dict[str, Any]]) -> None:
    known = {f"MODSTREAM_{f.upper()}" for f in Settings.model_fields} | {
        f"MODSTREAM_FEEDBACK_{f.upper()}" for f in FeedbackSettings.model_fields
    }
    given = set(by_kind(objects, "ConfigMap")["modstream"]["data"]) | set(
        by_kind(objects, "Secret")["modstream"]["stringData"]
    )
    assert given <= known, sorted(given - known)


def kafka_init_partitions() -> dict[str, str]:
    return dict(re.findall(r"^create (\S+) (\d+)$", KAFKA_INIT.read_text(), re.M))


def test_keda_scales_the_moderation_group_on_posts_up_to_the_partition_count(objects: list[dict[str, Any]]) -> None:
    partitions = kafka_init_partitions()
    scaled = by_kind(objects, "ScaledObject")["moderation"]["spec"]
    (trigger,) = scaled["triggers"]
    defaults = Settings()
    assert trigger["type"] == "kafka"
    assert trigger["metadata"]["topic"] == defaults.input_topic
    assert trigger["metadata"]["consumerGroup"] == defaults.group_id
    assert scaled["maxReplicaCount"] == int(partitions[defaults.input_topic])
    assert trigger["metadata"]["allowIdleConsumers"] == "false"
    target = scaled["scaleTargetRef"]
    assert target["kind"] == "StatefulSet" and target["name"] in by_kind(objects, "StatefulSet")
    # SASL/TLS clusters: credentials through a TriggerAuthentication, from a Secret that exists.
    auth = by_kind(objects, "TriggerAuthentication")[trigger["authenticationRef"]["name"]]
    secrets = by_kind(objects, "Secret")
    for ref in auth["spec"]["secretTargetRef"]:
        assert ref["key"] in secrets[ref["name"]]["stringData"], ref


def test_every_deployment_has_a_disruption_budget_and_a_scraped_metrics_port(objects: list[dict[str, Any]]) -> None:
    deployments = {**by_kind(objects, "Deployment"), **by_kind(objects, "StatefulSet")}
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
