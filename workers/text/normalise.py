"""The one text normaliser: what every text model sees, in training, evaluation and the worker.

Spam hides words and links from models: look-alike letters from other scripts
(``Miсrosoft`` with a Cyrillic ``с``), zero-width characters inside words, leetspeak
(``v1agra``), defanged links (``hxxp://evil[.]com``, ``http:\\\\host\\path``) and hosts
split mid-word (``micr.osoftr.com``). :func:`normalise` undoes these so that a model
trained on clean text recognises the obfuscated variant. It is applied by
``workers.textenc.TextEncoder`` and the n-gram model, so training and serving can
never disagree.

Confusables come from ``confusable-homoglyphs`` (the Unicode consortium's
confusables.txt), not a hand-kept table.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
import unicodedata
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from confusable_homoglyphs.confusables import confusables_data  # type: ignore[import-untyped]

log = logging.getLogger(__name__)


def _invisible_table() -> dict[int, None]:
    """Every format character (category Cf: ZWSP, ZWJ, soft hyphen, bidi controls, BOM, tag
    characters, interlinear annotation marks...) and every variation selector: they split words
    without showing anything. Derived from the Unicode database once, at import, so a new
    Unicode version's additions come with it.

    ZWJ and the emoji variation selector go too, so an emoji ZWJ sequence falls apart into its
    emoji (family -> man woman girl): the models still see the same emoji, and the tokenizer
    drops format characters anyway.
    """
    table: dict[int, None] = {}
    for code in range(sys.maxunicode + 1):
        category = unicodedata.category(chr(code))
        if category == "Cf" or (category == "Mn" and unicodedata.name(chr(code)).startswith("VARIATION SELECTOR")):
            table[code] = None
    return table


# Blank fillers that are not Cf hide in words the same way: the combining grapheme joiner, the
# Hangul fillers (NFKC folds the other two onto U+1160) and the Khmer inherent vowels.
_INVISIBLE = _invisible_table() | dict.fromkeys(map(ord, "\u034f\u115f\u1160\u17b4\u17b5"))
_ASCII_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def _confusable_table() -> dict[int, str]:
    """Each non-ASCII character that Unicode lists as confusable with one ASCII letter or digit -> it."""
    table: dict[int, str] = {}
    for char, glyphs in confusables_data.items():
        if len(char) != 1 or char.isascii():
            continue
        ascii_forms = {g["c"] for g in glyphs if len(g["c"]) == 1 and g["c"] in _ASCII_ALNUM}
        # Prefer a letter over a digit (Cyrillic "О" is confusable with both "O" and "0").
        letters = sorted(c for c in ascii_forms if c.isalpha())
        if letters or ascii_forms:
            table[ord(char)] = (letters or sorted(ascii_forms))[0]
    return table


# "LATIN LETTER SMALL CAPITAL W" and its modifier forms: the "fancy font" of ᴡᴏᴡ ɪ ɢᴏᴛ $27 000.
_SMALL_CAPITAL = re.compile(r"(?:LATIN|MODIFIER) LETTER SMALL CAPITAL ([A-Z])")


def _small_capital_table() -> dict[int, str]:
    """Each small capital Unicode names after one ASCII letter -> that letter. confusables.txt lists
    few of them, and a word in small capitals read as another script (Swedish, to the language
    identifier) which the text model then did not judge at all."""
    table: dict[int, str] = {}
    for code in range(0x80, sys.maxunicode + 1):
        if m := _SMALL_CAPITAL.fullmatch(unicodedata.name(chr(code), "")):
            table[code] = m.group(1).lower()
    return table


_CONFUSABLE = _confusable_table() | _small_capital_table()
# A word with at least one character from another script that Unicode marks confusable with
# Latin; it is mapped only when it mixes in ASCII letters or maps wholly to ASCII, so real
# Greek or Cyrillic words (which hold non-confusable letters) stay as they are.
_WORD = re.compile(r"\w+")

_DEFANG: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    (re.compile(r"\[\.\]|\(\.\)|\{\.\}|\[dot\]|\(dot\)|\{dot\}", re.I), "."),
    (re.compile(r"\[:\]|\[://\]", re.I), lambda m: m.group(0)[1:-1]),
    (re.compile(r"\bh(?:xx|\*\*|XX)p(s?)\b", re.I), r"http\1"),
]
_DEFANG_MARKERS = ("[.]", "(.)", "{.}", "[dot]", "(dot)", "{dot}", "[:", "xxp", "**p")
# A scheme followed by any mix of ':' and slashes or backslashes: "http:\\host\path".
_SCHEME = re.compile(r"\b(https?)\s*:\s*[/\\]{1,3}", re.I)
_URL = re.compile(r"\bhttps?://[^\s<>\"'()\[\]{}|^`]+|\bwww\.[^\s<>\"'()\[\]{}|^`]+", re.I)
_URL_AND_WORD = re.compile(rf"({_URL.pattern})(?: ([a-z]+))?", re.I)
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+")

# Leetspeak: digits and symbols standing in for letters.
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"})
# A whole run of letters, digits, "@" and "$" that holds one of the last three: a run of letters alone
# is left as it is, and skipping it in C spares a Python call for each of a post's ~20 words.
_LEET_TOKEN = re.compile(r"(?<![A-Za-z0-9@$])[A-Za-z]*[0-9@$][A-Za-z0-9@$]*")
# A leet character between two letters (v1agra, m0ney, b@nk), or a run of leet digits
# ending a word of at least two letters (fr33). A lone trailing digit (mp3) and
# numbers with units (3pm, 4k, covid-19) are left alone.
_LEET_INNER = re.compile(r"(?<=[A-Za-z])[013457@$]+(?=[A-Za-z])")
_LEET_TAIL = re.compile(r"(?<=[A-Za-z]{2})[013457]{2,}$")


def _version() -> str:
    """What :func:`normalise` does, as a short hash: this module's code and the tables it derives
    (which follow the Unicode database and the confusables package, not only this file)."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(unicodedata.unidata_version.encode())
    digest.update(repr(sorted(_CONFUSABLE.items())).encode())
    return digest.hexdigest()[:12]


