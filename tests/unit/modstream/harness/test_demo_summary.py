"""The demo's share of stream-kept signals, from the logged feature rows."""

import math
from datetime import UTC, datetime

from modstream.harness.demo import signal_shares
from schemas import FeatureRow, Verdict
from workers.state.features import FEATURE_VERSION, FEATURES, INDEX
from workers.state.signals import SIGNALS


def verdict(signal_values: list[float | None]) -> Verdict:
    values: list[float | None] = [0.0] * len(FEATURES)
    for name, value in zip(SIGNALS, signal_values, strict=True):
        values[INDEX[name]] = value
    return Verdict(
        post_id="p",
        user_id="u",
        decision="allow",
        score=0.1,
        reasons=[],
        model_versions={},
        stage_scores={},
        degraded=False,
        latency_ms=1.0,
        decided_at=datetime(2026, 11, 23, tzinfo=UTC),
        features=FeatureRow(contract=FEATURE_VERSION, values=values),
    )


def test_shares_count_present_and_nonzero_signal_values_only() -> None:
    half = len(SIGNALS) // 2
    row = [None] * half + [0.0] + [3.0] * (len(SIGNALS) - half - 1)
    present, nonzero = signal_shares([verdict(row)])
    assert present == round((len(SIGNALS) - half) / len(SIGNALS), 4)
    assert nonzero == round((len(SIGNALS) - half - 1) / len(SIGNALS), 4)


def test_no_feature_rows_give_nan() -> None:
    assert all(math.isnan(x) for x in signal_shares([]))
