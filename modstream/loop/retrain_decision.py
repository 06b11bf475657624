"""Train the decision model on labelled rows and gate it against the serving one.

The split is by time, never random: the latest ``holdout`` share of the posts is the gate's, which
both models decide; a random split would let the model see tomorrow's campaigns while being tested
on them. The thresholds are chosen on out-of-fold predictions over all the earlier rows
(time-contiguous folds), not on a 10% slice: with a few hundred spam, a slice holds too few to place
a block cut. They aim at the gate's limits (the product's, where the gate was
loosened): block where precision meets the limit and no more than its share of ham is blocked; the
review band narrowed, from below, to 80% of the gate's review ceiling: a model that defers whatever
it is unsure of to people is no model. The model that ships is trained on all of those rows for the
folds' median number of rounds.

The report names the rows whose label the out-of-fold model contradicts with confidence (confident
learning), for moderators to check again: on a new platform's first labels they are mostly scams
labelled real, and a handful of those set the block cut far above most spam. They still count: the
method cannot tell a wrong label from a hard post (docs/LOOP.md, "Labels to check again").
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import numpy.typing as npt
from cleanlab.filter import find_label_issues

from modstream.loop.champion import load_serving
from modstream.loop.gate import Gate, Judgement, Side, paired
from modstream.loop.join import DatasetError, Labelled, read_parquet
from modstream.loop.report import Curves, write
from training.decision_model import PARAMS, Evaluation, Fitted, choose_thresholds, evaluate, fit, save
from workers.model_cards import Thresholds
from workers.stages.decide import DecisionModel
from workers.state.features import FEATURES, MONOTONE

HOLDOUT = 0.2  # the latest share of the labelled posts: the gate's
FOLDS = 5
REVIEW_MARGIN = 0.8  # the out-of-fold review share aimed at, as a share of the gate's ceiling
TARGETS = Gate()  # the product's limits, which the thresholds aim at
MIN_SPAM = MIN_HAM = 5  # per fold and in the gate's slice: fewer cannot fit or measure anything

FloatArray = npt.NDArray[np.float64]


def holdout_split(n: int, share: float = HOLDOUT) -> tuple[slice, slice]:
    """(earlier rows, the latest ``share``) over rows in time order."""
    cut = n - max(1, round(n * share))
    return slice(0, cut), slice(cut, n)


def _check(name: str, y: npt.NDArray[np.int_]) -> None:
    spam = int(y.sum())
    if spam < MIN_SPAM or len(y) - spam < MIN_HAM:
        raise DatasetError(
            f"the {name} has {spam} spam and {len(y) - spam} ham; need >= {MIN_SPAM} of each: "
            "label more posts or widen the range"
        )


def cap_review(th: Thresholds, p: FloatArray, budget: float) -> Thresholds:
    """``th`` with ``allow`` raised until at most ``budget`` of the scores ``p`` fall in review
    (the highest below ``block`` stay there); ``block``, which keeps ham from being blocked, stays."""
    review = np.sort(p[(p >= th.allow) & (p < th.block)])
    keep = int(budget * len(p))
    if len(review) <= keep:
        return th
    return Thresholds(block=th.block, allow=float(review[len(review) - keep]) if keep else th.block)


def doubted_labels(y: npt.NDArray[np.int_], oof: FloatArray) -> npt.NDArray[np.bool_]:
    """The rows whose label the out-of-fold scores ``oof`` contradict with confidence (cleanlab's
    confident learning at its defaults: per class, scores past the class's own average, pruned to the
    noise rate they imply)."""
    return np.asarray(find_label_issues(y, np.c_[1 - oof, oof]), dtype=bool)


def fit_oof(
    x: FloatArray,
    y: npt.NDArray[np.int_],
    review_budget: float,
    block_precision: float = 0.99,
    max_ham_blocked: float = 1.0,
    folds: int = FOLDS,
) -> tuple[Fitted, FloatArray]:
    """The model on all rows, thresholded on its out-of-fold predictions (returned beside it): block at
    ``block_precision`` blocking at most ``max_ham_blocked`` of the ham, and at most ``review_budget``
    of them in review."""
    oof = np.empty(len(y), dtype=np.float64)
    rounds = []
    for i, part in enumerate(np.array_split(np.arange(len(y)), folds)):
        _check(f"fold {i + 1} of {folds}", y[part])
        rest = np.setdiff1d(np.arange(len(y)), part)
        fold = fit(x[rest], y[rest], x[part], y[part])
        oof[part] = fold.predict(x[part])
        rounds.append(max(1, fold.booster.best_iteration))
    params = PARAMS | {"monotone_constraints": list(MONOTONE)}  # as training.decision_model.fit
    n_rounds = int(np.median(rounds))
    booster = lgb.train(params, lgb.Dataset(x, y, feature_name=list(FEATURES)), num_boost_round=n_rounds)
    booster.best_iteration = n_rounds
    thresholds = choose_thresholds(y, oof, block_precision, max_ham_blocked=max_ham_blocked)
    return Fitted(booster, cap_review(thresholds, oof, review_budget)), oof


@dataclass(frozen=True)
class Decided:
    """The decision stage's outcome: a model in ``<out>/decision`` and the gate's judgement."""

    version: str
    rows: dict[str, int]
    split_times: dict[str, str]  # where each part starts (ISO)
    oof: Evaluation  # the challenger's out-of-fold predictions over the earlier rows, at its thresholds
    recheck: dict[str, list[str]]  # post ids whose labels the out-of-fold model doubts, by their label
    challenger: Side
    champion: Side
    judgement: Judgement
    curves: Curves

    def as_dict(self) -> dict[str, Any]:
        j = self.judgement
        return {
            "version": self.version,
            "rows": self.rows,
            "split_times": self.split_times,
            "out_of_fold": self.oof.__dict__,
            "labels_to_recheck": self.recheck,
            "challenger": self.challenger.as_dict(),
            "champion": self.champion.as_dict(),
            "gate": {
                "outcome": j.outcome.value,
                "line": j.line(),
                "failures": j.failures,
                "unsure": j.unsure,
                "more_labels": j.more_labels,
                "review_ceiling": j.review_ceiling,
                "sign_test_p": j.sign_test_p,
            },
        }

    def write_report(self, out: Path, confidence: float, report: dict[str, Any] | None = None) -> dict[str, Any]:
        """``report.json`` (``report``, by default this outcome's) and ``report.png`` in ``out``."""
        report = self.as_dict() if report is None else report
        sides = {"challenger": self.challenger, "champion": self.champion}
        write(out, report, self.curves, sides, self.judgement.review_ceiling, confidence)
        return report


def decide(
    data: Labelled,
    champion_x: FloatArray,
    champion: DecisionModel,
    out: Path,
    gate: Gate,
    text_version: str,
    holdout: float = HOLDOUT,
) -> Decided:
    """Train on ``data``'s earlier rows, save to ``out/decision`` and judge both models on the latest
    rows: the challenger on ``data.x``, the champion on ``champion_x`` (the rows as logged)."""
    early, late = holdout_split(len(data.y), holdout)
    _check("gate's held-out slice", data.y[late])
    y = data.y[late]
    p_old = champion.predict(champion_x[late])[0]
    budget = gate.ceiling(Side.of(y, p_old, champion.thresholds)) * REVIEW_MARGIN  # the champion's decisions only
    # Block where the product's limits (or a stricter gate's) hold out of fold: a 99%-precision cut on a
    # few hundred noisily labelled spam sits where a handful of mislabelled "ham" leaves it, far above
    # most spam. No margin below the ham-blocked limit: the fold models saw a fifth less history than the
    # one served and rank worse, so a cut placed on their scores is already a cautious one for it; half
    # the limit left a third of the spam unblocked (docs/LOOP.md, "Figures"). A looser gate accepts a
    # model on less evidence; it does not make the model block more.
    precision = max(gate.min_block_precision, TARGETS.min_block_precision)
    ham_blocked = min(gate.max_ham_blocked, TARGETS.max_ham_blocked)
    fitted, oof = fit_oof(data.x[early], data.y[early], budget, precision, ham_blocked)
    doubted = doubted_labels(data.y[early], oof)
    p_new = fitted.predict(data.x[late])
    challenger, served, won, lost = paired(y, (p_new, fitted.thresholds), (p_old, champion.thresholds))
    rows = {"train": early.stop, "held_out": late.stop - late.start}
    oof_eval = evaluate(data.y[early], oof, fitted.thresholds)
    test = evaluate(y, p_new, fitted.thresholds)
    # The drift alert's baseline: the earlier rows' text scores, out of fold in a retrain, as on new posts.
    card = save(
        fitted, out / "decision", text_version, rows, validation=oof_eval, test=test, validation_rows=data.x[early]
    )

    def start(s: slice) -> str:
        return datetime.fromtimestamp(float(data.times[s.start]), UTC).isoformat()

    return Decided(
        version=card.version,
        rows=rows,
        split_times={"train": start(early), "held_out": start(late)},
        oof=oof_eval,
        recheck={
            label: [data.post_ids[i] for i in np.nonzero(doubted & (data.y[early] == value))[0]]
            for label, value in (("labelled_ham", 0), ("labelled_spam", 1))
        },
        challenger=challenger,
        champion=served,
        judgement=gate.judge(challenger, served, won, lost),
        curves=Curves(y, p_new, p_old),
    )


def copy_text(text_dir: Path, out: Path) -> None:
    """``text_dir`` copied into ``out/text``: a bundle the loop writes holds its own files."""
    shutil.rmtree(out / "text", ignore_errors=True)
    (out / "text").unlink(missing_ok=True)
    shutil.copytree(text_dir.resolve(), out / "text")


def retrain_decision(data: Path, serving_bundle: Path, out: Path, gate: Gate, holdout: float = HOLDOUT) -> Decided:
    """``modstream train-decision --data``: the decision model alone, on a `dataset build` file
    scored by the serving text model, into a bundle with that text model. Raises DatasetError."""
    serving, text_version = load_serving(serving_bundle)
    d = read_parquet(data)
    if d.text_versions - {text_version}:
        raise DatasetError(
            f"{data}: rows scored by text model(s) {sorted(d.text_versions)}, the serving bundle has {text_version!r}"
        )
    decided = decide(d, d.x, serving, out, gate, text_version, holdout)
    copy_text(serving_bundle / "text", out)
    return decided
