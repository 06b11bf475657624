"""The normaliser against an adversarial set: each obfuscation must come back to the plain form,
and ordinary posts must pass through unchanged."""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from training.experiments.evasions import OBFUSCATIONS
from workers.text.encoder import TextEncoder
from workers.text.normalise import (
    _EMAIL,
    _INVISIBLE,
    NORMALISER_VERSION,
    NormaliserMismatch,
    _unleet_token,
    check_normaliser,
    defang,
    normalise,
    unleet,
)

ADVERSARIAL = [
    # Homoglyphs: Cyrillic і, с, о and Greek ο inside Latin words.
    ("Mі\u0441r\u043es\u03bfft account", "Microsoft account"),
    ("\u0440\u0430ypal login", "paypal login"),  # Cyrillic р and а
    # Zero-width and invisible characters splitting words.
    ("fr\u200bee mo\u200dney", "free money"),
    ("cl\u2060ick\ufeff here", "click here"),
    ("vi\u00adagra", "viagra"),  # soft hyphen
    # Every other format character and the variation selectors, from the Unicode database.
    ("vi\U000e0041agra \U000e0001fr\U000e007fee", "viagra free"),  # tag characters
    ("ca\u061csh pr\ufff9i\ufffaz\ufffbe", "cash prize"),  # Arabic letter mark, interlinear annotation
    ("vi\ufe0fagra fr\ufe00ee mo\U000e0100ney", "viagra free money"),  # variation selectors
    ("cl\u180eick he\U0001d173re", "click here"),  # Mongolian vowel separator, a musical format char
    # Compatibility forms NFKC folds: fullwidth and mathematical letters.
    ("\uff26\uff32\uff25\uff25 gift", "FREE gift"),
    ("\U0001d41f\U0001d42b\U0001d41e\U0001d41e \U0001d426\U0001d428\U0001d427\U0001d41e\U0001d432", "free money"),
    # Small capitals, the "fancy font" of comment scams (Unicode names them after their letter).
    (
        "\u1d21\u1d0f\u1d21 \u026a \u0262\u1d0f\u1d1b $27 000 \u0299\u028f "
        "\u026a\u0274\u1d20\u1d07\ua731\u1d1b\u026a\u0274\u0262",
        "wow i got $27 000 by investing",
    ),
    # Diacritics used as decoration.
    ("V\u00efagr\u00e0 ch\u00eaap", "Viagra cheap"),
    # Leetspeak.
    ("get fr33 v1agra n0w", "get free viagra now"),
    ("c@$h pr1ze, b@nk d3tails", "cash prize, bank details"),
    # Defanged links.
    ("hxxp://evil[.]com/login", "http://evil.com/login"),
    ("hxxps://bad(dot)example(.)net", "https://bad.example.net badexample"),
    ("visit http:\\\\www.example.com\\update now", "visit http://www.example.com/update now"),
    # A brand split across host labels is rejoined.
    (
        "Click here to update. http:\\\\www.micr.osoftr.com\\update",
        "Click here to update. http://www.micr.osoftr.com/update microsoftr",
    ),
]

UNCHANGED = [
    "happy birthday mom! love you",
    "see you at the standup tomorrow",
    "Selling my old bike, 50 bucks, pickup only, DM me",
    "Americans who haven't had covid-19 are now officially in the minority.",
    "meeting at 3pm, bring the 4k monitor and the mp3 player; call 555-0134",
    "mail me at jo3@ex4mple.com or @jo3 on here",
    "\u043f\u0440\u0438\u0432\u0435\u0442, \u043a\u0430\u043a \u0434\u0435\u043b\u0430?",  # real Russian stays Cyrillic
    "\u03ba\u03b1\u03bb\u03b7\u03bc\u03b5\u03c1\u03b1",  # real Greek stays Greek (accents go: see _strip_marks)
    "price $100, 20% off",
    "https://example.com/a/b?q=1",
]


@pytest.mark.parametrize(("raw", "expected"), ADVERSARIAL)
def test_obfuscation_is_undone(raw: str, expected: str) -> None:
    assert normalise(raw) == expected


