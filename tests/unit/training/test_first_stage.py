"""The cascade's first-stage cuts: where its decisions are shown to agree with the full model's."""

import numpy as np

from training.decision_model import (
    Agreement,
    Fitted,
    agreeing_cut,
    agreeing_cuts,
    first_stage,
    fit,
    without_transformer,
)
from workers.model_cards import Thresholds
from workers.state.features import FEATURES

WIDE = Thresholds(block=0.0, allow=1.0)  # full-model cuts that hold nothing back


def test_the_cuts_go_as_far_as_the_full_model_is_shown_to_agree() -> None:
    p1 = np.linspace(0.0, 1.0, 1000)
    full = ["allow"] * 600 + ["review"] * 100 + ["block"] * 300
    full[700] = "review"  # one disagreement just inside the block side
    assert agreeing_cut(p1, full, "allow", 0.995, 0.95) == p1[599]
    # The block side's 299 agreeing posts cannot show 99.5%; they show 99%, up to the disagreement.
    assert agreeing_cut(p1, full, "block", 0.995, 0.95) is None
    assert agreeing_cut(p1, full, "block", 0.99, 0.95) == p1[701]


def test_598_agreeing_posts_are_the_fewest_that_show_99_5_percent() -> None:
    for n, shown in ((597, False), (598, True)):
        p1 = np.linspace(0.0, 0.1, n)
        assert (agreeing_cut(p1, ["allow"] * n, "allow", 0.995, 0.95) is not None) == shown


def test_tied_scores_are_never_split_and_no_agreeing_cut_decides_nothing() -> None:
    p1 = np.array([0.1] * 700 + [0.9])
    full = ["allow"] * 699 + ["review", "block"]
    # 699 agreeing posts would show 99.5%, but the 700th has the same score: the cut takes all or none.
    assert agreeing_cut(p1, full, "allow", 0.995, 0.95) is None
    th = agreeing_cuts(p1, full, Agreement(), WIDE, np.zeros(len(p1), dtype=int))
    assert {th.classify(float(p)) for p in p1} == {"review"}


def test_the_first_stage_never_allows_or_blocks_past_the_full_models_own_cuts() -> None:
    """On a few weeks of labels its agreement can stretch its allow cut to posts it calls 45% spam
    (the loop trial); a first stage that reads no text must not allow what the full model would not."""
    p1 = np.linspace(0.0, 0.9, 2000)
    full = ["allow"] * 1800 + ["block"] * 200
    HAM = np.zeros(2000, dtype=int)
    th = agreeing_cuts(p1, full, Agreement(), Thresholds(block=0.95, allow=0.1), HAM)
    assert th.allow == 0.1 and th.block == 1.0
    assert agreeing_cuts(p1, full, Agreement(), WIDE, HAM).allow > 0.5


def test_the_first_stage_allows_only_where_the_labels_show_its_allowed_posts_ham() -> None:
    """A full model that allows some spam (its review budget) is agreed with there by a first stage
    that cannot read the text: the labels keep the first stage's allow cut below that spam."""
    p1 = np.linspace(0.0, 0.5, 2000)
    full = ["allow"] * 2000
    y = np.zeros(2000, dtype=int)
    y[1500::10] = 1  # spam among the full model's allows, from p1 0.375 on
    th = agreeing_cuts(p1, full, Agreement(), WIDE, y)
    allowed = p1 < th.allow
    assert y[allowed].mean() <= 0.005 and allowed.sum() > 1500  # its allowed posts ham at 99.5%
    assert agreeing_cuts(p1, full, Agreement(), WIDE, np.zeros(2000, dtype=int)).allow > 0.5


def test_a_spam_the_full_model_reviews_does_not_hold_back_the_block_cut_and_a_ham_does() -> None:
    """Among the first stage's surest posts, a spam the full model only reviews is no reason not to
    block there; a ham it reviews is: the block cut stops above it."""
    p1 = np.linspace(0.0, 1.0, 4000)
    full = ["allow"] * 2000 + ["block"] * 2000
    y = np.r_[np.zeros(2000, dtype=int), np.ones(2000, dtype=int)]
    full[3900] = "review"  # a spam, among the surest hundred
    assert agreeing_cuts(p1, full, Agreement(), WIDE, y).block == p1[2000]
    y[3900] = 0  # the twin: a ham there
    assert agreeing_cuts(p1, full, Agreement(), WIDE, y).block == 1.0  # 99 agreeing posts above show nothing


def test_the_first_stage_agrees_with_the_decisions_the_worker_serves_its_rules_included() -> None:
    """A full model that allows on the account alone would be agreed with by a first stage reading the
    same account; the worker never allows a post the transformer reads as spam (rule ``text_model``),
    so the first stage must leave those posts to it. Its twin, where the transformer reads every post
    as ham, allows as before."""
    rng = np.random.default_rng(3)
    x = rng.random((6000, len(FEATURES)))
    old = x[:, FEATURES.index("user_age_days")] > 0.5
    y = (~old).astype(int)  # the labels follow the account
    t, v = slice(0, 3000), slice(3000, 6000)
    full = Fitted(fit(x[t], y[t], x[v], y[v]).booster, Thresholds(block=0.9, allow=0.1))
    # The transformer reads a third of the old accounts' posts as spam; the first stage cannot see it.
    x[:, FEATURES.index("text_spam_prob")] = np.where(old & (rng.random(6000) < 0.3), 0.9, 0.1)
    x[:, FEATURES.index("text_ngram_spam_prob")] = 0.1
    first = first_stage(x[t], y[t], x[v], y[v], full, Agreement())
    assert (first.predict(without_transformer(x[v])) < first.thresholds.allow).sum() < 30
    x[:, FEATURES.index("text_spam_prob")] = 0.1
    again = first_stage(x[t], y[t], x[v], y[v], full, Agreement())
    assert (again.predict(without_transformer(x[v])) < again.thresholds.allow).sum() > 1000


def test_the_first_stage_learns_the_served_decisions_so_a_cheap_reading_of_them_widens_its_allow() -> None:
    """Where the n-gram model reads what the transformer will (here: a text the transformer reads as
    spam reads 0.45 to the n-gram, under the n-gram's own spam reading), a first stage learning the
    labels alone still calls every old account's post ham and cannot agree with the worker on any
    allow; learning the worker's decisions, it allows the old accounts' other posts. Its twin is the
    test above: an n-gram reading that tells nothing leaves those posts to the transformer."""
    rng = np.random.default_rng(5)
    x = rng.random((6000, len(FEATURES)))
    old = x[:, FEATURES.index("user_age_days")] > 0.5
    y = (~old).astype(int)
    t, v = slice(0, 3000), slice(3000, 6000)
    full = Fitted(fit(x[t], y[t], x[v], y[v]).booster, Thresholds(block=0.9, allow=0.1))
    spammy = old & (rng.random(6000) < 0.3)
    x[:, FEATURES.index("text_spam_prob")] = np.where(spammy, 0.9, 0.1)
    x[:, FEATURES.index("text_ngram_spam_prob")] = np.where(spammy, 0.45, 0.1)
    first = first_stage(x[t], y[t], x[v], y[v], full, Agreement())
    allowed = first.predict(without_transformer(x[v])) < first.thresholds.allow
    assert allowed.sum() > 800
    assert not (allowed & spammy[v]).any()
