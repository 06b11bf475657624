"""Behaviour signals the stream keeps: counts in event-time windows, campaigns, first sightings.

For every post it decides, the worker reads each signal as it was *before* the post and
then counts the post, in the same pipelined round trip as enrichment. This module is
the pure part, shared by the worker and the simulator: which keys a post touches
(:func:`plan`), and how the counts become feature values (:data:`SIGNALS`). The store
runs a plan (Redis: one script per batch; training: :class:`MemorySignals`).

Semantics, which every store implements:

* A count is a set cardinality: distinct post ids (posts per entity) or distinct user
  ids (users per entity, campaigns). Adding the same id twice counts once, so a
  redelivered post counts once (Redis keeps HyperLogLogs: about 1% error, 12 KB at most).
* Windows are tumbling buckets of event time (``created_at``): the 1 h signal counts the
  posts of the post's clock hour, the 24 h signal those of its UTC day. A key lives for
  two windows, so memory is bounded by the traffic of the last two windows.
* First sightings keep the earliest ``created_at`` seen for a URL or a domain; a post
  sees the earlier of that and its own time.
* The values a post saw are kept under its id for the redelivery window (the snapshot):
  a redelivered post gets exactly the values of its first delivery, even when other
  posts arrived in between.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from workers.keyspace import Keyspace
from workers.records import Post

HOUR = 3600
DAY = 24 * HOUR
# First sightings are kept this long after the last post that saw them.
FIRST_SEEN_TTL_S = 30 * DAY

# Near-duplicate text: MinHash over word bigrams, 16 permutations in 4 bands of 4, so
# texts with Jaccard similarity 0.8 share a band with probability 0.87, and at 0.5, 0.23.
# Computed with numpy over a whole batch: datasketch's MinHash measured ~460 µs per post
# here (a new object and Python loops per text), more than the worker's whole budget.
BANDS, ROWS = 4, 4
_PRIME = (1 << 31) - 1
_BAND = "band"  # the per-band counts behind campaign_neardup_users_24h
_rng = np.random.default_rng(20261123)  # fixed: every worker and the simulator agree on bands
_A = _rng.integers(1, _PRIME, size=BANDS * ROWS, dtype=np.int64)
_B = _rng.integers(0, _PRIME, size=BANDS * ROWS, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Count:
    """One counted signal: ``id`` is added to the set at ``key``; the feature is its size before."""

    feature: str
    key: str
    member: str
    ttl_s: int


@dataclass(frozen=True, slots=True)
class FirstSeen:
    feature: str
    key: str
    at: int  # epoch seconds of this post


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything one post reads and writes; ``snapshot`` keeps what it saw, under its id."""

    snapshot: str
    snapshot_ttl_s: int
    counts: tuple[Count, ...]
    first_seen: tuple[FirstSeen, ...]
    created_at: int

    @property
    def features(self) -> tuple[str, ...]:
        """What the store returns for this plan, in order: each count, then each first sighting."""
        return tuple(c.feature for c in self.counts) + tuple(f.feature for f in self.first_seen)


def _bucket(t: int, window: int) -> int:
    return t // window


def normalised(text: str) -> str:
    return " ".join(text.lower().split())


def text_hash(text: str) -> str:
    return f"{zlib.crc32(normalised(text).encode()):08x}"


def band_hashes(texts: Sequence[str]) -> list[tuple[str, ...]]:
    """Per text, its ``BANDS`` MinHash band hashes over word bigrams (unigrams for one word)."""
    shingles: list[list[int]] = []
    for text in texts:
        words = normalised(text).split() or [""]
        grams = [" ".join(p) for p in itertools.pairwise(words)] or words
        shingles.append([zlib.crc32(g.encode()) for g in grams])
    flat = np.fromiter((h for s in shingles for h in s), dtype=np.int64)
    hashed = (flat[:, None] * _A[None, :] + _B[None, :]) % _PRIME  # < 2**63: no overflow
    starts = np.cumsum([0, *map(len, shingles)])[:-1]
    mins: npt.NDArray[np.int64] = np.minimum.reduceat(hashed, starts, axis=0)
    return [tuple(f"{zlib.crc32(row[b * ROWS : (b + 1) * ROWS].tobytes()):08x}" for b in range(BANDS)) for row in mins]


