"""Training the character n-gram model (:mod:`workers.text.ngram`) beside the transformer.

Features come from the worker's own :func:`workers.text.ngram.tfidf_rows`, so the weights
fit exactly what the worker computes. The regularisation strength is chosen on the
validation split; the test split is only scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp  # type: ignore[import-untyped]  # no stubs in the environment
from sklearn.linear_model import LogisticRegression

from training.calibration import ece, fit_platt
from training.corpora.labelled import Example, Splits
from training.text_model.scoring import metrics
from workers.text.ngram import N_BUCKETS, NgramModel, tfidf_rows

C_GRID = (1.0, 4.0, 16.0, 64.0)


def _idf(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    """Smoothed idf per bucket, as sklearn's TfidfVectorizer computes it."""
    df = np.zeros(N_BUCKETS, dtype=np.float64)
    for chunk in _chunks(texts):
        df += np.bincount(tfidf_rows(chunk, np.ones(N_BUCKETS, dtype=np.float32))[1], minlength=N_BUCKETS)
    return np.asarray(np.log((1 + len(texts)) / (1 + df)) + 1, dtype=np.float32)


def _matrix(texts: Sequence[str], idf: npt.NDArray[np.float32]) -> sp.csr_matrix:
    parts = []
    for chunk in _chunks(texts):
        rows, ids, values = tfidf_rows(chunk, idf)
        parts.append(sp.csr_matrix((values, (rows, ids)), shape=(len(chunk), N_BUCKETS)))
    return sp.vstack(parts, format="csr") if parts else sp.csr_matrix((0, N_BUCKETS), dtype=np.float32)


def _chunks(texts: Sequence[str], size: int = 2048) -> list[Sequence[str]]:
    """Batches small enough that the per-occurrence arrays stay a few tens of MB."""
    return [texts[i : i + size] for i in range(0, len(texts), size)]


def _labels(part: Sequence[Example]) -> npt.NDArray[np.int64]:
    return np.array([e.label for e in part], dtype=np.int64)


def train_ngram(splits: Splits, out: Path, seed: int) -> dict[str, Any]:
    """Fit on train, pick C on val F1, save ``ngram.npz`` into ``out``; returns the card's report."""
    idf = _idf([e.text for e in splits.train])
    x_train = _matrix([e.text for e in splits.train], idf)
    x_val = _matrix([e.text for e in splits.val], idf)
    y_train, y_val = _labels(splits.train), _labels(splits.val)
    best: tuple[float, float, LogisticRegression] | None = None
    val_f1: dict[str, float] = {}
    for c in C_GRID:
        clf = LogisticRegression(C=c, max_iter=2000, random_state=seed).fit(x_train, y_train)
        f1 = metrics(y_val, clf.predict_proba(x_val)[:, 1])["f1"]
        val_f1[str(c)] = f1
        if best is None or f1 > best[0]:
            best = (f1, c, clf)
    assert best is not None
    _, c, clf = best
    # Platt scaling on validation, folded into the weights: the worker computes calibrated scores as before.
    raw = clf.predict_proba(x_val)[:, 1]
    a, b = fit_platt(raw, y_val)
    coef, intercept = clf.coef_[0] * a, float(clf.intercept_[0]) * a + b
    model = NgramModel(idf, coef.astype(np.float32), intercept)
    model.save(out)
    return {
        "c": c,
        "val_f1_by_c": val_f1,
        "calibration": {"platt_a": a, "platt_b": b, "val_ece_before": ece(y_val, raw)},
        "n_buckets": N_BUCKETS,
        "metrics": {
            name: metrics(_labels(part), model.spam_prob([e.text for e in part]))
            for name, part in (("val", splits.val), ("test", splits.test))
        },
    }
