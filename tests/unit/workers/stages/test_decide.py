import json
import math

import numpy as np
import pytest

from schemas import Decision, Reason
from tests.unit.fakes import tiny_decision_model
from training.decision_model import choose_thresholds, evaluate
from workers.config import CampaignAction
from workers.model_cards import Thresholds
from workers.stages.decide import DecisionModel, FloatArray, Unavailable, coordination, judge, top_reasons
from workers.state.features import DIRECTIONS, FEATURE_VERSION, FEATURES, ContractMismatch, PostFacts, Profile, assemble
from workers.state.signals import SIGNALS
from workers.text.trust import Trust


def _judge_one(
    model: DecisionModel, row: FloatArray, prob: float, contrib: FloatArray, action: CampaignAction
) -> tuple[Decision, list[Reason]]:
    """:func:`judge` of a batch of one row."""
    return judge(model, row[None], np.array([prob]), contrib[None], action)[0]


def test_thresholds_meet_their_targets_on_the_data_they_were_chosen_on() -> None:
    rng = np.random.default_rng(3)
    y = rng.random(5000) < 0.3
    p = np.clip(np.where(y, rng.normal(0.75, 0.15, 5000), rng.normal(0.25, 0.15, 5000)), 0, 1)
    th = choose_thresholds(y.astype(int), p, block_precision=0.99, allow_npv=0.995)
    ev = evaluate(y.astype(int), p, th)
    assert ev.block_precision >= 0.99 and ev.allow_npv >= 0.995
    assert th.allow <= th.block
    assert 0 < ev.review_share < 1


def test_threshold_cut_never_splits_tied_scores() -> None:
    y = np.array([1, 1, 0, 1, 0, 0])
    p = np.array([0.9, 0.8, 0.8, 0.5, 0.2, 0.1])
    th = choose_thresholds(y, p, block_precision=0.99, allow_npv=0.99)
    assert th.block == 0.9  # 0.8 is shared by a spam and a ham: cutting there gives precision 2/3
    assert 0.2 < th.allow <= 0.5


def test_unreachable_targets_block_nothing_and_allow_nothing() -> None:
    y, p = np.array([1, 0, 1, 0]), np.array([0.5, 0.5, 0.5, 0.5])
    th = choose_thresholds(y, p)
    assert Thresholds(th.block, th.allow).classify(0.5) == "review"


def test_classify_bands() -> None:
    th = Thresholds(block=0.9, allow=0.2)
    assert [th.classify(p) for p in (0.95, 0.9, 0.5, 0.2, 0.1)] == ["block", "block", "review", "review", "allow"]


def test_missing_history_stays_missing() -> None:
    facts = PostFacts(10, False, False, 0, None, None, [], 1.8e9)
    row = assemble(facts, Profile(), None)
    assert len(row) == len(FEATURES)
    for name in ("text_spam_prob", "user_age_days", "domain_age_days", "ip_spam_posts", "domain_risky_tld", *SIGNALS):
        assert math.isnan(row[FEATURES.index(name)]), name
    assert row[FEATURES.index("journey_direct_api")] == 1.0


def test_counts_and_ages_come_from_the_hashes_and_the_signals() -> None:
    facts = PostFacts(10, False, False, 1, "xyz", 2, [], 1.8e9)
    signals = tuple(float(i) for i in range(len(SIGNALS)))
    no_journey = SIGNALS.index("campaign_journey_users_1h")
    # The stream's first link two hours before the domain's: a first sighting of its own (and a new
    # stream, weeks short of dating it young: features.STREAM_HISTORY_DAYS).
    stream = signals[SIGNALS.index("domain_first_seen_hours")] + 2.0
    counted = (*(0.0 if i == no_journey else v for i, v in enumerate(signals)), 99.0, stream)  # COUNTED order
    prof = Profile(user={"created_at": str(1.8e9 - 10 * 86400), "spam_posts": "4"}, signals=counted)
    row = assemble(facts, prof, 0.7)
    assert row[FEATURES.index("user_age_days")] == pytest.approx(10)
    assert row[FEATURES.index("user_spam_posts")] == 4
    assert [row[FEATURES.index(name)] for name in SIGNALS] == list(counted[: len(SIGNALS)])  # no profile: unknown
    assert row[FEATURES.index("domain_risky_tld")] == 1.0
    assert row[FEATURES.index("text_spam_prob")] == 0.7


