"""The served models as metrics: ``modstream_model_info`` names the versions, and the validation
text-score distribution the drift alert compares the live ``modstream_text_score`` with. With the
cascade, the transformer scores only the posts the first stage leaves, so the baseline is those of
the validation posts (the first stage's card holds it)."""

from __future__ import annotations

from pathlib import Path

from workers.metrics import MODEL_INFO, TEXT_SCORE_KEY, TEXT_SCORE_VALIDATION
from workers.model_cards import CARD_FILE, DecisionModelCard
from workers.stages.decide import FIRST_STAGE


def show_models(bundle: Path, text_version: str, decision_version: str, *, cascade: bool) -> None:
    """Set on start and on every switch: only the models served now carry a series."""
    MODEL_INFO.clear()
    MODEL_INFO.labels(text_version, decision_version).set(1)
    TEXT_SCORE_VALIDATION.clear()
    first = bundle / "decision" / FIRST_STAGE
    scored = first if cascade and (first / CARD_FILE).exists() else bundle / "decision"
    validation = DecisionModelCard.load(scored).validation or {}
    counts = validation.get(TEXT_SCORE_KEY)
    # A card trained before the histogram was recorded has none: no drift baseline, no alert.
    if isinstance(counts, dict) and (total := counts.get("+Inf")):
        for le, n in counts.items():
            TEXT_SCORE_VALIDATION.labels(text_version, le).set(n / total)