# Pinned by each trained text model: a model trained on other normalised text is refused at load.
NORMALISER_VERSION = _version()


class NormaliserMismatch(ValueError):
    """A model trained with another normaliser than this code's."""


def check_normaliser(trained_with: str | None, source: Path) -> None:
    """Refuse a model whose normaliser differs from this one; one without the pin (trained before
    there was one) is accepted, with a warning, so models already in a cache keep working."""
    if trained_with is None:
        log.warning("%s does not record its normaliser version; assuming it matches %s", source, NORMALISER_VERSION)
    elif trained_with != NORMALISER_VERSION:
        raise NormaliserMismatch(
            f"{source}: trained with normaliser {trained_with}, this code's is {NORMALISER_VERSION}; retrain"
        )


def defang(text: str) -> str:
    """Re-arm defanged links: ``hxxp`` -> ``http``, ``[.]``/``(dot)`` -> ``.``, ``http:\\\\`` -> ``http://``."""
    lower = text.lower()
    if any(marker in lower for marker in _DEFANG_MARKERS):
        for pattern, repl in _DEFANG:
            text = pattern.sub(repl, text)
    if "http" in lower:
        text = _SCHEME.sub(lambda m: m.group(1).lower() + "://", text)
        text = _URL.sub(lambda m: m.group(0).replace("\\", "/"), text)
    return text


def _deconfuse_word(match: re.Match[str]) -> str:
    word = match.group(0)
    if word.isascii():
        return word
    mapped = word.translate(_CONFUSABLE)
    if mapped.isascii() or any(c.isascii() and c.isalpha() for c in word):
        return mapped
    return word


def _strip_marks(text: str) -> str:
    """Drop combining marks (Vïagra -> Viagra); the uncased tokenizer strips accents anyway."""
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))


def _unleet_token(match: re.Match[str]) -> str:
    token = match.group(0)
    if token.isalpha() or token.isdigit() or sum(c.isalpha() for c in token) < 2:
        return token
    token = _LEET_INNER.sub(lambda m: m.group(0).translate(_LEET), token)
    return _LEET_TAIL.sub(lambda m: m.group(0).translate(_LEET), token)


def unleet(text: str) -> str:
    """Leetspeak back to letters, outside e-mail addresses (whose ``@`` is real)."""
    out, last = [], 0
    for m in _EMAIL.finditer(text):
        out.append(_LEET_TOKEN.sub(_unleet_token, text[last : m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(_LEET_TOKEN.sub(_unleet_token, text[last:]))
    return "".join(out)


def _rejoin_host(match: re.Match[str]) -> str:
    """A URL followed by its host's labels joined into one word: ``www.micr.osoftr.com`` gains
    ``microsoftr``, so a brand split across labels is visible to the models again."""
    url, following = match.group(1), match.group(2)
    host = re.sub(r"^[a-z]+://", "", url, flags=re.I).split("/", 1)[0].split(":", 1)[0].lower()
    labels = [label for label in host.split(".") if label]
    if labels and labels[0] == "www":
        labels = labels[1:]
    inner = labels[:-1]  # without the top-level domain
    joined = "".join(inner)
    if len(inner) < 2 or not joined.isalpha() or following == joined:  # the last: already rejoined
        return match.group(0)
    return f"{url} {joined}{match.group(0)[len(url) :]}"


def rejoin_hosts(text: str) -> str:
    lower = text.lower()
    if "http" not in lower and "www." not in lower:
        return text
    return _URL_AND_WORD.sub(_rejoin_host, text)


@lru_cache(maxsize=16_384)  # campaigns repeat the same text across many posts
def normalise(text: str) -> str:
    """The text every model sees. Idempotent; plain ASCII text skips the Unicode steps."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
        text = text.translate(_INVISIBLE)
        text = _strip_marks(text)
        text = _WORD.sub(_deconfuse_word, text)
    text = defang(text)
    text = unleet(text)
    return rejoin_hosts(text)
