"""Behaviour signals the stream keeps: counts in event-time windows, campaigns, first sightings.

For every post it decides, the worker reads each signal as it was *before* the post and
then counts the post, in the same pipelined round trip as enrichment. This module is
the pure part, shared by the worker and the simulator: which keys a post touches
(:func:`plan`), and how the counts become feature values (:data:`SIGNALS`). The store
runs a plan (Redis: one script per batch; training: :class:`MemorySignals`).

Semantics, which every store implements (Redis: workers/adapters/redis_store.py):

* State lives in one hash per signal and time bucket (fields are short hashes of the
  entity), never a key per entity: a key costs ~200 bytes of Redis overhead, a field ~60.
* "Posts per X" counts posts; "users per X" counts distinct users, exactly up to
  :data:`USERS_CAP` (past that a campaign is a campaign).
* Windows are tumbling buckets of event time (``created_at``): the 1 h signal counts the
  posts of the post's clock hour, the 24 h signal those of its UTC day. A bucket's hash
  expires two windows after it was created, so memory follows the traffic of two windows.
* First sightings keep the earliest ``created_at`` of a URL (a domain) over the current
  and the previous 2-day (30-day) bucket; a post sees the earlier of that and its own time.
* Campaign signals compare texts with their links reduced to their site
  (:func:`workers.text.urls.site`: the registrable domain, so a unique path per copy does not hide a
  copy; but a user's own page on a shared host, or the link itself on a well-known host, so a
  share button's sentence with each sharer's own link is no copy). Per site the stream counts
  the distinct users of the hour, the distinct text fingerprints (a campaign's users repeat a
  few texts, sharers write their own) and the users who came by the same UI journey (step
  names and bucketed gaps); per domain, the distinct users of short windows and the days it
  was seen on (popularity, which never counts against a post).
* What a post saw is kept under its id and the digest of what it counts (its snapshot): a
  redelivered post gets exactly the values of its first delivery and counts nothing
  again, even when other posts arrived in between. This is what makes counting idempotent;
  another post that reuses the id (a platform's id clash, a replay of edited records) is
  counted as the post it is.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from workers.records import Post
from workers.state.keyspace import Keyspace
from workers.text.urls import reduce_links

MINUTES = 600  # the short window a wave shows in first
HOUR = 3600
DAY = 24 * HOUR
ESTABLISHED_WINDOW = 30 * DAY  # domain_days_30d: on how many days of it a domain was posted
USERS_CAP = 32
URL_FIRST_SEEN_WINDOW = 2 * DAY
DOMAIN_FIRST_SEEN_WINDOW = 30 * DAY
TOKEN_HEX = 8  # a user in a distinct-users list: 8 hex digits of a hash

# Near-duplicate text: MinHash over word bigrams, 16 permutations in 4 bands of 4, so
# texts with Jaccard similarity 0.8 share a band with probability 0.87, and at 0.5, 0.23.
# Computed with numpy over a whole batch: datasketch's MinHash measured ~460 µs per post
# here (a new object and Python loops per text), more than the worker's whole budget.
BANDS, ROWS = 4, 4
_PRIME = (1 << 31) - 1
_MIX = 1_000_003  # combines two 32-bit word hashes into a bigram hash: < 2**63
# A campaign's near-copies share their opening; hashing an e-mail-length text in full costs ~1 ms.
MAX_WORDS = 128
_BAND = "band"  # the per-band counts behind campaign_neardup_users_24h
_TEXTS = "site_texts_1h"  # distinct text fingerprints per site, behind campaign_domain_copies_1h
_SHARERS = "site_users_1h"  # distinct users per site, behind campaign_domain_copies_1h
# A text's fingerprint ignores what templating varies: digits, punctuation, case, spacing.
_TEMPLATED = re.compile(r"[\W\d_]+")
_rng = np.random.default_rng(20261123)  # fixed: every worker and the simulator agree on bands
_A = _rng.integers(1, _PRIME, size=BANDS * ROWS, dtype=np.int64)
_B = _rng.integers(0, _PRIME, size=BANDS * ROWS, dtype=np.int64)


# Count and FirstSeen are built a dozen times a post on the hot path: not frozen, whose __init__
# costs twice as much.
@dataclass(slots=True)
class Count:
    """One counted signal at ``(key, field)``: the post counts itself (``member`` empty) or its
    user (``member``, a token); the feature is the count before it. ``ttl_s`` for a new bucket."""

    feature: str
    key: str
    field: str
    member: str
    ttl_s: int


@dataclass(slots=True)
class FirstSeen:
    """The earliest time at ``field`` over the buckets ``key`` (written) and ``previous``."""

    feature: str
    key: str
    previous: str
    field: str
    at: int  # epoch seconds of this post
    ttl_s: int


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything one post reads and writes; its snapshot keeps what it saw, under :attr:`field`."""

    snapshot: str  # hash key
    field: str  # the post's id and a digest of what it counts
    snapshot_ttl_s: int
    counts: tuple[Count, ...]
    first_seen: tuple[FirstSeen, ...]
    created_at: int

    @property
    def features(self) -> tuple[str, ...]:
        """What the store returns for this plan, in order: each count, then each first sighting."""
        return tuple(c.feature for c in self.counts) + tuple(f.feature for f in self.first_seen)