def test_worker_refuses_a_model_with_another_feature_contract(tmp_path) -> None:  # type: ignore[no-untyped-def]
    tiny_decision_model().booster.save_model(str(tmp_path / "model.txt"))
    card = {
        "features": [*FEATURES[:-1], "something_new"],
        "feature_version": "0123456789ab",
        "thresholds": {"block": 0.9, "allow": 0.1},
        "version": "x",
    }
    (tmp_path / "card.json").write_text(json.dumps(card))
    with pytest.raises(ContractMismatch, match="does not match"):
        DecisionModel.load(tmp_path)
    card |= {"features": list(FEATURES), "feature_version": FEATURE_VERSION}
    (tmp_path / "card.json").write_text(json.dumps(card))
    assert DecisionModel.load(tmp_path).thresholds.block == 0.9


def test_path_contributions_add_up_to_lightgbm_and_agree_with_shap() -> None:
    model = tiny_decision_model()
    rng = np.random.default_rng(1)
    x = rng.random((300, len(FEATURES)))
    x[rng.random(x.shape) < 0.2] = np.nan  # missing values take LightGBM's own default branches
    prob, contrib = model.predict(x)
    raw = model.booster.predict(x, raw_score=True)
    assert np.allclose(prob, 1 / (1 + np.exp(-raw)), atol=1e-9)
    shap = model.booster.predict(x, pred_contrib=True)[:, :-1]
    assert np.mean(np.argmax(np.abs(contrib), 1) == np.argmax(np.abs(shap), 1)) > 0.9


def test_reasons_are_the_top_three_contributions() -> None:
    row = np.zeros(len(FEATURES))
    contrib = np.zeros(len(FEATURES))
    contrib[FEATURES.index("text_spam_prob")] = 2.0
    contrib[FEATURES.index("user_spam_posts")] = -1.5
    contrib[FEATURES.index("journey_min_gap_ms")] = 1.0
    contrib[FEATURES.index("ip_posts_24h")] = 0.1
    reasons = top_reasons(row[None], contrib[None])[0]
    assert [r.code for r in reasons] == ["text_model", "user_history", "journey"]
    assert "+2.000" in reasons[0].detail


def test_unavailable_inputs_give_the_degraded_flag_and_reason() -> None:
    assert not Unavailable()
    both = Unavailable(redis=True, text_model=True)
    assert both and both.reason.code == "degraded"
    assert both.reason.detail == "decided without redis and text model"
    assert Unavailable(text_model=True).reason.detail == "decided without text model"


def test_more_accounts_sharing_a_link_never_raises_the_spam_score() -> None:
    """Trained on data where sharing goes with spam, the model still may not learn it (DIRECTIONS)."""
    from training.decision_model import fit

    rng = np.random.default_rng(5)
    x = rng.random((3000, len(FEATURES)))
    sharing = [FEATURES.index(f) for f, d in DIRECTIONS.items() if d < 0 and f != "domain_reputation"]
    y = (x[:, sharing].mean(axis=1) + 0.3 * x[:, FEATURES.index("text_spam_prob")] > 0.65).astype(int)
    fitted = fit(x[:2000], y[:2000], x[2000:], y[2000:])
    rows = x[2000:].copy()
    before = fitted.predict(rows)
    rows[:, sharing] = 1000.0  # everyone shares it
    assert (fitted.predict(rows) <= before + 1e-12).all()
    rows[:, FEATURES.index("text_spam_prob")] = 0.0  # and a lower text score never raises it either
    assert (fitted.predict(rows) <= before + 1e-12).all()


