"""The retrain's per-language choice of text scores: the transformer's withheld only where the decision
model reads a language's out-of-fold labels better without it, never judged on the gate's slice."""

import numpy as np

from modstream.loop.join import Labelled
from modstream.loop.languages import MIN_PER_CLASS, NGRAM, TEXT, choose, withhold
from workers.state.features import FEATURES
from workers.text.trust import Trust

RU = "Подработка для всех, пишите в личку, оплата каждый день"
EN = "Just finished reading the release notes, the new version looks great"


def rows(y: list[int], text: list[float], ngram: list[float]) -> Labelled:
    x = np.full((len(y), len(FEATURES)), np.nan)
    x[:, TEXT], x[:, NGRAM] = text, ngram
    return Labelled([f"p{i}" for i in range(len(y))], np.arange(len(y), dtype=float), x, np.array(y), set())


def platform(n: int = 200, seed: int = 0) -> tuple[list[str | None], Labelled]:
    """Half Russian, half English, half spam in each: on Russian the transformer calls everything
    spam-like (as the default did Russian chat) and the n-gram model reads; on English both read,
    the transformer better."""
    rng = np.random.default_rng(seed)
    langs: list[str | None] = ["ru" if i % 2 else "en" for i in range(n)]
    y = [int(i % 4 >= 2) for i in range(n)]
    good = [0.3 + 0.4 * label + rng.normal(0, 0.1) for label in y]
    fair = [0.3 + 0.4 * label + rng.normal(0, 0.25) for label in y]
    noise = list(rng.uniform(0.5, 1.0, n))
    text = [noise[i] if lang == "ru" else good[i] for i, lang in enumerate(langs)]
    ngram = [good[i] if lang == "ru" else fair[i] for i, lang in enumerate(langs)]
    return langs, rows(y, text, ngram)


def test_the_transformer_is_withheld_where_it_cannot_read_and_kept_where_it_reads() -> None:
    langs, labelled = platform()
    trust = choose(langs, labelled, slice(0, 200))
    assert trust.ngram_only == {"ru"}
    ru, en = trust.evidence["ru"], trust.evidence["en"]
    assert ru.decision_auc_without_transformer > ru.decision_auc and ru.ngram_auc > ru.transformer_auc
    assert en.decision_auc >= en.decision_auc_without_transformer  # the benign twin: kept


def test_a_language_with_too_few_labels_of_a_class_is_not_judged() -> None:
    langs, labelled = platform(n=4 * (MIN_PER_CLASS - 1))
    assert choose(langs, labelled, slice(0, len(langs))) == Trust()


def test_only_the_judged_rows_are_read() -> None:
    """The gate's latest slice chooses nothing: there, the transformer reads Russian perfectly."""
    langs, labelled = platform(n=400)
    labelled.x[200:, TEXT] = labelled.y[200:]
    assert choose(langs, labelled, slice(0, 200)).ngram_only == {"ru"}
    assert choose(langs, labelled, slice(200, 400)).ngram_only == frozenset()


def test_withholding_masks_the_transformer_score_of_that_language_only() -> None:
    langs, labelled = platform(n=8)
    masked = withhold(labelled, langs, Trust(ngram_only=frozenset({"ru"})))
    ru = np.array([lang == "ru" for lang in langs])
    assert np.isnan(masked.x[ru, TEXT]).all() and np.isfinite(masked.x[~ru, TEXT]).all()
    assert np.array_equal(masked.x[:, NGRAM], labelled.x[:, NGRAM])
    assert withhold(labelled, langs, Trust()) is labelled


def test_the_worker_finds_the_language_of_each_post() -> None:
    trust = Trust(ngram_only=frozenset({"ru"}))
    assert trust.withheld([RU, EN, "ok"]) == ["ru", None, None]
    assert Trust().withheld([RU]) == [None]
