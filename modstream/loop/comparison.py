"""Two sets of decisions on the same posts compared: the flip matrix, the flipped posts, and
how each set does against the labels that exist. Shared by replay and the shadow report."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import get_args

import numpy as np
from matplotlib.figure import Figure

from schemas import Decision

DECISIONS: tuple[Decision, ...] = get_args(Decision)


@dataclass(frozen=True)
class LabelMetrics:
    """Decisions against labels: ``block_precision`` = spam among blocked, ``block_recall`` = blocked
    among spam, ``allow_npv`` = ham among allowed; NaN where nothing was decided so."""

    labelled: int
    block_precision: float
    block_recall: float
    allow_npv: float
    review_share: float


def label_metrics(decisions: Mapping[str, Decision], labels: Mapping[str, int]) -> LabelMetrics:
    pairs = [(decisions[pid], y) for pid, y in labels.items() if pid in decisions]

    def share(num: int, den: int) -> float:
        return num / den if den else math.nan

    blocked = [y for d, y in pairs if d == "block"]
    allowed = [y for d, y in pairs if d == "allow"]
    spam = sum(y for _, y in pairs)
    return LabelMetrics(
        labelled=len(pairs),
        block_precision=share(sum(blocked), len(blocked)),
        block_recall=share(sum(blocked), spam),
        allow_npv=share(len(allowed) - sum(allowed), len(allowed)),
        review_share=share(sum(d == "review" for d, _ in pairs), len(pairs)),
    )


@dataclass(frozen=True)
class Comparison:
    """``a`` (recorded, or the champion) against ``b`` (replayed, or the challenger) on the posts both decided."""

    a_name: str
    b_name: str
    posts: int
    agreed: int
    matrix: dict[str, dict[str, int]]  # a's decision -> b's decision -> posts
    flipped: list[str]  # post ids, sorted
    a_labels: LabelMetrics
    b_labels: LabelMetrics

    @property
    def agreement(self) -> float:
        return self.agreed / self.posts if self.posts else math.nan

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "agreement": self.agreement}


def compare(
    a: Mapping[str, Decision],
    b: Mapping[str, Decision],
    labels: Mapping[str, int],
    names: tuple[str, str] = ("recorded", "replayed"),
) -> Comparison:
    both = sorted(a.keys() & b.keys())
    matrix: dict[str, dict[str, int]] = {x: dict.fromkeys(DECISIONS, 0) for x in DECISIONS}
    for pid in both:
        matrix[a[pid]][b[pid]] += 1
    flipped = [pid for pid in both if a[pid] != b[pid]]
    return Comparison(
        names[0],
        names[1],
        len(both),
        len(both) - len(flipped),
        matrix,
        flipped,
        label_metrics({p: a[p] for p in both}, labels),
        label_metrics({p: b[p] for p in both}, labels),
    )


def plot(c: Comparison, path: Path, title: str) -> Path:
    """The flip matrix as a heat map, with each side's label metrics underneath."""
    counts = np.array([[c.matrix[x][y] for y in DECISIONS] for x in DECISIONS])
    fig = Figure(figsize=(5.2, 5))
    ax = fig.add_subplot()
    ax.imshow(counts, cmap="Oranges")
    for (i, j), n in np.ndenumerate(counts):
        ax.text(j, i, str(n), ha="center", va="center", fontweight="bold" if i == j else "normal")
    ticks = range(len(DECISIONS))
    ax.set(xticks=ticks, yticks=ticks, xticklabels=DECISIONS, yticklabels=DECISIONS)
    ax.set(xlabel=c.b_name, ylabel=c.a_name, title=f"{title}\n{c.agreed}/{c.posts} agree ({c.agreement:.2%})")
    lines = [
        f"{name}: block precision {m.block_precision:.3f}, recall {m.block_recall:.3f}, "
        f"allow NPV {m.allow_npv:.3f} ({m.labelled} labelled)"
        for name, m in ((c.a_name, c.a_labels), (c.b_name, c.b_labels))
        if m.labelled
    ]
    if lines:
        fig.text(0.02, 0.01, "\n".join(lines), fontsize=7)
    fig.tight_layout(rect=(0, 0.08 if lines else 0, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path
