"""``modstream demo``: the whole pipeline on the embedded stack, end to end, with a summary."""

from __future__ import annotations

import asyncio
import copy
import json
import math
import random
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import redis
from confluent_kafka import Producer
from rich.console import Console

from modstream.harness.traffic import Collector, Outcomes, Record, produce_all
from modstream.serving.artifacts import ensure_models
from modstream.serving.triton_repo import build_repo
from modstream.stack.local import EMBEDDED_SESSION_TIMEOUT_S, Endpoints, LocalStack, create_topics
from schemas import FeedbackEvent, Verdict
from training.corpora.posts import post_splits
from training.simulator import Simulator, World
from workers.clients import Framing
from workers.config import Settings, cache_root
from workers.main import run_moderation
from workers.state.features import INDEX
from workers.state.keyspace import Keyspace
from workers.state.signals import SIGNALS

PARTITIONS = 4
WARMUP = 8  # posts that wait for the worker to join its group, before the replay
MALFORMED: tuple[bytes, ...] = (
    b"{not json",
    b'{"post_id": "x"}',
    b'{"post_id": "m3", "user_id": "u", "created_at": "yesterday", "text": "", "ip": "1.2.3.4", "platform": "web"}',
    b'{"post_id": "m4", "user_id": "u", "created_at": "2026-11-21T10:00:00Z", "text": "", "ip": "999.1.1.1", '
    b'"platform": "web"}',
    b'{"post_id": true, "user_id": "u", "created_at": "2026-11-21T10:00:00Z", "text": "", "ip": "1.2.3.4", '
    b'"platform": "web"}',
    b"\xff\xfe binary garbage",
)


@dataclass(frozen=True)
class Summary:
    posts: int
    verdicts: int
    dead_letters: int
    lost: int
    decisions: dict[str, int]
    accuracy: float
    review_share: float
    degraded: int
    # The stream-kept behaviour features (workers/state/signals.py) in the rows the model saw: the share
    # present (not null) and the share already above zero, i.e. filled in by earlier posts.
    signals_present: float
    signals_nonzero: float
    throughput_posts_per_s: float
    p50_ms: float
    p99_ms: float
    labels_published: int = 0  # simulated moderator labels sent to the feedback topic

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


def seed_redis(url: str, ks: Keyspace, world: World) -> int:
    client = redis.Redis.from_url(url, socket_timeout=10)
    pipe = client.pipeline(transaction=False)
    for key, fields in world.hashes.items():
        pipe.hset(ks.prefix + key, mapping=fields)  # type: ignore[arg-type]  # redis's stubs: invariant key union
    pipe.sadd(ks.banned_domains, *world.banned_domains)
    pipe.sadd(ks.banned_ips, *world.banned_ips)
    pipe.execute()
    return len(world.hashes)


def clear_redis(url: str, ks: Keyspace) -> None:
    client = redis.Redis.from_url(url, socket_timeout=10)
    for batch in _chunks(list(client.scan_iter(match=ks.prefix + "*", count=1000)), 1000):
        client.delete(*batch)


@contextmanager
def seeded(url: str, ks: Keyspace, world: World) -> Iterator[None]:
    """``world`` in Redis under ``ks`` while the block runs, cleared after however it ends."""
    try:
        seed_redis(url, ks, world)
        yield
    finally:
        clear_redis(url, ks)


def _chunks(items: list[bytes], n: int) -> list[list[bytes]]:
    return [items[i : i + n] for i in range(0, len(items), n)]


def build_records(n: int, seed: int, ks: Keyspace, redis_url: str) -> tuple[list[Record], list[Record]]:
    """``(warm-up, replay)`` of :func:`demo_records` from now, their simulated platform seeded into Redis."""
    warmup, replay, world = demo_records(n, seed, time.time())
    seed_redis(redis_url, ks, world)
    return warmup, replay


