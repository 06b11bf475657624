"""confluent-kafka behind the Source and Sink protocols."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from workers.clients import DeliveryError, Headers
from workers.lag import REBALANCES, CommitTimer, LagExporter
from workers.records import InMsg

log = logging.getLogger(__name__)


def _commit_quietly(consumer: Consumer) -> None:
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:  # nothing stored since the last commit
            raise


class KafkaSource:
    def __init__(self, conf: dict[str, Any], topics: Sequence[str]) -> None:
        self.commits = CommitTimer()
        self._lag = LagExporter()
        # Both run inside poll, on the polling thread.
        conf = {**conf, "stats_cb": self._lag.export, "on_commit": self._on_commit}
        self._consumer = Consumer(conf)
        self._consumer.subscribe(list(topics), on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        failed = err is not None and err.code() != KafkaError._NO_OFFSET
        self.commits.committed(failed, {(p.topic, p.partition): p.offset for p in partitions if p.error is None})

    @staticmethod
    def _on_assign(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        REBALANCES.labels("assign").inc()
        log.info("partitions assigned: %s", [(p.topic, p.partition) for p in partitions])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Runs inside poll, between batches, so every stored offset is already settled:
        # commit them before another group member takes these partitions over.
        REBALANCES.labels("revoke").inc()
        log.info("partitions revoked: %s", [(p.topic, p.partition) for p in partitions])
        _commit_quietly(consumer)
        self.commits.forget([(p.topic, p.partition) for p in partitions])

    def poll_batch(self, max_size: int, max_wait_s: float) -> list[InMsg]:
        # Wait only for the first record, then take what has already arrived: an idle worker
        # answers at once, and under load batches grow by themselves while the last one runs.
        # (consume() alone would hold every batch open for the whole wait.)
        first = self._consumer.poll(max_wait_s)
        msgs: list[Message] = [] if first is None else [first, *self._consumer.consume(max_size - 1, 0)]
        now = time.monotonic()
        out = []
        for m in msgs:
            if err := m.error():
                if err.fatal():
                    raise KafkaException(err)
                log.warning("consumer error: %s", err)
                continue
            topic, partition, offset = m.topic(), m.partition(), m.offset()
            assert topic is not None and partition is not None and offset is not None  # set on non-error messages
            ts_type, ts = m.timestamp()
            out.append(InMsg(topic, partition, offset, m.key(), m.value(), now, ts if ts_type != 0 else None))
        return out

    def store_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        if not offsets:
            return
        try:
            self._consumer.store_offsets(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()])
            self.commits.stored(offsets)
        except KafkaException as exc:
            # A rebalance took these partitions while their batch was in flight: the new owner
            # resumes from the last commit and handles those records again (at-least-once).
            if exc.args[0].code() != KafkaError._STATE:
                raise
            log.warning("partitions revoked mid-batch, their records will be redelivered: %s", sorted(offsets))

    def close(self) -> None:
        _commit_quietly(self._consumer)
        self._consumer.close()


def _error(err: KafkaError) -> DeliveryError:
    return DeliveryError(err.name(), err.str())


class KafkaSink:
    def __init__(self, conf: dict[str, Any]) -> None:
        self._producer = Producer(conf)
        self._reports: dict[int, DeliveryError | None] = {}

    def produce(self, topic: str, key: bytes | None, value: bytes, headers: Headers, token: int) -> None:
        def report(err: KafkaError | None, _msg: Message) -> None:
            self._reports[token] = None if err is None else _error(err)

        while True:
            try:
                self._producer.produce(topic, value, key, headers=list(headers), on_delivery=report)
                return
            except BufferError:  # local queue full: serve delivery reports to make room
                self._producer.poll(0.05)
            except KafkaException as exc:  # refused before sending (too large, say): an error value
                self._reports[token] = _error(exc.args[0])
                return

    def check(self, timeout_s: float) -> None:
        """Raises unless a broker answers a metadata request within ``timeout_s``."""
        self._producer.list_topics(timeout=timeout_s)

    def flush(self, timeout_s: float) -> dict[int, DeliveryError | None]:
        self._producer.flush(timeout_s)
        reports, self._reports = self._reports, {}
        return reports
