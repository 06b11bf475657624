"""Faults injected while posts are replayed, and what a reader of the outputs then sees.

Each scenario replays posts through a worker process on the embedded stack, injects its
fault, and counts per post: lost (no verdict, no dead letter), duplicate verdicts, duplicates
that decided differently, degraded verdicts, the worst time from a fault to the next output,
and how many times the worker was killed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from modstream.bench import worker_process
from modstream.replay import Collector, Outcomes, Record, produce_all
from modstream.stack import LocalStack, create_topics
from workers.config import Settings

# How long a fault may keep every output away before the scenario gives up waiting.
RECOVERY_DEADLINE_S = 120.0


@dataclass(frozen=True)
class Result:
    scenario: str
    posts: int
    lost: int
    duplicates: int
    disagreeing: int  # posts whose repeated verdicts decided differently
    degraded: int
    recovery_s: float | None  # the worst time from a fault to the next output; None without faults
    crashes: int


def until(check: Callable[[], bool], what: str, timeout_s: float = RECOVERY_DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.02)


def started(out: Outcomes, records: Sequence[Record]) -> bool:
    return any(r.key in out.arrived for r in records)


def next_output_s(collector: Collector, since: float) -> float:
    """Seconds from ``since`` (epoch) to the first output stamped after it."""
    stamps = collector.outcomes.stamps
    until(lambda: any(t > since for t in stamps[-500:]), "the first output after the fault")
    return min(t for t in stamps if t > since) - since


def tally(name: str, records: Sequence[Record], collector: Collector, recoveries: list[float], crashes: int) -> Result:
    out = collector.outcomes
    keys = {r.key for r in records}
    verdicts = {k: v for k, v in out.verdicts.items() if k in keys}
    return Result(
        scenario=name,
        posts=len(keys),
        lost=len(keys - verdicts.keys() - out.dead_letters),
        duplicates=out.duplicates,
        disagreeing=out.disagreeing,
        degraded=sum(v.degraded for v in verdicts.values()),
        recovery_s=round(max(recoveries), 2) if recoveries else None,
        crashes=crashes,
    )


def kill_workers(
    name: str, s: Settings, records: Sequence[Record], kills: int, log: Path, settle_s: float = 3.0
) -> Result:
    """Replay ``records`` in ``kills + 1`` slices; kill -9 the worker as soon as each of the first
    ``kills`` slices starts coming out, and start it again at once."""
    create_topics(s.kafka_bootstrap, {s.input_topic: 2, s.output_topic: 2, s.dlq_topic: 1})
    collector = Collector(s, f"chaos-{s.group_id}")
    out = collector.outcomes
    slices = [records[i :: kills + 1] for i in range(kills + 1)]
    recoveries: list[float] = []
    try:
        with contextlib.ExitStack() as workers:
            proc = workers.enter_context(worker_process(s, log))
            produce_all(s, slices[0])
            for i in range(kills):
                until(partial(started, out, slices[i]), f"slice {i} to come out")
                killed_at = time.time()
                proc.kill()
                proc.wait()
                proc = workers.enter_context(worker_process(s, log))
                produce_all(s, slices[i + 1])
                recoveries.append(next_output_s(collector, killed_at))
            collector.wait_for([r.key for r in records], RECOVERY_DEADLINE_S)
            time.sleep(settle_s)  # any redelivery still on its way lands now
    finally:
        collector.close()
    return tally(name, records, collector, recoveries, kills)


def hides_aborted_records(bootstrap: str, topic: str, timeout_s: float = 10.0) -> bool:
    """Whether the broker keeps an aborted transaction's records from read_committed readers
    (Apache Kafka does; Tansu 0.6 sends no aborted-transactions index, so its readers see them)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"probe-{topic}"})
    producer.init_transactions(timeout_s)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.flush(timeout_s)
    producer.abort_transaction(timeout_s)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(timeout_s)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"probe-{topic}", "isolation.level": "read_committed"}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen: list[bytes | None] = []
    deadline = time.monotonic() + timeout_s
    try:
        while b"committed" not in seen and time.monotonic() < deadline:
            if (msg := consumer.poll(0.2)) is not None and not msg.error():
                seen.append(msg.value())
    finally:
        consumer.close()
    return b"aborted" not in seen


def restart_broker(
    name: str, stack: LocalStack, s: Settings, records: Sequence[Record], log: Path, settle_s: float = 3.0
) -> Result:
    """Replay half of ``records``; once they come out, kill -9 the broker and start it again on
    its storage (durable: S3), then replay the rest."""
    create_topics(s.kafka_bootstrap, {s.input_topic: 2, s.output_topic: 2, s.dlq_topic: 1})
    # The reader waits longer per fetch than the worker: it must not stall on the broker itself.
    collector = Collector(s, f"chaos-{s.group_id}", fetch_wait_s=0.5)
    half = len(records) // 2
    try:
        with worker_process(s, log):
            # Paced, as a live stream writes: many small produce requests, each an object to read back.
            produce_all(s, records[:half], rate=200)
            until(partial(started, collector.outcomes, records[:half]), "the first half to come out")
            stopped = stack.restart("kafka")
            produce_all(s, records[half:], rate=200)
            recovery = next_output_s(collector, stopped)
            collector.wait_for([r.key for r in records], RECOVERY_DEADLINE_S)
            time.sleep(settle_s)
    finally:
        collector.close()
    return tally(name, records, collector, [recovery], 0)
