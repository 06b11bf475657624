"""A bundle's first day on a platform: every post of an evaluation set from a brand-new account,
typed in the UI at a human pace, decided in process by the worker's own stages.

``python -m training.experiments.day_one [--bundle DIR ...] [--sets comments telegram] [--youtube DIR] [--out DIR]``

This is what a platform that installs modstream and never labels sees: nothing is known of the
accounts, so the text and the stream's own counting decide. The posts are validated, scored (the
serving ONNX file, the n-gram model and the language guard, as the worker scores them), enriched
against an empty Redis in time order and decided by the bundle's decision model at its cuts, with the
worker's campaign judgement (``workers.stages.decide.judge``, the default campaign action). The
loop's trial (:mod:`modstream.harness.trial`) decides the same kind of posts on the embedded stack.
Writes ``day_one.json`` and ``day_one.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from schemas import Decision
from training.corpora.labelled import Example
from training.corpora.platforms import new_account_event
from training.decision_model import feature_rows
from training.experiments.zero_shot import SETS, youtube
from training.simulator import World
from training.text_model.scoring import onnx_spam_scores
from workers.config import DEFAULT_CAMPAIGN_ACTION, cache_root, default_model_dir
from workers.model_cards import TextModelCard
from workers.records import InMsg
from workers.stages.decide import DecisionModel, judge
from workers.stages.validate import validate
from workers.text.language import Languages, withhold
from workers.text.ngram import NgramModel

START = datetime(2026, 1, 1, tzinfo=UTC)
GAP = timedelta(seconds=2)  # between two posts of the set: a busy platform's comment stream


@dataclass(frozen=True)
class Outcome:
    """One bundle's decisions on one set; ``*_blocked`` and ``*_review`` count posts."""

    set: str
    bundle: str
    n: int
    spam: int
    spam_blocked: int
    spam_review: int
    ham_blocked: int
    ham_review: int
    withheld: int  # posts whose text the language guard kept from the text models
    roc_auc: float  # of the decision model's score

    @property
    def block_f1(self) -> float:
        blocked = self.spam_blocked + self.ham_blocked
        return 2 * self.spam_blocked / (blocked + self.spam) if blocked + self.spam else float("nan")


def decide(bundle: Path, examples: list[Example], seed: int = 0) -> tuple[list[Decision], list[float], int]:
    """Each example's decision and score, as a worker with ``bundle`` and an empty Redis gives them,
    and how many texts the language guard withheld."""
    rng = random.Random(seed)
    msgs = [
        InMsg(
            "day-one",
            0,
            i,
            None,
            new_account_event(f"d{i}", f"du{i}", e.text, START + i * GAP, rng).model_dump_json().encode(),
            0.0,
        )
        for i, e in enumerate(examples)
    ]
    posts, failures = validate(msgs)
    assert not failures, failures[:1]
    texts = [p.text for p in posts]
    text_dir = bundle / "text"
    unjudged = Languages.of(TextModelCard.load(text_dir).languages).unjudged(texts)
    text = withhold([float(x) for x in onnx_spam_scores(text_dir, texts, show_progress=len(texts) >= 1000)], unjudged)
    ngram = withhold([float(x) for x in NgramModel.load(text_dir).spam_prob(texts)], unjudged)
    model = DecisionModel.load(bundle / "decision")
    rows = feature_rows(posts, World(), text, ngram)
    scores, contribs = model.predict(rows)
    decisions = [d for d, _ in judge(model, rows, scores, contribs, DEFAULT_CAMPAIGN_ACTION)]
    return decisions, [float(p) for p in scores], sum(1 for u in unjudged if u is not None)


def outcome(name: str, bundle: Path, examples: list[Example]) -> Outcome:
    decisions, scores, withheld = decide(bundle, examples)
    y = np.array([e.label for e in examples])

    def count(label: int, decision: str) -> int:
        return sum(1 for t, d in zip(y, decisions, strict=True) if t == label and d == decision)

    return Outcome(
        set=name,
        bundle=bundle.resolve().name,
        n=len(examples),
        spam=int(y.sum()),
        spam_blocked=count(1, "block"),
        spam_review=count(1, "review"),
        ham_blocked=count(0, "block"),
        ham_review=count(0, "review"),
        withheld=withheld,
        roc_auc=float(roc_auc_score(y, scores)) if 0 < y.sum() < len(y) else float("nan"),
    )


def table(rows: list[Outcome]) -> str:
    lines = [
        "| set | bundle | n (spam) | spam blocked / review / allowed | ham blocked / review | block-F1 | ROC-AUC |",
        "|" + " --- |" * 7,
    ]
    for r in rows:
        allowed = r.spam - r.spam_blocked - r.spam_review
        lines.append(
            f"| {r.set} | {r.bundle} | {r.n} ({r.spam}) | {r.spam_blocked} / {r.spam_review} / {allowed} "
            f"| {r.ham_blocked} / {r.ham_review} | {r.block_f1:.3f} | {r.roc_auc:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, action="append", help="a bundle dir (default: the served one)")
    parser.add_argument("--sets", nargs="*", default=["comments", "telegram"], choices=list(SETS))
    parser.add_argument("--youtube", type=Path, default=None, help="a folder with the UCI YouTube collection's CSVs")
    parser.add_argument("--out", type=Path, default=Path("out/day_one"))
    args = parser.parse_args()
    cache = cache_root() / "eval"
    # Each set whole: its parts by language or video are the zero-shot report's.
    sets = [SETS[name](cache)[0] for name in args.sets] + ([youtube(args.youtube)[0]] if args.youtube else [])
    rows = [outcome(s.name, b, s.examples) for s in sets for b in args.bundle or [default_model_dir()]]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "day_one.json").write_text(
        json.dumps([asdict(r) | {"block_f1": r.block_f1} for r in rows], indent=2) + "\n"
    )
    (args.out / "day_one.md").write_text(table(rows))
    print(table(rows))


if __name__ == "__main__":
    main()
