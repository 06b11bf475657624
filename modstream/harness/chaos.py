"""Faults injected while posts are replayed, and what a reader of the outputs then sees.

Each scenario replays posts through a worker process on the embedded stack, injects its
fault, and counts per post: lost (no verdict, no dead letter), duplicate verdicts, duplicates
that decided differently, degraded verdicts, the worst and the median time from a fault to
the next output, and how many times the worker was killed.
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import redis
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from rich.console import Console

from modstream.harness.bench import worker_env, worker_process
from modstream.harness.traffic import Collector, Outcomes, Record, produce_all
from modstream.serving.triton_repo import build_repo
from modstream.stack.local import EMBEDDED_SESSION_TIMEOUT_S, Endpoints, LocalStack, S3Standin, create_topics
from schemas import FeedbackEvent
from workers.config import Settings
from workers.state.keyspace import Keyspace
from workers.state.reputation import plan

# How long a fault may keep every output away before the scenario gives up waiting.
RECOVERY_DEADLINE_S = 120.0
# Weighted reports are floats, which Redis sums in another order than the truth's: a counter
# within this much of its truth agrees.
COUNT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Result:
    scenario: str
    posts: int
    lost: int
    duplicates: int
    disagreeing: int  # posts whose repeated verdicts decided differently
    degraded: int
    recovery_s: float | None  # the worst time from a fault to the next output; None without faults
    recovery_p50_s: float | None  # the median over the scenario's faults
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


def recovery(seconds: Sequence[float]) -> tuple[float | None, float | None]:
    """The worst and the median time to recover, over a scenario's faults."""
    if not seconds:
        return None, None
    return round(max(seconds), 2), round(statistics.median(seconds), 2)


def tally(name: str, records: Sequence[Record], collector: Collector, recoveries: list[float], crashes: int) -> Result:
    out = collector.outcomes
    keys = {r.key for r in records}
    verdicts = {k: v for k, v in out.verdicts.items() if k in keys}
    worst, p50 = recovery(recoveries)
    return Result(
        scenario=name,
        posts=len(keys),
        lost=len(keys - verdicts.keys() - out.dead_letters),
        duplicates=out.duplicates,
        disagreeing=out.disagreeing,
        degraded=sum(v.degraded for v in verdicts.values()),
        recovery_s=worst,
        recovery_p50_s=p50,
        crashes=crashes,
    )


def kill_workers(
    name: str,
    s: Settings,
    records: Sequence[Record],
    kills: int,
    log: Path,
    settle_s: float = 3.0,
    incarnation: Callable[[int], Settings] | None = None,
) -> Result:
    """Replay ``records`` in ``kills + 1`` slices; kill -9 the worker as soon as each of the first
    ``kills`` slices starts coming out, and start it again at once: the n-th process with
    ``incarnation(n)``'s settings (``s`` for all when None)."""
    create_topics(s.kafka_bootstrap, {s.input_topic: 2, s.output_topic: 2, s.dlq_topic: 1})
    collector = Collector(s, f"chaos-{s.group_id}")
    out = collector.outcomes
    slices = [records[i :: kills + 1] for i in range(kills + 1)]
    recoveries: list[float] = []
    settings = incarnation or (lambda _: s)
    try:
        with contextlib.ExitStack() as workers:
            proc = workers.enter_context(worker_process(settings(0), log))
            produce_all(s, slices[0])
            for i in range(kills):
                until(partial(started, out, slices[i]), f"slice {i} to come out")
                killed_at = time.time()
                proc.kill()
                proc.wait()
                proc = workers.enter_context(worker_process(settings(i + 1), log))
                produce_all(s, slices[i + 1])
                recoveries.append(next_output_s(collector, killed_at))
            collector.wait_for([r.key for r in records], RECOVERY_DEADLINE_S)
            time.sleep(settle_s)  # any redelivery still on its way lands now
    finally:
        collector.close()
    return tally(name, records, collector, recoveries, kills)


