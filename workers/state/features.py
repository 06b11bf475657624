"""The decision model's feature contract: names, order and version.

Training and the worker both build rows through :func:`assemble`, and the worker
refuses a model trained against another contract. Missing data stays NaN: a new
user has no history, and a degraded verdict has no transformer text score (it keeps the
n-gram one, which the worker computes itself).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from schemas import JourneyStep
from workers.state.signals import COUNTED, SIGNALS, STREAM_FIRST_SEEN, TEMPLATE_COPIES

FEATURES: tuple[str, ...] = (
    "text_spam_prob",
    # The worker's own character n-gram model (workers/text/ngram.py): present even when Triton is down.
    "text_ngram_spam_prob",
    "text_chars",
    "has_link_text",
    "has_media_text",
    # The platform's profile (workers/profiles contract) and the feedback worker's counters.
    "user_age_days",
    "user_friends",
    "user_followers",
    "user_verified",
    "user_spam_posts",
    "user_reports",
    "user_email_disposable",
    "url_count",
    "url_reports",
    "domain_age_days",
    "domain_reputation",
    "domain_reports",
    "domain_subdomain_depth",
    "domain_risky_tld",
    "ip_spam_posts",
    # What the stream itself counted, as before this post (workers/state/signals.py).
    *SIGNALS,
    "journey_steps",
    "journey_total_ms",
    "journey_min_gap_ms",
    "journey_direct_api",
)
# The directions that are known, which the decision model is trained under (LightGBM's
# monotone_constraints) and which the worker checks a model for: +1, a higher value never lowers
# the spam score; -1, never raises it. Text scores, reports and moderators' spam labels are
# evidence; a reputable, established domain and more distinct accounts sharing a link are not
# (news breaks that way: sharing alone must never block anyone). A wave's coordination (many
# accounts repeating a text or a journey on one domain) is.
DIRECTIONS: dict[str, int] = {
    "text_spam_prob": 1,
    "text_ngram_spam_prob": 1,
    "user_spam_posts": 1,
    "user_reports": 1,
    "url_reports": 1,
    "domain_reports": 1,
    "ip_spam_posts": 1,
    "domain_reputation": -1,
    "url_users_24h": -1,
    "domain_users_24h": -1,
    "domain_users_10m": -1,
    "domain_users_1h": -1,
    "domain_days_30d": -1,
    "campaign_domain_copies_1h": 1,
    "campaign_journey_users_1h": 1,
}
MONOTONE: tuple[int, ...] = tuple(DIRECTIONS.get(f, 0) for f in FEATURES)  # in FEATURES order
# The campaign signals: a verdict they decided gets the platform's campaign action.
CAMPAIGN = frozenset(f for f in FEATURES if f.startswith("campaign_"))
# The version covers the directions: a model trained without them cannot be served.
FEATURE_VERSION = hashlib.sha256((",".join(FEATURES) + ";" + ",".join(map(str, MONOTONE))).encode()).hexdigest()[:12]
INDEX = {name: i for i, name in enumerate(FEATURES)}

# Cheap, abuse-heavy TLDs. A prior, not a verdict: the model learns how much it matters.
RISKY_TLDS = frozenset({"xyz", "top", "click", "loan", "work", "info", "biz", "ru", "cn", "tk", "icu", "buzz"})

NAN = math.nan


class ContractMismatch(RuntimeError):
    pass


NO_SIGNALS = (NAN,) * len(COUNTED)
# A domain registered this recently is young: a template its accounts repeat there is a campaign's
# copies. A domain nothing dates is unknown, not young: there a template (a share button's one
# sentence with each sharer's own link) counts only with a replayed journey (docs/WAVES.md).
YOUNG_DOMAIN_DAYS = 30.0
# Where no profile dates a domain, the stream's first sighting does once the stream had this much
# history before it: a domain the platform's people share shows up within two weeks; one first seen
# after that is new to the platform. A new stream's first sightings date nothing.
STREAM_HISTORY_DAYS = 14.0
# A domain the stream has seen since its first hour with links is as old as the stream can tell: its
# first sighting is no feature (a new stream's first posts would all read as new domains).
STREAM_START_HOURS = 1.0
_COPIES, _JOURNEY, _SHARERS, _NEAR, _SAME, _FIRST_SEEN = (
    SIGNALS.index(f)
    for f in (
        "campaign_domain_copies_1h",
        "campaign_journey_users_1h",
        "domain_users_1h",
        "campaign_neardup_users_24h",
        "campaign_users_24h",
        "domain_first_seen_hours",
    )
)
_TEMPLATE, _STREAM = COUNTED.index(TEMPLATE_COPIES), COUNTED.index(f"{STREAM_FIRST_SEEN}_hours")
# A journey is replayed when a quarter of the domain's accounts in the hour repeated a template by it:
# a UI journey's fingerprint is coarse, and two of sixty people at their own pace can match by chance.
REPLAYED_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class Profile:
    """What enrichment found; an empty mapping means the entity is unknown."""

    user: Mapping[str, str] = field(default_factory=dict)
    url: Mapping[str, str] = field(default_factory=dict)
    domain: Mapping[str, str] = field(default_factory=dict)
    ip: Mapping[str, str] = field(default_factory=dict)
    signals: tuple[float, ...] = NO_SIGNALS  # in COUNTED order (signals.values)


@dataclass(frozen=True, slots=True)
class PostFacts:
    """The parts of a post the features need, independent of the event schema."""

    text_chars: int
    has_link_text: bool
    has_media_text: bool
    url_count: int
    suffix: str | None
    subdomain_depth: int | None
    journey: Sequence[JourneyStep]
    created_at: float  # epoch seconds
    popular: bool = False  # the first link's domain is in the popularity prior (workers/text/urls.py POPULAR)


def _num(m: Mapping[str, str], key: str) -> float:
    v = m.get(key)
    if v is None:
        return NAN
    try:
        return float(v)
    except ValueError:
        return NAN


def _age_days(m: Mapping[str, str], key: str, now: float) -> float:
    t = _num(m, key)
    return max(0.0, (now - t) / 86_400) if not math.isnan(t) else NAN


def journey_features(steps: Sequence[JourneyStep]) -> tuple[float, float, float, float]:
    """(steps, total ms, fastest gap ms, direct API). No UI steps means a direct API post."""
    if not steps:
        return 0.0, NAN, NAN, 1.0
    offsets = sorted(s.offset_ms for s in steps)
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    return float(len(steps)), float(offsets[-1]), float(min(gaps)) if gaps else NAN, 0.0


def dated_days(counted: Sequence[float], domain_age_days: float) -> float:
    """The domain's age where something dates it (COUNTED order): a profile's registration date, else
    the stream's first sighting of it where the stream had :data:`STREAM_HISTORY_DAYS` of history
    before; NaN where nothing does (no profile, a new stream, no link)."""
    if not math.isnan(domain_age_days):
        return domain_age_days
    seen, history = counted[_FIRST_SEEN] / 24, counted[_STREAM] / 24
    return seen if history - seen >= STREAM_HISTORY_DAYS else NAN  # NaN compares false


def stream_signals(counted: Sequence[float], domain_age_days: float, popular: bool = False) -> list[float]:
    """The signal features (SIGNALS order) from what the stream counted (COUNTED order). Copies are
    the accounts that repeated content on the domain; a template's repeats count as copies where
    the domain is young (:func:`dated_days`), or where one journey was replayed to repeat it (by a
    quarter of the domain's accounts in the hour, :data:`REPLAYED_SHARE`). On a popular domain crowds
    gather and clients replay their share flows: only content is copied there (near-duplicates count
    as far as exact copies do), and a journey is no coordination (popularity lowers the weight of
    counts; it vouches for no link)."""
    out = list(counted[: len(SIGNALS)])
    if counted[_STREAM] - counted[_FIRST_SEEN] < STREAM_START_HOURS:
        out[_FIRST_SEEN] = NAN
    if popular:  # people sharing one article write alike: only the same words to the same page count
        out[_JOURNEY] = min(out[_JOURNEY], 0.0)  # NaN (no link) stays NaN
        out[_NEAR] = min(out[_NEAR], out[_SAME])
    elif dated_days(counted, domain_age_days) < YOUNG_DOMAIN_DAYS:  # NaN compares false: unknown is not young
        out[_COPIES] = counted[_TEMPLATE]
    elif out[_JOURNEY] > 0 and out[_JOURNEY] >= REPLAYED_SHARE * out[_SHARERS]:
        out[_COPIES] = max(out[_COPIES], out[_JOURNEY])
    return out


def assemble(
    facts: PostFacts, profile: Profile, text_prob: float | None, ngram_prob: float | None = None
) -> list[float]:
    """One feature row, in FEATURES order."""
    u, url, d, ip, now = profile.user, profile.url, profile.domain, profile.ip, facts.created_at
    domain_age = _age_days(d, "created_at", now)
    row = [
        NAN if text_prob is None else text_prob,
        NAN if ngram_prob is None else ngram_prob,
        float(facts.text_chars),
        float(facts.has_link_text),
        float(facts.has_media_text),
        _age_days(u, "created_at", now),
        _num(u, "friends"),
        _num(u, "followers"),
        _num(u, "verified"),
        _num(u, "spam_posts"),
        _num(u, "reports"),
        _num(u, "email_disposable"),
        float(facts.url_count),
        _num(url, "reports"),
        domain_age,
        _num(d, "reputation"),
        _num(d, "reports"),
        NAN if facts.subdomain_depth is None else float(facts.subdomain_depth),
        NAN if facts.suffix is None else float(facts.suffix.rsplit(".", 1)[-1] in RISKY_TLDS),
        _num(ip, "spam_posts"),
        *stream_signals(profile.signals, domain_age, facts.popular),
        *journey_features(facts.journey),
    ]
    assert len(row) == len(FEATURES)
    return row


def check_contract(names: Sequence[str], version: str) -> None:
    if tuple(names) != FEATURES or version != FEATURE_VERSION:
        raise ContractMismatch(
            f"decision model feature contract {version!r} ({len(names)} features) does not match "
            f"this worker's {FEATURE_VERSION!r} ({len(FEATURES)} features); retrain with "
            "`modstream train-decision` or deploy a matching worker"
        )
