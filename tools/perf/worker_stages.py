"""The worker's own steps, offline: CPU µs a post of each, on the bench's posts
(docs/journal/2026-11-27-performance-rounds.md, ninth round).

Usage: ``python tools/perf/worker_stages.py BUNDLE [BATCH]``. No stack, no Redis: the signals are
counted in memory, the text scores are fixed, and the garbage collector runs as the worker runs it
(models frozen out of its sight, the worker's thresholds). Each step runs over 4,096 posts in batches of BATCH (256).
"""

import gc
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from modstream.harness.bench import build_posts
from workers.main import GC_THRESHOLDS
from workers.model_cards import TextModelCard
from workers.records import InMsg, Post
from workers.stages import decide, validate
from workers.stages.decide import DecisionModel
from workers.state.features import Profile
from workers.state.keyspace import Keyspace
from workers.state.signals import MemorySignals, plans, values
from workers.text.encoder import TextEncoder
from workers.text.language import Languages
from workers.text.ngram import NgramModel
from workers.text.normalise import normalise

bundle, size = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 256
records, _ = build_posts(4096, 7)
msgs = [InMsg("posts", 0, i, None, r.value, time.monotonic()) for i, r in enumerate(records)]
card = TextModelCard.load(bundle / "text")
encoder = TextEncoder(bundle / "text" / "tokenizer.json", card.max_length)
ngram, languages = NgramModel.load(bundle / "text"), Languages.of(card.languages)
model, ks = DecisionModel.load(bundle / "decision"), Keyspace("stages:")
gc.collect()
gc.freeze()
gc.set_threshold(*GC_THRESHOLDS)


def timed(name: str, step: Callable[[Any], Any], batches: Sequence[Any]) -> list[Any]:
    start = time.process_time()
    out = [step(b) for b in batches]
    print(f"{name:10s} {(time.process_time() - start) / len(msgs) * 1e6:6.1f} µs a post")
    return out


posts: list[list[Post]] = timed(
    "validate", lambda b: validate.validate(b)[0], [msgs[i : i + size] for i in range(0, len(msgs), size)]
)
normalise.cache_clear()  # the first step to read a text normalises it; the others find it cached
timed("normalise", lambda b: [normalise(p.text) for p in b], posts)
timed("language", lambda b: languages.unjudged([p.text for p in b]), posts)
timed("tokenize", lambda b: encoder.tokenize([p.text for p in b]), posts)
timed("ngram", lambda b: ngram.spam_prob([p.text for p in b]), posts)
planned = timed("plans", lambda b: plans(b, ks, 3600), posts)
memory = MemorySignals()
profiles = [[Profile(signals=values(p, v)) for p, v in zip(ps, memory.run(ps), strict=True)] for ps in planned]
batches = list(zip(posts, profiles, strict=True))
versions = {"text": card.version, "decision": model.version}
outcomes = timed(
    "decide",
    lambda b: decide.decide(b[0], b[1], [0.1] * len(b[0]), model, versions, decide.Unavailable(), [0.2] * len(b[0]))[0],
    batches,
)
timed("serialize", lambda b: [o.verdict.model_dump_json().encode() for o in b], outcomes)
