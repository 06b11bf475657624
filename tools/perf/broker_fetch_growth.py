"""The embedded broker's CPU as its topic grows, with and without a reader
(docs/journal/2026-12-07-tansu-fetch-lists-the-log.md).

Usage: ``python tools/perf/broker_fetch_growth.py [RATE] [SECONDS] [STORAGE] [OUT]`` (580 posts/s,
60 s, ``memory``, the working directory). Tansu 0.6 on ``memory://`` (the bench's) or ``disk``
(``stack up``'s s3:// on the project's S3 server, whose CPU is counted with the broker's). 600-byte
records with distinct keys, paced at RATE into four partitions by a producer with the worker's
settings, for SECONDS; once with nobody reading, once with one consumer of the worker's settings
(its fetch wait) reading as they come. Every 5 s: the records in the topic and the broker's cores
over the window. A line a window and ``broker_fetch_growth.png`` in OUT.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from broker_storage import STORAGES, broker, cpu_s
from confluent_kafka import Consumer, Producer

from modstream.stack.local import create_topics
from workers.config import Settings

WINDOW_S = 5.0
VALUE = b"x" * 600  # about a post event's size
READERS = {"nobody reading": False, "one consumer reading": True}


def read_all(s: Settings, stop: threading.Event, counted: list[int]) -> None:
    consumer = Consumer({**s.consumer_conf("growth"), "enable.auto.commit": False})
    consumer.subscribe([s.input_topic])
    try:
        while not stop.is_set():
            counted[0] += sum(m.error() is None for m in consumer.consume(500, 0.1))
    finally:
        consumer.close()


def phase(rate: float, seconds: float, storage: str, reader: bool) -> list[tuple[int, float]]:
    """(records in the topic, broker cores) for each window of a paced run."""
    with tempfile.TemporaryDirectory() as tmp, broker(storage, Path(tmp)) as (bootstrap, procs):
        s = Settings(kafka_bootstrap=bootstrap, input_topic="posts")
        create_topics(bootstrap, {s.input_topic: 4})
        stop, counted = threading.Event(), [0]
        thread = threading.Thread(target=read_all, args=(s, stop, counted)) if reader else None
        if thread:
            thread.start()
        producer = Producer(s.producer_conf())
        windows, start = [], time.monotonic()
        mark, used = start, sum(cpu_s(p.pid) for p in procs)
        try:
            for i in range(int(rate * seconds)):
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
                producer.produce(s.input_topic, key=str(i).encode(), value=VALUE)
                producer.poll(0)
                if (now := time.monotonic()) - mark >= WINDOW_S:
                    cpu = sum(cpu_s(p.pid) for p in procs)
                    windows.append((i + 1, (cpu - used) / (now - mark)))
                    print(f"  {'read' if reader else 'alone'}: {i + 1:>7,} records  broker {windows[-1][1]:.3f} cores"
                          + (f"  ({counted[0]:,} read)" if reader else ""), flush=True)  # fmt: skip
                    mark, used = now, cpu
            producer.flush(30)
        finally:
            stop.set()
            if thread:
                thread.join()
        return windows


def main() -> None:
    rate = float(sys.argv[1]) if len(sys.argv) > 1 else 580.0
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    storage = sys.argv[3] if len(sys.argv) > 3 else "memory"
    if storage not in STORAGES:
        sys.exit(f"STORAGE must be one of {', '.join(STORAGES)}, not {storage!r}")
    out = Path(sys.argv[4]) if len(sys.argv) > 4 else Path()
    runs = {label: phase(rate, seconds, storage, reader) for label, reader in READERS.items()}
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, windows in runs.items():
        ax.plot([n for n, _ in windows], [c for _, c in windows], marker="o", label=label)
    ax.set(xlabel="records in the topic (4 partitions)", ylabel="broker CPU (cores)",
           title=f"Tansu on {storage}, {rate:.0f} records/s of 600 bytes")  # fmt: skip
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "broker_fetch_growth.png", dpi=110)
    print(f"wrote {out / 'broker_fetch_growth.png'}")


if __name__ == "__main__":
    main()