def test_worker_refuses_a_model_trained_without_the_directions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import lightgbm as lgb

    x = np.random.default_rng(0).random((200, len(FEATURES)))
    booster = lgb.train({"objective": "binary", "verbose": -1}, lgb.Dataset(x, (x[:, 0] > 0.5).astype(int)), 5)
    booster.save_model(str(tmp_path / "model.txt"))
    card = {"features": list(FEATURES), "feature_version": FEATURE_VERSION, "version": "x"}
    (tmp_path / "card.json").write_text(json.dumps(card | {"thresholds": {"block": 0.9, "allow": 0.1}}))
    with pytest.raises(ContractMismatch, match="monotone"):
        DecisionModel.load(tmp_path)


def test_a_verdict_the_campaign_signals_decided_gets_the_campaign_action_and_names_the_signal() -> None:
    model = tiny_decision_model()
    row = np.zeros(len(FEATURES))
    contrib = np.zeros(len(FEATURES))
    at = FEATURES.index("campaign_journey_users_1h")
    row[at], contrib[at] = 31.0, 4.0
    row[FEATURES.index("journey_steps")] = 3.0  # a scripted UI journey (no steps is no script)
    model.bias = -3.0  # allow without the campaign's push (-3 -> 0.05), review with it (+1 -> 0.73)
    prob = float(1 / (1 + np.exp(-(model.bias + contrib.sum()))))
    for action in ("review", "block"):
        decision, reasons = _judge_one(model, row, prob, contrib, action)  # type: ignore[arg-type]
        assert decision == action
        assert reasons[0].code == "campaign" and "campaign_journey_users_1h=31" in reasons[0].detail
    contrib[at] = 0.0  # no push: the model's own decision
    assert _judge_one(model, row, float(1 / (1 + np.exp(3.0))), contrib, "block")[0] == "allow"


@pytest.mark.parametrize(
    ("signal", "expected"),
    [("campaign_domain_copies_1h", "block"), ("campaign_neardup_users_24h", "allow")],
)
def test_a_harmless_text_cannot_buy_an_allow_for_a_wave_pointing_at_one_domain(signal: str, expected: str) -> None:
    """Many copies linking to one domain: the text's pull toward allow is bait, not counted, and the
    campaign takes the post out of allow. Near-copies without a link (greetings) sell nothing: their
    text counts as ever."""
    model = tiny_decision_model()
    row, contrib = np.zeros(len(FEATURES)), np.zeros(len(FEATURES))
    at, text = FEATURES.index(signal), FEATURES.index("text_ngram_spam_prob")
    row[at], contrib[at] = 23.0, 1.7
    row[text], contrib[text] = 0.03, -3.1  # a harmless text
    model.bias = 0.0  # the rest of the post: undecided (0.5, review)
    prob = float(1 / (1 + np.exp(-(model.bias + contrib.sum()))))
    assert model.thresholds.classify(prob) == "allow"  # 0.2: the text's pull wins
    decision, reasons = _judge_one(model, row, prob, contrib, "block")
    assert decision == expected
    assert (reasons[0].code == "campaign" and f"{signal}=23" in reasons[0].detail) == (expected == "block")


def test_the_discount_alone_never_blocks_a_post_in_a_wave_below_the_campaign_share() -> None:
    """A third of the domain's accounts repeating one another discounts the text's pull by a third;
    that may take a post to review, never to block: blocking for a wave is the campaign action's."""
    model = tiny_decision_model()
    row, contrib = np.zeros(len(FEATURES)), np.zeros(len(FEATURES))
    copies, text = FEATURES.index("campaign_domain_copies_1h"), FEATURES.index("text_ngram_spam_prob")
    row[copies], row[FEATURES.index("domain_users_1h")] = 3.0, 9.0  # a third of the accounts
    row[text], contrib[text] = 0.03, -9.0  # a harmless text pulls hard toward allow
    model.bias = 7.5  # with the text: -1.5 (0.18, allow); a third of its pull discounted: +1.5 (0.82, block)
    prob = float(1 / (1 + np.exp(-(model.bias + contrib.sum()))))
    assert model.thresholds.classify(prob) == "allow"
    decision, reasons = _judge_one(model, row, prob, contrib, "block")
    assert decision == "review" and "discounted" in reasons[0].detail