def kill_feedback(
    name: str,
    env: dict[str, str],
    events: Sequence[bytes],
    truth: Mapping[tuple[str, str], float],
    kills: int,
    log: Path,
    settle_s: float = 3.0,
) -> Result:
    """Replay feedback ``events`` in ``kills + 1`` slices through a feedback worker run with
    ``env``, kill -9 it once each of the first slices starts being counted, and compare the
    Redis counters with ``truth`` ((key, field) -> amount): ``lost`` counts increments missing,
    ``duplicates`` increments counted twice (a report's weight, under 1, as one), ``disagreeing``
    counters that are off."""
    client = redis.Redis.from_url(env["MODSTREAM_REDIS_URL"], decode_responses=True, socket_timeout=5)
    producer = Producer({"bootstrap.servers": env["MODSTREAM_KAFKA_BOOTSTRAP"]})
    topic, total = env["MODSTREAM_FEEDBACK_TOPIC"], sum(truth.values())

    def counts() -> dict[tuple[str, str], float]:
        return {(key, f): float(client.hget(key, f) or 0) for key, f in truth}

    def counted() -> float:
        return sum(counts().values())

    def produce(part: Sequence[bytes]) -> None:
        for value in part:
            producer.produce(topic, value)
        if producer.flush(30):
            raise RuntimeError("could not deliver the feedback events")

    def start() -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            cmd = [sys.executable, "-m", "modstream.cli", "feedback", "--log-level", "WARNING"]
            return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)

    slices = [events[i :: kills + 1] for i in range(kills + 1)]
    recoveries = []
    proc = start()
    try:
        produce(slices[0])
        for i in range(kills):
            before = counted()
            until(lambda before=before: counted() > before, f"feedback slice {i} to be counted")  # type: ignore[misc]
            killed_at = time.time()
            proc.kill()
            proc.wait()
            proc = start()
            after_kill = counted()
            produce(slices[i + 1])
            until(lambda after_kill=after_kill: counted() > after_kill, "the restarted feedback worker")  # type: ignore[misc]
            recoveries.append(time.time() - killed_at)
        until(lambda: counted() >= total - COUNT_TOLERANCE, "every feedback event to be counted")
        time.sleep(settle_s)  # any redelivery still in flight would land now
        got = counts()
    finally:
        proc.kill()
        proc.wait()
    worst, p50 = recovery(recoveries)
    off = [got[k] - n for k, n in truth.items() if abs(got[k] - n) > COUNT_TOLERANCE]
    return Result(
        scenario=name,
        posts=len(events),
        lost=sum(math.ceil(-d) for d in off if d < 0),
        duplicates=sum(math.ceil(d) for d in off if d > 0),
        disagreeing=len(off),
        degraded=0,
        recovery_s=worst,
        recovery_p50_s=p50,
        crashes=kills,
    )


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


def fault_during_replay(
    name: str, s: Settings, records: Sequence[Record], log: Path, fault: Callable[[], float], settle_s: float = 3.0
) -> Result:
    """Replay half of ``records``; once they come out, inject ``fault`` (it returns when it struck,
    epoch seconds, once it is over) while the rest is replayed. A worker that exits counts as a
    crash; recovery is from the fault to the first output after it."""
    create_topics(s.kafka_bootstrap, {s.input_topic: 2, s.output_topic: 2, s.dlq_topic: 1})
    # The reader waits longer per fetch than the worker: it must not stall on the broker itself.
    collector = Collector(s, f"chaos-{s.group_id}", fetch_wait_s=0.5)
    half = len(records) // 2
    try:
        with worker_process(s, log) as proc:
            # Paced, as a live stream writes: many small produce requests (on S3, objects to read back).
            produce_all(s, records[:half], rate=200)
            until(partial(started, collector.outcomes, records[:half]), "the first half to come out")
            with ThreadPoolExecutor(1) as pool:  # the rest arrives while the fault lasts
                fault_over = pool.submit(fault)
                produce_all(s, records[half:], rate=200)
                struck = fault_over.result()
            recovery = next_output_s(collector, struck)
            collector.wait_for([r.key for r in records], RECOVERY_DEADLINE_S)
            time.sleep(settle_s)
            crashed = proc.poll() is not None
    finally:
        collector.close()
    return tally(name, records, collector, [recovery], int(crashed))


