"""Fixtures shared by the integration tests."""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from rich.console import Console

from modstream.harness.demo import WorkerThread, worker_settings
from modstream.harness.traffic import Collector, Record, produce_all
from modstream.serving.artifacts import Models, ensure_models
from modstream.serving.triton_repo import build_repo
from modstream.stack.local import EMBEDDED_SESSION_TIMEOUT_S, Endpoints, LocalStack, create_topics
from modstream.stack.redis_cluster import LocalRedisCluster
from tests.unit.fakes import tiny_decision_model
from workers.clients import Framing
from workers.config import Settings
from workers.state.features import FEATURE_VERSION, FEATURES
from workers.state.keyspace import Keyspace


def run_settings(stack: Endpoints, model_dir: Path, run: str, **overrides: Any) -> Settings:
    """The moderation worker's settings on the stack, with this run's own topics, group and keys."""
    return Settings(
        kafka_bootstrap=stack.kafka_bootstrap,
        redis_url=stack.redis_url,
        triton_url=stack.triton_grpc,
        model_dir=model_dir,
        redis_prefix=f"it:{run}:",
        group_id=f"it-{run}",
        input_topic=f"posts-{run}",
        output_topic=f"verdicts-{run}",
        dlq_topic=f"dlq-{run}",
        metrics_port=0,
        **{"batch_max_wait_s": 0.02, "session_timeout_s": EMBEDDED_SESSION_TIMEOUT_S, **overrides},
    )


@contextmanager
def default_models_stack(prefix: str) -> Iterator[tuple[Models, Endpoints, Settings]]:
    """A private stack serving the trained default models, with this run's settings and its
    one-partition topics (one partition: the posts are decided in the order they are sent)."""
    models = ensure_models(Console(stderr=True))
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        repo = build_repo("cpu-embedded", models.text, Path(tmp) / "triton_repo")
        with LocalStack(Path(tmp) / "stack", repo) as ep:
            settings = worker_settings(ep, models.bundle, uuid.uuid4().hex[:8])
            create_topics(
                ep.kafka_bootstrap, dict.fromkeys((settings.input_topic, settings.output_topic, settings.dlq_topic), 1)
            )
            yield models, ep, settings


def run_worker(
    settings: Settings, records: list[Record], timeout_s: float = 90, framing: Framing | None = None
) -> Collector:
    """The moderation worker on its own thread until every record has an outcome (or the timeout)."""
    collector = Collector(settings, f"collector-{settings.group_id}")
    worker = WorkerThread(settings, framing)
    try:
        produce_all(settings, records)
        assert collector.wait_for([r.key for r in records], timeout_s), "not every record got an outcome"
    finally:
        worker.close()
        collector.close()
    return collector


@pytest.fixture
async def redis_client(stack: Endpoints) -> AsyncIterator[aioredis.Redis]:
    """A client of the stack's Redis that answers strings."""
    client = aioredis.Redis.from_url(stack.redis_url, decode_responses=True, socket_timeout=2)
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
def model_bundle(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """The tiny text model (what the stack's Triton serves) beside a tiny decision model."""
    bundle = tmp_path_factory.mktemp("bundle")
    (bundle / "text").symlink_to(tiny_model_dir)
    decision = bundle / "decision"
    decision.mkdir()
    tiny_decision_model().booster.save_model(str(decision / "model.txt"))
    card = {
        "features": list(FEATURES),
        "feature_version": FEATURE_VERSION,
        "version": "tiny",
        "thresholds": {"block": 0.8, "allow": 0.2},
    }
    (decision / "card.json").write_text(json.dumps(card))
    return bundle


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis Cluster on loopback (three primaries, three replicas); yields a node's URL."""
    with LocalRedisCluster(tmp_path_factory.mktemp("redis_cluster")) as url:
        yield url


@pytest.fixture
def settings(stack: Endpoints, model_bundle: Path) -> Iterator[Settings]:
    s = run_settings(stack, model_bundle, uuid.uuid4().hex[:8])
    create_topics(s.kafka_bootstrap, {s.input_topic: 2, s.output_topic: 2, s.dlq_topic: 1})
    ks = Keyspace(s.redis_prefix)
    r = redis.Redis.from_url(stack.redis_url)
    r.sadd(ks.banned_domains, "evil.example")
    r.sadd(ks.banned_ips, "203.0.113.0/24")
    r.hset(ks.user("u1"), mapping={"created_at": "1700000000", "posts": "10", "spam_posts": "0"})
    yield s
    for key in r.scan_iter(match=f"{s.redis_prefix}*"):
        r.delete(key)
