"""Tokenisation for the content model, shared by the worker, evaluation and benchmarks.

Uses the Rust ``tokenizers`` library directly so the hot path never imports
transformers or torch. Batches are padded to their own longest sequence
(dynamic padding), never to ``max_length``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

IntArray = npt.NDArray[np.int64]


def post_text(text: str, link_text: str | None = None, media_text: str | None = None) -> str:
    """The text the content model sees: the post plus any page, OCR or transcript text."""
    parts = [text, link_text or "", media_text or ""]
    return " \n ".join(p for p in parts if p)


def pad(seqs: Sequence[Sequence[int]], multiple: int = 1) -> tuple[IntArray, IntArray]:
    """``(input_ids, attention_mask)``, both int64 ``[batch, longest]``, the width rounded up to ``multiple``.

    Triton's dynamic batcher only merges requests of one shape unless the model takes
    ragged input (our python backend does; the onnxruntime and TensorRT backends don't),
    so GPU deployments round widths to a few buckets.
    """
    width = -(-max((len(s) for s in seqs), default=1) // multiple) * multiple
    ids = np.zeros((len(seqs), width), dtype=np.int64)
    mask = np.zeros((len(seqs), width), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return ids, mask


# Characters kept per token of max_length before tokenising. Truncation keeps the head,
# but the tokenizer would still process a whole 4,000-character e-mail; 12 chars per
# token covers the head with a wide margin (identical ids at 8 on the whole corpus) and
# halves tokenisation CPU, the worker's largest cost.
CHARS_PER_TOKEN = 12


class TextEncoder:
    def __init__(self, tokenizer_json: Path, max_length: int) -> None:
        self.max_length = max_length
        self.max_chars = max_length * CHARS_PER_TOKEN
        self._tok = Tokenizer.from_file(str(tokenizer_json))
        self._tok.no_padding()
        self._tok.enable_truncation(max_length=max_length)

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, truncated, unpadded (the Rust side runs the batch in parallel)."""
        return [e.ids for e in self._tok.encode_batch([t[: self.max_chars] for t in texts])]

    def encode(self, texts: Sequence[str]) -> tuple[IntArray, IntArray]:
        """Tokenise and pad one batch to its longest sequence."""
        return pad(self.tokenize(texts))