def restart(stack: LocalStack, service: str, pause_s: float = 0.0) -> Callable[[], float]:
    """A fault: kill -9 ``service`` of ``stack``, and start it again after ``pause_s``."""
    return partial(stack.restart, service, pause_s=pause_s)


def back_after(stack: LocalStack, service: str, pause_s: float) -> Callable[[], float]:
    """The fault of :func:`restart`, over when ``service`` is back: recovery counts from then."""

    def fault() -> float:
        stack.restart(service, pause_s=pause_s)
        return time.time()

    return fault


POISON_DOMAIN = "evil.example"


def spam_label(i: int, domains: int = 3) -> bytes:
    """Feedback event number ``i``: a spam report or moderator label on one of ``domains`` domains
    and one of 7 IPs, so counters are shared and bans cross their thresholds."""
    event = FeedbackEvent.model_validate(
        {
            "kind": "moderator_label" if i % 3 else "user_report",
            "post_id": f"p{i}",
            "user_id": f"u{i % 11}",
            "actor_id": f"mod{i % 5}",
            "label": "spam",
            "urls": [f"https://s{i % 4}.d{i % domains}.chaos.example/x"],
            "ip": f"198.51.100.{i % 7}",
            "created_at": datetime.now(UTC),
        },
        strict=False,
    )
    return event.model_dump_json().encode()


def poison_records(template: Record, prefix: str) -> list[Record]:
    """Records that once crash-looped the worker, made from a valid post's JSON: one of about
    1 MB (its dead letter outgrew the producer's limit), one whose link is a very long host
    under a banned domain (its ban reason outgrew ``Reason.detail``), and one that is not JSON."""
    event = json.loads(template.value)
    host = ".".join(["x" * 60] * 30) + f".{POISON_DOMAIN}"
    huge = {**event, "post_id": f"{prefix}huge", "text": "spam " * 199_000}
    long = {**event, "post_id": f"{prefix}long", "urls": [f"https://{host}/"]}
    return [
        *(Record(e["post_id"], json.dumps(e).encode(), None) for e in (huge, long)),
        Record(f"{prefix}json", b"{not json", None),
    ]


