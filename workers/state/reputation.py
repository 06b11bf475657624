"""Feedback -> reputation counters, reporters' records and bans. Pure logic: no I/O, so
thresholds and weights are unit-tested.

Each event's change is applied at most once, under its event id (the store keeps a
marker per applied event), so a redelivered batch leaves the counters exact.

A user report is a vote, not a decision: it counts once per reporter and target (the poster,
each URL, each domain, the post itself; for as long as the store keeps its markers, the applied
TTL), weighted by the reporter's record of reports that moderators confirmed or refuted. A
moderator's label is a decision: it counts in full every time, and marks the record of the
accounts that reported the post, once per reporter and post: a ham label refutes each of them, a
spam label confirms at most :data:`CONFIRMED_PER_LABEL`, so weight is earned over many targets.

Field names are the ones :mod:`workers.state.features` reads, and keys come from the
:class:`Keyspace` and :func:`extract_links`, so what the feedback worker writes is
exactly what the moderation worker enriches with.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from schemas import FeedbackEvent
from workers.state.keyspace import Keyspace
from workers.text.urls import POPULAR, SHARED, extract_links

# Hash fields. "reports"/"spam_posts" feed features; "spam_reports" (moderator spam
# labels per domain) is the feedback worker's own, used only for ban decisions.
REPORTS = "reports"  # weighted: a float
SPAM_POSTS = "spam_posts"
SPAM_LABELS = "spam_reports"
REPUTATION = "reputation"
# A reporter's record (Keyspace.reporter): their reported posts that moderators labelled spam, and ham.
CONFIRMED = "confirmed"
REFUTED = "refuted"

# What a report counts once per reporter: metric labels, and Applied's keys.
USER, URL, DOMAIN, POST = "user", "url", "domain", "post"

# A reporter's weight is the share of their labelled reports that moderators confirmed, after
# a prior of this many confirmed and refuted ones. The prior is low: a new account weighs about
# 0.02, so a crowd of throwaway accounts adds little (300 add about 6) while a record earns
# weight (20 confirmed: 0.95) and a record of mostly refuted reports weighs next to nothing.
PRIOR_CONFIRMED = 0.02
PRIOR_REFUTED = 1.0
# The reporters one spam label confirms, at most: a brigade that piles onto one blatant spam post
# cannot earn its weight there all at once. Which ones is a hash of reporter and post: stable
# under redelivery, and no reporter can choose to be among them. A ham label refutes them all.
CONFIRMED_PER_LABEL = 3
# How long a post's reporters are kept for its label to judge them (and each judgement's
# marker, so a later label of the post cannot judge them again).
REPORTERS_TTL_S = 30 * 24 * 3600


@dataclass(frozen=True, slots=True)
class BanThresholds:
    domain_spam_labels: int  # ban a domain on this many moderator spam labels...
    domain_reports: int  # ...or on this many reports (weighted users' and moderators')...
    domain_reports_spam_labels: int  # ...once moderators confirmed at least this many
    ip_spam_labels: int  # ban an IP on this many moderator spam labels


@dataclass(frozen=True, slots=True)
class DomainCounts:
    reports: float
    spam_labels: int


@dataclass(frozen=True, slots=True)
class ReporterRecord:
    """How many of an account's reported posts moderators labelled spam (confirmed) and ham (refuted)."""

    confirmed: int = 0
    refuted: int = 0

    @property
    def weight(self) -> float:
        """What one report of theirs counts (see PRIOR_CONFIRMED)."""
        return (self.confirmed + PRIOR_CONFIRMED) / (self.confirmed + self.refuted + PRIOR_CONFIRMED + PRIOR_REFUTED)


@dataclass(frozen=True, slots=True)
class Reporters:
    """What a batch's plan needs to know of reporters, read from the store before it is applied."""

    records: Mapping[str, ReporterRecord] = field(default_factory=dict)  # reporter -> record (absent: new)
    of_posts: Mapping[str, frozenset[str]] = field(default_factory=dict)  # labelled post -> its reporters


NEW_REPORTERS = Reporters()  # nothing known: every reporter is new, no post was reported before


@dataclass(frozen=True, slots=True)
class Report:
    """A user's spam report: ``weight`` onto each target's reports, once per reporter and target."""

    reporter: str
    post_id: str
    weight: float  # from the reporter's record as the batch was planned
    targets: Mapping[str, str]  # hash key -> USER, URL or DOMAIN


@dataclass(frozen=True, slots=True)
class Judgement:
    """A moderator's label of a reported post: CONFIRMED or REFUTED onto each reporter's record."""

    post_id: str
    outcome: str
    reporters: frozenset[str]