@pytest.mark.parametrize("value", [0.0, float("nan")])
def test_a_campaign_signal_that_saw_no_wave_is_no_campaign(value: float) -> None:
    """A post with no link has no journey-per-domain count (missing), a unique text a zero copy count:
    their contributions may still be positive, but they are not a campaign, and decide nothing."""
    model = tiny_decision_model()
    row, contrib = np.zeros(len(FEATURES)), np.zeros(len(FEATURES))
    at = FEATURES.index("campaign_journey_users_1h")
    row[at], contrib[at] = value, 4.0
    model.bias = -3.0
    prob = float(1 / (1 + np.exp(-(model.bias + contrib.sum()))))
    decision, reasons = _judge_one(model, row, prob, contrib, "block")
    assert decision == model.thresholds.classify(prob) == "review"
    assert not any("decided it" in r.detail for r in reasons)


def test_a_ham_blocked_cap_places_block_where_a_few_mislabelled_posts_would_push_a_precision_cut() -> None:
    rng = np.random.default_rng(4)
    y = (rng.random(1200) < 0.33).astype(int)
    p = np.clip(np.where(y == 1, rng.normal(0.8, 0.1, 1200), rng.normal(0.2, 0.1, 1200)), 0, 1)
    y[np.argsort(-p)[[5, 30, 60, 95]]] = 0  # four of the surest spam labelled ham, as noisy labels are
    strict = choose_thresholds(y, p, block_precision=0.99)
    capped = choose_thresholds(y, p, block_precision=0.95, max_ham_blocked=0.005)
    strict_ev, capped_ev = evaluate(y, p, strict), evaluate(y, p, capped)
    assert (p >= strict.block).sum() < 0.4 * y.sum()  # 99% precision is met only above the mislabelled ones
    assert (p[y == 1] >= capped.block).mean() > 0.9 and capped_ev.block_precision >= 0.95
    assert ((p >= capped.block) & (y == 0)).sum() <= 0.005 * (y == 0).sum()
    assert strict_ev.block_precision >= 0.99


def test_the_block_cut_holds_its_precision_for_posts_without_text_scores() -> None:
    """Text scores separate the classes with a wide gap; without them the other features overlap. The cut
    chosen with text alone can fall low in the gap; the served cut meets the target without text too."""
    from training.decision_model import block_unjudged_alike, choose_thresholds, fit, without_text

    rng = np.random.default_rng(3)
    n = 6000
    y = (rng.random(n) < 0.3).astype(int)
    x = np.full((n, len(FEATURES)), np.nan)
    for name in ("text_spam_prob", "text_ngram_spam_prob"):
        x[:, FEATURES.index(name)] = np.where(y == 1, rng.uniform(0.9, 1.0, n), rng.uniform(0.0, 0.1, n))
    x[:, FEATURES.index("user_age_days")] = rng.normal(np.where(y == 1, 5.0, 8.0), 2.0)
    train, valid = slice(0, 4000), slice(4000, n)
    x_train = np.where(rng.random((4000, 1)) < 0.2, without_text(x[train]), x[train])  # some rows unjudged
    fitted = fit(x_train, y[train], x[valid], y[valid])
    guarded = block_unjudged_alike(fitted, x[valid], y[valid])
    blind = fitted.predict(without_text(x[valid]))
    assert y[valid][blind >= fitted.thresholds.block].mean() < 0.99  # the cut chosen with text alone
    assert guarded.thresholds.block == max(fitted.thresholds.block, choose_thresholds(y[valid], blind).block)
    blocked = blind >= guarded.thresholds.block
    assert not blocked.any() or y[valid][blocked].mean() >= 0.99
    with_text = fitted.predict(x[valid]) >= guarded.thresholds.block
    assert y[valid][with_text].mean() >= 0.99 and with_text.sum() > 0.9 * y[valid].sum()  # text still blocks
    assert guarded.thresholds.allow <= guarded.thresholds.block


def _judged(model, row, contrib):  # type: ignore[no-untyped-def]
    prob = float(1 / (1 + np.exp(-(model.bias + contrib.sum()))))
    return model.thresholds.classify(prob), _judge_one(model, row, prob, contrib, "block")


