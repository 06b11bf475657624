"""The embedded broker's CPU a message, topics in memory against topics kept on disk (Tansu's s3://
engine on modstream/stack/s3store.py, ``modstream stack up``'s default), and whether concurrent producers
lose records: ``python tools/perf/broker_storage.py``.

One broker per storage: 20,000 messages of 600 bytes produced at a steady pace into a topic of two
partitions, then read back by a consumer group that commits after every batch (the CPU of the
broker and of the S3 server over that, from /proc); then three producers writing 500 records each
into one partition at once, and how many distinct records a reader finds.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from modstream.stack import paths
from modstream.stack.local import HOST, S3_BUCKET, create_topics, free_ports, s3_env

MESSAGES = 20_000
STORAGES = ("memory", "disk")  # memory://, and s3:// on the project's S3 server


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_port(port: int) -> None:
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def concurrent(bootstrap: str, producers: int = 3, each: int = 500) -> int:
    """Distinct records read back after ``producers`` write ``each`` into one partition at once."""
    create_topics(bootstrap, {"together": 1})

    def produce(k: int) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        for i in range(each):
            producer.produce("together", value=f"{k}-{i}".encode())
            producer.poll(0)
        producer.flush(30)

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "together"})
    consumer.assign([TopicPartition("together", 0, 0)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 15
    while len(seen) < producers * each and time.monotonic() < deadline:
        if (m := consumer.poll(0.5)) is not None and m.error() is None:
            seen.add(m.value())
    consumer.close()
    return len(seen)


@contextmanager
def broker(storage: str, work: Path) -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    """One Tansu broker on ``storage`` ("memory", or "disk": s3:// on the project's S3 server in
    ``work``): its bootstrap, and its processes (the broker first) for their CPU."""
    kafka, s3 = free_ports(2)
    procs, env = [], dict(os.environ)
    if storage == "disk":
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "modstream.stack.s3store", "--dir", str(work), "--host", HOST, "--port", str(s3),
             "--bucket", S3_BUCKET]))  # fmt: skip
        wait_port(s3)
        env |= s3_env(f"http://{HOST}:{s3}")
    url = f"tcp://{HOST}:{kafka}"
    engine = f"s3://{S3_BUCKET}/" if storage == "disk" else "memory://tansu/"
    procs.insert(0, subprocess.Popen(
        [str(paths.tansu_bin()), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", engine], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
    try:
        wait_port(kafka)
        yield f"{HOST}:{kafka}", procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def run(storage: str, work: Path) -> dict[str, float]:
    with broker(storage, work) as (bootstrap, procs):
        create_topics(bootstrap, {"posts": 2})
        before = [cpu_s(p.pid) for p in procs]
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(MESSAGES):
            producer.produce("posts", value=b"x" * 600)
            if i % 200 == 0:
                producer.poll(0)
                time.sleep(0.002)
        producer.flush(60)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
        consumer.subscribe(["posts"])
        read, deadline = 0, time.monotonic() + 120
        while read < MESSAGES and time.monotonic() < deadline:
            batch = consumer.consume(500, 1.0)
            read += sum(m.error() is None for m in batch)
            if batch:
                consumer.commit(asynchronous=False)
        consumer.close()
        used = [cpu_s(p.pid) - b for p, b in zip(procs, before, strict=True)]
        return {
            "read": read,
            "broker_us": used[0] / MESSAGES * 1e6,
            "s3_us": sum(used[1:]) / MESSAGES * 1e6,
            "concurrent": concurrent(bootstrap),
        }


if __name__ == "__main__":
    for storage in STORAGES * 2:
        with tempfile.TemporaryDirectory() as tmp:
            r = run(storage, Path(tmp))
        print(f"{storage:>6}: {r['read']:.0f} read; CPU a message: broker {r['broker_us']:.1f} µs, "
              f"S3 server {r['s3_us']:.1f} µs; concurrent: {r['concurrent']:.0f} of 1500 kept")  # fmt: skip
