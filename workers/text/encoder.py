"""The content model's input and output: tokenisation and the spam probability of its logits,
shared by the worker, training, evaluation and benchmarks.

Uses the Rust ``tokenizers`` library directly so the hot path never imports
transformers or torch. Batches are padded to their own longest sequence
(dynamic padding), never to ``max_length``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding, Tokenizer

from workers.text.normalise import normalise

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.floating[Any]]


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
# but the tokenizer would still process a whole 4,000-character e-mail, and tokenising is
# the worker's largest CPU cost. A text is first cut to HEAD_CHARS_PER_TOKEN; when that
# head cannot be shown to hold every kept token (too few tokens, or the last kept one
# touches the head's last, possibly cut, word), it is tokenised again from a
# MAX_CHARS_PER_TOKEN cut. On the 5,907 corpus texts at 64 tokens the ids equal untruncated
# tokenisation for all but one (a base64 blob, which the 12-char cut already changed), for
# 184 instead of 315 µs of CPU per text.
HEAD_CHARS_PER_TOKEN = 6
MAX_CHARS_PER_TOKEN = 12
_LAST_WORD = re.compile(r"\S*$")


class TextEncoder:
    def __init__(self, tokenizer_json: Path, max_length: int) -> None:
        self.max_length = max_length
        self.head_chars = max_length * HEAD_CHARS_PER_TOKEN
        self.max_chars = max_length * MAX_CHARS_PER_TOKEN
        self._tok = Tokenizer.from_file(str(tokenizer_json))
        self._tok.no_padding()
        self._tok.enable_truncation(max_length=max_length)

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per normalised text, truncated, unpadded (the Rust side runs the batch in parallel).

        Texts are cut to the most characters truncation can keep before normalising, which
        bounds the normaliser's cost on long e-mails."""
        texts = [normalise(t[: self.max_chars]) for t in texts]
        heads = [t[: self.head_chars] for t in texts]
        # Without offsets: a fifth less CPU. Only a head cut from a longer text needs them, to show
        # that it holds every kept token; each head is encoded once, one way or the other.
        cut = [len(text) > len(head) for text, head in zip(texts, heads, strict=True)]
        whole = [i for i, c in enumerate(cut) if not c]
        checked = [i for i, c in enumerate(cut) if c]
        ids: list[list[int]] = [[] for _ in texts]
        for i, fast in zip(whole, self._tok.encode_batch_fast([heads[i] for i in whole]), strict=True):
            ids[i] = fast.ids
        redo = []
        for i, e in zip(checked, self._tok.encode_batch([heads[i] for i in checked]), strict=True):
            ids[i] = e.ids
            if not self._head_suffices(heads[i], e):
                redo.append(i)
        if redo:  # ~0.1% of the corpus: long URLs and runs of symbols use many characters per token
            for i, e in zip(redo, self._tok.encode_batch([texts[i][: self.max_chars] for i in redo]), strict=True):
                ids[i] = e.ids
        return ids

    def _head_suffices(self, head: str, encoding: Encoding) -> bool:
        """Truncation kept max_length tokens, all ending before the head's last word starts
        (the cut can only have changed that word)."""
        if len(encoding.ids) < self.max_length:
            return False
        last_word = _LAST_WORD.search(head)
        return last_word is not None and max(end for _, end in encoding.offsets) <= last_word.start()

    def encode(self, texts: Sequence[str]) -> tuple[IntArray, IntArray]:
        """Tokenise and pad one batch to its longest sequence."""
        return pad(self.tokenize(texts))


def spam_prob(logits: FloatArray) -> FloatArray:
    """Softmax probability of class 1 (spam) for ``[batch, 2]`` logits, in their own dtype."""
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return np.asarray(e[:, 1] / e.sum(axis=1))
