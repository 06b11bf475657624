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
  :data:`USERS_CAP` a bucket (past that a campaign is a campaign).
* Windows roll: a count reads the current bucket of event time (``created_at``) and the one
  before it, weighted by the share of the window that still overlaps it (``1 - elapsed/window``:
  the usual sliding-window estimate), so no count falls to zero at a clock hour or a UTC midnight.
  ``domain_days_30d`` counts the distinct days of the last thirty exactly. A bucket's hash expires
  two windows after it was created, so memory follows the traffic of two windows.
* First sightings keep the earliest ``created_at`` of a URL (a domain, the stream's posts with a
  link) over the current and the previous 2-day (30-day) bucket; a post sees the earlier of that and
  its own time.
* A share is not a copy. A post's *content* is its text with its links' landings
  (:func:`workers.text.urls.landing`: the same page however it was shared); its *template* the text
  with each link reduced to its registrable domain. Per domain the stream counts, in the hour, the
  accounts that posted content another account had already posted there (copies), the accounts
  that posted a template another had (template copies: a share button's sentence with each sharer's
  own link is one template), and the accounts that posted a template by the UI journey another had
  posted it by (journey copies: one script replayed; only for posts with UI steps). A template is no
  evidence by itself: it counts as copies only where the domain is young (by a profile, or first seen
  after the stream had weeks of history) or one journey was replayed, and on a popular domain only
  content counts
  (:func:`workers.state.features.stream_signals`). Each copy count is a set of accounts that only grows:
  pre-filling a domain with distinct texts erases nothing. Near-duplicates (MinHash bands) and
  ``campaign_users_24h`` compare the text together with its landings.
* Per domain the stream also counts the distinct users of short windows and the days it was seen
  on (popularity, which never counts against a post).
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
# Per domain and hour: the accounts before this post that posted this content, template or
# (template, journey) there; each only gates whether the post's account joins the copies beside it.
_SAME_CONTENT, _SAME_TEMPLATE, _SAME_JOURNEY = "same_content_1h", "same_template_1h", "same_journey_1h"
# Read by features.assemble, which knows whether the domain is young: not features themselves.
TEMPLATE_COPIES = "campaign_template_copies_1h"
STREAM_FIRST_SEEN = "stream_first_seen"  # the stream's earliest post with a link, as for a domain
# A text's fingerprint ignores what templating varies: digits, punctuation, case, spacing.
_TEMPLATED = re.compile(r"[\W\d_]+")
_WORDS = re.compile(r"[\W_]+")  # content keeps its numbers: "glad nobody was hurt 17" is someone's own
_rng = np.random.default_rng(20261123)  # fixed: every worker and the simulator agree on bands
_A = _rng.integers(1, _PRIME, size=BANDS * ROWS, dtype=np.int64)
_B = _rng.integers(0, _PRIME, size=BANDS * ROWS, dtype=np.int64)


# Count and FirstSeen are built a dozen times a post on the hot path: not frozen, whose __init__
# costs twice as much.
@dataclass(slots=True)
class Count:
    """One counted signal at ``(key, field)``: the post counts itself (``member`` empty) or its
    user (``member``, a token); the feature is the count before it, over ``key`` and the bucket
    before it (``previous``, weighted by its overlap with the rolling window). ``ttl_s`` for a new
    bucket. ``since``: only members at or after it count (fixed-width hex days: a window of days).
    ``gate``: the index of another count of the plan; this one's member joins only where that count
    saw another account (a copy of what someone else posted). ``shard``: the entity whose shard
    holds it on a cluster (a gate and the count it gates live together)."""

    feature: str
    key: str
    previous: str
    field: str
    member: str
    ttl_s: int
    since: str = ""
    gate: int = -1
    shard: str = ""


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


