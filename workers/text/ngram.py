"""The character n-gram model: the cheap second text signal, computed in the worker with numpy alone.

A TF-IDF (sublinear tf, l2-normalised) of hashed character 2-5-grams of the
normalised, lower-cased text, scored by a logistic regression. Hashing replaces a
vocabulary, so the exported model is two float arrays in an ``.npz``, and the
worker needs neither sklearn nor torch; training (:mod:`training.text_model.ngram`)
builds its matrices through :func:`tfidf_rows` too, so both compute the same features.
It needs no server, so degraded verdicts (Triton down) still have it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from workers.text.normalise import NORMALISER_VERSION, check_normaliser, normalise

NGRAM_FILE = "ngram.npz"
N_BUCKETS = 1 << 18
NGRAM_RANGE = (2, 5)
MAX_CHARS = 1000  # posts are shorter; bounds the cost of an e-mail-length text
_ROWS_IN_32_BITS = (1 << 32) // N_BUCKETS  # texts whose (row, bucket) keys fit in 32 bits
_PRIME = np.uint64(1_000_003)
_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing spreads the polynomial hash over the bits


def _occurrences(texts: Sequence[str]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(row, bucket id)`` of every character n-gram occurrence of each normalised text.

    A polynomial rolling hash over code points, vectorised per n over the whole batch at once
    (uint64 arithmetic wraps, which is what a hash wants); an n-gram running past its text's
    end into the next one is dropped.
    """
    padded = [f" {normalise(t[:MAX_CHARS]).lower()} " for t in texts]
    lengths = np.fromiter(map(len, padded), dtype=np.int64, count=len(padded))
    cp = np.frombuffer("".join(padded).encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    row = np.repeat(np.arange(len(padded), dtype=np.int64), lengths)
    end = np.repeat(np.cumsum(lengths), lengths)  # where each position's text ends
    lo, hi = NGRAM_RANGE
    h = np.zeros(len(cp), dtype=np.uint64)
    rows, ids = [], []
    with np.errstate(over="ignore"):
        for n in range(1, hi + 1):
            if len(cp) < n:
                break
            h = h[: len(cp) - n + 1] * _PRIME + cp[n - 1 :]
            if n >= lo:
                inside = np.arange(len(h)) + n <= end[: len(h)]
                rows.append(row[: len(h)][inside])
                ids.append(((h[inside] ^ np.uint64(n)) * _MIX) >> np.uint64(40))
    if not ids:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(rows), np.asarray(np.concatenate(ids) % np.uint64(N_BUCKETS), dtype=np.int64)


def ngram_ids(text: str) -> npt.NDArray[np.int64]:
    """Bucket ids of every character n-gram of one normalised text, one per occurrence."""
    return _occurrences([text])[1]


def tfidf_rows(
    texts: Sequence[str], idf: npt.NDArray[np.float32]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """The l2-normalised sublinear tf-idf rows of ``texts`` as sparse ``(row, bucket id, weight)``
    triples, ordered by row, then bucket."""
    rows, ids = _occurrences(texts)
    keys = rows * N_BUCKETS + ids
    if len(texts) <= _ROWS_IN_32_BITS:  # a 32-bit sort costs about half of a 64-bit one
        keys = keys.astype(np.uint32)
    unique, counts = np.unique(keys, return_counts=True)
    keys = unique.astype(np.int64)
    rows, ids = keys // N_BUCKETS, keys % N_BUCKETS
    values = ((1.0 + np.log(counts)) * idf[ids]).astype(np.float32)
    norms = np.sqrt(np.bincount(rows, weights=values.astype(np.float64) ** 2, minlength=len(texts)))
    return rows, ids, (values / np.where(norms > 0, norms, 1.0)[rows]).astype(np.float32)


@dataclass(frozen=True)
class NgramModel:
    idf: npt.NDArray[np.float32]
    coef: npt.NDArray[np.float32]
    intercept: float

    @classmethod
    def load(cls, model_dir: Path) -> NgramModel:
        """Raises a one-line ``ValueError`` for a model trained with other n-gram settings or
        another normaliser (:func:`workers.text.normalise.check_normaliser`)."""
        path = Path(model_dir) / NGRAM_FILE
        with np.load(path) as f:
            if int(f["n_buckets"]) != N_BUCKETS or tuple(f["ngram_range"]) != NGRAM_RANGE:
                raise ValueError(f"{path}: trained with other n-gram settings; retrain")
            check_normaliser(str(f["normaliser"]) if "normaliser" in f.files else None, path)
            return cls(f["idf"].astype(np.float32), f["coef"].astype(np.float32), float(f["intercept"]))

    def save(self, model_dir: Path, **meta: Any) -> Path:
        path = Path(model_dir) / NGRAM_FILE
        np.savez_compressed(
            path,
            idf=self.idf,
            coef=self.coef,
            intercept=np.float64(self.intercept),
            n_buckets=np.int64(N_BUCKETS),
            ngram_range=np.array(NGRAM_RANGE),
            normaliser=np.str_(NORMALISER_VERSION),
            **meta,
        )
        return path

    def spam_prob(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        """Spam probability per text (logistic regression on the tf-idf row)."""
        rows, ids, values = tfidf_rows(texts, self.idf)
        logits = np.bincount(rows, weights=values * self.coef[ids], minlength=len(texts)) + self.intercept
        return np.asarray(1.0 / (1.0 + np.exp(-logits)), dtype=np.float64)


async def ngram_probs(model: NgramModel | None, texts: Sequence[str]) -> list[float | None]:
    """``model``'s scores, or None for each text without one. In a thread: numpy releases the GIL
    for the larger steps, and the event loop stays free."""
    if model is None:
        return [None] * len(texts)
    return list(map(float, await asyncio.to_thread(model.spam_prob, texts)))
