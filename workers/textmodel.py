"""The parts of a content model the worker runs itself: its tokenizer and its n-gram companion,
named by its card's version. Triton runs the network; these load from the bundle's ``text/``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workers.cards import TextModelCard
from workers.ngram import NGRAM_FILE, NgramModel
from workers.textenc import TextEncoder


@dataclass(frozen=True)
class LocalText:
    version: str  # the card's: what verdicts name as model_versions["text"]
    encoder: TextEncoder
    ngram: NgramModel | None  # None for a text model trained without one; the feature stays NaN

    @classmethod
    def load(cls, text_dir: Path, max_tokens: int | None = None) -> LocalText:
        """``max_tokens`` overrides the length the card says the model was trained with."""
        card = TextModelCard.load(text_dir)
        encoder = TextEncoder(text_dir / "tokenizer.json", max_tokens or card.max_length)
        ngram = NgramModel.load(text_dir) if (text_dir / NGRAM_FILE).is_file() else None
        return cls(card.version, encoder, ngram)