@functools.lru_cache(maxsize=1024)  # a batch's posts share their buckets: two keys a count, built once
def _buckets(ks: Keyspace, signal: str, window: int, bucket: int) -> tuple[str, str]:
    """The keys of ``signal``'s bucket ``bucket`` of ``window`` seconds and of the one before it."""
    return ks.signal(f"{signal}:{window}:{bucket}"), ks.signal(f"{signal}:{window}:{bucket - 1}")


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
    """The signals of a batch: its templates (links reduced to domains) hashed into bands at once."""
    texts = [reduce_links(p.text) for p in posts]
    bands = band_hashes(texts) if posts else []
    return [plan(p, t, b, ks, snapshot_ttl_s) for p, t, b in zip(posts, texts, bands, strict=True)]


def plan(post: Post, text: str, bands: tuple[str, ...], ks: Keyspace, snapshot_ttl_s: int) -> Plan:
    """The signals of one post: ``text`` is its template (:func:`plans`), ``bands`` that text's
    :func:`band_hashes` (batched: it is numpy); both are compared beside the post's landings."""
    e, link = post.event, post.links[0] if post.links else None
    t, user = int(e.created_at.timestamp()), token(e.user_id, TOKEN_HEX)
    landings = " ".join(x.landing for x in post.links)

    def count(
        feature: str,
        signal: str,
        entity: str,
        window: int,
        member: str = "",
        since: str = "",
        gate: int = -1,
        shard: str = "",
    ) -> Count:
        key, previous = _buckets(ks, signal, window, t // window)
        return Count(feature, key, previous, token(entity), member, 2 * window, since, gate, shard)

    def first(feature: str, signal: str, entity: str, window: int) -> FirstSeen:
        key, previous = _buckets(ks, signal, window, t // window)
        return FirstSeen(feature, key, previous, token(entity), t, 2 * window)

    # A post without an IP (not every platform knows it) has no IP signals: they stay missing.
    ip = [] if e.ip is None else [count("ip_posts_24h", "ip", e.ip, DAY), count("ip_users_24h", "iu", e.ip, DAY, user)]
    counts = [
        count("user_posts_1h", "up", e.user_id, HOUR),
        count("user_posts_24h", "up", e.user_id, DAY),
        *ip,
        count("campaign_users_24h", "tu", f"{normalised(text)} {landings}", DAY, user),
        *(count(f"{_BAND}{i}", f"nu{i}", f"{h} {landings}", DAY, user) for i, h in enumerate(bands)),
    ]
    firsts: list[FirstSeen] = []
    if link is not None:
        d, day = link.domain, t // DAY
        sh = token(d)  # a domain's copy counts and their gates share a shard
        template = f"{d} {fingerprint(text)}"
        content = f"{d} {normalised(_WORDS.sub(' ', text))} {landings}"
        counts += [
            count("url_posts_24h", "lp", link.url, DAY),
            count("url_users_24h", "lu", link.url, DAY, user),
            count("domain_posts_24h", "dp", d, DAY),
            count("domain_users_24h", "du", d, DAY, user),
            count("domain_users_10m", "du", d, MINUTES, user),
            count("domain_users_1h", "du", d, HOUR, user, shard=sh),
            count(
                "domain_days_30d",
                "dd",
                d,
                ESTABLISHED_WINDOW,
                f"{day:0{TOKEN_HEX}x}",
                since=f"{day - 29:0{TOKEN_HEX}x}",
            ),
        ]
        copies = [(_SAME_CONTENT, "sc", content, "campaign_domain_copies_1h", "cc")]
        copies.append((_SAME_TEMPLATE, "st", template, TEMPLATE_COPIES, "tc"))
        if e.journey:  # no UI steps (a direct API post) is no journey to replay
            copies.append(
                (_SAME_JOURNEY, "sj", f"{template} {journey_fingerprint(post)}", "campaign_journey_users_1h", "jc")
            )
        for same, signal, entity, copied, into in copies:
            counts.append(count(same, signal, entity, HOUR, user, shard=sh))
            counts.append(count(copied, into, d, HOUR, user, gate=len(counts) - 1, shard=sh))
        firsts = [
            first("url_first_seen", "lf", link.url, URL_FIRST_SEEN_WINDOW),
            first("domain_first_seen", "df", link.domain, DOMAIN_FIRST_SEEN_WINDOW),
            first(STREAM_FIRST_SEEN, "sf", "", DOMAIN_FIRST_SEEN_WINDOW),  # the history its domains are seen against
        ]
    snapshot = ks.signal(f"snap:{snapshot_ttl_s}:{t // snapshot_ttl_s}")
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
    # Waves on a domain: many users in minutes; accounts repeating what others posted there (the
    # same content; the same template where the domain is young or the journey one); accounts
    # repeating a template by one journey. An established domain was posted on many days.
    "domain_users_10m",
    "domain_users_1h",
    "campaign_domain_copies_1h",
    "campaign_journey_users_1h",
    "domain_days_30d",
)


# What values() returns: the signal features, then what only assemble reads.
COUNTED: tuple[str, ...] = (*SIGNALS, TEMPLATE_COPIES, f"{STREAM_FIRST_SEEN}_hours")


def values(p: Plan, returned: Sequence[float]) -> tuple[float, ...]:
    """Values in :data:`COUNTED` order from what the store returned for ``p`` (in
    :attr:`Plan.features` order: counts, then first-seen times); NaN where the post has no such entity.
    A post with a link but no UI steps has no journey copies: 0."""
    seen = dict(zip(p.features, returned, strict=True))
    near = [seen[c.feature] for c in p.counts if c.feature.startswith(_BAND)]
    out = dict(seen)
    out["campaign_neardup_users_24h"] = max(near) if near else math.nan  # the most-shared band
    if TEMPLATE_COPIES in seen:
        out.setdefault("campaign_journey_users_1h", 0.0)
    for f in p.first_seen:
        out[f"{f.feature}_hours"] = max(0.0, (p.created_at - seen[f.feature]) / HOUR)
    return tuple(out.get(name, math.nan) for name in COUNTED)


def overlap(at: int, window: int) -> float:
    """The previous bucket's weight in a rolling window ending at ``at``: the share of it still inside."""
    return 1.0 - (at % window) / window


class MemorySignals:
    """The semantics above in plain Python: the simulator's store, and the reference the Redis
    script is tested against. Nothing expires here (training spans are short)."""

    def __init__(self) -> None:
        self.posts: dict[tuple[str, str], int] = {}
        self.users: dict[tuple[str, str], list[str]] = {}
        self.first: dict[tuple[str, str], int] = {}
        self.snapshots: dict[tuple[str, str], list[float]] = {}

    def _count(self, c: Count, at: int, others: list[float]) -> float:
        """The count before the post over the rolling window, after which the post is counted;
        ``others``: per count so far, how many accounts other than the post's it saw (for gates)."""
        where, before = (c.key, c.field), (c.previous, c.field)
        w = overlap(at, c.ttl_s // 2)
        if not c.member:
            seen = self.posts.get(where, 0) + w * self.posts.get(before, 0)
            self.posts[where] = self.posts.get(where, 0) + 1
            others.append(seen)
            return seen
        users, earlier = self.users.setdefault(where, []), self.users.get(before, [])
        if c.since:
            seen = float(sum(m >= c.since for m in users) + sum(m >= c.since for m in earlier))
            w = 1.0
        else:
            seen = len(users) + w * len(earlier)
        others.append(len(users) - (c.member in users) + w * (len(earlier) - (c.member in earlier)))
        if (c.gate < 0 or others[c.gate] > 0) and len(users) < USERS_CAP and c.member not in users:
            users.append(c.member)
        return seen

    def run(self, plans: Sequence[Plan]) -> list[list[float]]:
        """Per plan, the values in :attr:`Plan.features` order."""
        out = []
        for p in plans:
            if (p.snapshot, p.field) not in self.snapshots:
                others: list[float] = []
                seen = [self._count(c, p.created_at, others) for c in p.counts]
                for f in p.first_seen:
                    here = self.first.get((f.key, f.field))
                    seen.append(min(x for x in (here, self.first.get((f.previous, f.field)), f.at) if x is not None))
                    self.first[f.key, f.field] = min(here if here is not None else f.at, f.at)
                self.snapshots[p.snapshot, p.field] = seen
            out.append(self.snapshots[p.snapshot, p.field])
        return out
