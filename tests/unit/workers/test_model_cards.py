"""Model cards: the keys training has always written still load, and a bad card is one clear line."""

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from workers.bundle.local_text import LocalText
from workers.model_cards import DEFAULT_MAX_LENGTH, CardError, DecisionModelCard, TextModelCard, Thresholds
from workers.state.features import FEATURE_VERSION, FEATURES
from workers.text.normalise import NORMALISER_VERSION, NormaliserMismatch

SPLIT = {"n": 600, "accuracy": 0.98, "precision": 0.97, "recall": 0.96, "f1": 0.965, "roc_auc": None}
# A card as training/text_model/train.py wrote it before cards were typed.
TEXT_CARD: dict[str, Any] = {
    "version": "0123456789ab",
    "serving_model": "model.int8.onnx",
    "base": "distilbert-base-uncased",
    "architecture": "DistilBertForSequenceClassification",
    "data": "spamassassin",
    "data_hash": "f" * 64,
    "split_sizes": {"train": 4800, "val": 600, "test": 600},
    "param_count": 66955010,
    "max_length": 64,
    "epochs": 2,
    "batch_size": 32,
    "lr": 0.0001,
    "seed": 13,
    "bf16_training": False,
    "frozen_word_embeddings": True,
    "threshold": 0.5,
    "steps": 300,
    "best_step": 300,
    "epochs_run": 2.0,
    "best_val_f1": 0.97,
    "history": [{"step": 150, "epoch": 1.0, "loss": 0.2, "val_f1": 0.95}],
    "file_bytes": {"model.onnx": 267_000_000, "model.int8.onnx": 67_000_000, "hf": 268_000_000},
    "metrics": {"fp32": {"test": SPLIT}, "int8": {"test": SPLIT}},
    "int8": {"f1_drop": 0.001, "kept": True, "speedup": 2.1, "ort_threads": 2},
    "parity_max_abs_diff": 1e-5,
    "train_seconds": 500.0,
    "total_seconds": 600.0,
    "created": "2026-01-01T00:00:00+0000",
}
DECISION_CARD: dict[str, Any] = {
    "version": "ba9876543210",
    "features": list(FEATURES),
    "feature_version": FEATURE_VERSION,
    "thresholds": {"block": 0.9, "allow": 0.1},
    "targets": {"block_precision": 0.99, "allow_npv": 0.995},
    "best_iteration": 120,
    "text_model_version": "0123456789ab",
    "rows": {"train": 18000, "valid": 6000, "test": 6000},
    "validation": {"n": 10, "roc_auc": 0.9, "accuracy": math.nan, "decisions": {"allow": 0, "review": 10, "block": 0}},
    "test": {"n": 10, "roc_auc": 0.9, "accuracy": 1.0, "decisions": {"allow": 5, "review": 0, "block": 5}},
    "importance_gain": {"text_spam_prob": 100.0},
    "simulator": {"seed": 11, "posts": 24000, "degraded_text_share": 0.05},
}


def write(tmp_path: Path, card: object) -> Path:
    (tmp_path / "card.json").write_text(card if isinstance(card, str) else json.dumps(card))
    return tmp_path


def test_a_trainer_written_text_card_loads(tmp_path: Path) -> None:
    card = TextModelCard.load(write(tmp_path, TEXT_CARD))
    assert (card.serving_model, card.max_length, card.int8) == ("model.int8.onnx", 64, TEXT_CARD["int8"])


def test_a_serving_only_text_card_gets_the_documented_max_length(tmp_path: Path) -> None:
    card = TextModelCard.load(write(tmp_path, {"serving_model": "model.onnx", "version": "tiny0001"}))
    assert (card.version, card.max_length) == ("tiny0001", DEFAULT_MAX_LENGTH)


@pytest.mark.parametrize(("pinned", "loads"), [(NORMALISER_VERSION, True), (None, True), ("0" * 12, False)])
def test_a_text_model_trained_with_another_normaliser_is_refused(
    tmp_path: Path, tokenizer_json: Path, pinned: str | None, loads: bool
) -> None:
    shutil.copy(tokenizer_json, tmp_path / "tokenizer.json")
    card = {"serving_model": "model.onnx", "version": "tiny0001"} | ({"normaliser": pinned} if pinned else {})
    write(tmp_path, card)
    if loads:  # a card from before the pin (every cached model today) still loads
        assert LocalText.load(tmp_path).version == "tiny0001"
    else:
        refused = f"{tmp_path / 'card.json'}: trained with normaliser {'0' * 12}, "
        with pytest.raises(NormaliserMismatch, match=re.escape(refused)):
            LocalText.load(tmp_path)


def test_a_decision_card_round_trips_with_nan(tmp_path: Path) -> None:
    card = DecisionModelCard.load(write(tmp_path, DECISION_CARD))
    assert card.thresholds == Thresholds(block=0.9, allow=0.1)
    card.save(tmp_path)
    again = DecisionModelCard.load(tmp_path)
    accuracy = again.validation["accuracy"] if again.validation else None
    assert isinstance(accuracy, float) and math.isnan(accuracy)
    assert again.model_dump(exclude={"validation"}) == card.model_dump(exclude={"validation"})


@pytest.mark.parametrize(
    ("card", "message"),
    [
        ({**DECISION_CARD, "thresholds": {"block": "high", "allow": 0.1}}, "field 'thresholds.block': "),
        ({k: v for k, v in DECISION_CARD.items() if k != "features"}, "field 'features': Field required"),
        ({**DECISION_CARD, "surprise": 1}, "field 'surprise': Extra inputs are not permitted"),
        ("{not json", "Invalid JSON"),
    ],
)
def test_a_bad_card_is_one_line_naming_the_file_and_field(tmp_path: Path, card: object, message: str) -> None:
    with pytest.raises(CardError) as caught:
        DecisionModelCard.load(write(tmp_path, card))
    text = str(caught.value)
    assert text.startswith(f"{tmp_path / 'card.json'}: ") and message in text and "\n" not in text


def test_a_missing_card_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"card\.json not found"):
        TextModelCard.load(tmp_path)
