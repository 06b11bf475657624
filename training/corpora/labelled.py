"""Labelled text data: loaders for CSV/JSONL/Parquet, validation, dedup and the split.

Every source ends up as a list of :class:`Example`. The split is a pure function of
the texts and the seed, so any process (training, the decision model, the demo)
recomputes the same held-out test set without sharing files.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

SPAM, HAM = 1, 0
LABEL_NAMES = {HAM: "ham", SPAM: "spam"}
_LABELS: dict[str, int] = {"spam": SPAM, "ham": HAM, "1": SPAM, "0": HAM}
VAL_FRACTION = TEST_FRACTION = 0.1
# Below this many unique examples per class a train/val/test split is meaningless.
MIN_PER_CLASS = 2


class DataError(ValueError):
    """A labelled data file that cannot be used, with a message fit for the user."""


@dataclass(frozen=True, slots=True)
class Example:
    id: str
    text: str
    label: int  # 1 = spam, 0 = ham


@dataclass(frozen=True, slots=True)
class Splits:
    train: list[Example]
    val: list[Example]
    test: list[Example]


def parse_label(value: Any) -> int:
    """``spam``/``ham`` (any case) or ``1``/``0`` (int, float or string) -> 1/0."""
    if isinstance(value, bool):
        raise ValueError(f"unrecognised label {value!r}")
    if isinstance(value, int | float) and value in (0, 1):
        return int(value)
    key = str(value).strip().lower()
    if key not in _LABELS:
        raise ValueError(f"unrecognised label {value!r} (expected spam/ham or 1/0)")
    return _LABELS[key]


def _read_frame(path: Path) -> pd.DataFrame:
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            # All strings: keeps "0"/"1" labels and never turns a text like "NA" into NaN.
            return pd.read_csv(path, dtype=str, keep_default_na=False)
        if suffix in (".jsonl", ".ndjson"):
            return pd.read_json(path, lines=True, dtype=False)
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
    except (ValueError, OSError) as exc:
        raise DataError(f"{path}: cannot read as {suffix[1:]}: {exc}") from exc
    raise DataError(f"{path}: unknown extension {suffix or '(none)'!r}; use .csv, .jsonl or .parquet")


def load_labeled(path: Path, *, min_per_class: int = MIN_PER_CLASS) -> list[Example]:
    """Load a ``text``/``label`` file, deduplicated, validated for training.

    ``min_per_class=0`` accepts single-class data (evaluating on an all-spam file).
    An optional ``id`` column is kept; otherwise ids are ``<file stem>:<row>``.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: empty file")
    frame = _read_frame(path)
    missing = [c for c in ("text", "label") if c not in frame.columns]
    if missing and len(frame) > 0:
        raise DataError(f"{path}: missing column(s) {missing}; found {list(frame.columns)}")
    if len(frame) == 0:
        raise DataError(f"{path}: no rows")
    ids = frame["id"].astype(str) if "id" in frame.columns else [f"{path.stem}:{i}" for i in range(len(frame))]
    examples = []
    for row, (id_, text, label) in enumerate(zip(ids, frame["text"], frame["label"], strict=True), start=1):
        try:
            parsed = parse_label(label)
        except ValueError as exc:
            raise DataError(f"{path}: data row {row}: {exc}") from None
        text = "" if pd.isna(text) else str(text)
        if text.strip():
            examples.append(Example(id_, text, parsed))
    return validate(examples, source=str(path), min_per_class=min_per_class)


def validate(examples: Iterable[Example], *, source: str, min_per_class: int = MIN_PER_CLASS) -> list[Example]:
    """Deduplicate by text and check there is enough of each class left to train on."""
    examples = list(examples)
    if not examples:
        raise DataError(f"{source}: no non-empty texts")
    raw_counts = Counter(e.label for e in examples)
    if min_per_class and len(raw_counts) < 2:
        (only,) = raw_counts
        raise DataError(f"{source}: single-class data (only {LABEL_NAMES[only]}); need both spam and ham")
    unique = dedup(examples)
    counts = Counter(e.label for e in unique)
    if min(counts[SPAM], counts[HAM]) < min_per_class:
        raise DataError(
            f"{source}: after removing duplicates only {counts[SPAM]} spam and {counts[HAM]} ham texts "
            f"remain; need at least {min_per_class} unique texts per class"
        )
    return unique


def dedup(examples: Iterable[Example]) -> list[Example]:
    """First occurrence of each text wins; texts seen with both labels are dropped as noise."""
    labels: dict[str, set[int]] = {}
    first: dict[str, Example] = {}
    for e in examples:
        labels.setdefault(e.text, set()).add(e.label)
        first.setdefault(e.text, e)
    return [e for text, e in first.items() if len(labels[text]) == 1]


def _rank(text: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}\x00{text}".encode()).hexdigest()


def _text(e: Example) -> str:
    return e.text


def split(
    examples: Sequence[Example],
    seed: int,
    group: Callable[[Example], str] = _text,
    test_fraction: float = TEST_FRACTION,
) -> Splits:
    """Deterministic stratified 80/10/10 split keyed on (seed, text) only
    (90/10/0 with ``test_fraction=0``, when the test set is an external file).

    Each class is ordered by a hash of its texts and cut into test, val and train,
    so the result does not depend on file order, process or platform. ``group``
    keeps examples that share a key (pieces of one source message) on one side: they
    are ordered by the key's hash and each cut moves to the end of its group.
    """
    train: list[Example] = []
    val: list[Example] = []
    test: list[Example] = []
    for label in (HAM, SPAM):
        group_of = [(_rank(group(e), seed), _rank(e.text, seed), e) for e in examples if e.label == label]
        ordered = [(key, e) for key, _, e in sorted(group_of, key=lambda t: t[:2])]
        n = len(ordered)
        # Tiny classes still put one example in val and test when they can spare it.
        n_test = max(1, round(n * test_fraction)) if n >= 3 and test_fraction else 0
        n_val = max(1, round(n * VAL_FRACTION)) if n >= 3 else 0
        cut_test = _group_end(ordered, n_test)
        cut_val = _group_end(ordered, max(cut_test + 1, n_test + n_val) if n_val else cut_test)
        test += [e for _, e in ordered[:cut_test]]
        val += [e for _, e in ordered[cut_test:cut_val]]
        train += [e for _, e in ordered[cut_val:]]
    return Splits(train=train, val=val, test=test)


def _group_end(ordered: Sequence[tuple[str, Example]], cut: int) -> int:
    """``cut`` moved forward past the rest of the group it falls in."""
    while 0 < cut < len(ordered) and ordered[cut][0] == ordered[cut - 1][0]:
        cut += 1
    return min(cut, len(ordered))


def data_hash(examples: Iterable[Example]) -> str:
    """sha256 of the sorted (label, text) pairs: identifies a dataset independent of order and ids."""
    digest = hashlib.sha256()
    for label, text in sorted((e.label, e.text) for e in examples):
        digest.update(f"{label}\t{text}\x00".encode())
    return digest.hexdigest()