@dataclass(frozen=True, slots=True)
class Change:
    """What one feedback event changes. Applied at most once, under its event id."""

    event_id: str
    increments: Mapping[tuple[str, str], int]  # (hash key, field) -> amount, applied in full
    penalties: Mapping[str, int]  # domain -> moderator spam labels (each lowers its reputation)
    domains: frozenset[str]  # domains whose counters it changes
    ips: frozenset[str]  # IPs whose spam labels it changes
    report: Report | None = None
    judgement: Judgement | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """What a batch of feedback changes, event by event, so one round trip applies it."""

    changes: tuple[Change, ...]
    domains: frozenset[str]  # domains whose counters may change: re-check their ban rule
    ips: frozenset[str]  # likewise for IPs

    @property
    def increments(self) -> dict[tuple[str, str], float]:
        """The batch's counter increments, summed over its events, as a store that has seen none
        of its reporters counts them: a report counts once per reporter and target."""
        total: defaultdict[tuple[str, str], float] = defaultdict(float)
        reported: set[tuple[str, str]] = set()
        for c in self.changes:
            for counter, amount in c.increments.items():
                total[counter] += amount
            if c.report is not None:
                for key in c.report.targets:
                    if (c.report.reporter, key) not in reported:
                        reported.add((c.report.reporter, key))
                        total[key, REPORTS] += c.report.weight
        return dict(total)

    @property
    def penalties(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for c in self.changes:
            total.update(c.penalties)
        return dict(total)


@dataclass(frozen=True, slots=True)
class Applied:
    """The counters the ban rules need, read right after a batch was applied, and what its
    reports and judgements counted."""

    domains: Mapping[str, DomainCounts]
    ip_spam_labels: Mapping[str, int]
    duplicates: int  # events skipped: they had been applied before (a redelivery)
    # Once-only items by what they count, report targets (USER, URL, DOMAIN, POST) and judgements
    # (CONFIRMED, REFUTED): counted now, and skipped because their reporter had been counted there.
    counted: Mapping[str, int]
    repeated: Mapping[str, int]
    weights: tuple[float, ...]  # the weight of each report counted now (the first of its reporter on its post)


@dataclass(frozen=True, slots=True)
class Bans:
    domains: frozenset[str]
    ips: frozenset[str]

    def __bool__(self) -> bool:
        return bool(self.domains or self.ips)


def wanted(events: Collection[FeedbackEvent]) -> tuple[frozenset[str], frozenset[str]]:
    """What a batch's plan needs from the store: the records of its spam reports' reporters, and
    the reporters of the posts its moderators labelled."""
    reporters = frozenset(e.actor_id for e in events if e.kind == "user_report" and e.label == "spam")
    return reporters, frozenset(e.post_id for e in events if e.kind == "moderator_label")


def change(event_id: str, e: FeedbackEvent, ks: Keyspace, weight: float, reporters: frozenset[str]) -> Change:
    """What one event changes, given its reporter's weight (a report) or the post's reporters so
    far (a label). Counters are history, so nothing subtracts: a "ham" report is no evidence either
    way, and a "ham" label only refutes the post's reporters."""
    spam = e.label == "spam"
    links = extract_links("", e.urls) if spam else []
    # Several links to one domain are still one report about that domain. A popular host, a link
    # redirector or a shared host is a platform, not a party to the post (what its links show is
    # someone else's): reports and labels count on the URL and the poster, never against the host,
    # which no label count bans.
    domains = frozenset(link.domain for link in links if link.domain not in POPULAR and link.domain not in SHARED)
    if e.kind == "user_report":
        targets = {ks.user(e.user_id): USER} | {ks.url(link.url): URL for link in links}
        targets |= {ks.domain(domain): DOMAIN for domain in domains}
        report = Report(e.actor_id, e.post_id, weight, targets) if spam else None
        return Change(event_id, {}, {}, domains, frozenset(), report=report)
    inc: Counter[tuple[str, str]] = Counter()
    penalties: Counter[str] = Counter()
    ips: frozenset[str] = frozenset()
    if spam:
        inc[ks.user(e.user_id), SPAM_POSTS] += 1
        for link in links:
            inc[ks.url(link.url), REPORTS] += 1
        for domain in domains:
            inc[ks.domain(domain), REPORTS] += 1
            inc[ks.domain(domain), SPAM_LABELS] += 1
            penalties[domain] += 1
        if e.ip is not None:
            inc[ks.ip(e.ip), SPAM_POSTS] += 1
            ips = frozenset({e.ip})
    if spam:
        reporters = frozenset(sorted(reporters, key=lambda r: _draw(r, e.post_id))[:CONFIRMED_PER_LABEL])
    judgement = Judgement(e.post_id, CONFIRMED if spam else REFUTED, reporters) if reporters else None
    return Change(event_id, dict(inc), dict(penalties), domains, ips, judgement=judgement)


def _draw(reporter: str, post_id: str) -> bytes:
    return hashlib.blake2b(f"{reporter}\0{post_id}".encode(), digest_size=8).digest()


def plan(events: Mapping[str, FeedbackEvent], ks: Keyspace, known: Reporters = NEW_REPORTERS) -> Plan:
    """The changes of a batch of events, keyed by event id, given ``known`` (read before the
    batch: a reporter's weight is their record then). A label judges its post's reporters known
    before the batch and those earlier in it."""
    earlier: defaultdict[str, set[str]] = defaultdict(set)  # post -> its reporters earlier in the batch
    changes = []
    for event_id, e in events.items():
        weight = known.records.get(e.actor_id, ReporterRecord()).weight
        c = change(event_id, e, ks, weight, known.of_posts.get(e.post_id, frozenset()) | earlier[e.post_id])
        if c.report is not None:
            earlier[e.post_id].add(e.actor_id)
        if c.increments or c.report or c.judgement:
            changes.append(c)
    return Plan(
        tuple(changes),
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
