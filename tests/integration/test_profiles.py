"""The profile ingester on the real broker and Redis: partial writes, ordering by updated_at, priors, the DLQ."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from confluent_kafka import Consumer, Producer, TopicPartition
from pydantic import SecretStr

from modstream.stack.local import EMBEDDED_SESSION_TIMEOUT_S, Endpoints, create_topics
from schemas import DeadLetter
from tests.conftest import records
from workers.config import Settings
from workers.profiles.app import run_profiles
from workers.state.keyspace import Keyspace
from workers.state.profile_fields import STAMP_SUFFIX

pytestmark = pytest.mark.integration

DEADLINE_S = 30.0
OLD, NEW = "2025-03-01T12:00:00Z", "2025-03-02T12:00:00Z"


def update(entity: str, id: str, updated_at: str, **fields: Any) -> bytes:
    return json.dumps({"entity": entity, "id": id, "updated_at": updated_at, "fields": fields}).encode()


async def test_profile_updates_land_in_redis_and_bad_ones_in_the_dlq(
    stack: Endpoints, redis_client: aioredis.Redis
) -> None:
    run_id = uuid.uuid4().hex[:8]
    settings = Settings(
        kafka_bootstrap=stack.kafka_bootstrap,
        redis_url=SecretStr(stack.redis_url),
        redis_prefix=f"test-profiles-{run_id}:",
        profiles_topic=f"profiles-{run_id}",
        profiles_dlq_topic=f"profiles-{run_id}.dlq",
        profiles_group_id=f"profiles-{run_id}",
        session_timeout_s=EMBEDDED_SESSION_TIMEOUT_S,
        metrics_port=0,
    )
    ks = Keyspace(settings.redis_prefix)
    create_topics(stack.kafka_bootstrap, {settings.profiles_topic: 1, settings.profiles_dlq_topic: 1})
    await redis_client.hset(ks.user("u1"), "posts", 5)  # modstream's own counter: left alone
    await redis_client.hset(ks.domain("judged.example"), "reputation", 0.2)  # lowered by feedback already

    values = [
        update("user", "u1", NEW, created_at="2019-06-01T08:30:00Z", friends=10, verified=True),
        b'{"entity": "user", "id": ',  # malformed
        update("user", "u1", OLD, friends=3, followers=7),  # late: friends is older than stored
        update("user", "u2", OLD, reputation=0.5),  # a domain field on a user
        update("domain", "judged.example", OLD, created_at="2001-01-01T00:00:00Z", reputation=0.9),
        update("domain", "fresh.example", OLD, reputation=0.7),  # last: when it lands, all did
    ]
    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap})
    for i, value in enumerate(values):
        producer.produce(settings.profiles_topic, value, key=f"k{i}".encode())
    assert producer.flush(10) == 0

    stop = asyncio.Event()
    ingester = asyncio.create_task(run_profiles(settings, stop))
    try:
        deadline = time.monotonic() + DEADLINE_S
        while await redis_client.hget(ks.domain("fresh.example"), "reputation") is None:
            assert not ingester.done(), f"the ingester exited: {ingester.exception()!r}"
            assert time.monotonic() < deadline, "timed out waiting for the last update"
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.wait_for(ingester, 15)

        new_us = "1740916800000000"
        user = await redis_client.hgetall(ks.user("u1"))
        assert {k: v for k, v in user.items() if not k.endswith(STAMP_SUFFIX)} == {
            "posts": "5",
            "created_at": "1559377800",
            "friends": "10",
            "verified": "1",
            "followers": "7",
        }
        assert user[f"friends{STAMP_SUFFIX}"] == new_us and user[f"followers{STAMP_SUFFIX}"] == "1740830400000000"
        assert await redis_client.exists(ks.user("u2")) == 0
        judged = await redis_client.hgetall(ks.domain("judged.example"))
        assert (judged["reputation"], judged["created_at"]) == ("0.2", "978307200")
        assert await redis_client.hget(ks.domain("fresh.example"), "reputation") == "0.7"
    finally:
        stop.set()
        await asyncio.gather(ingester, return_exceptions=True)
        keys = [k async for k in redis_client.scan_iter(match=f"{settings.redis_prefix}*")]
        if keys:
            await redis_client.delete(*keys)

    letters = await asyncio.to_thread(records, stack.kafka_bootstrap, settings.profiles_dlq_topic, 2)
    assert [(m.key(), m.value()) for m in letters] == [(b"k1", values[1]), (b"k3", values[3])]
    dead = [DeadLetter.from_record(m.value(), m.headers() or []) for m in letters]
    assert [(d.topic, d.offset, d.group, d.error_class) for d in dead] == [
        (settings.profiles_topic, i, settings.profiles_group_id, "ValidationError") for i in (1, 3)
    ]

    # Offsets were committed on stop: the group resumes after the last record.
    consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": settings.profiles_group_id})
    try:
        (committed,) = consumer.committed([TopicPartition(settings.profiles_topic, 0)], timeout=10)
    finally:
        consumer.close()
    assert committed.offset == len(values)
