"""The cascade against the full pipeline on a split's texts as a first day's posts, offline
(docs/journal/2026-12-08-first-day-posts-ask-the-transformer.md).

Usage: ``python tools/perf/first_day.py [SPLIT] [BUNDLE]``: SPLIT ``val`` (the default: the texts the
decision model's simulated posts are made around, never the held-out ``test`` that the bench's real
phase reads) or ``test``; BUNDLE the default one. Each text once, from an account the platform knows
nothing of typing at a human pace (the bench's ``unknown_senders``), in one batch: no stack, the
stream signals counted in memory, the transformer's scores from the card's serving ONNX model. Prints
both judgements and every post the first stage decided otherwise than the full pipeline.
"""

import sys
import time
from collections import Counter
from pathlib import Path

from modstream.harness.bench_cascade import Judgement, unknown_senders
from training.corpora.posts import post_splits
from training.text_model.scoring import onnx_spam_scores
from workers.config import cache_root
from workers.model_cards import TextModelCard
from workers.records import InMsg
from workers.stages import decide, validate
from workers.stages.decide import DecisionModel
from workers.state.features import Profile
from workers.state.keyspace import Keyspace
from workers.state.signals import MemorySignals, plans, values
from workers.text.language import Languages
from workers.text.ngram import NgramModel

split = sys.argv[1] if len(sys.argv) > 1 else "val"
bundle = Path(sys.argv[2]) if len(sys.argv) > 2 else cache_root() / "current"
texts = getattr(post_splits(cache_root()), split)
records = unknown_senders(texts, 9)
msgs = [InMsg("posts", 0, i, None, r.value, time.monotonic()) for i, r in enumerate(records)]
posts, failures = validate.validate(msgs)
assert not failures, failures[:1]
labels = [int(records[p.msg.offset].label or 0) for p in posts]
card, model = TextModelCard.load(bundle / "text"), DecisionModel.load(bundle / "decision")
words = [p.text for p in posts]
unjudged = Languages.of(card.languages).unjudged(words)
ngram = [None if u else p for p, u in zip(NgramModel.load(bundle / "text").spam_prob(words), unjudged, strict=True)]
text = [None if u else float(p) for p, u in zip(onnx_spam_scores(bundle / "text", words), unjudged, strict=True)]
planned = plans(posts, Keyspace("first-day:"), 3600)
profiles = [Profile(signals=values(p, v)) for p, v in zip(planned, MemorySignals().run(planned), strict=True)]
versions = {"text": card.version, "decision": model.version}
full, _ = decide.decide(posts, profiles, text, model, versions, decide.Unavailable(), ngram, languages=unjudged)
first = decide.first_stage(posts, profiles, model.first, versions, decide.Unavailable(), ngram, languages=unjudged)
served = [o.verdict.decision for o in full]
cascade = list(served)
for o in first.outcomes:
    cascade[o.msg.offset] = o.verdict.decision
print(f"{split}: {len(posts):,} posts, {sum(labels)} spam; the first stage decided {len(first.outcomes):,}")
for name, decisions in (("full pipeline", served), ("cascade", cascade)):
    j = Judgement.of(labels, decisions)
    print(
        f"  {name:13s} block-F1 {j.block_f1:.4f}, ham blocked {j.ham_blocked}, spam allowed {j.spam_allowed}, "
        f"review {j.review_share:.1%}"
    )
pairs = Counter((served[o.msg.offset], o.verdict.decision) for o in first.outcomes)
print("  first stage (full, cascade):", dict(pairs))
for o in first.outcomes:
    i = o.msg.offset
    if served[i] != cascade[i]:
        reading = ", ".join(
            f"{name} {'none' if x is None else f'{x:.3f}'}"
            for name, x in (("transformer", text[i]), ("n-gram", ngram[i]))
        )
        print(f"    {served[i]} -> {cascade[i]}, label {labels[i]}, {reading}: {words[i][:60]!r}")
