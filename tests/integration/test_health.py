"""``modstream health`` against the real broker, Redis and tritonserver: the probe compose and k8s run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modstream.cli import app
from modstream.stack.local import Endpoints

pytestmark = pytest.mark.integration


def health(stack: Endpoints, bundle: Path, *args: str, **env: str) -> tuple[int, dict[str, str]]:
    environ = {
        "MODSTREAM_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "MODSTREAM_REDIS_URL": stack.redis_url,
        "MODSTREAM_TRITON_URL": stack.triton_grpc,
        "MODSTREAM_MODEL_DIR": str(bundle),
        **env,
    }
    result = CliRunner().invoke(app, ["health", "--timeout-s", "3", *args], env=environ)
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    return result.exit_code, lines


def test_healthy_when_every_dependency_answers_and_the_models_match(stack: Endpoints, model_bundle: Path) -> None:
    code, lines = health(stack, model_bundle)
    assert code == 0, lines
    assert list(lines) == ["kafka", "redis", "triton", "models"]
    assert "version tiny0001" in lines["triton"]


def test_unhealthy_with_one_line_naming_what_is_down(stack: Endpoints, model_bundle: Path) -> None:
    code, lines = health(stack, model_bundle, MODSTREAM_REDIS_URL="redis://127.0.0.1:1/0")
    assert code == 1
    assert " FAIL " in lines["redis"] and " ok " in lines["kafka"] and " ok " in lines["triton"]


def test_a_bundle_for_another_text_model_breaks_the_contract(
    stack: Endpoints, model_bundle: Path, tmp_path: Path
) -> None:
    other = tmp_path / "bundle"
    shutil.copytree(model_bundle, other)
    card = other / "text" / "card.json"
    card.write_text(json.dumps(json.loads(card.read_text()) | {"version": "retrained"}))
    code, lines = health(stack, other)
    assert code == 1 and " FAIL " in lines["models"] and "retrained" in lines["models"]
    # The feedback worker needs neither Triton nor the models.
    assert health(stack, other, "--no-models")[0] == 0


def test_redis_cluster_mode_is_checked_against_the_server(
    stack: Endpoints, model_bundle: Path, redis_cluster: str
) -> None:
    cluster = {"MODSTREAM_REDIS_CLUSTER": "true"}
    assert health(stack, model_bundle, "--no-models", MODSTREAM_REDIS_URL=redis_cluster, **cluster)[0] == 0
    # The cluster client against a single Redis: a clear failure, not a half-working worker.
    code, lines = health(stack, model_bundle, "--no-models", **cluster)
    assert code == 1 and " FAIL " in lines["redis"]