def plan(post: Post, bands: tuple[str, ...], ks: Keyspace, snapshot_ttl_s: int) -> Plan:
    """The signals of one post. ``bands`` comes from :func:`band_hashes` (batched: it is numpy)."""
    e, link = post.event, post.links[0] if post.links else None
    t, user, pid, ip = int(e.created_at.timestamp()), e.user_id, e.post_id, e.ip

    def count(feature: str, entity: str, member: str, window: int) -> Count:
        return Count(feature, ks.signal(f"{entity}:{window}:{_bucket(t, window)}"), member, 2 * window)

    counts = [
        count("user_posts_1h", f"up:{user}", pid, HOUR),
        count("user_posts_24h", f"up:{user}", pid, DAY),
        count("ip_posts_1h", f"ip:{ip}", pid, HOUR),
        count("ip_posts_24h", f"ip:{ip}", pid, DAY),
        count("ip_users_24h", f"iu:{ip}", user, DAY),
        count("campaign_users_24h", f"tu:{text_hash(post.text)}", user, DAY),
        *(count(f"{_BAND}{i}", f"nu{i}:{h}", user, DAY) for i, h in enumerate(bands)),
    ]
    first: list[FirstSeen] = []
    if link is not None:
        counts += [
            count("url_posts_24h", f"lp:{link.url}", pid, DAY),
            count("url_users_24h", f"lu:{link.url}", user, DAY),
            count("domain_posts_24h", f"dp:{link.domain}", pid, DAY),
            count("domain_users_24h", f"du:{link.domain}", user, DAY),
        ]
        first = [
            FirstSeen("url_first_seen", ks.signal(f"lf:{link.url}"), t),
            FirstSeen("domain_first_seen", ks.signal(f"df:{link.domain}"), t),
        ]
    return Plan(ks.signal(f"snap:{pid}"), snapshot_ttl_s, tuple(counts), tuple(first), t)


# The signal features, in contract order; a post without a link has no URL or domain signals.
SIGNALS: tuple[str, ...] = (
    "user_posts_1h",
    "user_posts_24h",
    "ip_posts_1h",
    "ip_posts_24h",
    "ip_users_24h",
    "campaign_users_24h",
    "campaign_neardup_users_24h",
    "url_posts_24h",
    "url_users_24h",
    "domain_posts_24h",
    "domain_users_24h",
    "url_first_seen_hours",
    "domain_first_seen_hours",
)


def values(p: Plan, seen: Mapping[str, float]) -> tuple[float, ...]:
    """Feature values in :data:`SIGNALS` order from what the store returned for ``p``
    (feature -> count, or first-seen epoch seconds); NaN where the post has no such entity."""
    near = [seen[c.feature] for c in p.counts if c.feature.startswith(_BAND)]
    out = dict(seen)
    out["campaign_neardup_users_24h"] = max(near) if near else math.nan  # the most-shared band
    for f in p.first_seen:
        out[f"{f.feature}_hours"] = max(0.0, (p.created_at - seen[f.feature]) / HOUR)
    return tuple(out.get(name, math.nan) for name in SIGNALS)


class MemorySignals:
    """The semantics above over exact Python sets: the simulator's store, and the reference
    the Redis script is tested against. Keys never expire here (training spans are short)."""

    def __init__(self) -> None:
        self.sets: dict[str, set[str]] = {}
        self.first: dict[str, int] = {}
        self.snapshots: dict[str, dict[str, float]] = {}

    def run(self, plans: Sequence[Plan]) -> list[dict[str, float]]:
        out = []
        for p in plans:
            if p.snapshot not in self.snapshots:
                seen: dict[str, float] = {}
                for c in p.counts:
                    members = self.sets.setdefault(c.key, set())
                    seen[c.feature] = float(len(members))
                    members.add(c.member)
                for f in p.first_seen:
                    earliest = min(self.first.get(f.key, f.at), f.at)
                    seen[f.feature] = self.first[f.key] = earliest
                self.snapshots[p.snapshot] = seen
            out.append(self.snapshots[p.snapshot])
        return out
