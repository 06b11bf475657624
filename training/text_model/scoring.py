"""Scoring texts with an exported content model, exactly as the worker does, and the text metrics.

Tokenisation goes through ``workers.text.encoder.TextEncoder``, the worker's own encoder,
so what is measured here is what production computes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score, roc_auc_score

from training.calibration import ece
from training.corpora.labelled import load_labeled
from training.text_model.fusion import Fusion
from workers.model_cards import TextModelCard
from workers.text.encoder import TextEncoder, spam_prob
from workers.text.ngram import NGRAM_FILE, NgramModel

FloatArray = npt.NDArray[np.float32]

SCORE_BATCH = 64
SCORE_CHUNK = 100 * SCORE_BATCH
THRESHOLD = 0.5

console = Console(stderr=True)


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def length_batches(
    lengths: npt.ArrayLike, batch_size: int, rng: np.random.Generator | None = None
) -> list[npt.NDArray[np.intp]]:
    """Index batches of similar token length, so little compute is spent on padding.

    Without ``rng``: sorted by length (evaluation). With ``rng``: shuffled, then sorted
    only within windows of 50 batches, and the batch order shuffled, so batches still
    differ between epochs while staying length-homogeneous.
    """
    lens = np.asarray(lengths)
    if rng is None:
        order = np.argsort(lens, kind="stable")
    else:
        order = rng.permutation(len(lens))
        windows = np.array_split(order, max(1, -(-len(lens) // (batch_size * 50))))
        order = np.concatenate([w[np.argsort(lens[w], kind="stable")] for w in windows])
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


@dataclass
class Encoded:
    """Texts encoded once by the worker's encoder; batches are re-trimmed to their own longest
    sequence, which is exactly what ``TextEncoder.encode`` returns for that batch."""

    ids: npt.NDArray[np.int64]
    mask: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]

    @classmethod
    def of(cls, encoder: TextEncoder, texts: Sequence[str]) -> Encoded:
        ids, mask = encoder.encode(texts)
        return cls(ids, mask, mask.sum(axis=1))

    def batch(self, idx: npt.NDArray[np.intp]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        width = max(1, int(self.lengths[idx].max()))
        return self.ids[idx, :width], self.mask[idx, :width]


def progress_bar(transient: bool = False, disable: bool = False) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=transient,
        disable=disable,
    )


def session(path: Path, threads: int | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or cpu_count()
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def score_texts(
    sess: ort.InferenceSession, encoder: TextEncoder, texts: Sequence[str], show_progress: bool = False
) -> FloatArray:
    """Spam probabilities through the worker's encoder, in length-sorted batches.

    Texts are encoded a chunk at a time, which bounds memory on large files while
    still sorting by length within each chunk.
    """
    scores = np.empty(len(texts), dtype=np.float32)
    with progress_bar(transient=True, disable=not show_progress) as progress:
        task = progress.add_task("Scoring", total=len(texts), info="")
        for start in range(0, len(texts), SCORE_CHUNK):
            encoded = Encoded.of(encoder, texts[start : start + SCORE_CHUNK])
            for idx in length_batches(encoded.lengths, SCORE_BATCH):
                ids, mask = encoded.batch(idx)
                (logits,) = sess.run(["logits"], {"input_ids": ids, "attention_mask": mask})
                scores[start + idx] = spam_prob(logits)
                progress.advance(task, len(idx))
    return scores


def metrics(y_true: npt.ArrayLike, y_score: npt.ArrayLike, threshold: float = THRESHOLD) -> dict[str, Any]:
    """n, accuracy, precision, recall, f1, roc_auc (None when only one class is present) and ece."""
    y = np.asarray(y_true, dtype=int)
    score = np.asarray(y_score)
    pred = (score >= threshold).astype(int)
    return {
        "n": len(y),
        "accuracy": float(accuracy_score(y, pred)),
        "precision": float(precision_score(y, pred, zero_division=0)),
        "recall": float(recall_score(y, pred, zero_division=0)),
        "f1": float(f1_score(y, pred, zero_division=0)),
        "roc_auc": float(roc_auc_score(y, score)) if len(set(y.tolist())) == 2 else None,
        "ece": ece(y, score),
    }


def onnx_spam_scores(model_dir: Path, texts: Sequence[str], show_progress: bool = False) -> FloatArray:
    """Spam probabilities from the card's serving ONNX model, exactly as the worker computes them."""
    card = TextModelCard.load(model_dir)
    encoder = TextEncoder(Path(model_dir) / "tokenizer.json", card.max_length)
    return score_texts(session(Path(model_dir) / card.serving_model), encoder, texts, show_progress)


def eval_text(data: Path, model_dir: Path) -> dict[str, Any]:
    """Metrics of the serving transformer on a labelled file (single-class files are fine); with the
    model's n-gram companion and its card's fusion, theirs too, under ``ngram`` and ``fused``."""
    examples = load_labeled(data, min_per_class=0)
    texts, labels = [e.text for e in examples], [e.label for e in examples]
    scores = onnx_spam_scores(model_dir, texts, show_progress=len(examples) >= 1000)
    result: dict[str, Any] = metrics(labels, scores)
    if (Path(model_dir) / NGRAM_FILE).is_file():
        ngram = NgramModel.load(Path(model_dir)).spam_prob(texts)
        result["ngram"] = metrics(labels, ngram)
        card = TextModelCard.load(model_dir)
        if card.fusion is not None:
            fusion = Fusion.model_validate({k: card.fusion[k] for k in Fusion.model_fields})
            result["fused"] = metrics(labels, fusion.spam_prob(scores, ngram))
    return result
