"""Small PNG plots for model reports, shared by the text and decision models.

Figures are built on ``matplotlib.figure.Figure`` directly (no pyplot), so nothing
depends on a GUI backend or on pyplot's global state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from matplotlib.figure import Figure
from sklearn.calibration import calibration_curve
from sklearn.metrics import (
    auc,
    average_precision_score,
    confusion_matrix,
    precision_recall_curve,
    roc_curve,
)

ArrayLike = npt.ArrayLike


def _save(fig: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def pr_curve(
    y_true: ArrayLike,
    y_score: ArrayLike,
    path: Path,
    title: str = "Precision-recall",
    others: Mapping[str, ArrayLike] | None = None,
    name: str = "",
) -> Path:
    """Precision against recall over all thresholds, with average precision in the legend;
    ``others`` are further scorers of the same examples, one named curve each (``name`` is y_score's)."""
    fig = Figure(figsize=(5, 4))
    ax = fig.add_subplot()
    for label, score in {name: y_score, **(others or {})}.items():
        precision, recall, _ = precision_recall_curve(y_true, score)
        ap = average_precision_score(y_true, score)
        ax.plot(recall, precision, drawstyle="steps-post", label=f"{label + ': ' if label else ''}AP = {ap:.4f}")
    ax.set(xlabel="Recall", ylabel="Precision", title=title, xlim=(0, 1.01), ylim=(0, 1.01))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    return _save(fig, path)


def roc(y_true: ArrayLike, y_score: ArrayLike, path: Path, title: str = "ROC") -> Path:
    """True- against false-positive rate, with the area under the curve in the legend."""
    fpr, tpr, _ = roc_curve(y_true, y_score)
    fig = Figure(figsize=(5, 4))
    ax = fig.add_subplot()
    ax.plot(fpr, tpr, label=f"AUC = {auc(fpr, tpr):.4f}")
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1)
    ax.set(xlabel="False positive rate", ylabel="True positive rate", title=title, xlim=(0, 1), ylim=(0, 1.01))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return _save(fig, path)


def confusion(
    y_true: ArrayLike,
    y_pred: ArrayLike,
    path: Path,
    labels: Sequence[str] = ("ham", "spam"),
    title: str = "Confusion matrix",
) -> Path:
    """Counts per (true, predicted) class; ``labels[i]`` names class ``i``."""
    matrix = confusion_matrix(y_true, y_pred, labels=list(range(len(labels))))
    fig = Figure(figsize=(4, 3.6))
    ax = fig.add_subplot()
    image = ax.imshow(matrix, cmap="Blues")
    fig.colorbar(image, ax=ax)
    threshold = matrix.max() / 2
    for (i, j), count in np.ndenumerate(matrix):
        ax.text(j, i, str(count), ha="center", va="center", color="white" if count > threshold else "black")
    ticks = range(len(labels))
    ax.set(xticks=ticks, yticks=ticks, xticklabels=labels, yticklabels=labels)
    ax.set(xlabel="Predicted", ylabel="True", title=title)
    return _save(fig, path)


def feature_importance(
    names: Sequence[str],
    values: ArrayLike,
    path: Path,
    top: int = 20,
    title: str = "Feature importance",
) -> Path:
    """Horizontal bars for the ``top`` largest values, largest at the top."""
    values = np.asarray(values, dtype=float)
    if len(names) != len(values):
        raise ValueError(f"{len(names)} names but {len(values)} values")
    order = np.argsort(values, kind="stable")[::-1][:top][::-1]
    fig = Figure(figsize=(6, 0.3 * len(order) + 1.2))
    ax = fig.add_subplot()
    ax.barh([names[i] for i in order], values[order])
    ax.set(xlabel="Importance", title=title)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def reliability(curves: Mapping[str, tuple[ArrayLike, ArrayLike]], path: Path, title: str = "Reliability") -> Path:
    """Spam share against mean score in ten equal-width bins, one line per ``name -> (y_true, y_score)``."""
    fig = Figure(figsize=(5.5, 5))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="calibrated")
    for name, (y, p) in curves.items():
        share, mean = calibration_curve(np.asarray(y), np.asarray(p), n_bins=10, strategy="uniform")
        ax.plot(mean, share, marker="o", label=name)
    ax.set(xlabel="mean score in bin", ylabel="spam share in bin", title=title, xlim=(0, 1), ylim=(0, 1))
    ax.legend(loc="upper left", fontsize=8)
    return _save(fig, path)
