"""Feedback -> counter updates and ban decisions (pure logic)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from schemas import FeedbackEvent
from workers.state.keyspace import Keyspace
from workers.state.reputation import (
    CONFIRMED,
    DOMAIN,
    REFUTED,
    URL,
    USER,
    BanThresholds,
    DomainCounts,
    Judgement,
    Report,
    ReporterRecord,
    Reporters,
    decide_bans,
    domain_banned,
    plan,
    wanted,
)

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


def test_a_well_known_host_is_never_a_party_to_a_post_and_never_banned_by_label_counts() -> None:
    """Spam labels and reports on posts linking someone's video count on the URL and the poster, not
    on youtube.com: the false-positive twin of the domain counts above (evil.co.uk is counted)."""
    video = "https://www.youtube.com/watch?v=abc"
    labels = [event(post_id=f"p{i}", urls=[video]) for i in range(5)]
    reports = [event(kind="user_report", post_id=f"q{i}", actor_id=f"a{i}", urls=[video]) for i in range(300)]
    p = plan(ids(*labels, *reports), KS)
    assert not [k for k, _ in p.increments if "youtube.com" in k and k.startswith("t:domain:")]
    assert (p.domains, p.penalties) == (frozenset(), {})
    assert p.increments[KS.url(video), "reports"] == pytest.approx(5 + 300 * ReporterRecord().weight)


def test_user_report_is_a_report_not_a_confirmed_spam() -> None:
    p = plan(ids(event(kind="user_report")), KS)
    new = ReporterRecord().weight
    assert p.increments == {
        ("t:user:u1", "reports"): new,
        ("t:url:https://www.evil.co.uk/x", "reports"): new,
        ("t:url:http://evil.co.uk/y", "reports"): new,
        ("t:domain:evil.co.uk", "reports"): new,
    }
    assert not p.penalties and not p.ips
    assert p.domains == {"evil.co.uk"}  # reports alone can cross the report rule
    (c,) = p.changes
    assert c.report == Report(
        "a1",
        "p1",
        new,
        {
            "t:user:u1": USER,
            "t:url:https://www.evil.co.uk/x": URL,
            "t:url:http://evil.co.uk/y": URL,
            "t:domain:evil.co.uk": DOMAIN,
        },
    )
    assert not c.increments and c.judgement is None  # all of it counts once per reporter


@pytest.mark.parametrize(
    ("record", "weight"),
    [
        (ReporterRecord(), pytest.approx(0.0196, abs=1e-4)),  # a new account
        (ReporterRecord(confirmed=20), pytest.approx(0.952, abs=1e-3)),  # a trusted reporter
        (ReporterRecord(confirmed=1), pytest.approx(0.505, abs=1e-3)),
        (ReporterRecord(confirmed=2, refuted=30), pytest.approx(0.061, abs=1e-3)),  # mostly refuted
        (ReporterRecord(refuted=50), pytest.approx(0.0004, abs=1e-4)),
    ],
)
def test_a_reporter_weighs_by_their_record(record: ReporterRecord, weight: object) -> None:
    assert record.weight == weight
    assert ReporterRecord(record.confirmed + 1, record.refuted).weight > record.weight
    assert ReporterRecord(record.confirmed, record.refuted + 1).weight < record.weight


def test_a_report_weighs_its_reporters_record_as_read_before_the_batch() -> None:
    known = Reporters({"trusted": ReporterRecord(confirmed=20)})
    p = plan(ids(event(kind="user_report", actor_id="trusted"), event(kind="user_report", actor_id="new")), KS, known)
    assert [c.report.weight for c in p.changes if c.report] == [ReporterRecord(20).weight, ReporterRecord().weight]
    assert p.increments[KS.user("u1"), "reports"] == pytest.approx(ReporterRecord(20).weight + ReporterRecord().weight)


def test_one_reporter_counts_once_per_target_however_often_they_report() -> None:
    """Plan.increments as a store that saw none of these reporters counts: a reporter once per target."""
    reports = [event(kind="user_report", post_id=f"p{i}", urls=["https://forum.example.net/x/y"]) for i in range(300)]
    new = ReporterRecord().weight
    assert plan(ids(*reports), KS).increments == {
        (KS.user("u1"), "reports"): new,
        (KS.url("https://forum.example.net/x/y"), "reports"): new,
        (KS.domain("example.net"), "reports"): new,
    }
    crowd = [
        event(kind="user_report", post_id=f"p{i}", actor_id=f"a{i}", urls=["https://forum.example.net/x"])
        for i in range(300)
    ]
    assert plan(ids(*crowd), KS).increments[KS.domain("example.net"), "reports"] == pytest.approx(300 * new)
    assert 300 * new == pytest.approx(5.9, abs=0.1)  # a throwaway crowd adds little


@pytest.mark.parametrize(("label", "outcome"), [("spam", CONFIRMED), ("ham", REFUTED)])
def test_a_label_judges_the_posts_reporters_known_and_earlier_in_the_batch(label: str, outcome: str) -> None:
    known = Reporters(of_posts={"p1": frozenset({"old"})})
    p = plan(
        {
            "r1": event(kind="user_report", actor_id="early"),
            "r2": event(kind="user_report", actor_id="elsewhere", post_id="p2"),
            "l": event(label=label, actor_id="mod"),
            "r3": event(kind="user_report", actor_id="late"),  # after the decision: the next label's
        },
        KS,
        known,
    )
    (judged,) = (c for c in p.changes if c.judgement)
    assert judged.event_id == "l"
    assert judged.judgement == Judgement("p1", outcome, frozenset({"old", "early"}))
    assert bool(judged.increments) is (label == "spam")  # a label's own counting is unchanged


def test_a_label_of_a_post_nobody_reported_judges_nobody() -> None:
    (c,) = plan(ids(event()), KS, Reporters(of_posts={"p2": frozenset({"a9"})})).changes
    assert c.judgement is None


def test_wanted_names_the_reporters_and_the_labelled_posts() -> None:
    events = [
        event(kind="user_report", actor_id="r1"),
        event(kind="user_report", actor_id="r2", label="ham"),  # no evidence: no weight needed
        event(actor_id="mod", post_id="p7"),
        event(actor_id="mod", post_id="p8", label="ham"),
    ]
    assert wanted(events) == ({"r1"}, {"p7", "p8"})


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
    p = plan({"a": event(), "b": event(kind="user_report"), "c": event(label="ham", post_id="p2")}, KS)
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
        (19.99, 2, False),  # weighted reports: the sum is compared
        (20.01, 2, True),
    ],
)
def test_domain_rule(reports: float, spam_labels: int, banned: bool) -> None:
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
