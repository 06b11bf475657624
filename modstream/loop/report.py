"""The retrain's report: ``report.json`` and one picture, challenger against champion on the gate's posts."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from matplotlib.figure import Figure
from sklearn.metrics import roc_curve

from modstream.loop.gate import Side, wilson

REPORT_FILE, PICTURE_FILE = "report.json", "report.png"


@dataclass(frozen=True)
class Curves:
    """Scores of the gate's held-out posts."""

    y: npt.NDArray[np.int_]
    challenger: npt.NDArray[np.float64]
    champion: npt.NDArray[np.float64]


def write(
    out: Path, report: dict[str, Any], curves: Curves, sides: dict[str, Side], ceiling: float, confidence: float
) -> None:
    """``report.json`` and ``report.png`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / REPORT_FILE).write_text(json.dumps(report, indent=2, default=str) + "\n")
    picture(curves, sides, ceiling, confidence, out / PICTURE_FILE)


def picture(curves: Curves, sides: dict[str, Side], ceiling: float, confidence: float, path: Path) -> None:
    """ROC of both models on the labelled posts (the challenger out of fold); block-F1, ham blocked
    and review share with their bounds."""
    fig = Figure(figsize=(11, 4.2))
    roc_ax, bar_ax = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    scores = {"challenger": curves.challenger, "champion": curves.champion}
    if len(set(curves.y.tolist())) == 2:
        for name, p in scores.items():
            fpr, tpr, _ = roc_curve(curves.y, p)
            roc_ax.plot(fpr, tpr, label=f"{name} AUC = {sides[name].roc_auc:.3f}")
    roc_ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1)
    roc_ax.set(xlabel="False positive rate", ylabel="True positive rate", title=f"ROC, {len(curves.y)} labelled posts")
    roc_ax.legend(loc="lower right")
    metrics = ("block-F1", "ham blocked", "review")
    xs = np.arange(len(metrics))
    for i, (name, side) in enumerate(sides.items()):
        values: list[float] = []
        errors: tuple[list[float], list[float]] = ([], [])
        for rate, kn in _rates(side):
            rate = 0.0 if math.isnan(rate) else rate
            lo, hi = wilson(*kn, confidence) if kn else (rate, rate)
            values.append(rate)
            errors[0].append(max(0.0, rate - lo))
            errors[1].append(max(0.0, hi - rate))
        bar_ax.bar(xs + (i - 0.5) * 0.38, values, 0.38, yerr=errors, capsize=3, label=name)
    bar_ax.axhline(
        ceiling, xmin=2 / 3, color="black", linestyle=":", linewidth=1, label=f"review ceiling {ceiling:.0%}"
    )
    bar_ax.set(
        xticks=xs,
        xticklabels=list(metrics),
        ylim=(0, 1.05),
        title=f"At each model's thresholds ({confidence:.0%} bounds)",
    )
    bar_ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _rates(s: Side) -> list[tuple[float, tuple[int, int] | None]]:
    """block-F1, ham blocked and review share, with (k, n) for a Wilson bound where it is a share."""
    return [(s.block_f1, None), (s.ham_blocked_share, (s.ham_blocked, s.ham)), (s.review_share, (s.review, s.n))]
