"""Scores that mean what they say: calibration on the validation split, and its measure.

A fine-tuned transformer is over-confident, and a strongly regularised logistic regression
under-confident for its minority class; both are fixed with one monotone map fitted on
validation, so rankings (ROC-AUC) do not move. The maps fold into the models' own last
layers (the classifier's weights, the n-gram model's), so Triton and the worker serve
calibrated scores with no extra step and no new field to forget.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize_scalar  # type: ignore[import-untyped]  # no stubs in the environment
from sklearn.linear_model import LogisticRegression

FloatArray = npt.NDArray[np.float64]
ECE_BINS = 10
_EPS = 1e-6


def logit(p: npt.ArrayLike) -> FloatArray:
    q = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return np.asarray(np.log(q / (1 - q)), dtype=np.float64)


def _nll(z: FloatArray, y: FloatArray) -> float:
    # log(1 + e^z) - y z, stable for large |z|
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def fit_temperature(probs: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    """The temperature T that minimises the log loss of sigmoid(logit(p) / T) on ``labels``."""
    z, y = logit(probs), np.asarray(labels, dtype=np.float64)
    found = minimize_scalar(lambda log_t: _nll(z / np.exp(log_t), y), bounds=(-3.0, 3.0), method="bounded")
    return float(np.exp(found.x))


def fit_platt(probs: npt.ArrayLike, labels: npt.ArrayLike) -> tuple[float, float]:
    """Slope and bias ``(a, b)`` minimising the log loss of sigmoid(a logit(p) + b) on ``labels``."""
    fitted = LogisticRegression(C=1e6).fit(logit(probs).reshape(-1, 1), np.asarray(labels, dtype=int))
    return float(fitted.coef_[0, 0]), float(fitted.intercept_[0])


def ece(labels: npt.ArrayLike, probs: npt.ArrayLike, bins: int = ECE_BINS) -> float:
    """Expected calibration error: the mean |spam share - mean score| over equal-width score bins,
    weighted by their posts."""
    y, p = np.asarray(labels, dtype=np.float64), np.asarray(probs, dtype=np.float64)
    if not len(y):
        return float("nan")
    which = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            total += inside.sum() * abs(float(y[inside].mean()) - float(p[inside].mean()))
    return total / len(y)
