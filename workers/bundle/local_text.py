"""The parts of a content model the worker runs itself: its tokenizer and its n-gram companion,
named by its card's version. Triton runs the network; these load from the bundle's ``text/``.
A text model other than the served one (a challenger's, a replayed bundle's) is checked against
the version Triton serves and scored here, network and n-gram together."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from workers.clients import TextModel
from workers.model_cards import CARD_FILE, TextModelCard
from workers.stages.score import TextScorer
from workers.text.encoder import TextEncoder
from workers.text.language import EVERY_LANGUAGE, Languages, withhold
from workers.text.ngram import NGRAM_FILE, NgramModel, ngram_probs
from workers.text.normalise import check_normaliser

# (text model, n-gram model) scores per text.
Scores = tuple[Sequence[float | None], Sequence[float | None]]


class WrongVersion(RuntimeError):
    pass


@dataclass(frozen=True)
class LocalText:
    version: str  # the card's: what verdicts name as model_versions["text"]
    encoder: TextEncoder
    ngram: NgramModel | None  # None for a text model trained without one; the feature stays NaN
    languages: Languages = EVERY_LANGUAGE  # what it can judge; a post in another language gets no scores

    @classmethod
    def load(cls, text_dir: Path, max_tokens: int | None = None) -> LocalText:
        """``max_tokens`` overrides the length the card says the model was trained with."""
        card = TextModelCard.load(text_dir)
        check_normaliser(card.normaliser, text_dir / CARD_FILE)
        encoder = TextEncoder(text_dir / "tokenizer.json", max_tokens or card.max_length)
        ngram = NgramModel.load(text_dir) if (text_dir / NGRAM_FILE).is_file() else None
        return cls(card.version, encoder, ngram, Languages.of(card.languages))

    async def connect(self, model: TextModel) -> None:
        """Connect ``model``; raises unless its server serves this text model at its card's version
        (the one verdicts name)."""
        await model.connect()
        if model.version != self.version:
            raise WrongVersion(f"Triton serves version {model.version!r}, not {self.version!r}")

    async def score(self, scorer: TextScorer, texts: Sequence[str]) -> Scores:
        """``texts`` scored by the network (through ``scorer``) and by the n-gram model, at once; None
        for both where a text is in a language the model cannot judge."""
        text, ngram = await asyncio.gather(scorer.score(texts), ngram_probs(self.ngram, texts))
        unjudged = self.languages.unjudged(texts)
        return withhold(text, unjudged), withhold(ngram, unjudged)
