"""How many posts could a first stage without the transformer decide exactly as the full decision
model does (issue 48)? Offline, on the simulator around the text model's own validation and test
texts (about 30% spam), as ``training.decision_model.train_decision`` builds it: a full model and a
stage-1 model with the transformer's score missing, both trained here; stage-1 cuts chosen on the
validation posts so that at least ``agree`` of the posts each cut decides get the full model's
decision there; measured on the test posts. Not a product path: a feasibility figure.

    python tools/perf/cascade_feasibility.py [POSTS]
"""

from __future__ import annotations

import sys

import numpy as np
import numpy.typing as npt

from modstream.serving.artifacts import ensure_models
from training.corpora.posts import post_splits
from training.decision_model import fit, scored_rows, to_posts
from training.simulator import Simulator
from training.text_model.scoring import onnx_spam_scores
from workers.config import cache_root
from workers.model_cards import Thresholds
from workers.state.features import FEATURES
from workers.text.ngram import NgramModel

ALLOW, REVIEW, BLOCK = 0, 1, 2
TEXT = FEATURES.index("text_spam_prob")
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int_]


def without_transformer(x: FloatArray) -> FloatArray:
    x = x.copy()
    x[:, TEXT] = np.nan
    return x


def decisions(p: FloatArray, th: Thresholds) -> IntArray:
    return np.where(p >= th.block, BLOCK, np.where(p < th.allow, ALLOW, REVIEW))


def cut(p1: FloatArray, full: IntArray, decision: int, agree: float) -> float:
    """The stage-1 cut past which at least ``agree`` of the posts get ``decision`` from the full model:
    the highest allow cut (scores at or under it) or the lowest block cut (at or over it)."""
    order = np.argsort(p1 if decision == ALLOW else -p1, kind="stable")
    ok = np.cumsum(full[order] == decision) / np.arange(1, len(order) + 1) >= agree
    if not ok.any():
        return -1.0 if decision == ALLOW else 2.0
    return float(p1[order][np.nonzero(ok)[0].max()])


def block_f1(d: IntArray, y: IntArray) -> float:
    return float(2 * ((d == BLOCK) & (y == 1)).sum() / ((d == BLOCK).sum() + y.sum()))


def main(n: int) -> None:
    text_dir = ensure_models().text
    splits = post_splits(cache_root())
    rng = np.random.default_rng(11)
    sim = Simulator(11, now=1.8e9, scale=n // 8)
    ids = sorted({e.id for e in splits.val})
    held = set(rng.choice(ids, size=len(ids) // 4, replace=False))
    ngram = NgramModel.load(text_dir).spam_prob
    parts: dict[str, tuple[FloatArray, IntArray]] = {}
    for name, examples, k in (
        ("train", [e for e in splits.val if e.id not in held], n * 3 // 4),
        ("valid", [e for e in splits.val if e.id in held], n // 4),
        ("test", list(splits.test), n // 4),
    ):
        posts, y = to_posts(sim.posts(examples, k), sim.world)
        parts[name] = (scored_rows(posts, sim.world, lambda t: onnx_spam_scores(text_dir, t), ngram), y)
        print(f"{name}: {len(y)} posts, {y.mean():.1%} spam", flush=True)
    (xt, yt), (xv, yv), (xs, ys) = parts["train"], parts["valid"], parts["test"]
    full = fit(xt, yt, xv, yv)
    stage1 = fit(without_transformer(xt), yt, without_transformer(xv), yv)
    dv, ds = decisions(full.predict(xv), full.thresholds), decisions(full.predict(xs), full.thresholds)
    p1v, p1s = stage1.predict(without_transformer(xv)), stage1.predict(without_transformer(xs))
    for agree in (0.999, 0.998, 0.995):
        allow, block = cut(p1v, dv, ALLOW, agree), cut(p1v, dv, BLOCK, agree)
        low, high = p1s <= allow, p1s >= block
        cascade = np.where(low, ALLOW, np.where(high, BLOCK, ds))
        print(
            f"agree {agree}: stage 1 allows at <= {allow:.4f} and blocks at >= {block:.4f}; on the test posts it "
            f"decides {(low | high).mean():.1%} (allow {low.mean():.1%}, block {high.mean():.1%}), "
            f"{(cascade != ds).sum()} of {len(ds)} unlike the full model; block-F1 {block_f1(ds, ys):.4f} full, "
            f"{block_f1(cascade, ys):.4f} cascade; ham blocked {((ds == BLOCK) & (ys == 0)).sum()} full, "
            f"{((cascade == BLOCK) & (ys == 0)).sum()} cascade; review {(ds == REVIEW).mean():.2%} full, "
            f"{(cascade == REVIEW).mean():.2%} cascade"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
