"""Feedback -> counter updates and ban decisions (pure logic)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from schemas import FeedbackEvent
from workers.keyspace import Keyspace
from workers.reputation import BanThresholds, DomainCounts, decide_bans, domain_banned, plan

KS = Keyspace("t:")
T = BanThresholds(domain_spam_labels=3, domain_reports=20, domain_reports_spam_labels=2, ip_spam_labels=5)


def event(kind: str = "moderator_label", label: str = "spam", **fields: Any) -> FeedbackEvent:
    base = {
        "kind": kind,
        "post_id": "p1",
        "user_id": "u1",
        "actor_id": "a1",
        "label": label,
        "urls": ["https://www.Evil.co.uk/x", "http://evil.co.uk/y"],
        "ip": "198.51.100.9",
        "created_at": datetime(2025, 1, 1, tzinfo=UTC),
    }
    return FeedbackEvent.model_validate({**base, **fields}, strict=False)


def ids(*events: FeedbackEvent) -> dict[str, FeedbackEvent]:
    return {f"e{i}": e for i, e in enumerate(events)}


def test_moderator_spam_label_counts_every_entity_once() -> None:
    p = plan(ids(event()), KS)
    assert p.increments == {
        ("t:user:u1", "spam_posts"): 1,
        ("t:url:https://www.evil.co.uk/x", "reports"): 1,  # the key the moderation worker enriches with
        ("t:url:http://evil.co.uk/y", "reports"): 1,
        ("t:domain:evil.co.uk", "reports"): 1,  # two links, one domain: one report
        ("t:domain:evil.co.uk", "spam_reports"): 1,
        ("t:ip:198.51.100.9", "spam_posts"): 1,
    }
    assert p.penalties == {"evil.co.uk": 1}
    assert (p.domains, p.ips) == ({"evil.co.uk"}, {"198.51.100.9"})


def test_user_report_is_a_report_not_a_confirmed_spam() -> None:
    p = plan(ids(event(kind="user_report")), KS)
    assert p.increments == {
        ("t:user:u1", "reports"): 1,
        ("t:url:https://www.evil.co.uk/x", "reports"): 1,
        ("t:url:http://evil.co.uk/y", "reports"): 1,
        ("t:domain:evil.co.uk", "reports"): 1,
    }
    assert not p.penalties and not p.ips
    assert p.domains == {"evil.co.uk"}  # reports alone can cross the report rule


@pytest.mark.parametrize("kind", ["user_report", "moderator_label"])
def test_ham_changes_nothing(kind: str) -> None:
    p = plan(ids(event(kind=kind, label="ham")), KS)
    assert not p.increments and not p.penalties and not p.domains and not p.ips


def test_batch_aggregates_and_tolerates_missing_ip_and_urls() -> None:
    p = plan(ids(event(), event(actor_id="a2"), event(urls=[], ip=None)), KS)
    assert p.increments[("t:user:u1", "spam_posts")] == 3
    assert p.increments[("t:domain:evil.co.uk", "spam_reports")] == 2
    assert p.increments[("t:ip:198.51.100.9", "spam_posts")] == 2
    assert p.penalties == {"evil.co.uk": 2}


def test_each_event_is_its_own_change_under_its_id() -> None:
    p = plan({"a": event(), "b": event(kind="user_report"), "c": event(label="ham")}, KS)
    assert [c.event_id for c in p.changes] == ["a", "b"]  # ham changes nothing: no marker needed
    assert p.changes[0].penalties == {"evil.co.uk": 1} and not p.changes[1].penalties


def test_defanged_urls_key_like_the_moderation_worker() -> None:
    p = plan(ids(event(urls=["hxxp://bad[.]example[.]com/p"])), KS)
    assert ("t:domain:example.com", "reports") in p.increments
    assert ("t:url:http://bad.example.com/p", "reports") in p.increments


@pytest.mark.parametrize(
    ("reports", "spam_labels", "banned"),
    [
        (0, 3, True),  # enough moderator labels on their own
        (2, 2, False),
        (19, 2, False),  # not enough reports yet
        (20, 2, True),  # reports confirmed by two moderators
        (50, 1, False),  # reports alone never ban: users can brigade
    ],
)
def test_domain_rule(reports: int, spam_labels: int, banned: bool) -> None:
    assert domain_banned(DomainCounts(reports, spam_labels), T) is banned


def test_decide_bans_picks_only_entities_over_thresholds() -> None:
    bans = decide_bans(
        {"bad.example": DomainCounts(3, 3), "ok.example": DomainCounts(5, 1)},
        {"192.0.2.1": 5, "192.0.2.2": 4},
        T,
    )
    assert (bans.domains, bans.ips) == ({"bad.example"}, {"192.0.2.1"})
    assert bans
    assert not decide_bans({"ok.example": DomainCounts(1, 0)}, {}, T)