def test_coincidental_copies_in_a_crowd_leave_the_texts_pull_and_a_campaigns_copies_do_not() -> None:
    """Coordination is graded: two matching reactions among sixty sharers change nothing (the crowd
    twin of the harmless-text test above); twenty copies among twenty accounts discount the text."""
    model = tiny_decision_model()
    model.bias = 0.0
    row, contrib = np.zeros(len(FEATURES)), np.zeros(len(FEATURES))
    names = ("campaign_domain_copies_1h", "domain_users_1h", "text_spam_prob")
    copies, users, text = (FEATURES.index(f) for f in names)
    row[copies], contrib[copies] = 2.0, 1.7
    row[users] = 60.0
    row[text], contrib[text] = 0.02, -3.5
    model_says, (decision, reasons) = _judged(model, row, contrib)
    assert model_says == decision == "allow" and reasons[0].code != "campaign"
    row[copies], row[users] = 20.0, 21.0
    assert _judged(model, row, contrib)[1][0] == "block"


@pytest.mark.parametrize(("steps", "expected"), [(3.0, 1.0), (0.0, 0.0)])
def test_a_shared_journey_counts_as_coordination_only_when_the_post_has_ui_steps(steps: float, expected: float) -> None:
    """Many platforms send no journey: posts without steps all share the empty one, which is no script."""
    row = np.full(len(FEATURES), np.nan)
    row[FEATURES.index("campaign_journey_users_1h")], row[FEATURES.index("domain_users_1h")] = 30.0, 30.0
    row[FEATURES.index("journey_steps")] = steps
    assert coordination(row) == expected


@pytest.mark.parametrize(("text", "expected"), [(0.65, "review"), (0.3, "allow")])
def test_a_human_paced_journey_cannot_allow_a_post_its_text_calls_spam(text: float, expected: str) -> None:
    """The journey is reported by the client, so a script can type at a human pace: it may lower the
    score, never to an allow for a text that reads as spam; an ordinary text with the same journey stays allowed."""
    model = tiny_decision_model()
    model.bias = 0.0
    row, contrib = np.zeros(len(FEATURES)), np.zeros(len(FEATURES))
    row[FEATURES.index("text_spam_prob")], contrib[FEATURES.index("text_spam_prob")] = text, 0.6
    for name in ("journey_total_ms", "journey_min_gap_ms"):
        row[FEATURES.index(name)], contrib[FEATURES.index(name)] = 4000.0, -1.8
    model_says, (decision, reasons) = _judged(model, row, contrib)
    assert model_says == "allow" and decision == expected
    assert (reasons[0].code == "sender_signals") == (expected != "allow")


@pytest.mark.parametrize(("text_push", "expected"), [(0.0, "review"), (3.0, "block")])
def test_reports_alone_never_block(text_push: float, expected: str) -> None:
    """300 reports lift a post at most to review; with evidence from the post itself it can still block."""
    model = tiny_decision_model()
    model.bias = -1.0
    row, contrib = np.zeros(len(FEATURES)), np.zeros(len(FEATURES))
    row[FEATURES.index("user_reports")], contrib[FEATURES.index("user_reports")] = 300.0, 3.0
    row[FEATURES.index("text_spam_prob")], contrib[FEATURES.index("text_spam_prob")] = 0.5, text_push
    model_says, (decision, reasons) = _judged(model, row, contrib)
    assert model_says == "block" and decision == expected
    assert (reasons[0].code == "reports_only") == (expected == "review")


@pytest.mark.parametrize(("links", "expected"), [(0.0, "review"), (1.0, "block")])
def test_the_copies_of_a_wave_without_a_link_never_block(links: float, expected: str) -> None:
    """A greeter in a wave of near-copies, from an address with a spam record: the copies may send the
    post to a person, never block it. With a link, copies with nothing else coordinated keep the model's
    block."""
    model = tiny_decision_model()
    model.bias = -1.0
    row, contrib = np.zeros(len(FEATURES)), np.zeros(len(FEATURES))
    near = FEATURES.index("campaign_neardup_users_24h")
    row[near], contrib[near] = 18.0, 3.0
    row[FEATURES.index("url_count")] = links
    model_says, (decision, reasons) = _judged(model, row, contrib)
    assert model_says == "block" and decision == expected
    assert ("without a link never blocks" in reasons[0].detail) == (expected == "review")


