"""The loop trial's history at a chosen share of spam."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from modstream.harness.trial import with_spam_share
from training.corpora.platforms import LabelledPost

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_the_history_at_a_spam_share_spreads_both_classes_over_the_latest_stretch() -> None:
    posts = [LabelledPost(T0 + timedelta(hours=i), f"t{i}", i % 3 == 0) for i in range(30)]  # spam: 0, 3, ..., 27
    picked = with_spam_share(posts, 8, 0.5)
    assert [p.text for p in picked if p.spam] == ["t18", "t21", "t24", "t27"]  # the stretch from t18 holds 4 spam
    ham = [int(p.text[1:]) for p in picked if not p.spam]
    assert len(ham) == 4 and all(18 < i <= 29 for i in ham)  # sampled from the same stretch, not the latest 4
    assert picked == sorted(picked, key=lambda p: p.posted_at)
    with pytest.raises(ValueError, match="11 posts at 100% spam asked of 30"):
        with_spam_share(posts, 11, 1.0)  # ten spam there are
