"""How many of the default text model's test spam change verdict when obfuscated.

Each obfuscation of :data:`OBFUSCATIONS` rewrites every spam text of the default posts' test
split the way a spammer would; the serving scores (transformer, n-gram and their fusion,
exactly as the worker computes them) are taken on the plain and the obfuscated text, and a
post counts as evaded when the plain text was flagged (score >= 0.5) and the obfuscated one
is not. The normaliser is meant to make these counts zero.

    python -m training.experiments.evasions [--model-dir DIR] [--out out/evasions.json]
"""

from __future__ import annotations

import argparse
import json
import re
import string
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from workers.config import cache_root, default_model_dir

_WORD = re.compile(r"[A-Za-z]{4,}")
_LINK = re.compile(r"\b(?:https?://)?(?:www\.)?((?:[a-z0-9-]+\.)+[a-z]{2,})(/\S*)?", re.I)
_HOMOGLYPHS = str.maketrans("aceopxy", "\u0430\u0441\u0435\u043e\u0440\u0445\u0443")  # Cyrillic look-alikes
_LEET = str.maketrans("aeiost", "431057")


def _inside_words(mark: str) -> Callable[[str], str]:
    """Put ``mark`` after the second letter of each word of four letters or more."""
    return lambda text: _WORD.sub(lambda m: m.group(0)[:2] + mark + m.group(0)[2:], text)


def _in_words(table: dict[int, int]) -> Callable[[str], str]:
    """Translate the inner letters of each word of four letters or more (first and last stay)."""
    return lambda text: _WORD.sub(lambda m: m.group(0)[0] + m.group(0)[1:-1].translate(table) + m.group(0)[-1], text)


def _small_capital(letter: str) -> str:
    try:
        return unicodedata.lookup(f"LATIN LETTER SMALL CAPITAL {letter.upper()}")
    except KeyError:  # x has none
        return letter


# The whole text in small capitals ("fancy font" generators): ᴄʟɪᴄᴋ ʜᴇʀᴇ.
_SMALL_CAPITALS = str.maketrans({c: _small_capital(c) for c in string.ascii_lowercase})


def _bare_links(text: str) -> str:
    """Links without their scheme and ``www.``, dots defanged: ``http://www.evil.com/x`` -> ``evil[.]com/x``."""
    return _LINK.sub(lambda m: m.group(1).replace(".", "[.]") + (m.group(2) or ""), text)


OBFUSCATIONS: dict[str, Callable[[str], str]] = {
    "zero-width space": _inside_words("\u200b"),
    "tag character": _inside_words("\U000e0041"),
    "variation selector": _inside_words("\ufe0f"),
    "supplementary variation selector": _inside_words("\U000e0100"),
    "arabic letter mark": _inside_words("\u061c"),
    "interlinear annotation": _inside_words("\ufff9"),
    "homoglyphs": _in_words(_HOMOGLYPHS),
    "leetspeak": _in_words(_LEET),
    "small capitals": lambda text: text.lower().translate(_SMALL_CAPITALS),
    "links without scheme, defanged": _bare_links,
}


def evaded(plain: npt.ArrayLike, obfuscated: npt.ArrayLike, threshold: float = 0.5) -> int:
    """Posts flagged in ``plain`` and not in ``obfuscated``."""
    before, after = np.asarray(plain) >= threshold, np.asarray(obfuscated) >= threshold
    return int((before & ~after).sum())


def measure(model_dir: Path, spam: Sequence[str]) -> dict[str, Any]:
    """Per obfuscation and signal: the spam flagged before, and how many of them evade after."""
    from training.text_model.fusion import Fusion
    from training.text_model.scoring import onnx_spam_scores
    from workers.model_cards import TextModelCard
    from workers.text.language import Languages
    from workers.text.ngram import NgramModel

    card = TextModelCard.load(model_dir)
    ngram = NgramModel.load(model_dir)
    fusion = Fusion.model_validate({k: card.fusion[k] for k in Fusion.model_fields}) if card.fusion else None

    guard = Languages.of(card.languages)

    def scores(texts: Sequence[str]) -> dict[str, npt.NDArray[np.float64]]:
        """As served: a text the language guard withholds flags nothing (score 0)."""
        text = onnx_spam_scores(model_dir, texts).astype(np.float64)
        out = {"transformer": text, "ngram": ngram.spam_prob(texts)}
        if fusion is not None:
            out["fused"] = np.asarray(fusion.spam_prob(text, out["ngram"]), dtype=np.float64)
        withheld = np.array([lang is not None for lang in guard.unjudged(texts)])
        return {signal: np.where(withheld, 0.0, s) for signal, s in out.items()} | {"withheld": withheld}

    plain = scores(spam)
    signals = [k for k in plain if k != "withheld"]
    result: dict[str, Any] = {
        "model": card.version,
        "normaliser": card.normaliser,
        "spam": len(spam),
        "flagged": {signal: int((plain[signal] >= 0.5).sum()) for signal in signals},
        "withheld": int(plain["withheld"].sum()),
        "evaded": {},
    }
    for name, obfuscate in OBFUSCATIONS.items():
        changed = [obfuscate(t) for t in spam]
        after = scores(changed)
        result["evaded"][name] = {signal: evaded(plain[signal], after[signal]) for signal in signals}
        result["evaded"][name]["withheld"] = int(after["withheld"].sum())
        result["evaded"][name]["texts_changed"] = sum(a != b for a, b in zip(spam, changed, strict=True))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, default=default_model_dir() / "text")
    parser.add_argument("--out", type=Path, default=Path("out/evasions.json"))
    args = parser.parse_args()
    from training.corpora.posts import post_splits
    from workers.model_cards import TextModelCard

    seed = TextModelCard.load(args.model_dir).seed or 13
    spam = [e.text for e in post_splits(cache_root(), seed).test if e.label == 1]
    result = measure(args.model_dir, spam)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    signals = list(result["flagged"])
    head = " | ".join(f"{s} evaded" for s in signals)
    print(f"| obfuscation ({result['spam']} test spam) | {head} | withheld by the language guard |")
    print("| --- |" + " --- |" * (len(signals) + 1))
    flagged = " | ".join(str(result["flagged"][s]) for s in signals)
    print(f"| flagged when plain | {flagged} | {result['withheld']} |")
    for name, counts in result["evaded"].items():
        print(f"| {name} | " + " | ".join(str(counts[s]) for s in [*signals, "withheld"]) + " |")


if __name__ == "__main__":
    main()