def test_a_campaign_typing_at_a_human_pace_cannot_buy_an_allow_with_its_journey() -> None:
    """The journey is the senders' choice as much as the text: in a coordinated wave both pulls are
    discounted; the same journey in a crowd with a coincidental copy keeps its pull."""
    model = tiny_decision_model()
    model.bias = -1.0
    row, contrib = np.zeros(len(FEATURES)), np.zeros(len(FEATURES))
    names = ("campaign_domain_copies_1h", "domain_users_1h", "journey_total_ms", "journey_steps")
    copies, users, pace, steps = (FEATURES.index(f) for f in names)
    row[copies], contrib[copies] = 20.0, 3.0
    row[users], row[steps] = 21.0, 4.0
    row[pace], contrib[pace] = 9000.0, -3.5
    model_says, (decision, reasons) = _judged(model, row, contrib)
    assert model_says == "allow" and decision == "block" and "decided it" in reasons[0].detail
    row[copies], row[users] = 1.0, 60.0
    assert _judged(model, row, contrib)[1][0] == "allow"


@pytest.mark.parametrize(
    ("history", "value", "expected"), [("domain_days_30d", 12.0, 0.5), ("domain_age_days", 4000.0, 0.5), (None, 0, 1.0)]
)
def test_copies_weigh_half_on_a_domain_with_a_history(history: str | None, value: float, expected: float) -> None:
    """A petition or a meme on a site people have shared for years is where crowds gather; a campaign's
    new domain has no history."""
    row = np.full(len(FEATURES), np.nan)
    row[FEATURES.index("campaign_domain_copies_1h")], row[FEATURES.index("domain_users_1h")] = 30.0, 30.0
    if history is not None:
        row[FEATURES.index(history)] = value
    assert coordination(row) == expected


@pytest.mark.parametrize(
    ("links", "text", "ngram", "expected"),
    [
        (1.0, None, None, "review"),  # no text model read it (a language none reads), with a link
        (0.0, None, None, "allow"),  # the twin: a greeting in that language, no link
        (1.0, 0.1, 0.1, "allow"),  # the twin: an English share of a link, read and ordinary
        (1.0, None, 0.1, "allow"),  # the twin: read by the n-gram model alone (first stage, withheld transformer)
    ],
)
def test_a_link_no_text_model_read_is_not_allowed_on_the_other_signals_alone(
    links: float, text: float | None, ngram: float | None, expected: str
) -> None:
    """A new platform's first day in a language the bundle cannot read: the journey and the account
    pull toward allow as they learned to beside a text score; a link is what can be judged without
    the language, so it goes to review, and everything else keeps the model's decision."""
    model = tiny_decision_model()
    model.bias = -3.0
    row, contrib = np.zeros(len(FEATURES)), np.zeros(len(FEATURES))
    row[FEATURES.index("url_count")] = links
    row[FEATURES.index("text_spam_prob")] = np.nan if text is None else text
    row[FEATURES.index("text_ngram_spam_prob")] = np.nan if ngram is None else ngram
    for name in ("journey_total_ms", "journey_min_gap_ms"):
        row[FEATURES.index(name)], contrib[FEATURES.index(name)] = 4000.0, -1.0
    model_says, (decision, reasons) = _judged(model, row, contrib)
    assert model_says == "allow" and decision == expected
    assert (reasons[0].code == "text_language") == (expected == "review")


@pytest.mark.parametrize(
    ("text", "ngram", "expected"),
    [
        (0.9, 0.1, "review"),  # the transformer reads spam, the n-gram model and the account say ham
        (0.1, 0.7, "review"),  # the other way round
        (None, 0.7, "review"),  # the first stage's row: the n-gram model alone reads spam
        (0.3, 0.2, "allow"),  # the twin: both read ham, the same account allows it
        (None, 0.2, "allow"),
    ],
)
def test_no_signal_allows_a_post_a_text_model_reads_as_spam(text: float | None, ngram: float, expected: str) -> None:
    """An old account's reputation may lower the score of a text that reads as spam, never to an
    allow without a person; an ordinary text from the same account stays allowed."""
    model = tiny_decision_model()
    model.bias = -1.0
    row, contrib = np.zeros(len(FEATURES)), np.zeros(len(FEATURES))
    row[FEATURES.index("text_spam_prob")] = np.nan if text is None else text
    row[FEATURES.index("text_ngram_spam_prob")] = ngram
    row[FEATURES.index("user_age_days")], contrib[FEATURES.index("user_age_days")] = 2000.0, -3.0
    model_says, (decision, reasons) = _judged(model, row, contrib)
    assert model_says == "allow" and decision == expected
    assert (reasons[0].code == "text_model") == (expected == "review")


