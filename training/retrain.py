"""Retrain the decision model on the platform's own labels and compare it with the one serving.

The split is by time, never random: train on the earliest 80% of the posts, choose the
thresholds on the next 10% and report on the latest 10%, which both models score. A
random split would let the model see tomorrow's campaigns while being tested on them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt
from matplotlib.figure import Figure
from sklearn.metrics import roc_curve

from training.dataset import DatasetError, read_parquet
from training.decision import Evaluation, evaluate, fit, save
from workers.cards import TextModelCard
from workers.stages.decide import DecisionModel

TRAIN_SHARE, VALID_SHARE = 0.8, 0.1
MIN_ROWS = 20  # per split: fewer cannot choose thresholds or measure anything


@dataclass(frozen=True)
class Bar:
    """What the new model must reach to count as at least as good as the serving one."""

    min_auc_delta: float = 0.0  # new ROC-AUC >= serving ROC-AUC + this
    min_block_precision: float | None = None
    min_allow_npv: float | None = None
    max_review_share: float | None = None

    def failures(self, new: Evaluation, serving: Evaluation) -> list[str]:
        checks = [
            (f"ROC-AUC {new.roc_auc:.4f} < serving {serving.roc_auc:.4f} + {self.min_auc_delta}",
             new.roc_auc < serving.roc_auc + self.min_auc_delta),
            (f"block precision {new.block_precision:.4f} < {self.min_block_precision}",
             self.min_block_precision is not None and not new.block_precision >= self.min_block_precision),
            (f"allow NPV {new.allow_npv:.4f} < {self.min_allow_npv}",
             self.min_allow_npv is not None and not new.allow_npv >= self.min_allow_npv),
            (f"review share {new.review_share:.4f} > {self.max_review_share}",
             self.max_review_share is not None and new.review_share > self.max_review_share),
        ]  # fmt: skip
        return [what for what, failed in checks if failed]


@dataclass(frozen=True)
class Report:
    rows: dict[str, int]
    split_times: dict[str, str]  # where each split starts (ISO)
    new: Evaluation
    serving: Evaluation
    new_version: str
    serving_version: str
    failures: list[str]  # empty when the new model is at least as good

    @property
    def at_least_as_good(self) -> bool:
        return not self.failures

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "at_least_as_good": self.at_least_as_good}, indent=2, default=str)


def time_split(n: int) -> tuple[slice, slice, slice]:
    """(train, validation, test) over rows in time order."""
    a, b = int(n * TRAIN_SHARE), int(n * (TRAIN_SHARE + VALID_SHARE))
    return slice(0, a), slice(a, b), slice(b, n)


def _check(name: str, y: npt.NDArray[np.int_]) -> None:
    if len(y) < MIN_ROWS or len(set(y.tolist())) < 2:
        raise DatasetError(
            f"the {name} split has {len(y)} rows and {len(set(y.tolist()))} class(es); "
            f"need >= {MIN_ROWS} rows with both spam and ham: label more posts or widen the range"
        )


def load_serving(bundle: Path) -> tuple[DecisionModel, str]:
    """The bundle's decision model and text model version; a one-line DatasetError when it cannot compare."""
    try:
        model = DecisionModel.load(bundle / "decision")
        text_version = TextModelCard.load(bundle / "text").version
    except Exception as exc:  # a card, a contract or a model file: none of it can be compared against
        raise DatasetError(f"cannot load the serving bundle {bundle}: {str(exc).splitlines()[0]}") from None
    return model, text_version


def retrain(
    data: Path, serving_bundle: Path, out: Path, bar: Bar, progress: Callable[[str], None] = lambda _: None
) -> Report:
    """Train on ``data``, write a bundle to ``out`` (``decision/`` and the serving bundle's ``text/``),
    and compare both models on the latest rows. Raises :class:`DatasetError` for unusable input."""
    serving, text_version = load_serving(serving_bundle)
    d = read_parquet(data)
    if d.text_versions - {text_version}:
        raise DatasetError(
            f"{data}: rows scored by text model(s) {sorted(d.text_versions)}, the serving bundle has {text_version!r}"
        )
    tr, va, te = time_split(len(d.y))
    for name, part in (("train", tr), ("validation", va), ("test", te)):
        _check(name, d.y[part])
    progress(f"training on {tr.stop} rows, validating on {va.stop - va.start}, testing on {te.stop - te.start}")
    fitted = fit(d.x[tr], d.y[tr], d.x[va], d.y[va])
    x_test, y_test = d.x[te], d.y[te]
    p_new, p_serving = fitted.predict(x_test), serving.predict(x_test)[0]
    new_eval = evaluate(y_test, p_new, fitted.thresholds)
    serving_eval = evaluate(y_test, p_serving, serving.thresholds)
    rows = {"train": tr.stop, "validation": va.stop - va.start, "test": te.stop - te.start}
    validation = evaluate(d.y[va], fitted.predict(d.x[va]), fitted.thresholds)
    version = save(
        fitted, out / "decision", text_version, rows, validation=validation, test=new_eval, validation_rows=d.x[va]
    ).version
    text_link = out / "text"
    text_link.unlink(missing_ok=True)
    text_link.symlink_to((serving_bundle / "text").resolve())

    def start(s: slice) -> str:
        return datetime.fromtimestamp(float(d.decided_at[s.start]), UTC).isoformat()

    report = Report(
        rows=rows,
        split_times={"train": start(tr), "validation": start(va), "test": start(te)},
        new=new_eval,
        serving=serving_eval,
        new_version=version,
        serving_version=serving.version,
        failures=bar.failures(new_eval, serving_eval),
    )
    (out / "report.json").write_text(report.to_json() + "\n")
    side_by_side(y_test, p_new, p_serving, new_eval, serving_eval, out / "comparison.png")
    return report


def side_by_side(
    y: npt.NDArray[np.int_],
    p_new: npt.NDArray[np.float64],
    p_serving: npt.NDArray[np.float64],
    new: Evaluation,
    serving: Evaluation,
    path: Path,
) -> None:
    """ROC curves of both models on the test rows, and their metrics at their own thresholds."""
    fig = Figure(figsize=(10, 4))
    roc_ax, bar_ax = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for name, p, ev in (("new", p_new, new), ("serving", p_serving, serving)):
        fpr, tpr, _ = roc_curve(y, p)
        roc_ax.plot(fpr, tpr, label=f"{name} AUC = {ev.roc_auc:.4f}")
    roc_ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1)
    roc_ax.set(xlabel="False positive rate", ylabel="True positive rate", title=f"ROC on the latest {len(y)} posts")
    roc_ax.legend(loc="lower right")
    metrics = ("block_precision", "allow_npv", "review_share")
    xs = np.arange(len(metrics))
    for i, (name, ev) in enumerate((("new", new), ("serving", serving))):
        values = [0.0 if math.isnan(v) else v for v in (getattr(ev, m) for m in metrics)]
        bar_ax.bar(xs + (i - 0.5) * 0.38, values, 0.38, label=name)
    bar_ax.set(xticks=xs, xticklabels=metrics, ylim=(0, 1.05), title="At each model's thresholds")
    bar_ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
