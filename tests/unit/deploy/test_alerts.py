"""The alerting rules load in Prometheus, every alert fires in one promtool test case and stays
silent in another, reads only metrics that exist, and has a runbook line in deploy/README.md.

promtool and amtool are Debian's ``prometheus`` and ``prometheus-alertmanager`` packages;
``make setup`` installs them where promtool is missing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.test_deploy_files import exported_series

ROOT = Path(__file__).resolve().parents[3]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules.yml"
TESTS = PROMETHEUS / "rules.test.yml"
# Triton's own series (its :8002/metrics), as the dashboard charts them.
TRITON = {"nv_inference_request_success", "nv_inference_request_failure"}


def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("promtool is not installed: `make setup` installs Debian's prometheus package")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, cwd=PROMETHEUS, check=False)


def test_promtool_checks_the_rules_and_runs_their_tests() -> None:
    checked = promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_alertmanager_route_example_is_valid() -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool is not installed: `make setup` installs Debian's prometheus-alertmanager package")
    checked = subprocess.run(
        [amtool, "check-config", str(ROOT / "deploy" / "alertmanager.yml")], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_alert_has_a_firing_and_a_silent_test_case() -> None:
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(TESTS.read_text())["tests"]:
        for case in test["alert_rule_test"]:
            cases.setdefault(case["alertname"], set()).add(bool(case["exp_alerts"]))
    assert {name: cases.get(name, set()) for name in alerts()} == {name: {True, False} for name in alerts()}


def test_rules_read_only_exported_metrics() -> None:
    exported = exported_series()
    for name, rule in alerts().items():
        used = set(re.findall(r"\b(?:modstream|nv)_[a-z0-9_]+\b", rule["expr"]))
        assert used, name
        assert used <= exported | TRITON, (name, sorted(used - exported - TRITON))


def test_every_alert_has_a_severity_and_a_runbook_line() -> None:
    readme = (ROOT / "deploy" / "README.md").read_text()
    for name, rule in alerts().items():
        assert rule["labels"]["severity"] in {"page", "ticket"}, name
        assert rule["annotations"]["runbook"] == "deploy/README.md#alerts", name
        assert re.search(rf"^\| `{name}` \|", readme, re.M), f"{name} has no runbook line in deploy/README.md"