@dataclass(frozen=True)
class Suite:
    """What every scenario shares: the stack, the worker's settings, the posts to replay."""

    stack: LocalStack
    endpoints: Endpoints
    model_dir: Path
    work: Path
    posts: Callable[[str], list[Record]]  # fresh posts whose keys start with the given prefix
    kills: int = 3
    outage_s: float = 10.0
    redis_prefix: str | None = None  # where the posts' platform world is seeded; else one per scenario

    def settings(self, name: str, **overrides: object) -> Settings:
        run = f"{name}-{uuid.uuid4().hex[:6]}"
        base = {
            "kafka_bootstrap": self.endpoints.kafka_bootstrap,
            "redis_url": self.endpoints.redis_url,
            "triton_url": self.endpoints.triton_grpc,
            "model_dir": self.model_dir,
            "redis_prefix": self.redis_prefix or f"modstream-chaos:{run}:",
            "group_id": f"chaos-{run}",
            "input_topic": f"posts-{run}",
            "output_topic": f"verdicts-{run}",
            "dlq_topic": f"dlq-{run}",
            "metrics_port": 0,
            "batch_max_wait_s": 0.02,
            # Tansu: a join waits about one session, and so does a killed worker's successor.
            "session_timeout_s": EMBEDDED_SESSION_TIMEOUT_S,
        }
        return Settings(**{**base, **overrides})  # type: ignore[arg-type]

    def log(self, name: str) -> Path:
        return self.work / f"worker-{name}.log"

    def kill(self, guarantee: str) -> Result:
        name = f"kill -9 x{self.kills}, {guarantee.replace('_', '-')}"
        s = self.settings(f"kill-{guarantee}", processing_guarantee=guarantee, instance_id=f"chaos-{guarantee}")
        return kill_workers(name, s, self.posts(f"k{guarantee[0]}-"), self.kills, self.log(guarantee))

    def reschedule(self) -> Result:
        """Exactly-once with the workers as a StatefulSet's pods: each killed worker comes back as
        another process under another client id (a rescheduled pod's: its UID is new) but the same
        ``MODSTREAM_INSTANCE_ID`` (the pod's name, which a StatefulSet keeps), so its transactional id
        is the killed one's and its first ``init_transactions`` fences it."""
        name = f"kill -9 x{self.kills}, exactly-once, rescheduled pods"
        s = self.settings("reschedule", processing_guarantee="exactly_once", instance_id="moderation-0")

        def pod(n: int) -> Settings:
            client_id = f"{s.instance_id}-{n}-{uuid.uuid4().hex[:8]}"
            return s.model_copy(update={"kafka_extra": {**s.kafka_extra, "client.id": client_id}})

        return kill_workers(name, s, self.posts("kp-"), self.kills, self.log("reschedule"), incarnation=pod)

    def outage(self, service: str, pause_s: float) -> Result:
        what = {"redis": f"Redis down {pause_s:.0f} s", "triton": f"tritonserver killed, back after {pause_s:.0f} s"}
        s = self.settings(service)
        return fault_during_replay(
            what[service], s, self.posts(f"{service}-"), self.log(service), restart(self.stack, service, pause_s)
        )

    def feedback(self, events: int) -> Result:
        """The feedback worker killed as the moderation worker is: its counters must stay exact."""
        s = self.settings("feedback", feedback_topic=f"feedback-{uuid.uuid4().hex[:6]}")
        create_topics(s.kafka_bootstrap, {s.feedback_topic: 1, f"{s.feedback_topic}.dlq": 1})
        env = {
            **worker_env(s),
            "MODSTREAM_FEEDBACK_APP_ID": f"chaos-{s.feedback_topic}",
            "MODSTREAM_FEEDBACK_SESSION_TIMEOUT_S": str(s.session_timeout_s),
            "MODSTREAM_FEEDBACK_BATCH_MAX_SIZE": "5",
        }
        values = [spam_label(i) for i in range(events)]
        truth = plan(
            {str(i): FeedbackEvent.model_validate_json(v) for i, v in enumerate(values)}, Keyspace(s.redis_prefix)
        )
        name = f"feedback worker kill -9 x{self.kills}"
        return kill_feedback(name, env, values, truth.increments, self.kills, self.log("feedback"))

    def broker(self, guarantee: str, pause_s: float = 5.0) -> Result:
        """The broker killed mid-stream and started again ``pause_s`` later; the worker must not exit."""
        name = f"broker killed, back after {pause_s:g} s, {guarantee.replace('_', '-')}"
        s = self.settings(f"broker-{guarantee}", processing_guarantee=guarantee, instance_id=f"broker-{guarantee}")
        fault = back_after(self.stack, "kafka", pause_s)
        return fault_during_replay(name, s, self.posts(f"b{guarantee[0]}-"), self.log(f"broker-{guarantee}"), fault)

    def poisoned(self) -> Result:
        s = self.settings("poison")
        # The long host of a poison record sits under this domain: banned, it once crash-looped the worker.
        redis.Redis.from_url(self.endpoints.redis_url).sadd(Keyspace(s.redis_prefix).banned_domains, POISON_DOMAIN)
        posts = self.posts("poison-")
        records = [*posts, *poison_records(posts[0], "poison-")]
        return fault_during_replay("poison records", s, records, self.log("poison"), time.time)


