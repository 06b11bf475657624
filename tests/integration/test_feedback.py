"""The feedback worker on the real broker and Redis: counters, a ban, and a dead letter."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from confluent_kafka import Producer
from pydantic import SecretStr

from modstream.chaos import kill_feedback, spam_label
from modstream.stack import Endpoints, create_topics
from schemas import DeadLetter, FeedbackEvent
from tests.conftest import first_record
from workers.adapters.redis_store import RedisReputationStore
from workers.config import Settings
from workers.feedback import FeedbackSettings, run_feedback
from workers.keyspace import Keyspace
from workers.reputation import plan

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
        assert await redis_client.hgetall(ks.user("u1")) == {"reports": "1", "spam_posts": "3"}
        assert await redis_client.hgetall(ks.url(SPAM_URL)) == {"reports": "4"}
        domain = await redis_client.hgetall(ks.domain(SPAM_DOMAIN))
        assert {k: domain[k] for k in ("reports", "spam_reports")} == {"reports": "4", "spam_reports": "3"}
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
        assert await redis_client.hgetall(ks.user("u1")) == {"reports": "1", "spam_posts": "4"}
    finally:
        keys = [k async for k in redis_client.scan_iter(match=f"{settings.redis_prefix}*")]
        if keys:
            await redis_client.delete(*keys)

    message = await asyncio.to_thread(first_record, stack.kafka_bootstrap, dlq)
    assert (message.key(), message.value()) == (b"k4", records[4])
    letter = DeadLetter.from_record(message.value(), message.headers() or [])
    assert (letter.topic, letter.partition, letter.offset) == (settings.feedback_topic, 0, 4)
    assert (letter.group, letter.error_class) == (fb.app_id, "ValidationError")


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
