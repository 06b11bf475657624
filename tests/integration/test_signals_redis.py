"""The Redis script behind the stream-kept signals, against the in-memory reference, on a real Redis."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modstream.stack.local import Endpoints
from tests.unit.workers.state.test_signals import T0, post
from workers.adapters.redis_store import RedisStore
from workers.records import InMsg
from workers.stages.validate import validate
from workers.state import signals
from workers.state.keyspace import Keyspace
from workers.state.signals import HOUR, MemorySignals

pytestmark = pytest.mark.integration


@pytest.fixture
def prefix(stack: Endpoints) -> Iterator[str]:
    prefix = f"sig-{uuid.uuid4().hex[:8]}:"
    yield prefix
    r = redis.Redis.from_url(stack.redis_url)
    for key in r.scan_iter(match=f"{prefix}*"):
        r.delete(key)


def batch() -> list:  # type: ignore[type-arg]
    base = "limited offer buy cheap watches today at the best price with free shipping"
    return [
        post(f"p{i}", f"u{i % 4}", at=T0 + i * 600, text=f"{base} {i % 3}", urls=[f"https://s{i % 2}.promo.example/x"])
        for i in range(24)
    ] + [post("plain", "u9", at=T0 + 5 * HOUR, text="see you at the standup tomorrow")]


def plans(ks: Keyspace) -> list[signals.Plan]:
    return signals.plans(batch(), ks, 600)


async def test_redis_counts_like_the_reference_and_a_second_delivery_changes_nothing(
    stack: Endpoints, prefix: str
) -> None:
    ks = Keyspace(prefix)
    store = RedisStore(stack.redis_url, 2.0)
    r = redis.Redis.from_url(stack.redis_url)
    try:
        _, seen = await store.enrich([], plans(ks))
        assert seen == MemorySignals().run(plans(ks))  # small sets: HyperLogLogs count them exactly
        keys = sorted(r.scan_iter(match=f"{prefix}*"))
        before = {k: r.dump(k) for k in keys}
        assert all(0 < r.ttl(k) <= 2 * signals.DOMAIN_FIRST_SEEN_WINDOW for k in keys)  # every key expires
        _, again = await store.enrich([], plans(ks))  # the batch redelivered
        assert again == seen
        assert sorted(r.scan_iter(match=f"{prefix}*")) == keys and {k: r.dump(k) for k in keys} == before
    finally:
        await store.close()


async def test_a_batch_reads_every_profile_hash_in_its_round_trip(stack: Endpoints, prefix: str) -> None:
    """One Redis reads the batch's hashes in one script call: each as HGETALL answers it, {} when absent."""
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    keys = [f"{prefix}user:a", f"{prefix}user:missing", f"{prefix}domain:x.example"]
    r.hset(keys[0], mapping={"posts": 3, "reputation": 0.25})
    r.hset(keys[2], mapping={"spam_labels": 1})
    store = RedisStore(stack.redis_url, 2.0)
    try:
        hashes, seen = await store.enrich(keys, plans(Keyspace(prefix)))
        assert hashes == [r.hgetall(k) for k in keys]
        assert hashes == [{"posts": "3", "reputation": "0.25"}, {}, {"spam_labels": "1"}]
        assert len(seen) == len(batch())
        assert await store.enrich([], []) == ([], [])
    finally:
        await store.close()


# What the tolerant input contract accepts, in the corners that once made a batch's counting fail:
# integer and Unicode ids, ids that collide, long ids, epoch times, posts without an IP.
_IDS = st.sampled_from([12345, "12345", "pöst", "p" * 129, "a/b=+", 7])
_EVENTS = st.fixed_dictionaries(
    {
        "post_id": _IDS,
        "user_id": st.sampled_from(["u1", 42, "üser"]),
        "created_at": st.sampled_from(["2026-11-23T10:00:00Z", 1795255200000, 1795255200, "2026-11-23T10:30:00+05:30"]),
        "text": st.sampled_from(["hello", "win big https://promo.example/x", "see https://github.com/alice/repo", ""]),
    },
    optional={
        "urls": st.lists(st.sampled_from(["https://x.example/p", "https://www.youtube.com/watch?v=1"]), max_size=2),
        "ip": st.sampled_from(["192.0.2.7", "2001:db8::1"]),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_EVENTS, min_size=1, max_size=12))
def test_every_accepted_post_gets_exactly_the_signals_it_asked_for(
    stack: Endpoints, events: list[dict[str, object]]
) -> None:
    """Property: for any batch the contract accepts, Redis answers each post with one value per
    signal, exactly as the reference does, and a redelivery sees the same."""
    posts, _ = validate([InMsg("posts", 0, i, None, json.dumps(e).encode(), 0.0) for i, e in enumerate(events)])
    ks = Keyspace(f"prop-{uuid.uuid4().hex[:8]}:")

    async def count() -> tuple[list[list[float]], list[list[float]]]:
        store = RedisStore(stack.redis_url, 2.0)
        try:
            first = (await store.enrich([], signals.plans(posts, ks, 600)))[1]
            return first, (await store.enrich([], signals.plans(posts, ks, 600)))[1]
        finally:
            await store.close()

    try:
        first, again = asyncio.run(count())
        plans = signals.plans(posts, ks, 600)
        assert first == again == MemorySignals().run(plans)
        assert all(len(signals.values(p, s)) == len(signals.COUNTED) for p, s in zip(plans, first, strict=True))
    finally:
        r = redis.Redis.from_url(stack.redis_url)
        for key in r.scan_iter(match=f"{ks.prefix}*"):
            r.delete(key)
