"""Feedback -> reputation counters and bans. Pure logic: no I/O, so thresholds are unit-tested.

Each event's change is applied at most once, under its event id (the store keeps a
marker per applied event), so a redelivered batch leaves the counters exact.

Field names are the ones :mod:`workers.features` reads, and keys come from the
:class:`Keyspace` and :func:`extract_links`, so what the feedback worker writes is
exactly what the moderation worker enriches with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from schemas import FeedbackEvent
from workers.keyspace import Keyspace
from workers.urls import extract_links

# Hash fields. "reports"/"spam_posts" feed features; "spam_reports" (moderator spam
# labels per domain) is the feedback worker's own, used only for ban decisions.
REPORTS = "reports"
SPAM_POSTS = "spam_posts"
SPAM_LABELS = "spam_reports"
REPUTATION = "reputation"


@dataclass(frozen=True, slots=True)
class BanThresholds:
    domain_spam_labels: int  # ban a domain on this many moderator spam labels...
    domain_reports: int  # ...or on this many reports (users and moderators)...
    domain_reports_spam_labels: int  # ...once moderators confirmed at least this many
    ip_spam_labels: int  # ban an IP on this many moderator spam labels


@dataclass(frozen=True, slots=True)
class DomainCounts:
    reports: int
    spam_labels: int


@dataclass(frozen=True, slots=True)
class Change:
    """What one feedback event changes. Applied at most once, under its event id."""

    event_id: str
    increments: Mapping[tuple[str, str], int]  # (hash key, field) -> amount
    penalties: Mapping[str, int]  # domain -> moderator spam labels (each lowers its reputation)
    domains: frozenset[str]  # domains whose counters it changes
    ips: frozenset[str]  # IPs whose spam labels it changes


@dataclass(frozen=True, slots=True)
class Plan:
    """What a batch of feedback changes, event by event, so one round trip applies it."""

    changes: tuple[Change, ...]
    domains: frozenset[str]  # domains whose counters may change: re-check their ban rule
    ips: frozenset[str]  # likewise for IPs

    @property
    def increments(self) -> dict[tuple[str, str], int]:
        """The batch's increments, summed over its events."""
        total: Counter[tuple[str, str]] = Counter()
        for c in self.changes:
            total.update(c.increments)
        return dict(total)

    @property
    def penalties(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for c in self.changes:
            total.update(c.penalties)
        return dict(total)


@dataclass(frozen=True, slots=True)
class Applied:
    """The counters the ban rules need, read right after a batch was applied."""

    domains: Mapping[str, DomainCounts]
    ip_spam_labels: Mapping[str, int]
    duplicates: int  # events skipped: they had been applied before (a redelivery)


@dataclass(frozen=True, slots=True)
class Bans:
    domains: frozenset[str]
    ips: frozenset[str]

    def __bool__(self) -> bool:
        return bool(self.domains or self.ips)


def change(event_id: str, e: FeedbackEvent, ks: Keyspace) -> Change:
    """Counter updates for one event. Only spam feedback counts: "ham" is acknowledged but is
    no evidence either way, and counters are history, so it never subtracts."""
    inc: Counter[tuple[str, str]] = Counter()
    penalties: Counter[str] = Counter()
    domains: set[str] = set()
    ips: set[str] = set()
    if e.label == "spam":
        confirmed = e.kind == "moderator_label"
        inc[ks.user(e.user_id), SPAM_POSTS if confirmed else REPORTS] += 1
        links = extract_links("", e.urls)
        for link in links:
            inc[ks.url(link.url), REPORTS] += 1
        # Several links to one domain are still one report about that domain.
        domains = {link.domain for link in links}
        for domain in domains:
            inc[ks.domain(domain), REPORTS] += 1
            if confirmed:
                inc[ks.domain(domain), SPAM_LABELS] += 1
                penalties[domain] += 1
        if confirmed and e.ip is not None:
            inc[ks.ip(str(e.ip)), SPAM_POSTS] += 1
            ips.add(str(e.ip))
    return Change(event_id, dict(inc), dict(penalties), frozenset(domains), frozenset(ips))


def plan(events: Mapping[str, FeedbackEvent], ks: Keyspace) -> Plan:
    """The changes of a batch of events, keyed by event id."""
    changes = tuple(c for event_id, e in events.items() if (c := change(event_id, e, ks)).increments)
    return Plan(
        changes,
        frozenset(d for c in changes for d in c.domains),
        frozenset(ip for c in changes for ip in c.ips),
    )


def domain_banned(c: DomainCounts, t: BanThresholds) -> bool:
    return c.spam_labels >= t.domain_spam_labels or (
        c.reports >= t.domain_reports and c.spam_labels >= t.domain_reports_spam_labels
    )


def decide_bans(domains: Mapping[str, DomainCounts], ip_spam_labels: Mapping[str, int], t: BanThresholds) -> Bans:
    """Given the counters after the batch, the domains and IPs that must be banned."""
    return Bans(
        frozenset(d for d, c in domains.items() if domain_banned(c, t)),
        frozenset(ip for ip, n in ip_spam_labels.items() if n >= t.ip_spam_labels),
    )
