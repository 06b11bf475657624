"""The retrain's choice, per language, of the text scores its decision model reads (workers/text/trust.py).

Both text models are fine-tuned on every labelled post, whatever its language. Where the transformer's
vocabulary cannot read a script (the default's is English), its score may be noise beside the
n-gram model's, and a decision model trained on both can learn a mix of the two that blocks ham
(a Russian platform of issue 46: 1.9% of its ham). Which to trust is the decision model's question,
not each score's alone: on the Russian chat posts of training/platforms the n-gram model alone
read better than the transformer alone, and the decision model read better with both. So for each
language with enough labels, the decision model is fitted out of fold on the earlier rows (never
the gate's latest slice) twice, with the transformer's score and with it missing in that language,
and the transformer's score is withheld there only where the decision model reads that language's
rows better without it (ROC-AUC), in its training rows and in the worker alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt
from sklearn.metrics import roc_auc_score

from modstream.loop.join import Labelled
from modstream.loop.retrain_decision import out_of_fold
from workers.state.features import FEATURES
from workers.text.trust import LanguageEvidence, Trust

# Out-of-fold rows of each class a language needs before the choice is made for it.
MIN_PER_CLASS = 20
TEXT = FEATURES.index("text_spam_prob")
NGRAM = FEATURES.index("text_ngram_spam_prob")


def _auc(y: npt.NDArray[np.int_], p: npt.NDArray[np.float64]) -> float:
    return round(float(roc_auc_score(y, p)), 4)


def choose(languages: Sequence[str | None], rows: Labelled, judged: slice) -> Trust:
    """The trust that ``rows`` (rescored out of fold, per row its language) support over ``judged``."""
    evidence = {}
    x, y = rows.x[judged], rows.y[judged]
    langs = np.array(languages[judged], dtype=object)
    both: npt.NDArray[np.float64] | None = None  # the decision model's out-of-fold scores, reading both
    for lang in sorted({lang for lang in langs if lang is not None}):
        at = (langs == lang) & np.isfinite(x[:, TEXT]) & np.isfinite(x[:, NGRAM])
        spam = int(y[at].sum())
        if min(spam, int(at.sum()) - spam) < MIN_PER_CLASS:
            continue
        if both is None:
            both = out_of_fold(x, y)[0]
        blind = x.copy()
        blind[at, TEXT] = np.nan
        evidence[lang] = LanguageEvidence(
            posts=int(at.sum()),
            spam=spam,
            transformer_auc=_auc(y[at], x[at, TEXT]),
            ngram_auc=_auc(y[at], x[at, NGRAM]),
            decision_auc=_auc(y[at], both[at]),
            decision_auc_without_transformer=_auc(y[at], out_of_fold(blind, y)[0][at]),
        )
    ngram_only = frozenset(lang for lang, e in evidence.items() if e.decision_auc_without_transformer > e.decision_auc)
    return Trust(ngram_only=ngram_only, evidence=evidence)


def withhold(rows: Labelled, languages: Sequence[str | None], trust: Trust) -> Labelled:
    """``rows`` with the transformer's score missing where ``trust`` withholds it, as the worker serves."""
    mask: npt.NDArray[np.bool_] = np.array([lang in trust.ngram_only for lang in languages], dtype=bool)
    if not mask.any():
        return rows
    x = rows.x.copy()
    x[mask, TEXT] = np.nan
    return replace(rows, x=x)


def trust_line(trust: Trust) -> str:
    """What the retrain prints: each language compared, and the choice."""
    if not trust.evidence:
        return f"no language has {MIN_PER_CLASS} out-of-fold posts of each class to choose on"
    read = ", ".join(
        f"{lang} ({e.posts} posts; ROC-AUC transformer {e.transformer_auc:.3f}, n-gram {e.ngram_auc:.3f}, "
        f"decision model {e.decision_auc:.3f} with the transformer, {e.decision_auc_without_transformer:.3f} without)"
        for lang, e in trust.evidence.items()
    )
    kept = ", ".join(sorted(trust.ngram_only)) or "none"
    return f"{read}; the transformer's score withheld in: {kept}"
