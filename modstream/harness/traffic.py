"""Replay posts into the input topic and collect every outcome: shared by the demo and the benchmark."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, Producer

from schemas import Verdict
from workers.config import Settings


@dataclass(frozen=True)
class Record:
    key: str
    value: bytes
    label: int | None  # 1 spam, 0 ham, None for malformed input


@dataclass
class Outcomes:
    """Every verdict and dead letter seen, by input key, with arrival times."""

    raw_verdicts: dict[str, bytes] = field(default_factory=dict)  # the first verdict read for each key
    repeats: dict[str, list[bytes]] = field(default_factory=dict)  # any later verdicts for the same key
    dead_letters: set[str] = field(default_factory=set)
    arrived: dict[str, float] = field(default_factory=dict)  # key -> epoch seconds, when read here
    published: dict[str, float] = field(default_factory=dict)  # key -> epoch seconds, the output's timestamp
    stamps: list[float] = field(default_factory=list)  # every output's timestamp, repeats included

    @property
    def verdicts(self) -> dict[str, Verdict]:
        # Parsed on demand: the collector shares the CPU with what it measures.
        return {k: Verdict.model_validate_json(v) for k, v in self.raw_verdicts.items()}

    @property
    def duplicates(self) -> int:
        return sum(len(v) for v in self.repeats.values())

    @property
    def disagreeing(self) -> int:
        """Keys whose repeated verdicts decided differently from the first."""
        first = {k: Verdict.model_validate_json(self.raw_verdicts[k]).decision for k in self.repeats}
        return sum(
            any(Verdict.model_validate_json(v).decision != first[k] for v in vs) for k, vs in self.repeats.items()
        )

    def latencies_ms(self, sent: dict[str, float]) -> list[float]:
        return [(t - sent[k]) * 1000 for k, t in self.arrived.items() if k in sent]

    def span_s(self, keys: Iterable[str]) -> float:
        times = [self.arrived[k] for k in keys if k in self.arrived]
        return max(times) - min(times) if len(times) > 1 else float("nan")


def produce_all(
    settings: Settings,
    records: Iterable[Record],
    rate: float | None = None,
    producer: Producer | None = None,
    topic: str | None = None,
) -> dict[str, float]:
    """Produce records to ``topic`` (default: the input topic), paced at ``rate`` per second when
    given; returns key -> produce time (epoch s).

    Pass a ``producer`` that has already delivered once to keep its start-up (metadata,
    producer id) out of the measured latencies.
    """
    producer = producer or Producer(settings.producer_conf())
    sent: dict[str, float] = {}
    start = time.perf_counter()
    for i, rec in enumerate(records):
        if rate is not None:
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        sent[rec.key] = time.time()
        while True:
            try:
                producer.produce(
                    topic or settings.input_topic, rec.value, rec.key.encode(), timestamp=int(sent[rec.key] * 1000)
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(30):
        raise RuntimeError("could not deliver every input record within 30 s")
    return sent


class Collector:
    """Reads the verdict and dead-letter topics in a background thread."""

    def __init__(self, settings: Settings, group: str, fetch_wait_s: float | None = None) -> None:
        """``fetch_wait_s`` overrides the settings' for this reader: a throughput measurement reads
        ``published`` times and can poll less often, leaving the CPU to what it measures."""
        self.settings = settings
        reader = settings if fetch_wait_s is None else settings.model_copy(update={"fetch_wait_max_s": fetch_wait_s})
        self.outcomes = Outcomes()
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                **reader.consumer_conf(),
                "group.id": group,
                "enable.auto.commit": False,
            }
        )
        self._consumer.subscribe([settings.output_topic, settings.dlq_topic])
        self._thread = threading.Thread(target=self._run, name="collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        o = self.outcomes
        while not self._stop.is_set():
            # A short wait: consume() returns only when the count or the wait is reached,
            # and arrival times are taken after it returns.
            for msg in self._consumer.consume(500, 0.005):
                if msg.error():
                    continue
                now = time.time()
                key = (msg.key() or b"").decode()
                if msg.topic() == self.settings.dlq_topic:
                    o.dead_letters.add(key)
                elif key in o.raw_verdicts:
                    o.repeats.setdefault(key, []).append(msg.value() or b"")
                else:
                    o.raw_verdicts[key] = msg.value() or b""
                o.arrived.setdefault(key, now)
                ts_type, ts = msg.timestamp()
                o.stamps.append(ts / 1000 if ts_type != TIMESTAMP_NOT_AVAILABLE else now)
                o.published.setdefault(key, o.stamps[-1])
        self._consumer.close()

    def wait_for(self, keys: Sequence[str], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        wanted = set(keys)
        while time.monotonic() < deadline:
            if wanted <= (self.outcomes.raw_verdicts.keys() | self.outcomes.dead_letters):
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
