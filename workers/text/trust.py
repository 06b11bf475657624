"""Per language, whether a bundle's decision model reads the transformer's score.

A platform's retrain learns where its transformer helps the decision model read the platform: the
default one's vocabulary is English. The retrain (modstream/loop/languages.py) lists the languages
where the decision model reads the labels better without it in the decision model's
``languages.json``; the worker then withholds the transformer's score for a post confidently in one
of them (and does not ask Triton for it), so the decision model, trained alike, decides on the
n-gram score and the stream's signals. A bundle without the file trusts the transformer everywhere.

It also says from what text score a text model's spam reading keeps a post out of allow (the
worker's ``text_model`` rule, workers/stages/decide.py): where the platform's labels show the
stream's signals right when the two disagree, the retrain raises it. And from what score the
platform's labels confirm the reading, so that a post the decision model leaves to review is blocked:
review is for the posts the evidence disagrees on. Only a retrain sets it, on the platform's labels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from workers.text.language import Languages

TRUST_FILE = "languages.json"
# A calibrated text score at or above this calls the post spam more likely than not.
SPAM_READING = 0.5
# A post's confident language, whatever a text model judges: none is inside an empty set.
_ANY = Languages(frozenset())


class LanguageEvidence(BaseModel):
    """What the choice read: the language's out-of-fold rows, each text score's ROC-AUC on them, and
    the decision model's, fitted out of fold with the transformer's score and without it there."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    posts: int
    spam: int
    transformer_auc: float
    ngram_auc: float
    decision_auc: float
    decision_auc_without_transformer: float


class Trust(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    ngram_only: frozenset[str] = frozenset()  # languages whose transformer score is withheld
    evidence: dict[str, LanguageEvidence] = {}
    # The text score from which a text model's spam reading keeps a post out of allow; None: never.
    spam_reading: float | None = SPAM_READING
    # The text score from which the labels confirm that reading: the decision model's review is a block.
    spam_confirmed: float | None = None

    @property
    def reads_spam_from(self) -> float:
        """:attr:`spam_reading` as a cut no score reaches where it is None."""
        return math.inf if self.spam_reading is None else self.spam_reading

    @property
    def confirms_spam_from(self) -> float:
        """:attr:`spam_confirmed` as a cut no score reaches where it is None."""
        return math.inf if self.spam_confirmed is None else self.spam_confirmed

    @classmethod
    def load(cls, directory: Path) -> Trust:
        path = directory / TRUST_FILE
        return cls.model_validate_json(path.read_text()) if path.is_file() else cls()

    def save(self, directory: Path) -> None:
        (directory / TRUST_FILE).write_text(self.model_dump_json(indent=2) + "\n")

    def withheld(self, texts: Sequence[str]) -> list[str | None]:
        """Per text, the language whose transformer score is withheld, or None."""
        if not self.ngram_only:  # identification costs ~30 µs a post: only where it can matter
            return [None] * len(texts)
        return [lang if lang in self.ngram_only else None for lang in languages_of(texts)]


def languages_of(texts: Sequence[str]) -> list[str | None]:
    """Per text, its language where the identifier is confident of one (after the models' normaliser), or None."""
    return _ANY.unjudged(texts)


TRUST_EVERYWHERE = Trust()  # a bundle without the file
