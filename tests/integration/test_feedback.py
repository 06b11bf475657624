"""The feedback worker on the real broker and Redis: counters, a ban, and a dead letter."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from confluent_kafka import Producer
from pydantic import SecretStr

from modstream.harness.chaos import kill_feedback, spam_label
from modstream.stack.local import Endpoints, create_topics
from schemas import DeadLetter, FeedbackEvent
from tests.conftest import first_record
from workers.adapters.redis_store import RedisReputationStore
from workers.config import Settings
from workers.feedback.app import run_feedback
from workers.feedback.settings import FeedbackSettings
from workers.state.keyspace import Keyspace
from workers.state.reputation import CONFIRMED, REFUTED, Applied, ReporterRecord, plan, wanted

pytestmark = pytest.mark.integration

DEADLINE_S = 20.0
SPAM_URL = "https://promo.spam-feedback.xyz/win"
SPAM_DOMAIN = "spam-feedback.xyz"
IP = "203.0.113.7"


def feedback(kind: str, actor: str, label: str = "spam") -> bytes:
    event = FeedbackEvent.model_validate(
        {
            "kind": kind,
            "post_id": "p1",
            "user_id": "u1",
            "actor_id": actor,
            "label": label,
            "urls": [SPAM_URL],
            "ip": IP,
            "created_at": datetime.now(UTC),
        },
        strict=False,
    )
    return event.model_dump_json().encode()


async def until(check: Callable[[], Awaitable[Any]], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def test_feedback_updates_counters_bans_and_dead_letters(stack: Endpoints, redis_client: aioredis.Redis) -> None:
    run_id = uuid.uuid4().hex[:8]
    settings = Settings(
        kafka_bootstrap=stack.kafka_bootstrap,
        redis_url=SecretStr(stack.redis_url),
        redis_prefix=f"test-feedback-{run_id}:",
        feedback_topic=f"feedback-{run_id}",
        metrics_port=0,
    )
    dlq = f"{settings.feedback_topic}.dlq"
    # A short session: Tansu starts generations at 0, and aiokafka sends no LeaveGroup from
    # generation 0, so the restarted member waits out its predecessor's session.
    fb = FeedbackSettings(app_id=f"feedback-test-{run_id}", batch_max_wait_s=0.1, session_timeout_s=3)
    ks = Keyspace(settings.redis_prefix)
    create_topics(stack.kafka_bootstrap, {settings.feedback_topic: 1, dlq: 1})
    await redis_client.hset(ks.domain(SPAM_DOMAIN), "reputation", 0.5)
    # A trusted reporter: a new one's report weighs about 0.02 (workers/state/reputation.py).
    await redis_client.hset(ks.reporter("reporter1"), CONFIRMED, 20)
    trusted = ReporterRecord(confirmed=20).weight

    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap})
    records = [
        feedback("user_report", "reporter1"),
        *(feedback("moderator_label", f"mod{i}") for i in range(3)),  # crosses the domain threshold (3)
        b'{"kind": "user_report", "post_id": ',  # malformed
        feedback("moderator_label", "mod9", label="ham"),  # counted in metrics only
    ]
    for i, value in enumerate(records):
        producer.produce(settings.feedback_topic, value, key=f"k{i}".encode())
    assert producer.flush(10) == 0

    try:
        async with running(settings, fb) as alive:

            async def banned() -> bool:
                alive()
                return bool(await redis_client.sismember(ks.banned_domains, SPAM_DOMAIN))

            await until(banned, "the domain ban")
            # The ban comes with the batch that crossed the threshold; later records may be a batch behind.
            await until(lambda: redis_client.hget(ks.url(SPAM_URL), "reports"), "URL counters")
        assert await counters(redis_client, ks.user("u1")) == pytest.approx({"reports": trusted, "spam_posts": 3})
        assert await counters(redis_client, ks.url(SPAM_URL)) == pytest.approx({"reports": 3 + trusted})
        domain = await redis_client.hgetall(ks.domain(SPAM_DOMAIN))
        assert {k: float(domain[k]) for k in ("reports", "spam_reports")} == pytest.approx(
            {"reports": 3 + trusted, "spam_reports": 3}
        )
        assert float(domain["reputation"]) == pytest.approx(0.2)
        assert await redis_client.hgetall(ks.ip(IP)) == {"spam_posts": "3"}
        assert not await redis_client.sismember(ks.banned_ips, IP)  # 3 < 5 spam labels

        # A restart resumes from the offsets committed on stop: nothing is counted twice.
        producer.produce(settings.feedback_topic, feedback("moderator_label", "mod4"))
        assert producer.flush(10) == 0
        async with running(settings, fb) as alive:

            async def fourth_label() -> bool:
                alive()
                return await redis_client.hget(ks.domain(SPAM_DOMAIN), "spam_reports") == "4"

            await until(fourth_label, "the label produced after the restart")
        assert await counters(redis_client, ks.user("u1")) == pytest.approx({"reports": trusted, "spam_posts": 4})
        # Four spam labels and a ham one on the reported post: its reporter was judged once.
        assert await redis_client.hgetall(ks.reporter("reporter1")) == {CONFIRMED: "21"}
    finally:
        keys = [k async for k in redis_client.scan_iter(match=f"{settings.redis_prefix}*")]
        if keys:
            await redis_client.delete(*keys)

    message = await asyncio.to_thread(first_record, stack.kafka_bootstrap, dlq)
    assert (message.key(), message.value()) == (b"k4", records[4])
    letter = DeadLetter.from_record(message.value(), message.headers() or [])
    assert (letter.topic, letter.partition, letter.offset) == (settings.feedback_topic, 0, 4)
    assert (letter.group, letter.error_class) == (fb.app_id, "ValidationError")


async def counters(client: aioredis.Redis, key: str) -> dict[str, float]:
    return {name: float(value) for name, value in (await client.hgetall(key)).items()}


@contextlib.asynccontextmanager
async def running(settings: Settings, fb: FeedbackSettings) -> AsyncIterator[Callable[[], None]]:
    """The worker in a task; yields a check that raises if it died. Stops it gracefully on exit."""
    stop = asyncio.Event()
    worker = asyncio.create_task(run_feedback(settings, fb, stop))

    def alive() -> None:
        if worker.done():
            raise AssertionError(f"the feedback worker exited: {worker.exception()!r}")

    try:
        yield alive
    finally:
        stop.set()
        await asyncio.wait_for(worker, 15)


async def test_a_batch_applied_twice_counts_once(stack: Endpoints, redis_client: aioredis.Redis) -> None:
    prefix = f"test-once-{uuid.uuid4().hex[:8]}:"
    ks = Keyspace(prefix)
    store = RedisReputationStore(stack.redis_url, 2.0, ks, reputation_step=0.1, applied_ttl_s=3600)
    events = {f"feedback:0:{i}": FeedbackEvent.model_validate_json(spam_label(i, 3)) for i in range(30)}
    batch = plan(events, ks)
    try:
        first = await store.apply(batch)
        snapshot = {k: await redis_client.hgetall(k) for k in {key for key, _ in batch.increments}}
        again = await store.apply(batch)  # a crash before the commit: the same batch comes back
        assert (first.duplicates, again.duplicates) == (0, len(batch.changes))
        assert {k: await redis_client.hgetall(k) for k in snapshot} == snapshot
        assert again.domains == first.domains and again.ip_spam_labels == first.ip_spam_labels
    finally:
        await store.close()
        keys = [k async for k in redis_client.scan_iter(match=f"{prefix}*")]
        await redis_client.delete(*keys)


NEW = ReporterRecord().weight  # about 0.02
TRUSTED = ReporterRecord(confirmed=20).weight  # about 0.95
LINK = "https://forum.example.net/t/modstream/issues"


def report(
    post_id: str, actor_id: str, user_id: str = "u1", kind: str = "user_report", spam: bool = True
) -> FeedbackEvent:
    return FeedbackEvent.model_validate(
        {
            "kind": kind,
            "post_id": post_id,
            "user_id": user_id,
            "actor_id": actor_id,
            "label": "spam" if spam else "ham",
            "urls": [LINK],
            "created_at": datetime.now(UTC),
        },
        strict=False,
    )


def label(post_id: str, moderator: str = "mod", spam: bool = True) -> FeedbackEvent:
    return report(post_id, moderator, kind="moderator_label", spam=spam)


async def feed(store: RedisReputationStore, events: dict[str, FeedbackEvent]) -> Applied:
    """One batch as the feedback worker applies it: its reporters read first, then its plan applied."""
    known = await store.reporters(*wanted(events.values()))
    return await store.apply(plan(events, store.keyspace, known))


@pytest.fixture
async def reputation(stack: Endpoints, redis_client: aioredis.Redis) -> AsyncIterator[RedisReputationStore]:
    ks = Keyspace(f"test-reports-{uuid.uuid4().hex[:8]}:")
    store = RedisReputationStore(stack.redis_url, 2.0, ks, reputation_step=0.1, applied_ttl_s=3600)
    yield store
    await store.close()
    keys = [k async for k in redis_client.scan_iter(match=f"{ks.prefix}*")]
    if keys:
        await redis_client.delete(*keys)


async def test_one_account_reporting_300_times_weighs_as_one_new_reporter(
    reputation: RedisReputationStore, redis_client: aioredis.Redis
) -> None:
    ks, repeated = reputation.keyspace, Counter[str]()
    for batch in range(3):  # in several batches: the markers outlive one
        events = {f"r{i}": report(f"p{i % 150}", "a1") for i in range(100 * batch, 100 * (batch + 1))}
        applied = await feed(reputation, events)
        repeated.update(applied.repeated)
    assert await counters(redis_client, ks.user("u1")) == pytest.approx({"reports": NEW})
    assert await counters(redis_client, ks.domain("example.net")) == pytest.approx({"reports": NEW})
    assert await counters(redis_client, ks.url(LINK)) == pytest.approx({"reports": NEW})
    assert applied.domains["example.net"].reports == pytest.approx(NEW)
    assert repeated == {"user": 299, "url": 299, "domain": 299, "post": 150}  # 150 posts, each reported twice


async def test_300_new_reporters_weigh_about_6(reputation: RedisReputationStore, redis_client: aioredis.Redis) -> None:
    applied = await feed(reputation, {f"r{i}": report(f"p{i}", f"a{i}") for i in range(300)})
    assert await counters(redis_client, reputation.keyspace.user("u1")) == pytest.approx({"reports": 300 * NEW})
    assert applied.domains["example.net"].reports == pytest.approx(300 * NEW) == pytest.approx(5.88, abs=0.01)
    assert applied.weights == (NEW,) * 300 and not applied.repeated


async def test_a_reporter_earns_weight_by_confirmed_reports_and_loses_it_by_refuted_ones(
    reputation: RedisReputationStore, redis_client: aioredis.Redis
) -> None:
    ks = reputation.keyspace
    await feed(reputation, {f"r{i}": report(f"p{i}", "trusted") for i in range(20)})
    await feed(reputation, {f"l{i}": label(f"p{i}") for i in range(20)})
    await feed(reputation, {f"n{i}": report(f"q{i}", "noisy") for i in range(10)})
    await feed(reputation, {f"h{i}": label(f"q{i}", spam=False) for i in range(10)})
    assert await redis_client.hgetall(ks.reporter("trusted")) == {CONFIRMED: "20"}
    assert await redis_client.hgetall(ks.reporter("noisy")) == {REFUTED: "10"}
    applied = await feed(
        reputation,
        {"t": report("x1", "trusted", user_id="v1"), "n": report("x2", "noisy", user_id="v2")},
    )
    assert applied.weights == (TRUSTED, ReporterRecord(refuted=10).weight)
    assert await counters(redis_client, ks.user("v1")) == pytest.approx({"reports": TRUSTED})  # about 0.95
    assert float(await redis_client.hget(ks.user("v2"), "reports") or 0) < 0.002


async def test_a_label_marks_each_reporter_once_however_often_the_post_is_labelled(
    reputation: RedisReputationStore, redis_client: aioredis.Redis
) -> None:
    ks = reputation.keyspace

    async def records() -> dict[str, dict[str, str]]:
        return {r: await redis_client.hgetall(ks.reporter(r)) for r in ("r1", "r2", "r3")}

    await feed(reputation, {"a": report("p1", "r1"), "b": report("p1", "r2"), "c": report("p2", "r3")})
    first = await feed(reputation, {"l1": label("p1")})
    assert first.counted == {CONFIRMED: 2}
    judged = {"r1": {CONFIRMED: "1"}, "r2": {CONFIRMED: "1"}, "r3": {}}
    assert await records() == judged
    again = await feed(reputation, {"l1": label("p1")})  # redelivered
    assert again.duplicates == 1 and await records() == judged
    relabelled = await feed(reputation, {"l2": label("p1", "mod2"), "l3": label("p1", "mod3", spam=False)})
    assert relabelled.repeated == {CONFIRMED: 2, REFUTED: 2} and not relabelled.counted
    assert await records() == judged
    # A report and its post's label in one batch: the label judges it too, and the earlier ones not again.
    late = await feed(reputation, {"d": report("p1", "r3"), "l4": label("p1", "mod4")})
    assert late.counted[CONFIRMED] == 1 and await records() == {**judged, "r3": {CONFIRMED: "1"}}


async def test_a_redelivered_report_batch_changes_nothing(
    reputation: RedisReputationStore, redis_client: aioredis.Redis
) -> None:
    ks = reputation.keyspace
    await redis_client.hset(ks.reporter("trusted"), CONFIRMED, 20)
    events = {
        **{f"r{i}": report(f"p{i % 5}", f"a{i % 7}") for i in range(30)},
        "t": report("p9", "trusted"),
        "l": label("p1"),
        "h": label("p2", spam=False),
    }
    first = await feed(reputation, events)

    async def state() -> dict[str, object]:
        keys = sorted([k async for k in redis_client.scan_iter(f"{ks.prefix}*")])
        return {k: await redis_client.dump(k) for k in keys}

    before = await state()
    again = await feed(reputation, events)  # re-read records (now judged), re-planned: the markers still hold
    assert (first.duplicates, again.duplicates) == (0, len(events))
    assert not again.counted and not again.repeated and not again.weights
    assert await state() == before
    assert again.domains == first.domains


def test_counters_are_exact_when_the_worker_is_killed(stack: Endpoints, tmp_path: Path) -> None:
    """kill -9 between applying a batch and committing it used to count the batch twice."""
    run_id = uuid.uuid4().hex[:8]
    prefix, topic = f"test-kill-{run_id}:", f"feedback-kill-{run_id}"
    create_topics(stack.kafka_bootstrap, {topic: 1, f"{topic}.dlq": 1})
    env = {
        **os.environ,
        "MODSTREAM_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "MODSTREAM_REDIS_URL": stack.redis_url,
        "MODSTREAM_REDIS_PREFIX": prefix,
        "MODSTREAM_FEEDBACK_TOPIC": topic,
        "MODSTREAM_METRICS_PORT": "0",
        "MODSTREAM_FEEDBACK_APP_ID": f"feedback-kill-{run_id}",
        "MODSTREAM_FEEDBACK_SESSION_TIMEOUT_S": "3",
        "MODSTREAM_FEEDBACK_BATCH_MAX_SIZE": "5",
        "MODSTREAM_FEEDBACK_BATCH_MAX_WAIT_S": "0.05",
    }
    values = [spam_label(i, 3) for i in range(300)]
    truth = plan({str(i): FeedbackEvent.model_validate_json(v) for i, v in enumerate(values)}, Keyspace(prefix))
    try:
        result = kill_feedback("feedback worker kill -9 x2", env, values, truth.increments, 2, tmp_path / "fb.log")
        assert (result.lost, result.duplicates, result.disagreeing) == (0, 0, 0), result
    finally:
        client = redis.Redis.from_url(stack.redis_url)
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
