"""confluent-kafka behind the Source and Sink protocols."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from workers.clients import DeliveryError, Headers
from workers.kafka.commit import Recovery, recovery
from workers.kafka.fetch_wait import FetchWait
from workers.kafka.lag import REBALANCES, CommitTimer, LagExporter
from workers.records import InMsg

log = logging.getLogger(__name__)


def _commit_quietly(consumer: Consumer) -> None:
    """Commit what is stored; a commit that fails (the broker restarting, the assignment lost)
    leaves those records for redelivery and never ends the worker (workers/kafka/commit.py)."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if recovery(exc, transactional=False) is not Recovery.NOTHING:
            log.warning("commit failed, the records since the last commit will be redelivered: %s", exc.args[0])


class KafkaSource:
    def __init__(
        self,
        conf: dict[str, Any],
        topics: Sequence[str],
        fetch_wait: FetchWait | None = None,
        on_assign: Callable[[], None] | None = None,
    ) -> None:
        """``fetch_wait`` adapts ``fetch.wait.max.ms`` to a broker that answers slowly (workers/kafka/fetch_wait.py);
        ``on_assign`` runs, inside poll, whenever partitions are assigned."""
        self._assigned_hook = on_assign
        self.commits = CommitTimer()
        self._lag_exporter = LagExporter()
        # Both run inside poll, on the polling thread.
        self._conf = {**conf, "stats_cb": self._lag_exporter.export, "on_commit": self._on_commit}
        self._topics, self._fetch_wait = list(topics), fetch_wait
        self._consumer = self._subscribe(self._conf)

    def _subscribe(self, conf: dict[str, Any]) -> Consumer:
        consumer = Consumer(conf)
        consumer.subscribe(self._topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
        return consumer

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        failed = err is not None and err.code() != KafkaError._NO_OFFSET
        self.commits.committed(failed, {(p.topic, p.partition): p.offset for p in partitions if p.error is None})

    # Under the cooperative protocol these see only the partitions that move, and confluent-kafka
    # applies them incrementally after the callback returns (eager: the whole assignment).
    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalanced()
        if not partitions:  # a cooperative rebalance that gave this member nothing new
            return
        REBALANCES.labels("assign").inc()
        log.info("partitions assigned: %s", [(p.topic, p.partition) for p in partitions])
        if self._assigned_hook is not None:
            self._assigned_hook()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Runs inside poll, between batches, so every stored offset is already settled:
        # commit them before another group member takes these partitions over.
        REBALANCES.labels("revoke").inc()
        self._rebalanced()
        log.info("partitions revoked: %s", [(p.topic, p.partition) for p in partitions])
        _commit_quietly(consumer)
        self.commits.forget([(p.topic, p.partition) for p in partitions])

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The group went on without this member (a broker restart, a missed session): another may
        # own these partitions already, so nothing is committed for them. The batches in flight
        # cannot store their offsets (store_offsets below), their records come again from the
        # last commit, and the consumer rejoins on its next poll.
        REBALANCES.labels("lost").inc()
        self._rebalanced()
        log.warning("partition assignment lost, rejoining: %s", [(p.topic, p.partition) for p in partitions])
        self.commits.forget([(p.topic, p.partition) for p in partitions])

    def _rebalanced(self) -> None:
        if self._fetch_wait is not None:
            self._fetch_wait.rebalanced()

    def poll_batch(self, max_size: int, max_wait_s: float) -> list[InMsg]:
        # Wait only for the first record, then take what has already arrived: an idle worker
        # answers at once, and under load batches grow by themselves while the last one runs.
        # (consume() alone would hold every batch open for the whole wait.)
        first = self._consumer.poll(max_wait_s)
        msgs: list[Message] = [] if first is None else [first, *self._consumer.consume(max_size - 1, 0)]
        now = time.monotonic()
        if self._fetch_wait is not None and (wait_s := self._fetch_wait.observe(bool(msgs), now, self._lag)):
            self._refetch(wait_s)
        out = []
        for m in msgs:
            if err := m.error():
                if err.fatal():  # fenced as a static member: this consumer is done, a new one rejoins
                    log.error("consumer failed (%s): joining the group again", err)
                    self.rejoin(commit=False)
                    return []
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

    def _lag(self) -> int | None:
        """Records waiting on the assigned partitions, from the position (or, before the first
        fetch, the committed offset) to the end; None while no partition is assigned, or while
        the broker cannot say (it is restarting: the next stall asks again)."""
        assigned = self._consumer.assignment()
        if not assigned:
            return None
        try:
            committed = {(tp.topic, tp.partition): tp.offset for tp in self._consumer.committed(assigned, timeout=5)}
            lag = 0
            for tp in self._consumer.position(assigned):
                low, high = self._consumer.get_watermark_offsets(tp, timeout=5)
                at = next((o for o in (tp.offset, committed[tp.topic, tp.partition]) if o >= 0), low)
                lag += max(0, high - at)
        except KafkaException as exc:
            log.warning("consumer lag unknown: %s", exc.args[0])
            return None
        return lag

    def _refetch(self, wait_s: float) -> None:
        """librdkafka fixes fetch.wait.max.ms per consumer: commit, leave, and join again with ``wait_s``."""
        log.warning(
            "fetch wait now %.0f ms (fetches came back empty with records waiting, or caught up)", wait_s * 1000
        )
        self._conf = {**self._conf, "fetch.wait.max.ms": round(wait_s * 1000)}
        self.rejoin()

    def rejoin(self, *, commit: bool = True) -> None:
        """Leave the group (committing what is stored, with ``commit``) and join again: the new
        consumer starts from the committed offsets."""
        self._close(commit)
        self._consumer = self._subscribe(self._conf)

    @property
    def consumer(self) -> Consumer:
        return self._consumer

    def close(self) -> None:
        self._close(commit=True)

    def _close(self, commit: bool) -> None:
        if commit:
            _commit_quietly(self._consumer)  # exactly-once stores nothing: there is nothing to commit
        try:
            self._consumer.close()
        except KafkaException as exc:  # the broker is away: the group drops this member at its session's end
            log.warning("consumer close: %s", exc.args[0])


def _error(err: KafkaError) -> DeliveryError:
    return DeliveryError(err.name(), err.str())


class KafkaSink:
    def __init__(self, conf: dict[str, Any]) -> None:
        self._conf = conf
        self._producer = Producer(conf)
        self._reports: dict[int, DeliveryError | None] = {}

    def replace(self) -> None:
        """A new producer in place of one that failed for good or hangs in a call; its delivery
        reports go to the batches given up, never to the new producer's. The old one is destroyed
        where its last reference goes: on a thread of its own (librdkafka's destroy waits for its
        broker threads), or on the thread of a call it hangs in, once that returns (if ever; a
        producer must not be closed under a call in progress)."""
        retired = [self._producer]
        self._producer, self._reports = Producer(self._conf), {}
        threading.Thread(target=retired.clear, name="retire-producer", daemon=True).start()

    def produce(self, topic: str, key: bytes | None, value: bytes, headers: Headers, token: int) -> None:
        reports = self._reports  # this batch's: a report that comes after its flush is not another batch's

        def report(err: KafkaError | None, _msg: Message) -> None:
            reports[token] = None if err is None else _error(err)

        while True:
            try:
                self._producer.produce(topic, value, key, headers=list(headers), on_delivery=report)
                return
            except BufferError:  # local queue full: serve delivery reports to make room
                self._producer.poll(0.05)
            except KafkaException as exc:  # refused before sending (too large, say): an error value
                reports[token] = _error(exc.args[0])
                return

    @property
    def producer(self) -> Producer:
        return self._producer

    def check(self, timeout_s: float) -> None:
        """Raises unless a broker answers a metadata request within ``timeout_s``."""
        self._producer.list_topics(timeout=timeout_s)

    def flush(self, timeout_s: float) -> dict[int, DeliveryError | None]:
        self._producer.flush(timeout_s)
        reports, self._reports = self._reports, {}
        return reports


class KafkaTransactions:
    """The sink's producer in transactions that also commit the source consumer's offsets; each
    call blocks up to ``timeout_s`` (the worker calls them through workers/kafka/commit.py's ``Guarded``)."""

    def __init__(self, sink: KafkaSink, source: KafkaSource, timeout_s: float) -> None:
        self._sink, self._source, self._timeout_s = sink, source, timeout_s

    def init(self) -> None:
        self._sink.producer.init_transactions(self._timeout_s)

    def begin(self) -> None:
        self._sink.producer.begin_transaction()

    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        producer = self._sink.producer
        if offsets:
            producer.send_offsets_to_transaction(
                [TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                self._source.consumer.consumer_group_metadata(),
                self._timeout_s,
            )
        producer.commit_transaction(self._timeout_s)

    def abort(self) -> None:
        self._sink.producer.abort_transaction(self._timeout_s)

    def replace(self) -> None:
        self._sink.replace()

    def rewind(self) -> None:
        consumer = self._source.consumer
        try:
            assigned = consumer.assignment()
            for tp in consumer.committed(assigned, timeout=self._timeout_s) if assigned else []:
                # Nothing committed yet: back to the start, as auto.offset.reset=earliest would.
                offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        except KafkaException as exc:
            # The broker cannot say (restarting) or the assignment went: a new consumer starts
            # from the committed offsets too.
            log.warning("cannot rewind (%s): joining the group again", exc.args[0])
            self._source.rejoin(commit=False)
