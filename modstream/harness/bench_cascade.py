"""Bench phase: the cascade against the full pipeline, on a social mix, a spam-heavy one and real posts.

Each simulated mix is a labelled stream of post-length texts (each text once: the held-out ones,
then the decision model's and the text model's own) in simulated platform context; the real one
(``REAL``) is the held-out labelled texts alone, at their own share of spam, each from an account
the platform knows nothing of typing at a human pace, as on a platform's first day, where the text
decides. Each is run three times through the worker on the embedded stack, each run in its own
Redis keyspace seeded alike:

1. the cascade as shipped: its throughput and CPU;
2. ``MODSTREAM_CASCADE=false`` (every post scored): the full pipeline's throughput and CPU, and
   its verdicts paired with run 1's post by post: the judgement on the labels (block-F1, ham
   blocked, spam allowed, review share), on every post and on the held-out texts alone, and the
   flips. Two runs of one stream differ a little even with one model: a post's stream signals
   depend on the order and batches of its hour's posts;
3. the cascade with every first-stage post audited (``MODSTREAM_CASCADE_AUDIT_SHARE=1``): its
   verdicts are the cascade's, and each first-stage row with its audited transformer score
   decided again by the full model gives the full pipeline's decision on the very same features.
   The judgement and flips of that pairing are the cascade's own, without the runs' noise.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import numpy as np

from modstream.harness.demo import seed_redis
from modstream.harness.traffic import Record
from modstream.loop.redecide import redecide
from schemas import Decision, Verdict
from training.corpora.labelled import Example
from training.corpora.platforms import new_account_event
from training.simulator import Simulator
from workers.stages.decide import FIRST_STAGE, DecisionModel
from workers.state.features import FEATURES
from workers.state.keyspace import Keyspace

MIXES = {"social": 0.10, "spam_heavy": 0.50}  # the share of spam in each stream
REAL = "real"  # the held-out labelled texts from unknown senders (:func:`unknown_senders`)
TEXT = FEATURES.index("text_spam_prob")
DECISIONS = ("allow", "review", "block")


@dataclass(frozen=True)
class Judgement:
    posts: int
    spam: int
    block_f1: float
    ham_blocked: int
    spam_allowed: int
    review_share: float

    @classmethod
    def of(cls, labels: Sequence[int], decisions: Sequence[str]) -> Judgement:
        y, d = np.array(labels), np.array(decisions)
        blocked = d == "block"
        hits = int((blocked & (y == 1)).sum())
        return cls(
            posts=len(y),
            spam=int(y.sum()),
            block_f1=round(2 * hits / max(1, int(blocked.sum()) + int(y.sum())), 4),
            ham_blocked=int((blocked & (y == 0)).sum()),
            spam_allowed=int(((d == "allow") & (y == 1)).sum()),
            review_share=round(float((d == "review").mean()), 4),
        )


@dataclass
class MixResult:
    spam_share: float
    posts: int
    held_out_posts: int  # of which the texts no model trained or tuned on
    cascade_posts_per_s: float
    full_posts_per_s: float
    transformer_share: float  # of the cascade's verdicts, those the transformer scored (audits included)
    # The same of the full pipeline's: every one but those decided without text scores (in a language
    # the text model cannot judge, or Triton failing).
    full_transformer_share: float
    cascade: Judgement
    full: Judgement
    cascade_held_out: Judgement
    full_held_out: Judgement
    flips: dict[str, dict[str, int]]  # full pipeline's decision -> cascade's decision -> posts
    # Of those, the posts the cascade decided in its first stage: the rest were decided by the same full
    # model in both runs, and differ only where a post's stream signals did (the order and batches of
    # its hour's posts); two runs of the full pipeline differ about as much.
    first_stage_flips: dict[str, dict[str, int]]
    # Run 3: the cascade's verdicts against the full model's decisions on the same rows.
    same_rows_cascade: Judgement
    same_rows_full: Judgement
    same_rows_flips: dict[str, dict[str, int]]
    cascade_cpu_s: dict[str, float] = field(default_factory=dict)
    full_cpu_s: dict[str, float] = field(default_factory=dict)
    lost: int = 0


class Run(Protocol):
    """A throughput run's outcome (modstream.harness.bench.Phase)."""

    rate: float
    lost: int
    cpu_s: dict[str, float]
    verdicts: dict[str, Verdict]


