"""The command line's options: those several commands share and those too long for a signature, each
default written once. The help shows the value the code uses, and an option left out (None) keeps the
default of what it configures (:func:`merged`).

Imported with the CLI, so only light modules here: the defaults of modules that import torch or
LightGBM are shown as written, and tests/unit/modstream/test_cli_help.py holds them to the code's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from modstream.loop.gate import REVIEW_FLOOR, Gate

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

D = TypeVar("D", bound="DataclassInstance")


def merged(defaults: D, **given: object) -> D:
    """``defaults`` with every field given (not None) replaced: an option left out keeps the default."""
    return replace(defaults, **{name: value for name, value in given.items() if value is not None})


def gate_from(max_review_share: float | None, max_ham_blocked: float | None, min_block_precision: float | None,
              confidence: float | None) -> Gate:  # fmt: skip
    """The gate the options ask for, the rest of it the default :class:`Gate`'s."""
    return merged(Gate(), max_review_share=max_review_share, max_ham_blocked=max_ham_blocked,
                  min_block_precision=min_block_precision, confidence=confidence)  # fmt: skip


DEFAULT_STATE = Path(".state/stack")
RETRAINED = Path("out/retrained")  # a challenger bundle trained on the platform's labels
SIMULATED = Path("out/decision-model")  # a decision model trained on the platform simulator
SIMULATED_POSTS = 24_000
SIMULATOR_SEED = 11
# Shown as written: importing modstream.loop.retrain (TEXT_EPOCHS, TEXT_FOLDS) loads torch, and
# modstream.loop.retrain_decision (HOLDOUT) LightGBM: seconds before any command could start.
TEXT_EPOCHS_SHOWN = "4"
TEXT_FOLDS_SHOWN = "5"
HOLDOUT_SHOWN = "0.2"

# A range of a topic (modstream.loop.topics.parse_range).
FromTime = Annotated[str | None, typer.Option(help="ISO time: records at or after it (UTC when no zone)")]
ToTime = Annotated[str | None, typer.Option(help="ISO time: records before it")]
FromOffsets = Annotated[str | None, typer.Option(help="PARTITION:OFFSET[,...] on the verdicts topic")]

DeadLetter = Annotated[bool, typer.Option(help="Dead-letter bad feedback records (the feedback DLQ)")]

# The gate (modstream.loop.gate.Gate) and the labels it judges on.
ReviewCeiling = Annotated[
    float | None,
    typer.Option(
        min=0, max=1, help="Review-share ceiling", show_default=f"the champion's share or {REVIEW_FLOOR:g}, the higher"
    ),
]
HamBlocked = Annotated[
    float | None,
    typer.Option(
        min=0, max=1, help="Ceiling on the ham-blocked share's bound", show_default=f"{Gate.max_ham_blocked:g}"
    ),
]
BlockPrecision = Annotated[
    float | None,
    typer.Option(min=0, max=1, help="Floor on block precision's bound", show_default=f"{Gate.min_block_precision:g}"),
]
Confidence = Annotated[
    float | None,
    typer.Option(min=0.5, max=0.999, help="One-sided, for every bound", show_default=f"{Gate.confidence:g}"),
]
Holdout = Annotated[
    float | None,
    typer.Option(min=0.05, max=0.5, help="Latest share of the labels: the gate's", show_default=HOLDOUT_SHOWN),
]

# retrain's text model.
Champion = Annotated[Path | None, typer.Option(help="The champion bundle", show_default="MODSTREAM_MODEL_DIR")]
TextBase = Annotated[str | None, typer.Option(help="Base checkpoint dir or hub id", show_default="the default base")]
TextEpochs = Annotated[int | None, typer.Option(min=1, help="Text model epochs", show_default=TEXT_EPOCHS_SHOWN)]
TextFolds = Annotated[
    int | None,
    typer.Option(
        min=0, max=10, help="Out-of-fold text models for the earlier posts (0: none)", show_default=TEXT_FOLDS_SHOWN
    ),
]

# train-decision: on the simulator, or with --data on the platform's labels.
DecisionOut = Annotated[Path | None, typer.Option(help="Output dir", show_default=f"{SIMULATED}; --data: {RETRAINED}")]
SimulatedPosts = Annotated[
    int | None, typer.Option(min=1000, help="Simulator: posts", show_default=str(SIMULATED_POSTS))
]
SimulatorSeed = Annotated[int | None, typer.Option(help="Simulator: seed", show_default=str(SIMULATOR_SEED))]
WithoutSignals = Annotated[
    bool, typer.Option(help="Simulator: the stream-kept signals left missing, to see what they add")
]
LabelsData = Annotated[Path | None, typer.Option(help="A `dataset build` Parquet file: train on the platform's labels")]
ComparedServing = Annotated[
    Path | None, typer.Option(help="--data: the bundle to compare with", show_default="MODSTREAM_MODEL_DIR")
]

# train-text.
TextData = Annotated[
    Path | None,
    typer.Option(help="CSV, JSONL or Parquet with text and label columns (default: the built-in posts)"),
]
TextTest = Annotated[
    Path | None,
    typer.Option(help="External labelled test file; --data is then all train + validation (90/10)"),
]
UnfreezeEmbeddings = Annotated[
    bool, typer.Option(help="Train the word embeddings too (half the parameters, ~25% more time per step)")
]

RescoringModel = Annotated[
    str | None,
    typer.Option(
        help="The Triton model serving the bundle's text model, asked only when another text model scored the range",
        show_default="MODSTREAM_SHADOW_TRITON_MODEL",
    ),
]
ShadowModel = Annotated[
    Path | None,
    typer.Option(
        help="A challenger's text model dir (its bundle's text/), served beside as MODSTREAM_SHADOW_TRITON_MODEL "
        "for MODSTREAM_SHADOW_MODEL_DIR"
    ),
]
# One bound of build-engine's optimization profile (modstream.serving.engine.EngineProfile).
ProfileBound = Annotated[int | None, typer.Option(help="Default: measured on a GPU (docs/PERFORMANCE.md)")]

CheckModels = Annotated[
    bool, typer.Option(help="Also check Triton and the model contract; --no-models for the feedback worker")
]
LabelShare = Annotated[
    float, typer.Option(min=0, max=1, help="Share of posts given a simulated moderator label on `feedback`")
]
KeepStack = Annotated[
    Path | None, typer.Option(help="Run the stack in this dir and leave it up (for dataset build, replay)")
]
ChaosOnly = Annotated[
    list[str] | None, typer.Option(help="Run only this scenario (repeatable), e.g. broker; the doc is left as it is")
]
InMemory = Annotated[
    bool, typer.Option(help="Keep the broker's topics in memory: a little faster, and `stack down` empties them")
]
