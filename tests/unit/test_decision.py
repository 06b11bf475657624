import json
import math

import numpy as np
import pytest

from tests.unit.fakes import tiny_decision_model
from training.decision import choose_thresholds, evaluate
from workers.cards import Thresholds
from workers.features import FEATURE_VERSION, FEATURES, ContractMismatch, PostFacts, Profile, assemble
from workers.signals import SIGNALS
from workers.stages.decide import DecisionModel, Unavailable, top_reasons


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
    prof = Profile(user={"created_at": str(1.8e9 - 10 * 86400), "spam_posts": "4"}, signals=signals)
    row = assemble(facts, prof, 0.7)
    assert row[FEATURES.index("user_age_days")] == pytest.approx(10)
    assert row[FEATURES.index("user_spam_posts")] == 4
    assert [row[FEATURES.index(name)] for name in SIGNALS] == list(signals)
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
    reasons = top_reasons(row, contrib)
    assert [r.code for r in reasons] == ["text_model", "user_history", "journey"]
    assert "+2.000" in reasons[0].detail


def test_unavailable_inputs_give_the_degraded_flag_and_reason() -> None:
    assert not Unavailable()
    both = Unavailable(redis=True, text_model=True)
    assert both and both.reason.code == "degraded"
    assert both.reason.detail == "decided without redis and text model"
    assert Unavailable(text_model=True).reason.detail == "decided without text model"
