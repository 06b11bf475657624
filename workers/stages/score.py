"""Stage 4: the content model's spam probability for each post's text.

The batch is tokenised once, sorted by length and cut into requests where the lengths
jump, so each request pads only to its own longest text; several requests are in flight
at once. A small batch is still split across the server's model instances: on CPU each
instance owns one core, and one request would leave the others idle. Repeated texts
(spam campaigns) hit a small LRU cache keyed by a hash of the normalised text.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from itertools import pairwise

from workers.clients import TextModel
from workers.metrics import CACHE_HITS
from workers.text.encoder import FloatArray, TextEncoder, pad, spam_prob

STAGE = "score"


def text_key(text: str) -> bytes:
    return hashlib.blake2b(" ".join(text.lower().split()).encode(), digest_size=16).digest()


class ScoreCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: OrderedDict[bytes, float] = OrderedDict()

    def get(self, key: bytes) -> float | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: bytes, value: float) -> None:
        if self.capacity == 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.capacity:
            self._data.popitem(last=False)


def split(n: int, sub_batch: int, parallelism: int) -> list[range]:
    """Contiguous, nearly equal slices of ``range(n)``: at most ``sub_batch`` each, and at
    least ``parallelism`` of them while there are texts for each."""
    parts = max(-(-n // sub_batch), min(n, parallelism))
    bounds = [n * i // parts for i in range(parts + 1)] if parts else []
    return [range(a, b) for a, b in pairwise(bounds)]


def requests(lengths: Sequence[int], sub_batch: int, parallelism: int) -> list[range]:
    """Requests over ascending ``lengths``: of ``sub_batch`` / 2 to ``sub_batch`` texts, cut to
    send the fewest tokens, padding included, counting each request as one more text of the
    mean length. Fixed sizes cut through runs of equal lengths: over the bench's post texts,
    512-text batches in requests of 16 pad 2.6%, these pad 1.4% in requests of 14.8 on average.
    A request is counted because a smaller one costs more per text on some CPUs (docs/PERFORMANCE.md).
    A batch too small to give each model instance full requests is split evenly instead. With a native
    backend (TensorRT, ONNX Runtime) a row runs at its request's width, and its score's last bits with
    it; the embedded stack's Python model runs each row at its own (triton_models/spam_text_python)."""
    n = len(lengths)
    if n < sub_batch * parallelism:
        return split(n, sub_batch, parallelism)
    least, per_request = -(-sub_batch // 2), sum(lengths) / n
    # cost[end]: the fewest tokens for lengths[:end]; start[end]: where its last request starts.
    # Sizes from half to all of sub_batch reach every end from ``least`` on.
    cost, start = [0.0] + [float("inf")] * n, [0] * (n + 1)
    for end in range(least, n + 1):
        longest = lengths[end - 1]
        for size in range(least, min(sub_batch, end) + 1):
            c = cost[end - size] + size * longest + per_request
            if c < cost[end]:
                cost[end], start[end] = c, end - size
    cuts = [n]
    while cuts[-1]:
        cuts.append(start[cuts[-1]])
    return [range(a, b) for a, b in pairwise(reversed(cuts))]


class TextScorer:
    def __init__(
        self,
        encoder: TextEncoder,
        model: TextModel,
        sub_batch: int,
        max_in_flight: int,
        cache: ScoreCache,
        pad_multiple: int = 1,
    ) -> None:
        self.encoder = encoder
        self.pad_multiple = pad_multiple
        self.model = model
        self.sub_batch = sub_batch
        self.cache = cache
        self._slots = asyncio.Semaphore(max_in_flight)

    async def _infer(self, seqs: list[list[int]]) -> FloatArray:
        async with self._slots:
            return spam_prob(await self.model.logits(*pad(seqs, self.pad_multiple)))

    async def score(self, texts: Sequence[str]) -> list[float]:
        """Spam probability per text. Raises when the model is unreachable or too slow."""
        # Only the head the model can see decides its score, so only the head is hashed.
        keys = [text_key(t[: self.encoder.max_chars]) for t in texts]
        known = {k: v for k in keys if (v := self.cache.get(k)) is not None}
        CACHE_HITS.inc(len(known))
        missing = list({k: t for k, t in zip(keys, texts, strict=True) if k not in known}.items())
        if missing:
            # In a thread: the Rust tokenizer releases the GIL, so the event loop keeps
            # serving Redis replies and Triton responses instead of stalling past their timeouts.
            seqs = await asyncio.to_thread(self.encoder.tokenize, [t for _, t in missing])
            order = sorted(range(len(seqs)), key=lambda j: len(seqs[j]))
            m = self.pad_multiple  # a request is as wide as its longest text, rounded up to this
            widths = [-(-len(seqs[j]) // m) * m for j in order]
            parts = requests(widths, self.sub_batch, self.model.parallelism)
            chunks = [[order[i] for i in part] for part in parts]
            results = await asyncio.gather(*(self._infer([seqs[j] for j in c]) for c in chunks))
            for chunk, probs in zip(chunks, results, strict=True):
                for j, prob in zip(chunk, probs, strict=True):
                    known[missing[j][0]] = float(prob)
                    self.cache.put(missing[j][0], float(prob))
        return [known[k] for k in keys]
