"""Consumer lag, rebalances, commit latency and readiness: the metrics a scaler and an operator watch.

librdkafka reports statistics as JSON every ``statistics.interval.ms`` (from poll, on the
worker's thread); :func:`export` parses them into :class:`Statistics` (only the fields used
here; the rest of the document is ignored) and sets ``modstream_consumer_lag`` per assigned
partition. These live apart from workers/metrics.py because that module is part of the
training code's content key, and none of this changes a model.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workers.errors import describe

log = logging.getLogger(__name__)

CONSUMER_LAG = Gauge(
    "modstream_consumer_lag", "Records behind the partition's high watermark (librdkafka)", ["topic", "partition"]
)
REBALANCES = Counter("modstream_rebalances_total", "Partition assignments and revocations this worker saw", ["kind"])
COMMIT_SECONDS = Histogram(
    "modstream_commit_seconds",
    "From offsets stored (outputs acknowledged) to the broker acknowledging their commit",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
COMMIT_ERRORS = Counter("modstream_commit_errors_total", "Offset commits the broker refused or that timed out")
READY = Gauge("modstream_ready", "1 while the worker has its dependencies and consumes; 0 while starting or draining")
GROUP_STATE_UP = Gauge("modstream_consumer_group_up", "1 while librdkafka reports the consumer group state 'up'")

# librdkafka's internal "unassigned" partition, and its value for an unknown lag.
_UNASSIGNED = "-1"
_UNKNOWN = -1


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class PartitionStatistics(_Model):
    partition: int
    consumer_lag: int = _UNKNOWN  # -1 until both the committed/stored offset and the watermark are known
    committed_offset: int = _UNKNOWN


class TopicStatistics(_Model):
    partitions: dict[str, PartitionStatistics] = Field(default_factory=dict)


class GroupStatistics(_Model):
    state: str  # "up" once joined and assigned
    rebalance_cnt: int = 0
    assignment_size: int = 0


class Statistics(_Model):
    """The part of librdkafka's STATISTICS.md document this worker exports."""

    name: str
    topics: dict[str, TopicStatistics] = Field(default_factory=dict)
    cgrp: GroupStatistics | None = None

    def lags(self) -> dict[tuple[str, int], int]:
        """``(topic, partition) -> lag`` for every assigned partition whose lag is known."""
        return {
            (topic, p.partition): p.consumer_lag
            for topic, t in self.topics.items()
            for key, p in t.partitions.items()
            if key != _UNASSIGNED and p.consumer_lag != _UNKNOWN
        }


class LagExporter:
    """Keeps ``modstream_consumer_lag`` to the partitions this worker has now: a revoked
    partition's series is removed, so a sum over workers counts each partition once."""

    def __init__(self) -> None:
        self._shown: set[tuple[str, str]] = set()

    def export(self, raw: str) -> Statistics | None:
        """Called by librdkafka inside poll: an exception here would surface from poll and stop
        the worker, so a document this model cannot read is logged and skipped."""
        try:
            stats = Statistics.model_validate_json(raw)
        except ValidationError as exc:
            log.warning("unreadable librdkafka statistics, lag not updated: %s", describe(exc))
            return None
        shown = {(topic, str(partition)): lag for (topic, partition), lag in stats.lags().items()}
        for labels in self._shown - shown.keys():
            CONSUMER_LAG.remove(*labels)
        for labels, lag in shown.items():
            CONSUMER_LAG.labels(*labels).set(lag)
        self._shown = set(shown)
        GROUP_STATE_UP.set(stats.cgrp is not None and stats.cgrp.state == "up")
        return stats


class CommitTimer:
    """Times each stored offset until a commit covering it is acknowledged (librdkafka's
    ``on_commit``, auto-commits included): what a crash at that moment would redeliver."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._stored: dict[tuple[str, int], list[tuple[int, float]]] = {}
        # Offsets are stored from the event loop; commits are reported inside poll, on its thread.
        self._lock = threading.Lock()

    def stored(self, offsets: dict[tuple[str, int], int]) -> None:
        now = self._clock()
        with self._lock:
            for tp, offset in offsets.items():
                self._stored.setdefault(tp, []).append((offset, now))

    def committed(self, failed: bool, offsets: dict[tuple[str, int], int]) -> None:
        if failed:
            COMMIT_ERRORS.inc()
            return
        now = self._clock()
        with self._lock:
            for tp, offset in offsets.items():
                pending = self._stored.get(tp, [])
                for o, t in pending:
                    if o <= offset:
                        COMMIT_SECONDS.observe(now - t)
                self._stored[tp] = [(o, t) for o, t in pending if o > offset]

    def forget(self, partitions: list[tuple[str, int]]) -> None:
        """Partitions revoked: their stored offsets are now another worker's to commit."""
        with self._lock:
            for tp in partitions:
                self._stored.pop(tp, None)
