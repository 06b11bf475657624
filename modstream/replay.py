"""Replay posts into the input topic and collect every outcome: shared by the demo and the benchmark."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer

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

    verdicts: dict[str, Verdict] = field(default_factory=dict)
    dead_letters: set[str] = field(default_factory=set)
    arrived: dict[str, float] = field(default_factory=dict)  # key -> epoch seconds

    def latencies_ms(self, sent: dict[str, float]) -> list[float]:
        return [(t - sent[k]) * 1000 for k, t in self.arrived.items() if k in sent]

    def span_s(self, keys: Iterable[str]) -> float:
        times = [self.arrived[k] for k in keys if k in self.arrived]
        return max(times) - min(times) if len(times) > 1 else float("nan")


def produce_all(settings: Settings, records: Iterable[Record], rate: float | None = None) -> dict[str, float]:
    """Produce records (paced at ``rate`` per second when given); returns key -> produce time (epoch s)."""
    producer = Producer(settings.producer_conf())
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
                producer.produce(settings.input_topic, rec.value, rec.key.encode(), timestamp=int(sent[rec.key] * 1000))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(30):
        raise RuntimeError("could not deliver every input record within 30 s")
    return sent


class Collector:
    """Reads the verdict and dead-letter topics in a background thread."""

    def __init__(self, settings: Settings, group: str) -> None:
        self.settings = settings
        self.outcomes = Outcomes()
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                **settings.kafka_common(),
                "group.id": group,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": settings.session_timeout_ms,
                "enable.auto.commit": False,
            }
        )
        self._consumer.subscribe([settings.output_topic, settings.dlq_topic])
        self._thread = threading.Thread(target=self._run, name="collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        o = self.outcomes
        while not self._stop.is_set():
            for msg in self._consumer.consume(500, 0.2):
                if msg.error():
                    continue
                now = time.time()
                key = (msg.key() or b"").decode()
                if msg.topic() == self.settings.dlq_topic:
                    o.dead_letters.add(key)
                else:
                    o.verdicts[key] = Verdict.model_validate_json(msg.value() or b"")
                o.arrived.setdefault(key, now)
        self._consumer.close()

    def wait_for(self, keys: Sequence[str], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        wanted = set(keys)
        while time.monotonic() < deadline:
            if wanted <= (self.outcomes.verdicts.keys() | self.outcomes.dead_letters):
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
