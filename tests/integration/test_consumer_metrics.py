"""Consumer lag, rebalances and commit latency from a real consumer on the real broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from prometheus_client import REGISTRY

from modstream.stack.local import Endpoints, create_topics
from workers.adapters.kafka import KafkaSource
from workers.config import Settings
from workers.records import InMsg

pytestmark = pytest.mark.integration


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_lag_per_partition_rebalances_and_commit_latency(stack: Endpoints) -> None:
    run = uuid.uuid4().hex[:8]
    topic = f"lag-{run}"
    create_topics(stack.kafka_bootstrap, {topic: 2})
    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap})
    for i in range(40):
        producer.produce(topic, b"x", partition=i % 2)
    assert producer.flush(10) == 0
    settings = Settings(kafka_bootstrap=stack.kafka_bootstrap, group_id=f"lag-{run}", kafka_stats_interval_s=0.2)
    assigned, commits = sample("modstream_rebalances_total", kind="assign"), sample("modstream_commit_seconds_count")
    source = KafkaSource(settings.consumer_conf(), [topic])
    deadline = time.monotonic() + 30

    got: list[InMsg] = []

    def poll_until(done: Callable[[], bool], what: str) -> None:
        """Poll (which also serves statistics and commit callbacks) until ``done``."""
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            got.extend(source.poll_batch(5, 0.2))

    def lags() -> dict[str, float | None]:
        return {p: REGISTRY.get_sample_value("modstream_consumer_lag", {"topic": topic, "partition": p}) for p in "01"}

    try:
        poll_until(lambda: sample("modstream_rebalances_total", kind="assign") > assigned, "an assignment")
        poll_until(lambda: len(got) == 40, "every record")
        source.store_offsets({(m.topic, m.partition): m.offset + 1 for m in got})
        poll_until(lambda: sample("modstream_commit_seconds_count") > commits, "a commit")
        poll_until(lambda: lags() == {"0": 0, "1": 0}, f"no lag once all is committed (now {lags()})")
    finally:
        source.close()