@functools.lru_cache(maxsize=4096)  # a post names its domain seven times, its URL and user thrice
def token(value: str, digits: int = 16) -> str:
    """A short, stable stand-in for an entity (a URL can be 2 KB): ``digits`` hex of its hash."""
    return hashlib.blake2b(value.encode(), digest_size=digits // 2).hexdigest()


def _bucket(t: int, window: int) -> int:
    return t // window


def normalised(text: str) -> str:
    return " ".join(text.lower().split())


def fingerprint(text: str) -> str:
    """A templated text's fingerprint (``TOKEN_HEX`` hex): copies that differ only in numbers,
    punctuation or spacing share it; texts in their own words do not."""
    return f"{zlib.crc32(_TEMPLATED.sub(' ', text.lower()).strip().encode()):08x}"


def journey_fingerprint(post: Post) -> str:
    """The UI journey as step names and gaps in ~9% buckets: a script replays it to the bucket,
    people do not. No steps (a direct API post) is a fingerprint too."""
    steps = sorted(post.event.journey, key=lambda s: s.offset_ms)
    gaps = (b.offset_ms - a.offset_ms for a, b in itertools.pairwise(steps))
    return ",".join(s.name for s in steps) + "/" + ",".join(str(round(8 * math.log2(1 + g))) for g in gaps)


def band_hashes(texts: Sequence[str]) -> list[tuple[str, ...]]:
    """Per text, its ``BANDS`` MinHash band hashes over word bigrams (unigrams for one word) of its
    first ``MAX_WORDS`` words."""
    words = [normalised(t).split()[:MAX_WORDS] or [""] for t in texts]
    lens = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    ends = np.cumsum(lens)
    starts = ends - lens
    h = np.fromiter((zlib.crc32(w.encode()) for ws in words for w in ws), dtype=np.int64, count=int(ends[-1]))
    # Bigram hashes of every adjacent pair; each text's last slot (a pair across two texts) is
    # overwritten with one of its own bigrams, or with its only word, so a segment's min is its own.
    x = np.empty_like(h)
    x[:-1] = (h[:-1] * _MIX + h[1:]) % _PRIME
    multi = lens > 1
    x[ends[multi] - 1] = x[starts[multi]]
    x[starts[~multi]] = h[starts[~multi]] % _PRIME
    hashed = (x[:, None] * _A[None, :] + _B[None, :]) % _PRIME  # < 2**63: no overflow
    mins: npt.NDArray[np.int64] = np.minimum.reduceat(hashed, starts, axis=0)
    return [tuple(f"{zlib.crc32(row[b * ROWS : (b + 1) * ROWS].tobytes()):08x}" for b in range(BANDS)) for row in mins]


def plans(posts: Sequence[Post], ks: Keyspace, snapshot_ttl_s: int) -> list[Plan]:
    """The signals of a batch, its texts compared with their links reduced to domains."""
    texts = [reduce_links(p.text) for p in posts]
    bands = band_hashes(texts) if posts else []
    return [plan(p, t, b, ks, snapshot_ttl_s) for p, t, b in zip(posts, texts, bands, strict=True)]


def plan(post: Post, text: str, bands: tuple[str, ...], ks: Keyspace, snapshot_ttl_s: int) -> Plan:
    """The signals of one post: ``text`` is its text with links reduced (:func:`plans`), ``bands``
    that text's :func:`band_hashes` (batched: it is numpy)."""
    e, link = post.event, post.links[0] if post.links else None
    t, user = int(e.created_at.timestamp()), token(e.user_id, TOKEN_HEX)

    def count(feature: str, signal: str, entity: str, window: int, member: str = "") -> Count:
        return Count(feature, ks.signal(f"{signal}:{window}:{_bucket(t, window)}"), token(entity), member, 2 * window)

    def first(feature: str, signal: str, entity: str, window: int) -> FirstSeen:
        b = _bucket(t, window)
        key, previous = ks.signal(f"{signal}:{window}:{b}"), ks.signal(f"{signal}:{window}:{b - 1}")
        return FirstSeen(feature, key, previous, token(entity), t, 2 * window)

    # A post without an IP (not every platform knows it) has no IP signals: they stay missing.
    ip = [] if e.ip is None else [count("ip_posts_24h", "ip", e.ip, DAY), count("ip_users_24h", "iu", e.ip, DAY, user)]
    counts = [
        count("user_posts_1h", "up", e.user_id, HOUR),
        count("user_posts_24h", "up", e.user_id, DAY),
        *ip,
        count("campaign_users_24h", "tu", normalised(text), DAY, user),
        *(count(f"{_BAND}{i}", f"nu{i}", h, DAY, user) for i, h in enumerate(bands)),
    ]
    firsts: list[FirstSeen] = []
    if link is not None:
        counts += [
            count("url_posts_24h", "lp", link.url, DAY),
            count("url_users_24h", "lu", link.url, DAY, user),
            count("domain_posts_24h", "dp", link.domain, DAY),
            count("domain_users_24h", "du", link.domain, DAY, user),
            count("domain_users_10m", "du", link.domain, MINUTES, user),
            count("domain_users_1h", "du", link.domain, HOUR, user),
            count(_SHARERS, "su", link.site, HOUR, user),
            count(_TEXTS, "dt", link.site, HOUR, fingerprint(text)),
            count("campaign_journey_users_1h", "dj", f"{link.site} {journey_fingerprint(post)}", HOUR, user),
            count("domain_days_30d", "dd", link.domain, ESTABLISHED_WINDOW, f"{_bucket(t, DAY):0{TOKEN_HEX}x}"),
        ]
        firsts = [
            first("url_first_seen", "lf", link.url, URL_FIRST_SEEN_WINDOW),
            first("domain_first_seen", "df", link.domain, DOMAIN_FIRST_SEEN_WINDOW),
        ]
    snapshot = ks.signal(f"snap:{snapshot_ttl_s}:{_bucket(t, snapshot_ttl_s)}")
    counted = "\0".join(f"{c.key} {c.field} {c.member}" for c in counts) + "".join(f.field for f in firsts)
    digest = hashlib.blake2b(counted.encode(), digest_size=TOKEN_HEX // 2).hexdigest()  # unique: not via token's cache
    return Plan(snapshot, f"{e.post_id}/{digest}", 2 * snapshot_ttl_s, tuple(counts), tuple(firsts), t)


# The signal features, in contract order; a post without a link has no URL or domain signals,
# one without an IP no IP signals.
SIGNALS: tuple[str, ...] = (
    "user_posts_1h",
    "user_posts_24h",
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
    # Waves on a domain: many users in minutes, few texts among them, one journey among them;
    # an established domain was posted on many days.
    "domain_users_10m",
    "domain_users_1h",
    "campaign_domain_copies_1h",
    "campaign_journey_users_1h",
    "domain_days_30d",
)


def values(p: Plan, returned: Sequence[float]) -> tuple[float, ...]:
    """Feature values in :data:`SIGNALS` order from what the store returned for ``p`` (in
    :attr:`Plan.features` order: counts, then first-seen times); NaN where the post has no such entity."""
    seen = dict(zip(p.features, returned, strict=True))
    near = [seen[c.feature] for c in p.counts if c.feature.startswith(_BAND)]
    out = dict(seen)
    out["campaign_neardup_users_24h"] = max(near) if near else math.nan  # the most-shared band
    if _TEXTS in seen:  # the site's users in the hour who repeated a text already seen on it
        out["campaign_domain_copies_1h"] = max(0.0, seen[_SHARERS] - seen[_TEXTS])
    for f in p.first_seen:
        out[f"{f.feature}_hours"] = max(0.0, (p.created_at - seen[f.feature]) / HOUR)
    return tuple(out.get(name, math.nan) for name in SIGNALS)


class MemorySignals:
    """The semantics above in plain Python: the simulator's store, and the reference the Redis
    script is tested against. Nothing expires here (training spans are short)."""

    def __init__(self) -> None:
        self.posts: dict[tuple[str, str], int] = {}
        self.users: dict[tuple[str, str], list[str]] = {}
        self.first: dict[tuple[str, str], int] = {}
        self.snapshots: dict[tuple[str, str], list[float]] = {}

    def run(self, plans: Sequence[Plan]) -> list[list[float]]:
        """Per plan, the values in :attr:`Plan.features` order."""
        out = []
        for p in plans:
            if (p.snapshot, p.field) not in self.snapshots:
                seen: list[float] = []
                for c in p.counts:
                    where = (c.key, c.field)
                    if not c.member:
                        seen.append(self.posts.get(where, 0))
                        self.posts[where] = self.posts.get(where, 0) + 1
                        continue
                    users = self.users.setdefault(where, [])
                    seen.append(len(users))
                    if len(users) < USERS_CAP and c.member not in users:
                        users.append(c.member)
                for f in p.first_seen:
                    here = self.first.get((f.key, f.field))
                    seen.append(min(x for x in (here, self.first.get((f.previous, f.field)), f.at) if x is not None))
                    self.first[f.key, f.field] = min(here if here is not None else f.at, f.at)
                self.snapshots[p.snapshot, p.field] = seen
            out.append(self.snapshots[p.snapshot, p.field])
        return out
