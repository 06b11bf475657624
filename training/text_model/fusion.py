"""Both text signals as one text verdict: a logistic fusion of the transformer's and the char
n-gram model's log-odds, fit on the validation split.

In serving, the decision model combines the two scores (with the behaviour signals); this
fusion is the text-only figure, what a platform training on its own posts compares with the
n-gram baseline. Three numbers, so it is stored in the card itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict
from sklearn.linear_model import LogisticRegression

FloatArray = npt.NDArray[np.float32] | npt.NDArray[np.float64]
_EPS = 1e-6


def _log_odds(p: npt.ArrayLike) -> npt.NDArray[np.float64]:
    q = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return np.asarray(np.log(q / (1 - q)))


class Fusion(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    transformer: float  # weight of the transformer's log-odds
    ngram: float  # weight of the n-gram model's log-odds
    bias: float

    def spam_prob(self, transformer: npt.ArrayLike, ngram: npt.ArrayLike) -> npt.NDArray[np.float64]:
        z = self.transformer * _log_odds(transformer) + self.ngram * _log_odds(ngram) + self.bias
        return np.asarray(1 / (1 + np.exp(-z)))

    @classmethod
    def fit(cls, transformer: FloatArray, ngram: FloatArray, labels: Sequence[int]) -> Fusion:
        """Fit on held-out scores (the validation split): on training scores both models are overconfident."""
        x = np.column_stack([_log_odds(transformer), _log_odds(ngram)])
        clf = LogisticRegression(C=1.0).fit(x, np.asarray(labels, dtype=np.int64))
        w = clf.coef_[0]
        return cls(transformer=float(w[0]), ngram=float(w[1]), bias=float(clf.intercept_[0]))
