"""The publish stage times each delivered post by hop (``modstream_hop_seconds``)."""

import time

import pytest
from prometheus_client import REGISTRY

from tests.unit.fakes import FakeSink
from workers.kafka.delivery import DeadLetters
from workers.records import Failure, InMsg
from workers.stages import publish

HOPS = ("broker_in", "in_worker")


def sample(name: str, hop: str) -> float:
    return REGISTRY.get_sample_value(f"modstream_hop_seconds_{name}", {"hop": hop}) or 0.0


def test_each_delivered_post_is_timed_from_its_produce_to_the_poll_and_from_the_poll_to_delivery() -> None:
    # Produced a second ago, polled 0.2 s ago: 0.8 s in the broker, 0.2 s in the worker.
    produced_ms, polled = int((time.time() - 1.0) * 1000), time.monotonic() - 0.2
    msgs = [InMsg("posts", 0, i, None, b"{}", polled, produced_ms) for i in range(3)]
    before = {(n, h): sample(n, h) for n in ("count", "sum") for h in HOPS}
    publish.publish(
        [],
        [Failure(m, "ValidationError", "not a post") for m in msgs],
        FakeSink(),
        verdict_topic="verdicts",
        dlq=DeadLetters("dlq", "group", 1_000_000),
        timeout_s=1,
    )
    assert [sample("count", h) - before["count", h] for h in HOPS] == [3, 3]
    assert sample("sum", "broker_in") - before["sum", "broker_in"] == pytest.approx(3 * 0.8, abs=0.1)
    assert sample("sum", "in_worker") - before["sum", "in_worker"] == pytest.approx(3 * 0.2, abs=0.1)
