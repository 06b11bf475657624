"""The retrain's gate: Wilson bounds at the sample size there is, a review ceiling, and how many
more labels an unsettled bound needs."""

from __future__ import annotations

import numpy as np
import pytest

from modstream.loop.gate import (
    REVIEW_FLOOR,
    Gate,
    Outcome,
    Side,
    Workload,
    needed,
    paired,
    settled,
    sign_test,
    wilson,
)
from workers.model_cards import Thresholds


def side(n: int, spam: int, spam_blocked: int, ham_blocked: int, review: int) -> Side:
    return Side(n, spam, n - spam, spam_blocked, ham_blocked, review, roc_auc=0.9)


def test_wilson_bounds() -> None:
    lo, hi = wilson(0, 220, 0.95)
    assert lo == 0 and hi == pytest.approx(1.645**2 / (220 + 1.645**2), rel=1e-3)  # the rule of three's cousin
    lo, hi = wilson(75, 75, 0.95)
    assert hi == pytest.approx(1) and lo == pytest.approx(0.965, abs=1e-3)
    assert wilson(30, 100, 0.95)[0] == pytest.approx(1 - wilson(70, 100, 0.95)[1])  # symmetric
    assert wilson(30, 100, 0.99)[0] < wilson(30, 100, 0.95)[0] < 0.3 < wilson(30, 100, 0.95)[1]


def test_the_sign_test_is_the_binomial_tail() -> None:
    assert sign_test(0, 0) == 1.0 and sign_test(3, 3) == 1 / 8 and sign_test(2, 3) == 4 / 8
    assert sign_test(15, 20) == pytest.approx(0.020695, abs=1e-6)


def test_how_many_more_settles_a_bound_at_the_rate_seen() -> None:
    assert settled(0, 220, 0.01, 0.95) is None  # 0 of 220 ham blocked cannot show <= 1%
    more = needed(0, 220, 0.01, 0.95)
    assert more is not None and settled(0, 220 + more, 0.01, 0.95) is True
    assert settled(0, 220 + more - 1, 0.01, 0.95) is None  # the fewest that settle it
    assert settled(20, 100, 0.01, 0.95) is False  # surely above
    assert needed(1, 100, 0.01, 0.95) is None  # right on the limit: no sample size tells


def test_a_challenger_sending_77_percent_to_review_is_not_better_whatever_its_precision() -> None:
    champion = side(4000, 1000, 280, 0, 80)
    challenger = side(4000, 1000, 900, 0, 3080)  # the README loop's model: 77% of posts to review
    j = Gate().judge(challenger, champion, won=620, lost=0)
    assert j.outcome is Outcome.NOT_BETTER and not j.better
    assert j.review_ceiling == REVIEW_FLOOR  # the champion reviewed 2%: the floor holds
    assert "77.0% of posts to review, over the ceiling 10.0%" in j.line()


def test_the_review_share_is_judged_where_the_models_that_ship_decide() -> None:
    """The earlier rows are decided by fold models that read fewer posts surely: their review share
    is no forecast of the shipped bundle's. Given where the models that ship decide, the gate judges
    the share there."""
    champion = side(1600, 500, 100, 0, 80)
    folds_review_more = side(1600, 500, 400, 2, 210)  # 13.1% of every label, by the fold models
    right_now = Workload(25, 320, "the latest 320 posts")  # 7.8%, by the models that ship
    assert Gate().judge(folds_review_more, champion, 300, 0, workload=right_now).better
    flooding = Workload(64, 320, "the latest 320 posts")  # 20%: a model to refuse
    j = Gate().judge(side(1600, 500, 400, 2, 100), champion, 300, 0, workload=flooding)
    assert j.outcome is Outcome.NOT_BETTER
    assert "sends 20.0% of the latest 320 posts to review, over the ceiling 10.0%" in j.line()
    assert not Gate().judge(folds_review_more, champion, 300, 0).better  # none given: every label's share


def test_the_review_ceiling_is_the_champions_share_when_higher_or_as_given() -> None:
    champion = side(4000, 1000, 280, 0, 800)  # 20% to review
    challenger = side(4000, 1000, 950, 2, 720)
    assert Gate().judge(challenger, champion, 670, 2).better
    j = Gate(max_review_share=0.15).judge(challenger, champion, 670, 2)
    assert j.review_ceiling == 0.15 and "over the ceiling 15.0%" in j.line()


def test_too_few_labels_to_tell_says_how_many_more_rather_than_passing() -> None:
    champion = side(300, 80, 20, 0, 10)
    challenger = side(300, 80, 76, 0, 12)  # no ham blocked, but 220 ham cannot show <= 1%
    j = Gate().judge(challenger, champion, won=56, lost=0)
    assert j.outcome is Outcome.TOO_FEW_LABELS and not j.better
    assert j.more_labels == pytest.approx(48 * 300 / 220, abs=1)  # 48 more ham, at 220 ham in 300 posts
    assert (
        j.line().startswith("too few labels to tell (ham blocked 0/220") and f"about {j.more_labels} more" in j.line()
    )
    assert Gate(confidence=0.9).judge(challenger, champion, 56, 0).better  # a looser bound settles it


def test_blocking_ham_or_no_gain_fails_when_the_bound_says_so() -> None:
    champion = side(3000, 800, 700, 2, 100)
    blocks_ham = side(3000, 800, 780, 60, 100)  # 2.7% of ham blocked: surely over 1%
    assert "ham blocked 60/2200" in Gate().judge(blocks_ham, champion, 80, 58).line()
    assert "no better than the champion" in Gate().judge(champion, champion, 0, 0).line()


def test_a_champion_over_the_limits_is_no_bar_for_one_within_them() -> None:
    champion = side(3000, 800, 780, 300, 0)  # blocks most spam, and 14% of the ham
    careful = side(3000, 800, 400, 0, 250)  # half the spam blocked, no ham; the rest to review
    j = Gate().judge(careful, champion, won=300, lost=680)  # the sign test alone would say "not better"
    assert j.better and j.champion_broken == ["ham blocked 300/2200 (95% bound 12.48%) over 1.00%",
                                              "ham among blocked 300/1080 (95% bound 25.59%) over 5.00%"]  # fmt: skip
    assert j.line().startswith("better: every bound holds, and the champion's do not (ham blocked 300/2200")


def test_paired_counts_the_posts_only_one_model_gets_right() -> None:
    y = np.array([1, 1, 1, 0, 0, 0])
    new = np.array([0.9, 0.9, 0.1, 0.1, 0.1, 0.9])  # catches two spam, blocks one ham
    old = np.array([0.9, 0.1, 0.1, 0.1, 0.1, 0.1])  # catches one spam
    th = Thresholds(block=0.8, allow=0.2)
    challenger, champion, won, lost = paired(y, (new, th), (old, th))
    assert (won, lost) == (1, 1)  # the second spam against the blocked ham
    assert (challenger.spam_blocked, challenger.ham_blocked, champion.spam_blocked) == (2, 1, 1)
    assert challenger.block_f1 == pytest.approx(2 * 2 / (3 + 3))
