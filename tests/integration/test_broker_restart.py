"""A broker restart on durable storage (Tansu on S3, moto's S3 server standing in) mid-stream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from modstream.chaos import restart_broker
from modstream.stack import Endpoints, LocalStack, S3Standin
from modstream.triton_repo import RepoOptions, build_repo
from tests.integration.test_pipeline import post
from workers.config import Settings

pytestmark = pytest.mark.integration


@pytest.fixture
def s3_stack(tmp_path: Path, tiny_model_dir: Path, stack: Endpoints) -> Iterator[tuple[LocalStack, Endpoints]]:
    repo = build_repo("cpu-embedded", tiny_model_dir, tmp_path / "repo", RepoOptions())
    with S3Standin(tmp_path / "s3") as s3:
        local = LocalStack(
            tmp_path / "stack", repo, stack.redis_url, kafka_storage="s3://tansu/", kafka_env=s3.kafka_env
        )
        with local as endpoints:
            yield local, endpoints


def test_the_worker_makes_progress_after_a_broker_restart_on_s3(
    settings: Settings, s3_stack: tuple[LocalStack, Endpoints], tmp_path: Path
) -> None:
    local, ep = s3_stack
    s = settings.model_copy(update={"kafka_bootstrap": ep.kafka_bootstrap, "triton_url": ep.triton_grpc})
    records = [post(f"s{i}", f"post {i} about the weather") for i in range(400)]
    result = restart_broker("broker restart on S3", local, s, records, tmp_path / "worker.log")
    assert result.lost == 0 and result.recovery_s is not None, result