def run_suite(
    suite: Suite, s3: Suite | None = None, progress: Callable[[str], object] = print, only: Sequence[str] = ()
) -> list[Result]:
    """Every scenario on ``suite``'s stack, or those named in ``only`` (see :data:`SCENARIOS`); the
    broker restarts on ``s3``'s (Tansu on S3 storage)."""
    scenarios: dict[str, Callable[[], Result]] = {
        "kill-at-least-once": partial(suite.kill, "at_least_once"),
        "kill-exactly-once": partial(suite.kill, "exactly_once"),
        "kill-rescheduled": suite.reschedule,
        "triton": partial(suite.outage, "triton", 2.0),
        "poison": suite.poisoned,
        "feedback": partial(suite.feedback, 3 * len(suite.posts("count-"))),
    }
    if s3 is not None:
        scenarios["broker"] = partial(s3.broker, "at_least_once")
        scenarios["broker-exactly-once"] = partial(s3.broker, "exactly_once")
    # Last: the restarted Redis is empty (a throwaway cache), and the others read the seeded world.
    # Never an outage of a Redis this stack does not own.
    if suite.endpoints.redis_started:
        scenarios["redis"] = partial(suite.outage, "redis", suite.outage_s)
    if unknown := sorted(set(only) - set(scenarios)):
        raise ValueError(f"no such scenario here: {', '.join(unknown)} (one of {', '.join(scenarios)})")
    results = []
    for key, scenario in scenarios.items():
        if only and key not in only:
            continue
        results.append(scenario())
        progress(f"{results[-1]}")
    return results


# The scenarios' names in run_suite, for ``modstream chaos --only`` to check before a stack starts.
SCENARIOS = (
    "kill-at-least-once",
    "kill-exactly-once",
    "kill-rescheduled",
    "triton",
    "poison",
    "feedback",
    "broker",
    "broker-exactly-once",
    "redis",
)


COLUMNS = (
    "scenario",
    "posts",
    "lost",
    "duplicates",
    "disagreeing",
    "degraded",
    "recovery_s",
    "recovery_p50_s",
    "crashes",
)


def table(results: Sequence[Result]) -> str:
    """A Markdown table, one row per scenario."""
    head = ["| " + " | ".join(c.replace("_", " ") for c in COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    rows = ["| " + " | ".join("–" if (v := getattr(r, c)) is None else str(v) for c in COLUMNS) + " |" for r in results]
    return "\n".join(head + rows)


TABLE_START, TABLE_END = "<!-- chaos table -->", "<!-- /chaos table -->"


def write_table(doc: Path, results: Sequence[Result], command: str) -> None:
    """Replace the table between the markers in ``doc``."""
    text = doc.read_text()
    before, rest = text.split(TABLE_START, 1)
    after = rest.split(TABLE_END, 1)[1]
    doc.write_text(f"{before}{TABLE_START}\n`{command}`:\n\n{table(results)}\n{TABLE_END}{after}")


def run_chaos(
    posts: int, kills: int, outage_s: float, console: Console, seed: int = 2026, only: Sequence[str] = ()
) -> list[Result]:
    """Every scenario (or those in ``only``) at full size on the embedded stack with the trained models."""
    from modstream.harness.bench import relabel
    from modstream.harness.demo import build_records
    from modstream.serving.artifacts import ensure_models

    models = ensure_models(console)
    with tempfile.TemporaryDirectory(prefix="modstream-chaos-") as tmp:
        work = Path(tmp)
        repo = build_repo("cpu-embedded", models.text, work / "triton_repo")
        # A private Redis (never the user's: it is taken down), and a broker on S3 storage beside.
        memory = LocalStack(work / "stack", repo, redis_url=None, console=console)
        with memory as ep, S3Standin(work / "s3") as s3:
            durable = LocalStack(
                work / "s3stack",
                repo,
                ep.redis_url,
                kafka_storage="s3://tansu/",
                kafka_env=s3.kafka_env,
                console=console,
            )
            with durable as s3_ep:
                prefix = "modstream-chaos:"
                _, replay = build_records(posts, seed, Keyspace(prefix), ep.redis_url)
                valid = [r for r in replay if r.label is not None]
                main, s3_suite = (
                    Suite(stack, endpoints, models.bundle, work, partial(relabel, valid), kills, outage_s, prefix)
                    for stack, endpoints in ((memory, ep), (durable, s3_ep))
                )
                return run_suite(main, s3_suite, progress=console.log, only=only)