@pytest.mark.parametrize(
    ("reading", "text", "expected"),
    [
        (0.9, 0.95, "review"),  # a platform's retrain held the rule to its surest readings
        (0.9, 0.7, "allow"),  # the twin below it: the platform's labels side with the account there
        (None, 0.99, "allow"),  # never: the labels side with the other signals wherever the two disagree
        (0.5, 0.7, "review"),  # the default
    ],
)
def test_a_bundles_spam_reading_says_from_what_text_score_the_rule_holds(
    reading: float | None, text: float, expected: str
) -> None:
    model = tiny_decision_model()
    model.bias, model.trust = -1.0, Trust(spam_reading=reading)
    row, contrib = np.zeros(len(FEATURES)), np.zeros(len(FEATURES))
    row[FEATURES.index("text_spam_prob")], row[FEATURES.index("text_ngram_spam_prob")] = text, 0.1
    row[FEATURES.index("user_age_days")], contrib[FEATURES.index("user_age_days")] = 2000.0, -3.0
    model_says, (decision, reasons) = _judged(model, row, contrib)
    assert model_says == "allow" and decision == expected
    assert (reasons[0].code == "text_model") == (expected == "review")


@pytest.mark.parametrize(
    ("confirmed", "text", "reports", "expected"),
    [
        (0.9, 0.95, 0.0, "block"),  # a platform's labels confirm the reading: nothing disagrees with it
        (0.9, 0.8, 0.0, "review"),  # the twin below it: the evidence is not sure
        (None, 0.99, 0.0, "review"),  # the default bundle: no platform's labels confirmed a reading
        (0.9, 0.95, 2.0, "review"),  # users' reports lifted it into review: the reading alone did not
    ],
)
def test_a_text_reading_the_platforms_labels_confirm_blocks_what_the_model_leaves_to_review(
    confirmed: float | None, text: float, reports: float, expected: str
) -> None:
    model = tiny_decision_model()
    model.bias, model.trust = -reports, Trust(spam_confirmed=confirmed)
    row, contrib = np.zeros(len(FEATURES)), np.zeros(len(FEATURES))
    row[FEATURES.index("text_spam_prob")], row[FEATURES.index("text_ngram_spam_prob")] = text, 0.1
    row[FEATURES.index("user_reports")], contrib[FEATURES.index("user_reports")] = 300.0 * (reports > 0), reports
    model_says, (decision, reasons) = _judged(model, row, contrib)
    assert model_says == "review" and decision == expected
    assert ("labels confirm" in reasons[0].detail) == (expected == "block")


@pytest.mark.parametrize(("copies", "expected"), [(3.0, "review"), (0.0, "block")])
def test_a_confirmed_text_reading_does_not_block_in_a_wave(copies: float, expected: str) -> None:
    """Blocking for a wave is the campaign action's: a crowd's post in review, with a few coincidental
    copies among sixty sharers, stays there whatever its text reads; its twin alone is blocked."""
    model = tiny_decision_model()
    model.bias, model.trust = 0.0, Trust(spam_confirmed=0.9)
    row, contrib = np.zeros(len(FEATURES)), np.zeros(len(FEATURES))
    names = ("campaign_domain_copies_1h", "domain_users_1h", "text_spam_prob")
    i_copies, users, text = (FEATURES.index(f) for f in names)
    row[i_copies], row[users], row[text], contrib[text] = copies, 60.0, 0.95, 0.5
    model_says, (decision, _) = _judged(model, row, contrib)
    assert model_says == "review" and decision == expected
