"""Consumer lag from librdkafka statistics, commit latency, and the ``modstream health`` report."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client import REGISTRY
from typer.testing import CliRunner

import workers.health
from modstream.cli import app
from workers.health import Check, _run
from workers.kafka.lag import CommitTimer, LagExporter, Statistics


def stats(lags: dict[int, int], state: str = "up") -> str:
    """A librdkafka statistics document, trimmed to what matters plus fields that must be ignored."""
    partitions = {str(p): {"partition": p, "consumer_lag": lag, "fetchq_cnt": 3} for p, lag in lags.items()}
    partitions["-1"] = {"partition": -1, "consumer_lag": -1}  # librdkafka's internal UA partition
    doc = {
        "name": "rdkafka#consumer-1",
        "type": "consumer",
        "brokers": {"b:9092/1": {"rtt": {"avg": 1200}}},
        "topics": {"posts": {"topic": "posts", "partitions": partitions}},
        "cgrp": {"state": state, "join_state": "steady", "rebalance_cnt": 2, "assignment_size": len(lags)},
    }
    return json.dumps(doc)


def lag(partition: int) -> float | None:
    return REGISTRY.get_sample_value("modstream_consumer_lag", {"topic": "posts", "partition": str(partition)})


def test_statistics_keep_assigned_partitions_with_a_known_lag() -> None:
    parsed = Statistics.model_validate_json(stats({0: 5, 1: -1, 2: 0}))
    assert parsed.lags() == {("posts", 0): 5, ("posts", 2): 0}
    assert parsed.cgrp is not None and parsed.cgrp.rebalance_cnt == 2


def test_a_revoked_partition_stops_being_exported() -> None:
    exporter = LagExporter()
    exporter.export(stats({0: 7, 1: 3}))
    assert (lag(0), lag(1)) == (7, 3)
    assert REGISTRY.get_sample_value("modstream_consumer_group_up") == 1
    exporter.export(stats({1: 4}, state="wait-join"))
    assert (lag(0), lag(1)) == (None, 4)
    assert REGISTRY.get_sample_value("modstream_consumer_group_up") == 0


def test_unreadable_statistics_are_skipped_not_raised_into_poll() -> None:
    exporter = LagExporter()
    exporter.export(stats({0: 7}))
    assert exporter.export("{not json") is None and exporter.export('{"topics": 3}') is None
    assert lag(0) == 7  # the last good reading stands


def test_commit_latency_runs_from_store_to_the_commit_that_covers_it() -> None:
    now = [10.0]
    timer = CommitTimer(lambda: now[0])
    before = REGISTRY.get_sample_value("modstream_commit_seconds_sum") or 0.0
    count = REGISTRY.get_sample_value("modstream_commit_seconds_count") or 0.0
    timer.stored({("posts", 0): 100})
    now[0] = 10.5
    timer.stored({("posts", 0): 200, ("posts", 1): 50})
    now[0] = 11.0
    timer.committed(False, {("posts", 0): 100})  # covers the first store only
    timer.forget([("posts", 1)])  # revoked: not this worker's to commit any more
    timer.committed(False, {("posts", 0): 200, ("posts", 1): 50})
    assert REGISTRY.get_sample_value("modstream_commit_seconds_count") == count + 2
    assert REGISTRY.get_sample_value("modstream_commit_seconds_sum") == pytest.approx(before + 1.0 + 0.5)


async def test_a_probe_fails_with_one_line_on_error_or_deadline() -> None:
    async def hangs() -> str:
        await asyncio.sleep(10)
        return "never"

    async def breaks() -> str:
        raise ConnectionError("connection refused\nsecond line")

    async def answers() -> str:
        return "PONG"

    slow, broken, fine = await asyncio.gather(
        _run("triton", hangs, 0.05), _run("redis", breaks, 1), _run("redis", answers, 1)
    )
    assert not slow.ok and "within 0.05s" in slow.detail
    assert not broken.ok and "\n" not in str(broken) and "connection refused" in broken.detail
    assert fine.ok and str(fine).startswith("redis    ok")


@pytest.mark.parametrize(("oks", "code"), [((True, True), 0), ((True, False), 1)])
def test_health_exits_zero_only_when_every_check_passes(
    monkeypatch: pytest.MonkeyPatch, oks: tuple[bool, bool], code: int
) -> None:
    async def check(_settings: object, _timeout_s: float, models: bool) -> list[Check]:
        assert models is False
        return [Check(name, ok, "detail", 0.001) for name, ok in zip(("kafka", "redis"), oks, strict=True)]

    monkeypatch.setattr(workers.health, "check", check)
    result = CliRunner().invoke(app, ["health", "--no-models"])
    assert result.exit_code == code
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["kafka", "redis"]
