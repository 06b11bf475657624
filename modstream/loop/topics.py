"""Read a bounded range of a topic: by record time or by offsets, up to what it held when asked.

The learning-loop commands (dataset build, replay, shadow-report) read history, not a
live stream: partitions are assigned directly (no consumer group, nothing committed) and
reading stops where each partition ended when it was reached.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from modstream.loop.config import Reading
from workers.records import InMsg


class RangeError(ValueError):
    """A range that cannot be read; the message is one line."""


@dataclass(frozen=True)
class Range:
    """Records with ``from_time <= timestamp < to_time``, or from ``from_offsets`` (partition -> offset,
    the partitions not named from their start); neither bound means the whole topic."""

    from_time: datetime | None = None
    to_time: datetime | None = None
    from_offsets: dict[int, int] | None = None

    def __post_init__(self) -> None:
        if self.from_offsets is not None and (self.from_time or self.to_time):
            raise RangeError("give a time range or offsets, not both")
        if self.from_time and self.to_time and self.to_time <= self.from_time:
            raise RangeError(f"the range is empty: --to-time {self.to_time} is not after --from-time {self.from_time}")

    @staticmethod
    def parse_offsets(text: str) -> dict[int, int]:
        """``"0:120,1:98"`` -> ``{0: 120, 1: 98}``."""
        try:
            pairs = (item.split(":") for item in text.split(",") if item.strip())
            return {int(p): int(o) for p, o in pairs}
        except ValueError:
            raise RangeError(f"--from-offsets {text!r}: expected PARTITION:OFFSET[,PARTITION:OFFSET...]") from None

    def after(self) -> Range:
        """Everything from this range's start on: where labels for its posts can be."""
        return Range(from_time=self.from_time)

    def _ms(self, t: datetime | None, default: int) -> int:
        return default if t is None else int(t.timestamp() * 1000)

    def contains(self, timestamp_ms: int) -> bool:
        return self._ms(self.from_time, -(2**62)) <= timestamp_ms < self._ms(self.to_time, 2**62)


def parse_range(from_time: str | None, to_time: str | None, from_offsets: str | None) -> Range:
    """The range the command-line options name: ISO times (UTC when they name no zone) or
    ``PARTITION:OFFSET[,...]``; :class:`RangeError` (one line) when they are not."""
    offsets = None if from_offsets is None else Range.parse_offsets(from_offsets)
    return Range(_when(from_time), _when(to_time), offsets)


def _when(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise RangeError(f"{text!r} is not an ISO time (e.g. 2026-11-23T10:00:00Z)") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def read_range(settings: Reading, topic: str, rng: Range, timeout_s: float = 30.0) -> list[InMsg]:
    """Every record of ``topic`` in ``rng``, partition by partition in offset order."""
    consumer = Consumer(
        {
            **settings.consumer_conf(f"modstream-reader-{uuid.uuid4().hex[:8]}"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise RangeError(f"topic {topic!r} does not exist on {settings.kafka_bootstrap}")
        starts = {p: (rng.from_offsets or {}).get(p, OFFSET_BEGINNING) for p in sorted(meta.partitions)}
        if rng.from_time is not None:
            asked = [TopicPartition(topic, p, int(rng.from_time.timestamp() * 1000)) for p in starts]
            starts = {tp.partition: tp.offset for tp in consumer.offsets_for_times(asked, timeout=timeout_s)}
        todo = {p for p, offset in starts.items() if offset != OFFSET_END}  # END: nothing that recent
        if not todo:
            return []
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in todo])
        out: list[InMsg] = []
        deadline = time.monotonic() + timeout_s
        # Until each partition reports its end. (Not up to a watermark asked for up front: Tansu
        # answers ListOffsets "latest" with 1 on a partition of many records.)
        while todo:
            if time.monotonic() > deadline:
                raise RangeError(f"reading {topic!r} stalled: partitions {sorted(todo)} not read to their end")
            for m in consumer.consume(1000, 0.5):
                p = m.partition()
                assert p is not None
                if err := m.error():
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(err)
                    todo.discard(p)
                    continue
                offset = m.offset()
                assert offset is not None
                ts_type, ts = m.timestamp()
                if rng.contains(ts):
                    out.append(InMsg(topic, p, offset, m.key(), m.value(), 0.0, ts if ts_type else None))
                deadline = time.monotonic() + timeout_s
        return sorted(out, key=lambda m: (m.partition, m.offset))
    except KafkaException as exc:
        raise RangeError(f"cannot read {topic!r}: {exc.args[0].str()}") from None
    finally:
        consumer.close()
