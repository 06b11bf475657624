"""The model cards: ``card.json`` next to each trained model, written by training, read by serving.

One typed model per card, so every reader gets the same fields and defaults, and a
card that does not fit fails at load with the file and the field. The keys are the
ones training has always written, so cards already in the cache still load. Fields
that only the trainer's report holds are optional: hand-made models (the tests'
tiny ones) carry only what serving needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from schemas import Decision

CARD_FILE = "card.json"
# The serving side's token budget for a card that does not record the training length.
DEFAULT_MAX_LENGTH = 128

Number = int | float


class CardError(ValueError):
    """A ``card.json`` that is not valid JSON or does not match its card model."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The decision model's cut-offs: ``block`` at and above, ``allow`` below, ``review`` in between."""

    block: float
    allow: float

    def classify(self, prob: float) -> Decision:
        if prob >= self.block:
            return "block"
        return "allow" if prob < self.allow else "review"


class _Card(BaseModel):
    # NaN as json.dumps writes it: an evaluation with nothing decided has NaN accuracy.
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    version: str

    @classmethod
    def load(cls, model_dir: Path) -> Self:
        """The card of ``model_dir``; raises ``FileNotFoundError`` or a one-line :class:`CardError`."""
        path = Path(model_dir) / CARD_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(f"{path} not found: is {model_dir} a trained model directory?") from None
        try:
            return cls.model_validate_json(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = f"field '{'.'.join(map(str, first['loc']))}': " if first["loc"] else ""
            more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
            raise CardError(f"{path}: {where}{first['msg']}{more}") from None

    def save(self, model_dir: Path) -> None:
        (Path(model_dir) / CARD_FILE).write_text(self.model_dump_json(indent=2) + "\n")


class TextModelCard(_Card):
    """The content model (``training.text_model.train``). Serving reads the first five fields."""

    serving_model: str  # the ONNX file Triton serves: model.int8.onnx or model.onnx
    max_length: int = DEFAULT_MAX_LENGTH  # tokens per text the model was trained with
    normaliser: str | None = None  # workers.text.normalise.NORMALISER_VERSION it was trained with; None: before the pin
    languages: list[str] | None = None  # the languages it judges (workers/text/language.py); None: every post
    # The training report.
    base: str | None = None
    architecture: str | None = None
    data: str | None = None
    data_hash: str | None = None
    split_sizes: dict[str, int] | None = None
    language_counts: dict[str, dict[str, int]] | None = None  # training split: language -> ham/spam texts
    ngram: dict[str, Any] | None = None  # the character n-gram model's report (ngram.npz beside)
    fusion: dict[str, Any] | None = None  # both text signals fused (training/text_model/fusion.py): weights and metrics
    param_count: int | None = None
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    seed: int | None = None
    bf16_training: bool | None = None
    frozen_word_embeddings: bool | None = None
    balanced_loss: bool | None = None  # loss weighted by inverse class frequency
    threshold: float | None = None
    steps: int | None = None
    best_step: int | None = None
    epochs_run: float | None = None
    best_val_f1: float | None = None
    calibration: dict[str, float] | None = None  # temperature fitted on validation, folded into the classifier
    history: list[dict[str, Number]] | None = None
    file_bytes: dict[str, int] | None = None
    metrics: dict[str, dict[str, dict[str, Number | None]]] | None = None  # precision -> split -> metric
    int8: dict[str, Number | bool] | None = None
    parity_max_abs_diff: float | None = None
    train_seconds: float | None = None
    total_seconds: float | None = None
    created: str | None = None


class DecisionModelCard(_Card):
    """The LightGBM decision model (``training.decision_model``). Serving reads the first four fields."""

    features: list[str]
    feature_version: str
    thresholds: Thresholds
    # The training report.
    targets: dict[str, float] | None = None
    best_iteration: int | None = None
    text_model_version: str | None = None
    rows: dict[str, int] | None = None
    validation: dict[str, Number | dict[str, int]] | None = None
    test: dict[str, Number | dict[str, int]] | None = None
    importance_gain: dict[str, float] | None = None
    simulator: dict[str, Number] | None = None
    # The test slices of the simulator's waves (campaign spam, viral and greeting ham): decision counts.
    waves: dict[str, dict[str, int]] | None = None
    # The test posts by class with both text scores withheld (a language the text model cannot judge).
    without_text: dict[str, dict[str, int]] | None = None