def demo_records(n: int, seed: int, now: float) -> tuple[list[Record], list[Record], World]:
    """``(warm-up, replay, world)``: held-out post-length texts (training.corpora.posts' test split), a few
    banned-link posts and a few malformed events, by a simulator whose clock reads ``now``. ``world`` is
    the platform before the posts: their new accounts and links are unknown to it."""
    test = post_splits(cache_root()).test
    sim = Simulator(seed, now=now, scale=max(n // 4, 200))
    world = copy.deepcopy(sim.world)
    n_bad, n_banned = max(3, n // 200), max(5, n // 100)
    banned_domains = sorted(sim.world.banned_domains)
    records: list[Record] = []
    for post in sim.posts(test, n - n_bad - n_banned + WARMUP):
        records.append(Record(post.event.post_id, post.event.model_dump_json().encode(), post.label))
    for i in range(n_banned):
        post = sim.posts(test, 1)[0]
        update = (
            {"urls": [f"https://promo{i}.{banned_domains[i % len(banned_domains)]}/x"]}
            if i % 2 == 0
            else {"ip": f"203.0.113.{i % 250 + 1}"}
        )
        event = post.event.model_copy(update=update)
        records.append(Record(event.post_id, event.model_dump_json().encode(), 1))
    records += [Record(f"malformed-{i}", MALFORMED[i % len(MALFORMED)], None) for i in range(n_bad)]
    warmup, replay = records[:WARMUP], records[WARMUP:]
    random.Random(seed).shuffle(replay)
    return warmup, replay, world


def simulated_labels(records: Sequence[Record], share: float, seed: int) -> list[Record]:
    """Moderator labels, from the simulator's ground truth, for a random ``share`` of the labelled posts:
    what a trust-and-safety team sends back, so the learning loop runs on the embedded stack."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    return [
        Record(
            r.key,
            FeedbackEvent(
                event_id=f"sim-label-{r.key}",
                kind="moderator_label",
                post_id=r.key,
                user_id=json.loads(r.value)["user_id"],
                actor_id="simulated-moderator",
                label="spam" if r.label else "ham",
                created_at=now,
            )
            .model_dump_json()
            .encode(),
            r.label,
        )
        for r in records
        if r.label is not None and rng.random() < share
    ]


def signal_shares(verdicts: Iterable[Verdict]) -> tuple[float, float]:
    """``(present, non-zero)`` shares of the stream-kept signal values in the logged feature rows."""
    cells = [row.values[INDEX[name]] for row in (v.features for v in verdicts) if row for name in SIGNALS]
    if not cells:
        return math.nan, math.nan
    present = [c for c in cells if c is not None and not math.isnan(c)]
    return round(len(present) / len(cells), 4), round(sum(c > 0 for c in present) / len(cells), 4)


def summarise(replay: list[Record], out: Outcomes, sent: dict[str, float]) -> Summary:
    labels = {r.key: r.label for r in replay}
    verdicts = {k: v for k, v in out.verdicts.items() if k in labels}
    dead = {k for k in out.dead_letters if k in labels}
    decisions = Counter(v.decision for v in verdicts.values())
    decided = [(v.decision, labels[k]) for k, v in verdicts.items() if v.decision != "review"]
    correct = sum((d == "block") == (y == 1) for d, y in decided)
    lat = out.latencies_ms({k: sent[k] for k in labels})
    span = max(out.arrived[k] for k in labels if k in out.arrived) - min(sent.values())
    present, nonzero = signal_shares(verdicts.values())
    return Summary(
        posts=len(replay),
        verdicts=len(verdicts),
        dead_letters=len(dead),
        lost=len(replay) - len(verdicts) - len(dead),
        decisions={d: decisions.get(d, 0) for d in ("allow", "review", "block")},
        accuracy=round(correct / len(decided), 4) if decided else float("nan"),
        review_share=round(decisions.get("review", 0) / max(len(verdicts), 1), 4),
        degraded=sum(v.degraded for v in verdicts.values()),
        signals_present=present,
        signals_nonzero=nonzero,
        throughput_posts_per_s=round(len(replay) / span, 1),
        p50_ms=round(float(np.percentile(lat, 50)), 1),
        p99_ms=round(float(np.percentile(lat, 99)), 1),
    )


def worker_settings(ep: Endpoints, model_dir: Path, run: str) -> Settings:
    return Settings(
        kafka_bootstrap=ep.kafka_bootstrap,
        redis_url=ep.redis_url,  # pydantic wraps it in SecretStr
        triton_url=ep.triton_grpc,
        model_dir=model_dir,
        redis_prefix=f"modstream-demo:{run}:",
        group_id=f"modstream-demo-{run}",
        metrics_port=0,
        session_timeout_s=EMBEDDED_SESSION_TIMEOUT_S,  # what `stack up` prints: a join waits about one session
    )


class WorkerThread:
    """The moderation worker on its own event loop, as a deployment would run it."""

    def __init__(self, settings: Settings, framing: Framing | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(settings, framing), name="worker", daemon=True)
        self.thread.start()

    def _run(self, settings: Settings, framing: Framing | None) -> None:
        async def main() -> None:
            await run_moderation(settings, self.stop, framing)

        try:
            self.loop.run_until_complete(main())
        except BaseException as exc:  # surfaced by close(); the demo must not hang on a dead worker
            self.error = exc

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(60)
        if self.error:
            raise self.error


def run_demo(
    posts: int,
    console: Console,
    seed: int = 2026,
    state_dir: Path | None = None,
    label_share: float = 0.0,
    keep_stack: bool = False,
) -> Summary:
    """``keep_stack`` (with ``state_dir``) leaves the stack running with its topics, for the learning
    loop's commands to read; ``modstream stack down --state-dir <state_dir>/stack`` stops it, and
    the topics stay on disk for its next ``stack up``."""
    models = ensure_models(console)
    with tempfile.TemporaryDirectory(prefix="modstream-demo-") as tmp:
        work = state_dir or Path(tmp)
        repo = build_repo("cpu-embedded", models.text, work / "triton_repo")
        kept = keep_stack and state_dir is not None
        stack = LocalStack(work / "stack", repo, durable=kept, console=console)  # a kept stack keeps its topics
        with nullcontext(stack.up()) if kept else stack as ep:
            run = uuid.uuid4().hex[:8]
            settings = worker_settings(ep, models.bundle, run)
            ks = Keyspace(settings.redis_prefix)
            create_topics(
                ep.kafka_bootstrap,
                {
                    settings.input_topic: PARTITIONS,
                    settings.output_topic: PARTITIONS,
                    settings.dlq_topic: 1,
                    settings.feedback_topic: 1,
                },
            )
            try:
                with console.status("building posts and seeding Redis with the simulated platform"):
                    warmup, replay = build_records(posts, seed, ks, ep.redis_url)
                collector = Collector(settings, f"demo-collector-{run}")
                worker = WorkerThread(settings)
                producer = Producer(settings.producer_conf())  # one producer, warmed up with the worker
                try:
                    with console.status("warming up: waiting for the worker to join its group"):
                        produce_all(settings, warmup, producer=producer)
                        if not collector.wait_for([r.key for r in warmup], 120):
                            raise RuntimeError(f"worker produced no verdicts for the warm-up posts ({worker.error!r})")
                    with console.status(f"replaying {len(replay)} posts"):
                        sent = produce_all(settings, replay, producer=producer)
                        collector.wait_for([r.key for r in replay], 120 + len(replay) / 20)
                    labels = simulated_labels(replay, label_share, seed)
                    if labels:
                        produce_all(settings, labels, producer=producer, topic=settings.feedback_topic)
                finally:
                    worker.close()
                    collector.close()
                summary = summarise(replay, collector.outcomes, sent)
                return replace(summary, labels_published=len(labels))
            finally:
                clear_redis(ep.redis_url, ks)