def mix_texts(texts: Sequence[Example], held_out: int, spam_share: float, n: int) -> tuple[list[Example], set[str]]:
    """Up to ``n`` of ``texts`` at ``spam_share`` of spam, each once, in a shuffled order; the first
    ``held_out`` texts are taken first. Returns them and the ids of the held-out ones among them."""
    spam = [e for e in texts if e.label == 1]
    ham = [e for e in texts if e.label == 0]
    n = min(n, int(len(spam) / spam_share), int(len(ham) / (1 - spam_share)))
    n_spam = round(n * spam_share)
    chosen = spam[:n_spam] + ham[: n - n_spam]
    first = {e.id for e in texts[:held_out]}
    order = np.random.default_rng(5).permutation(len(chosen))
    return [chosen[i] for i in order], {e.id for e in chosen if e.id in first}


def labelled_posts(texts: Sequence[Example], seed: int, redis_url: str, prefixes: Sequence[str]) -> list[Record]:
    """The texts as labelled posts in simulated context, its world seeded into Redis under each of
    ``prefixes``: a run counts its own stream's signals, not the copies another run posted."""
    sim = Simulator(seed, now=time.time(), scale=max(len(texts) // 4, 200))
    for prefix in prefixes:
        seed_redis(redis_url, Keyspace(prefix), sim.world)
    return [Record((p := sim.post(e).event).post_id, p.model_dump_json().encode(), e.label) for e in texts]


def unknown_senders(texts: Sequence[Example], seed: int) -> list[Record]:
    """The texts as labelled posts, each from a new account typing in the UI at a human pace."""
    rng, now = random.Random(seed), datetime.now(UTC)
    return [
        Record((p := new_account_event(f"real{i}", f"realu{i}", e.text, now, rng)).post_id,
               p.model_dump_json().encode(), e.label)
        for i, e in enumerate(texts)
    ]  # fmt: skip


def run_mix(
    run: Callable[..., Run],
    texts: Sequence[Example],
    held_out: int,
    spam_share: float | None,
    n: int,
    redis_url: str,
    relabel: Callable[[Sequence[Record], str], list[Record]],
    model: DecisionModel,
) -> MixResult:
    """One mix through the cascade as shipped, the full pipeline (every post scored), and the cascade
    with every first-stage post audited, whose rows ``model`` (the bundle's) decides again in full.
    ``spam_share`` None: up to ``n`` of the ``held_out`` texts alone, from unknown senders (:data:`REAL`)."""
    if spam_share is None:
        chosen = list(texts[: min(held_out, n)])
        kept_ids = {e.id for e in chosen}
    else:
        chosen, kept_ids = mix_texts(texts, held_out, spam_share, n)
    prefixes = {run: f"modstream-bench-{run}{spam_share or REAL}:" for run in ("on-", "off-", "audit-")}
    if spam_share is None:
        records = unknown_senders(chosen, 9)
    else:
        records = labelled_posts(chosen, 9, redis_url, list(prefixes.values()))
    kept = {r.key for r, e in zip(records, chosen, strict=True) if e.id in kept_ids}
    on = run(relabel(records, "on-"), redis_prefix=prefixes["on-"])
    off = run(relabel(records, "off-"), redis_prefix=prefixes["off-"], cascade=False)
    audit = run(relabel(records, "audit-"), redis_prefix=prefixes["audit-"], cascade_audit_share=1.0)
    cascade = {k.removeprefix("on-"): v for k, v in on.verdicts.items()}
    full = {k.removeprefix("off-"): v for k, v in off.verdicts.items()}
    audited = {k.removeprefix("audit-"): v for k, v in audit.verdicts.items()}
    in_full = decided_in_full(audited, model)
    paired = [r for r in records if r.key in in_full and r.label is not None]
    served, again = [audited[r.key].decision for r in paired], [in_full[r.key] for r in paired]
    same: Counter[tuple[str, str]] = Counter(zip(again, served, strict=True))
    both = [r for r in records if r.key in cascade and r.key in full and r.label is not None]
    ys = [int(r.label or 0) for r in both]
    with_cascade = [cascade[r.key].decision for r in both]
    without = [full[r.key].decision for r in both]
    held = [i for i, r in enumerate(both) if r.key in kept]
    flips: Counter[tuple[str, str]] = Counter(zip(without, with_cascade, strict=True))
    by_first = [i for i, r in enumerate(both) if FIRST_STAGE in cascade[r.key].stage_scores]
    first: Counter[tuple[str, str]] = Counter((without[i], with_cascade[i]) for i in by_first)
    return MixResult(
        spam_share=round(sum(e.label for e in chosen) / len(chosen), 4),
        posts=len(records),
        held_out_posts=len(kept),
        cascade_posts_per_s=round(on.rate, 1),
        full_posts_per_s=round(off.rate, 1),
        transformer_share=scored(cascade, both),
        full_transformer_share=scored(full, both),
        cascade=Judgement.of(ys, with_cascade),
        full=Judgement.of(ys, without),
        cascade_held_out=Judgement.of([ys[i] for i in held], [with_cascade[i] for i in held]),
        full_held_out=Judgement.of([ys[i] for i in held], [without[i] for i in held]),
        flips=matrix(flips),
        first_stage_flips=matrix(first),
        same_rows_cascade=Judgement.of([int(r.label or 0) for r in paired], served),
        same_rows_full=Judgement.of([int(r.label or 0) for r in paired], again),
        same_rows_flips=matrix(same),
        cascade_cpu_s=on.cpu_s,
        full_cpu_s=off.cpu_s,
        lost=on.lost + off.lost + audit.lost,
    )


def decided_in_full(verdicts: dict[str, Verdict], model: DecisionModel) -> dict[str, Decision]:
    """Each verdict's decision by ``model``'s full model on its row: a first-stage verdict's row with its
    audited transformer score put back, decided again (loop/redecide.py), the others as published."""
    full = DecisionModel(model.booster, model.thresholds, model.version, trust=model.trust)  # no first stage
    filled, out = [], {}
    for key, v in verdicts.items():
        if FIRST_STAGE not in v.stage_scores:
            out[key] = v.decision
        elif v.features is not None:
            # Audited: its transformer score, except where none was asked for (a language the text model
            # cannot judge) or none came (Triton failing), as the full pipeline would decide it too.
            values = list(v.features.values)
            values[TEXT] = v.stage_scores.get("text")
            filled.append((key, v.model_copy(update={"features": v.features.model_copy(update={"values": values})})))
    again = redecide([v for _, v in filled], full)
    out |= {key: a.decision for (key, _), (_, a) in zip(filled, again.pairs, strict=True)}
    return out


def matrix(pairs: Counter[tuple[str, str]]) -> dict[str, dict[str, int]]:
    return {a: {b: pairs[a, b] for b in DECISIONS} for a in DECISIONS}


def scored(verdicts: dict[str, Verdict], records: Sequence[Record]) -> float:
    """The share of ``records`` whose verdict the transformer's score was in."""
    return round(sum("text" in verdicts[r.key].stage_scores for r in records) / max(1, len(records)), 4)


def first_stage_share(verdicts: dict[str, Verdict]) -> float:
    """The share of ``verdicts`` the cascade's first stage decided."""
    return sum(FIRST_STAGE in v.stage_scores for v in verdicts.values()) / max(1, len(verdicts))


def plot(results: dict[str, MixResult], out: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.6))
    rate, judge = fig.subplots(1, 2)
    names = list(results)
    x = np.arange(len(names))
    for k, (label, attr, color) in enumerate(
        (("full pipeline", "full_posts_per_s", "#c44"), ("cascade", "cascade_posts_per_s", "#4a4"))
    ):
        values = [getattr(results[n], attr) for n in names]
        rate.bar(x + (k - 0.5) * 0.4, values, 0.4, label=label, color=color)
        for xi, v in zip(x, values, strict=True):
            rate.text(xi + (k - 0.5) * 0.4, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=8)
    rate.set_xticks(x, [f"{n}\n{results[n].transformer_share:.0%} to the\ntransformer" for n in names])
    rate.set_ylabel("posts/s (2 cores)")
    rate.set_title("Throughput")
    rate.legend(loc="lower center")
    sides = (("full", "same_rows_full"), ("cascade", "same_rows_cascade"))
    rows = [(f"{n} {side}", getattr(results[n], attr)) for n in names for side, attr in sides]
    judge.axis("off")
    table = judge.table(
        cellText=[
            [f"{j.block_f1:.3f}", f"{j.ham_blocked}", f"{j.spam_allowed}", f"{j.review_share:.1%}"] for _, j in rows
        ],
        rowLabels=[name for name, _ in rows],
        colLabels=["block-F1", "ham blocked", "spam allowed", "review"],
        loc="center",
    )
    table.scale(1, 1.4)
    judge.set_title("Judgement on the same rows (run 3)")
    fig.tight_layout()
    fig.savefig(out / "cascade.png", dpi=120)