@pytest.mark.parametrize("text", UNCHANGED)
def test_ordinary_posts_pass_through(text: str) -> None:
    assert normalise(text) == text


def test_obfuscated_and_plain_spam_normalise_alike() -> None:
    plain = "Your Microsoft account has been compromised, click here http://microsoft-help.com"
    obfuscated = (
        "Your M\u0456cr0s\u200boft acc\u043eunt has been c\u043empr\u00f6mised, cl1ck here hxxp://microsoft-help[.]com"
    )
    assert normalise(obfuscated) == plain


def test_every_format_character_and_variation_selector_is_invisible() -> None:
    assert sum(unicodedata.category(chr(c)) == "Cf" for c in _INVISIBLE) == sum(
        unicodedata.category(chr(c)) == "Cf" for c in range(sys.maxunicode + 1)
    )
    selectors = [*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)]
    assert all(c in _INVISIBLE for c in selectors)
    assert normalise("".join(map(chr, selectors))) == ""


def test_emoji_sequences_fall_apart_into_their_emoji() -> None:
    # ZWJ and the emoji presentation selector go like every format character: the emoji stay.
    assert (
        normalise("\u2764\ufe0f \U0001f468\u200d\U0001f469\u200d\U0001f467") == "\u2764 \U0001f468\U0001f469\U0001f467"
    )


@pytest.mark.parametrize("name", OBFUSCATIONS)
def test_the_measured_evasions_normalise_to_the_plain_text(name: str) -> None:
    # training/experiments/evasions.py's obfuscations, which measure the trained model, are undone here.
    plain = "Claim your free prize today at http://www.cheap-pills.com/now before midnight"
    obfuscated = OBFUSCATIONS[name](plain)
    assert obfuscated != plain
    expected = {"links without scheme, defanged": plain.replace("http://www.", ""), "small capitals": plain.lower()}
    expected_text = expected.get(name, plain)
    assert normalise(obfuscated) == normalise(expected_text)


def test_the_version_is_pinned_and_a_mismatch_refused(caplog: pytest.LogCaptureFixture) -> None:
    assert len(NORMALISER_VERSION) == 12
    check_normaliser(NORMALISER_VERSION, Path("model/card.json"))
    with pytest.raises(NormaliserMismatch, match=r"model/card.json: trained with normaliser 0{12}, .*; retrain"):
        check_normaliser("0" * 12, Path("model/card.json"))
    check_normaliser(None, Path("old/card.json"))  # a model from before the pin still loads
    assert "old/card.json does not record its normaliser version" in caplog.text


def test_defang_leaves_text_without_markers() -> None:
    assert defang("a plain sentence.") == "a plain sentence."


def test_unleet_keeps_email_addresses() -> None:
    assert unleet("write to b0b@m4il.com, b0bby") == "write to b0b@m4il.com, bobby"


@given(st.text(alphabet="abzXY013457@$ .-_é9", max_size=40))
def test_unleet_reads_every_whole_run_of_letters_digits_and_signs(text: str) -> None:
    # The reference: each maximal run handed to the token rule, outside e-mail addresses. The
    # worker's pattern skips runs of letters alone, which the rule leaves as they are.
    def runs(part: str) -> str:
        return re.sub(r"[A-Za-z0-9@$]+", _unleet_token, part)

    out, last = [], 0
    for m in _EMAIL.finditer(text):
        out += [runs(text[last : m.start()]), m.group(0)]
        last = m.end()
    assert unleet(text) == "".join([*out, runs(text[last:])])


@given(st.text(max_size=200))
def test_idempotent_and_total(text: str) -> None:
    once = normalise(text)
    assert normalise(once) == once


def test_the_worker_encoder_sees_the_normalised_text(tokenizer_json: Path) -> None:
    encoder = TextEncoder(tokenizer_json, 64)
    plain, obfuscated = encoder.tokenize(["free viagra at http://evil.com", "FR\u200bEE v1agra at hxxp://evil[.]com"])
    assert obfuscated == plain
