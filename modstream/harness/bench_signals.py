"""Bench phase: what the stream-kept signals and the logged feature row cost per post.

Measured in-process against the stack's Redis, batch by batch, with the worker's own stages:
the enrichment round trip with the signals counted (as served) against the profile lookups
alone, the worker-side planning (near-duplicate hashing and keys), Redis's own CPU, and the
verdict's size and encoding time with and without its feature row.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from modstream.harness.traffic import Record
from schemas import FeatureRow
from workers.adapters.redis_store import RedisStore
from workers.records import InMsg, Post, verdict_for
from workers.stages.decide import facts_of
from workers.stages.enrich import enrich, profile_keys
from workers.stages.validate import validate
from workers.state import signals
from workers.state.features import FEATURE_VERSION, assemble
from workers.state.keyspace import Keyspace

REPEATS = 3  # each batch is counted under fresh post ids this many times; the median counts


@dataclass(frozen=True)
class SignalCost:
    batch: int
    posts: int
    enrich_profiles_only_us_per_post: float  # the round trip as it was before the signals
    enrich_with_signals_us_per_post: float  # the enrich stage as served: lookups, planning, counting
    planning_us_per_post: float  # of which worker CPU: near-duplicate bands and plans
    redis_cpu_us_per_post: float  # Redis's own CPU for the served round trip
    verdict_bytes: float
    verdict_bytes_without_features: float
    verdict_encode_us: float
    verdict_encode_us_without_features: float


def _posts(records: Sequence[Record], prefix: str) -> list[Post]:
    msgs = []
    for i, r in enumerate(records):
        event = json.loads(r.value)
        event["post_id"] = f"{prefix}{event['post_id']}"  # fresh ids: a known post counts nothing
        msgs.append(InMsg("bench", 0, i, None, json.dumps(event).encode(), time.monotonic()))
    posts, _ = validate(msgs)
    return posts


async def _measure(redis_url: str, records: Sequence[Record], batch: int, ks: Keyspace) -> SignalCost:
    store, stats = RedisStore(redis_url, timeout_s=10.0), redis.Redis.from_url(redis_url)
    timed: dict[str, list[float]] = {"profiles": [], "signals": [], "planning": [], "redis_cpu": []}
    try:
        for rep in range(REPEATS):
            posts = _posts(records, f"sigbench{rep}-{time.time_ns()}-")
            for start in range(0, len(posts), batch):
                chunk = posts[start : start + batch]
                keys = list(dict.fromkeys(k for p in chunk for k in profile_keys(p, ks) if k is not None))
                t0 = time.perf_counter()
                await store.enrich(keys, [])
                t1 = time.perf_counter()
                signals.plans(chunk, ks, 600)
                t2 = time.perf_counter()
                cpu0 = _redis_cpu_us(stats)
                t3 = time.perf_counter()
                await enrich(chunk, store, ks, 600)
                t4 = time.perf_counter()
                cpu1 = _redis_cpu_us(stats)
                n = len(chunk)
                timed["profiles"].append((t1 - t0) / n)
                timed["planning"].append((t2 - t1) / n)
                timed["signals"].append((t4 - t3) / n)
                timed["redis_cpu"].append((cpu1 - cpu0) / n)
        profiles = await enrich(posts[:batch], store, ks, 600)  # already counted: reads the snapshots
    finally:
        await store.close()
        stats.close()
    with_row: list[float] = []
    without_row: list[float] = []
    enc_with: list[float] = []
    enc_without: list[float] = []
    for post, profile in zip(posts[:batch], profiles, strict=True):
        row = assemble(facts_of(post), profile, 0.5)
        logged = FeatureRow(contract=FEATURE_VERSION, values=[None if math.isnan(v) else v for v in row])
        for features, sizes, times in ((logged, with_row, enc_with), (None, without_row, enc_without)):
            outcome = verdict_for(
                post,
                decision="allow",
                score=0.1,
                reasons=[],
                stage_scores={"decision": 0.1, "text": 0.5},
                model_versions={"text": "x" * 12, "decision": "y" * 12},
                degraded=False,
                features=features,
            )
            t0 = time.perf_counter()
            payload = outcome.verdict.model_dump_json().encode()
            times.append(time.perf_counter() - t0)
            sizes.append(len(payload))

    def median(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    return SignalCost(
        batch=batch,
        posts=len(records),
        enrich_profiles_only_us_per_post=round(median(timed["profiles"]) * 1e6, 1),
        enrich_with_signals_us_per_post=round(median(timed["signals"]) * 1e6, 1),
        planning_us_per_post=round(median(timed["planning"]) * 1e6, 1),
        redis_cpu_us_per_post=round(median(timed["redis_cpu"]), 1),
        verdict_bytes=round(sum(with_row) / len(with_row), 1),
        verdict_bytes_without_features=round(sum(without_row) / len(without_row), 1),
        verdict_encode_us=round(median(enc_with) * 1e6, 1),
        verdict_encode_us_without_features=round(median(enc_without) * 1e6, 1),
    )


def _redis_cpu_us(client: redis.Redis) -> float:
    info = client.info("cpu")
    return (float(info["used_cpu_user"]) + float(info["used_cpu_sys"])) * 1e6


def signal_cost(redis_url: str, records: Sequence[Record], batch: int, prefix: str) -> SignalCost:
    return asyncio.run(_measure(redis_url, records, batch, Keyspace(prefix)))
