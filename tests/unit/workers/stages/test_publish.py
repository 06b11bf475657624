"""The publish stage times each delivered post by hop (``modstream_hop_seconds``) and counts it by outcome."""

import time

import pytest
from prometheus_client import REGISTRY

from tests.unit.fakes import FakeSink, event
from workers.kafka.delivery import DeadLetters
from workers.records import Failure, InMsg, verdict_for
from workers.stages import publish, validate

HOPS = ("broker_in", "in_worker")


def sample(name: str, hop: str) -> float:
    return REGISTRY.get_sample_value(f"modstream_hop_seconds_{name}", {"hop": hop}) or 0.0


def test_each_delivered_post_is_timed_from_its_produce_to_the_poll_and_from_the_poll_to_delivery() -> None:
    # Produced a second ago, polled 0.2 s ago: 0.8 s in the broker, 0.2 s in the worker (and however
    # long this test takes to reach the delivery: a loaded host can hold it for tens of ms).
    start = time.monotonic()
    produced_ms, polled = int((time.time() - 1.0) * 1000), start - 0.2
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
    took = time.monotonic() - start
    assert 3 * 0.2 <= sample("sum", "in_worker") - before["sum", "in_worker"] <= 3 * (0.2 + took)


def test_each_delivered_record_is_counted_by_its_outcome() -> None:
    msgs = [InMsg("posts", 0, i, None, event(f"p{i}"), time.monotonic()) for i in range(4)]
    posts, _ = validate.validate(msgs[:3])
    decided = [("allow", 0.1), ("block", 0.9), ("allow", 0.2)]
    outcomes = [
        verdict_for(p, decision=d, score=s, reasons=[], stage_scores={}, model_versions={}, degraded=False)
        for p, (d, s) in zip(posts, decided, strict=True)
    ]
    outcomes_of = ("allow", "block", "review", "dead_letter")
    before = {o: REGISTRY.get_sample_value("modstream_records_total", {"outcome": o}) or 0.0 for o in outcomes_of}
    publish.publish(
        outcomes,
        [Failure(msgs[3], "ValidationError", "not a post")],
        FakeSink(),
        verdict_topic="verdicts",
        dlq=DeadLetters("dlq", "group", 1_000_000),
        timeout_s=1,
    )
    after = {o: REGISTRY.get_sample_value("modstream_records_total", {"outcome": o}) or 0.0 for o in outcomes_of}
    assert {o: after[o] - before[o] for o in outcomes_of} == {"allow": 2, "block": 1, "review": 0, "dead_letter": 1}
