"""The worker-side char n-gram model: stable hashing, a save/load round trip, and that training
(sklearn) and serving (numpy) agree on the probabilities."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from training.corpora.labelled import Example, Splits
from training.text_model.ngram import train_ngram
from workers.text.ngram import N_BUCKETS, NGRAM_FILE, NgramModel, ngram_ids, tfidf_rows
from workers.text.normalise import NORMALISER_VERSION, NormaliserMismatch


def test_ngram_ids_are_deterministic_and_in_range() -> None:
    ids = ngram_ids("free money now")
    assert ids.dtype == np.int64 and len(ids) > 0
    assert ids.min() >= 0 and ids.max() < N_BUCKETS
    # " free money now " has 16 characters: 15 + 14 + 13 + 12 n-grams of lengths 2 to 5.
    assert len(ids) == 15 + 14 + 13 + 12
    assert np.array_equal(ids, ngram_ids("free money now"))
    assert len(ngram_ids("")) == 2 - 1  # just the padding bigram "  "


def test_obfuscated_text_has_the_plain_texts_features() -> None:
    assert np.array_equal(ngram_ids("FR\u200bEE m0ney"), ngram_ids("free money"))


def test_tfidf_rows_are_l2_normalised() -> None:
    rows, _, values = tfidf_rows(["win a free prize today", "", "ok"], np.ones(N_BUCKETS, dtype=np.float32))
    for r in range(3):
        assert np.linalg.norm(values[rows == r]) == pytest.approx(1.0, abs=1e-5)


def test_a_texts_score_does_not_depend_on_its_batch() -> None:
    rng = np.random.default_rng(0)
    model = NgramModel(
        rng.random(N_BUCKETS, dtype=np.float32), rng.normal(size=N_BUCKETS).astype(np.float32), intercept=-0.3
    )
    texts = ["free money now", "", "see you at the standup tomorrow", "x", "WIN a FR\u200bEE prize"]
    alone = np.concatenate([model.spam_prob([t]) for t in texts])
    np.testing.assert_allclose(model.spam_prob(texts), alone, rtol=0, atol=1e-6)
    np.testing.assert_allclose(model.spam_prob(texts[::-1])[::-1], alone, rtol=0, atol=1e-6)


def _examples(label: int, texts: list[str]) -> list[Example]:
    return [Example(f"{label}-{i}", t, label) for i, t in enumerate(texts)]


SPAM = [f"win a free {p} now, click http://prize{i}.example" for i, p in enumerate(["iphone", "car", "trip"] * 8)]
HAM = [f"see you at {p} tomorrow, {i} of us are going" for i, p in enumerate(["lunch", "practice", "church"] * 8)]


def test_trained_model_separates_and_round_trips(tmp_path: Path) -> None:
    data = _examples(1, SPAM) + _examples(0, HAM)
    splits = Splits(train=data, val=data[::3], test=data[1::3])
    report = train_ngram(splits, tmp_path, seed=1)
    assert (tmp_path / NGRAM_FILE).is_file()
    assert report["metrics"]["test"]["f1"] == 1.0
    model = NgramModel.load(tmp_path)
    with np.load(tmp_path / NGRAM_FILE) as saved:
        assert str(saved["normaliser"]) == NORMALISER_VERSION
    probs = model.spam_prob(["win a free iphone now, click http://prize99.example", "see you at lunch tomorrow"])
    assert probs[0] > 0.5 > probs[1]


def _saved(model_dir: Path, **fields: object) -> None:
    """A model's file as ``NgramModel.save`` writes it, with ``fields`` replaced or (None) left out."""
    model = NgramModel(np.ones(N_BUCKETS, dtype=np.float32), np.zeros(N_BUCKETS, dtype=np.float32), 0.0)
    model.save(model_dir)
    with np.load(model_dir / NGRAM_FILE) as f:
        arrays = {k: f[k] for k in f.files}
    arrays.update({k: v for k, v in fields.items() if v is not None})
    np.savez_compressed(model_dir / NGRAM_FILE, **{k: v for k, v in arrays.items() if fields.get(k, 0) is not None})


def test_a_model_trained_with_another_normaliser_is_refused(tmp_path: Path) -> None:
    _saved(tmp_path, normaliser=np.str_("0" * 12))
    with pytest.raises(NormaliserMismatch, match=r"ngram\.npz: trained with normaliser 0{12}, .*; retrain"):
        NgramModel.load(tmp_path)


def test_a_model_from_before_the_pin_still_loads(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _saved(tmp_path, normaliser=None)
    assert NgramModel.load(tmp_path).intercept == 0.0
    assert "does not record its normaliser version" in caplog.text
