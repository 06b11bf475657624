"""Enrichment, the stream-kept signals, ban lists, feedback and profiles on a real Redis Cluster
(six redis-server processes on loopback, made by the ``redis_cluster`` fixture).

The same expectations as on one node: the signals equal the in-memory reference and a
redelivered batch changes nothing; feedback counts exactly once. A script touching keys of
two slots would fail with CROSSSLOT, so passing these is also the cluster-safety check.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio.cluster import RedisCluster

from schemas import FeedbackEvent
from tests.integration.test_feedback import spam_label
from tests.integration.test_signals_redis import plans
from tests.unit.workers.profiles.test_profiles import AT, record, update
from workers.adapters.redis_layout import Layout, Script
from workers.adapters.redis_profiles import RedisProfileStore
from workers.adapters.redis_store import _COUNT_SIGNALS, RedisReputationStore, RedisStore, signal_calls
from workers.stages.short_circuit import BanListCache
from workers.state import signals
from workers.state.keyspace import Keyspace
from workers.state.profile_fields import plan as profile_plan
from workers.state.reputation import Bans, plan
from workers.state.signals import MemorySignals

pytestmark = pytest.mark.integration

LAYOUT = Layout(shards=16)


@pytest.fixture
async def cluster(redis_cluster: str) -> AsyncIterator[RedisCluster]:
    client = RedisCluster.from_url(redis_cluster, decode_responses=True, socket_timeout=2)
    yield client
    await client.aclose()


@pytest.fixture
def ks() -> Keyspace:
    return Keyspace(f"cl-{uuid.uuid4().hex[:8]}:")


async def keys(cluster: RedisCluster, ks: Keyspace) -> dict[str, object]:
    """Every key under the prefix, on every primary, with its value dumped."""
    found = sorted([k async for k in cluster.scan_iter(match=f"{ks.prefix}*")])
    return {k: await cluster.dump(k) for k in found}


async def test_signals_on_a_cluster_count_like_the_reference_and_once(
    redis_cluster: str, cluster: RedisCluster, ks: Keyspace
) -> None:
    store = RedisStore(redis_cluster, 2.0, LAYOUT)
    try:
        batch = plans(ks)
        _, seen = await store.enrich([], batch)
        assert seen == MemorySignals().run(plans(ks))
        before = await keys(cluster, ks)
        slots = {await cluster.cluster_keyslot(k) for k in before}
        assert len(slots) > 3  # the shared hashes really are spread
        ttls = [await cluster.ttl(k) for k in before]
        assert all(0 < t <= 2 * signals.DOMAIN_FIRST_SEEN_WINDOW for t in ttls)  # every key expires
        _, again = await store.enrich([], plans(ks))  # the batch redelivered
        assert again == seen and await keys(cluster, ks) == before
    finally:
        await store.close()


async def test_a_post_half_counted_before_a_failure_is_completed_not_counted_twice(
    redis_cluster: str, cluster: RedisCluster, ks: Keyspace
) -> None:
    """On a cluster a post is counted in parts, one per slot; a failure between parts (one
    node down, a timeout) leaves some done. The redelivery counts only the rest."""
    store = RedisStore(redis_cluster, 2.0, LAYOUT)
    try:
        batch = plans(ks)
        calls = list(signal_calls(batch, LAYOUT).by_group.values())
        await Script(_COUNT_SIGNALS).pipeline(cluster, calls[: len(calls) // 2])  # the other half failed
        _, seen = await store.enrich([], batch)
        assert seen == MemorySignals().run(plans(ks))
    finally:
        await store.close()


async def test_enrichment_reads_hashes_across_slots_in_one_pipeline(
    redis_cluster: str, cluster: RedisCluster, ks: Keyspace
) -> None:
    users = {ks.user(f"u{i}"): {"posts": str(i), "spam_posts": "0"} for i in range(40)}
    for key, fields in users.items():
        await cluster.hset(key, mapping=fields)
    store = RedisStore(redis_cluster, 2.0, LAYOUT)
    try:
        hashes, seen = await store.enrich([*users, ks.user("nobody")], plans(ks)[:3])
        assert hashes == [*users.values(), {}] and len(seen) == 3
    finally:
        await store.close()


async def test_feedback_on_a_cluster_counts_once_and_bans_reach_the_ban_list(
    redis_cluster: str, cluster: RedisCluster, ks: Keyspace
) -> None:
    store = RedisReputationStore(redis_cluster, 2.0, ks, reputation_step=0.1, applied_ttl_s=3600, layout=LAYOUT)
    reader = RedisStore(redis_cluster, 2.0, LAYOUT)
    events = {f"feedback:0:{i}": FeedbackEvent.model_validate_json(spam_label(i, 3)) for i in range(30)}
    # A moderator's label of p0, which mod0 reported earlier in the batch: it marks mod0's record.
    events["label"] = FeedbackEvent.model_validate_json(spam_label(1, 3)).model_copy(update={"post_id": "p0"})
    batch = plan(events, ks)
    try:
        first = await store.apply(batch)
        counted = {k: await cluster.hgetall(k) for k in {key for key, _ in batch.increments}}
        # Reports count once per reporter and target, weighted: as Plan.increments counts them.
        assert {(k, f): float(counted[k][f]) for k, f in batch.increments} == pytest.approx(batch.increments)
        assert first.repeated and await cluster.hgetall(ks.reporter("mod0")) == {"confirmed": "1"}
        again = await store.apply(batch)
        assert (first.duplicates, again.duplicates) == (0, len(batch.changes))
        assert {k: await cluster.hgetall(k) for k in counted} == counted
        assert again.domains == first.domains and again.ip_spam_labels == first.ip_spam_labels
        assert await store.ban(Bans(frozenset({"evil.example"}), frozenset({"203.0.113.0/24"}))) == (1, 1)
        loaded = await BanListCache(reader, ks, refresh_s=60).current()
        assert loaded.domain_hit("evil.example") == "evil.example" and len(loaded) == 2
    finally:
        await store.close()
        await reader.close()


async def test_profiles_on_a_cluster_write_every_slot(redis_cluster: str, cluster: RedisCluster, ks: Keyspace) -> None:
    updates = [update(record("user", f"u{i}", created_at=AT)) for i in range(20)]
    store = RedisProfileStore(redis_cluster, 2.0, LAYOUT)
    try:
        written, kept = await store.write(profile_plan(updates, ks))
        assert (written, kept) == (20, 0)
        assert await store.write(profile_plan(updates, ks)) == (20, 0)  # same stamps: written again, harmlessly
        stored = [await cluster.hget(ks.user(f"u{i}"), "created_at") for i in range(20)]
        assert stored == [stored[0]] * 20 and stored[0] is not None
    finally:
        await store.close()


def test_bench_redis_reports_both_servers(tmp_path: Path) -> None:
    from modstream.harness.redis_bench import plot, run

    results = run(batches=2, size=16, shards=8)
    for server in ("single_node", "cluster"):
        assert results[server]["p50_ms"] > 0 and results[server]["bytes_per_post"] > 0
    assert 1 < results["cluster_script_calls_per_batch"] <= 8
    plot(results, tmp_path)
    assert (tmp_path / "redis_cluster.png").stat().st_size > 0
