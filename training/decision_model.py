"""Train, calibrate and report the LightGBM decision model.

Rows are built through the worker's own code (validate -> enrich -> assemble), from
simulated posts around held-out corpus texts scored by the real content model, so
training and serving cannot drift apart.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import lightgbm as lgb
import numpy as np
import numpy.typing as npt
from scipy.stats import beta  # type: ignore[import-untyped]
from sklearn.metrics import average_precision_score, roc_auc_score

from training.calibration import ece
from training.corpora.labelled import Example
from training.simulator import KS, WAVES, SimPost, Simulator, World
from workers.config import DEFAULT_CAMPAIGN_ACTION
from workers.metrics import TEXT_SCORE_KEY, score_histogram
from workers.model_cards import DecisionModelCard, Thresholds
from workers.records import InMsg, Post
from workers.stages.decide import FIRST_STAGE, TEXT_MASK, DecisionModel, facts_of, judge, never_allowed
from workers.stages.enrich import enrich
from workers.stages.short_circuit import BanList, short_circuit
from workers.stages.validate import validate
from workers.state.features import FEATURE_VERSION, FEATURES, MONOTONE, Profile, assemble
from workers.state.signals import SIGNALS, MemorySignals
from workers.state.signals import Plan as SignalPlan
from workers.text.trust import TRUST_EVERYWHERE

FloatArray = npt.NDArray[np.float64]
Labels = npt.NDArray[np.int_]
Targets = Labels | FloatArray  # what a model learns: the labels, or a first stage's targets
# LightGBM's objective for each: the labels' binary log loss, or cross-entropy on targets in [0, 1].
Objective = Literal["binary", "cross_entropy"]
Scorer = Callable[[Sequence[str]], npt.NDArray[np.floating[Any]]]

PARAMS = {
    "objective": "binary",
    "learning_rate": 0.05,
    "num_leaves": 31,
    "min_data_in_leaf": 40,
    # Half the features per tree: the two text scores are strongly correlated and the n-gram one
    # is graded where the transformer's saturates, so with nearly all features every tree split on
    # the n-gram first, and a casual post it misread ("Congratulations to our team for winning
    # the regional finals!": n-gram 0.69, transformer 0.02) was blocked; trees without it learn
    # the transformer's part too. Simulated test metrics do not move.
    "feature_fraction": 0.5,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "verbose": -1,
    # One thread: on tens of thousands of rows a second saves little, and beside another busy process
    # (Triton, a worker, a second test) OpenMP's spinning helper thread slowed a retrain 30-fold
    # (docs/journal/2026-11-29-ci-threads-and-latency.md).
    "num_threads": 1,
    "seed": 7,
}
DEGRADED_TEXT_SHARE = 0.05  # rows trained without a text score, as when Triton is down
DEGRADED_REDIS_SHARE = 0.03  # rows trained without any history, as when Redis is down
# Rows trained without either text score, as a post in a language the text model cannot judge
# (workers/text/language.py): the model learns to decide those on the other signals alone.
UNJUDGED_TEXT_SHARE = 0.05
WAVES_PER_KIND = 40  # the card's crowds and campaigns, each kind's decisions counted over this many waves
TEXT_SCORES = np.flatnonzero(TEXT_MASK)  # the two text scores, as the decide stage names them
TRANSFORMER = FEATURES.index("text_spam_prob")


class Agreement(NamedTuple):
    """Of the validation posts past each first-stage cut, the share that must get the same decision
    from the full model, at least at the one-sided ``confidence`` (Clopper-Pearson's lower bound), so
    a few hundred labels cannot buy a wide cut: 598 posts that all agree are the fewest that show
    99.5%. On 24,000 simulated posts (docs/journal/2026-11-27-cascade.md) allow at 99.5% and block
    at 99.8% decided 87.8% of the test posts without the transformer (block cut 0.984) with none
    decided otherwise; allow at 99.8% decided 80.2%; block at 99.9% could not be shown."""

    allow: float = 0.995
    block: float = 0.998
    confidence: float = 0.95

    def as_targets(self) -> dict[str, float]:
        return {"allow_agreement": self.allow, "block_agreement": self.block, "confidence": self.confidence}


FIRST_STAGE_AGREEMENT = Agreement()


class DictStore:
    """The HashStore protocol over a dict and :class:`MemorySignals`: lets training reuse the
    enrich stage as-is, so the stream-kept signals come from the worker's own counting code."""

    def __init__(self, hashes: dict[str, dict[str, str]]) -> None:
        self.hashes = hashes
        self.signals = MemorySignals()

    async def enrich(
        self, keys: Sequence[str], plans: Sequence[SignalPlan]
    ) -> tuple[list[dict[str, str]], list[list[float]]]:
        return [self.hashes.get(k, {}) for k in keys], self.signals.run(plans)

    async def members(self, keys: Sequence[str]) -> list[set[str]]:
        return [set() for _ in keys]


def to_posts(sim: Sequence[SimPost], world: World) -> tuple[list[Post], Labels]:
    """Validated posts that reach the decision model (banned ones are short-circuited), and
    their labels; ``sim[p.msg.offset]`` is a post's simulated original."""
    msgs = [InMsg("sim", 0, i, None, s.event.model_dump_json().encode(), 0.0) for i, s in enumerate(sim)]
    posts, failures = validate(msgs)
    assert not failures, failures[:1]
    _, rest, unchecked = short_circuit(posts, BanList.parse(world.banned_domains, world.banned_ips), {})
    assert not unchecked, unchecked[:1]
    return rest, np.array([sim[p.msg.offset].label for p in rest])


def feature_rows(
    posts: Sequence[Post],
    world: World,
    text_probs: Sequence[float | None],
    ngram_probs: Sequence[float | None] | None = None,
) -> FloatArray:
    # In time order, as the stream would count them.
    order = sorted(range(len(posts)), key=lambda i: posts[i].event.created_at)
    counted = asyncio.run(enrich([posts[i] for i in order], DictStore(world.hashes), KS, snapshot_ttl_s=1))
    profiles: list[Profile] = [Profile()] * len(posts)
    for rank, i in enumerate(order):
        profiles[i] = counted[rank]
    ngram = ngram_probs or [None] * len(posts)
    return np.array(
        [assemble(facts_of(p), pr, tp, ng) for p, pr, tp, ng in zip(posts, profiles, text_probs, ngram, strict=True)]
    )


def scored_rows(posts: Sequence[Post], world: World, scorer: Scorer, ngram: Scorer | None = None) -> FloatArray:
    texts = sorted({p.text for p in posts})
    probs = dict(zip(texts, (float(x) for x in scorer(texts)), strict=True))
    ngram_probs = dict(zip(texts, (float(x) for x in ngram(texts)), strict=True)) if ngram else None
    return feature_rows(
        posts,
        world,
        [probs[p.text] for p in posts],
        [ngram_probs[p.text] for p in posts] if ngram_probs else None,
    )


def choose_thresholds(
    y: Labels, p: FloatArray, block_precision: float = 0.99, allow_npv: float = 0.995, max_ham_blocked: float = 1.0
) -> Thresholds:
    """``block`` at the lowest score whose precision >= target and which blocks at most ``max_ham_blocked``
    of the ham; ``allow`` below the highest score whose negative predictive value >= target. Cuts fall
    only between distinct scores."""
    desc = np.argsort(-p, kind="stable")
    ps, ys = p[desc], y[desc]
    k = np.arange(1, len(p) + 1)
    boundary = np.r_[ps[:-1] > ps[1:], True]  # a cut after position k-1 separates distinct values
    ham_blocked = np.cumsum(1 - ys) / max(1, len(ys) - int(ys.sum()))
    ok = boundary & (np.cumsum(ys) / k >= block_precision) & (ham_blocked <= max_ham_blocked)
    block = float(ps[np.nonzero(ok)[0].max()]) if ok.any() else 1.0
    asc_p, asc_y = ps[::-1], ys[::-1]
    boundary = np.r_[asc_p[:-1] < asc_p[1:], True]
    ok = boundary & (np.cumsum(1 - asc_y) / k >= allow_npv)
    if ok.any():
        i = np.nonzero(ok)[0].max()
        allow = float((asc_p[i] + asc_p[i + 1]) / 2) if i + 1 < len(asc_p) else float(np.nextafter(asc_p[i], 2))
    else:
        allow = 0.0
    return Thresholds(block=block, allow=min(allow, block))


@dataclass(frozen=True)
class Evaluation:
    n: int
    roc_auc: float
    pr_auc: float
    accuracy: float  # review counted as correct for neither class: it is deferred, not decided
    block_precision: float
    allow_npv: float
    review_share: float
    decisions: dict[str, int]
    ece: float  # expected calibration error of the served score (training/calibration.py)


def _decisions(p: FloatArray, th: Thresholds) -> dict[str, int]:
    """How many of a slice's posts each decision got (a wave's posts share one label)."""
    return {d: int(sum(th.classify(float(x)) == d for x in p)) for d in ("allow", "review", "block")}


def served_waves(model_dir: Path, x: FloatArray, waves: npt.NDArray[np.str_]) -> dict[str, dict[str, int]]:
    """Per kind of wave, its posts' decisions as the worker serves them: the saved model's score
    and the decide stage's rules (the campaign action, the text and sender rules) together; and of
    the reviews and blocks, those of posts a text model reads as spam more likely than not (the text
    model's to answer for, not the crowd's shape: ``<decision>_text_reads_spam``)."""
    model = DecisionModel.load(model_dir)
    at = np.nonzero(np.isin(waves, WAVES))[0]
    probs, contribs = model.predict(x[at])
    decided = np.array([d for d, _ in judge(model, x[at], probs, contribs, DEFAULT_CAMPAIGN_ACTION)])
    reads = (x[at][:, TEXT_SCORES] >= 0.5).any(axis=1)
    out = {}
    for w in WAVES:
        kind = waves[at] == w
        counts = {d: int(np.sum(kind & (decided == d))) for d in ("allow", "review", "block")}
        out[w] = counts | {
            f"{d}_text_reads_spam": int(np.sum(kind & reads & (decided == d))) for d in ("review", "block")
        }
    return out


def evaluate(y: Labels, p: FloatArray, th: Thresholds) -> Evaluation:
    block, allow = p >= th.block, p < th.allow
    review = ~block & ~allow
    decided = block | allow
    correct = (block & (y == 1)) | (allow & (y == 0))
    return Evaluation(
        n=len(y),
        roc_auc=float(roc_auc_score(y, p)),
        pr_auc=float(average_precision_score(y, p)),
        accuracy=float(correct[decided].mean()) if decided.any() else float("nan"),
        block_precision=float(y[block].mean()) if block.any() else float("nan"),
        allow_npv=float(1 - y[allow].mean()) if allow.any() else float("nan"),
        review_share=float(review.mean()),
        decisions={"allow": int(allow.sum()), "review": int(review.sum()), "block": int(block.sum())},
        ece=ece(y, p),
    )


def _degrade(x: FloatArray, rng: np.random.Generator) -> FloatArray:
    x = x.copy()
    x[rng.random(len(x)) < DEGRADED_TEXT_SHARE, FEATURES.index("text_spam_prob")] = np.nan
    x[np.ix_(rng.random(len(x)) < UNJUDGED_TEXT_SHARE, TEXT_SCORES)] = np.nan
    # What enrichment reads from Redis: the entity hashes and the stream-kept signals.
    history = [
        i
        for i, f in enumerate(FEATURES)
        if (f.split("_", 1)[0] in ("user", "url", "domain", "ip") or f in SIGNALS)
        and f not in ("url_count", "domain_subdomain_depth", "domain_risky_tld")
    ]
    rows = np.nonzero(rng.random(len(x)) < DEGRADED_REDIS_SHARE)[0]
    x[np.ix_(rows, np.array(history))] = np.nan
    return x


@dataclass(frozen=True)
class Fitted:
    booster: lgb.Booster
    thresholds: Thresholds  # chosen on the validation rows

    def predict(self, x: FloatArray) -> FloatArray:
        return np.asarray(self.booster.predict(x, num_iteration=self.booster.best_iteration))


def fit(
    xt: FloatArray, yt: Targets, xv: FloatArray, yv: Targets, *, monotone: bool = True, objective: Objective = "binary"
) -> Fitted:
    """LightGBM on the training rows, stopped early on the validation rows. Binary: on labels,
    thresholded there. ``FIRST_STAGE_OBJECTIVE``: on a first stage's targets (:func:`first_stage_targets`),
    uncut: its caller places the cuts where it agrees with the full model."""
    dtrain = lgb.Dataset(xt, yt, feature_name=list(FEATURES), free_raw_data=False)
    dvalid = lgb.Dataset(xv, yv, reference=dtrain)
    # The known directions (workers/state/features.py): a higher text score never lowers the spam score
    # (the trees may not learn the wiggles of the text model's calibration: an old model split the
    # text score at 0.0056, 0.0065 and 0.0073, where ham texts score), and more accounts sharing a
    # link never raises it.
    params = PARAMS | {"objective": objective} | ({"monotone_constraints": list(MONOTONE)} if monotone else {})
    booster = lgb.train(
        params, dtrain, num_boost_round=2000, valid_sets=[dvalid], callbacks=[lgb.early_stopping(50, verbose=False)]
    )
    if objective != "binary":
        return Fitted(booster, UNCUT)
    pv = np.asarray(booster.predict(xv, num_iteration=booster.best_iteration))
    return Fitted(booster, choose_thresholds(np.asarray(yv, dtype=np.int_), pv))


def without_text(x: FloatArray) -> FloatArray:
    """The rows as the worker sees a post whose text it may not judge (workers/text/language.py)."""
    blind = x.copy()
    blind[:, TEXT_SCORES] = np.nan
    return blind


def without_transformer(x: FloatArray) -> FloatArray:
    """The rows as the cascade's first stage sees them: the transformer's score missing."""
    blind = x.copy()
    blind[:, TRANSFORMER] = np.nan
    return blind


def agreeing_cut(p1: FloatArray, full: Sequence[str], decision: str, agree: float, confidence: float) -> float | None:
    """The first stage's cut past which ``agree`` of the posts get ``decision`` from the full model, at
    least at ``confidence``: the highest score for allow (at or under it), the lowest for block (at or
    over it). Cuts fall only between distinct scores; None where no cut can show so much agreement."""
    order = np.argsort(p1 if decision == "allow" else -p1, kind="stable")
    ps = p1[order]
    n = np.arange(1, len(order) + 1)
    alike = np.cumsum(np.array(full)[order] == decision)
    # Clopper-Pearson's one-sided lower bound on the agreeing share: beta(1 - confidence; k, n - k + 1).
    lower = np.where(alike > 0, beta.ppf(1 - confidence, np.maximum(alike, 1), n - alike + 1), 0.0)
    ok = (lower >= agree) & np.r_[ps[:-1] != ps[1:], True]
    return float(ps[np.nonzero(ok)[0].max()]) if ok.any() else None


def as_agreeing(full: Sequence[str], y: Labels) -> list[str]:
    """The full model's decisions ``full`` as a first stage's block agrees with them: a spam (by the
    labels ``y``) the full model would only review counts as a block: blocking it is no worse judgement,
    and at 99.8% a single one among the first 1,500 posts would leave the block cut to chance
    (docs/journal/2026-11-29-int8-served.md)."""
    return ["block" if label == 1 else d for d, label in zip(full, y, strict=True)]


def first_stage_targets(full: Sequence[str], y: Labels) -> FloatArray:
    """What a first stage learns: the full model's served decisions ``full`` as its cuts count agreement
    (:func:`as_agreeing`), 0 allow, 1 block, 0.5 review. Trained on the labels instead, a first stage
    that cannot read the transformer learned that a spammy-reading text from a good account is ham,
    where the full model reviews it (the transformer reads it as spam): it could agree on allow only
    far below, and decided 39% of the simulated test posts; on these targets 71%, at the same
    agreement (docs/journal/2026-11-29-first-stage-learns-decisions.md)."""
    return np.array([_TARGET[d] for d in as_agreeing(full, y)])


_TARGET = {"allow": 0.0, "review": 0.5, "block": 1.0}
# A first stage's targets lie between 0 and 1: LightGBM's cross-entropy, with the binary objective's sigmoid
# link, so the worker reads its score as any decision model's (DecisionModel.predict).
FIRST_STAGE_OBJECTIVE: Objective = "cross_entropy"
UNCUT = Thresholds(block=1.0, allow=0.0)  # a model whose cuts its caller places


def agreeing_cuts(p1: FloatArray, full: Sequence[str], agree: Agreement, within: Thresholds, y: Labels) -> Thresholds:
    """The first stage's thresholds: it allows below ``allow`` and blocks at ``block`` and above, each
    where it agrees with the full model's decisions ``full`` (:func:`agreeing_cut`), never past the
    full model's own cuts ``within``, and allowing only where the labels ``y`` show its allowed posts
    ham at the full model's negative predictive value (:func:`choose_thresholds`). A retrained full
    model may allow posts it scores 0.8 to keep review within its budget (the loop trial), and a
    first stage that reads no text would agree with it there on the spam it cannot see. In between
    it is not sure; a cut that cannot agree so well decides nothing. A spam the full model would only
    review agrees with a block (:func:`as_agreeing`)."""
    allow = agreeing_cut(p1, full, "allow", agree.allow, agree.confidence)
    block = agreeing_cut(p1, as_agreeing(full, y), "block", agree.block, agree.confidence)
    block_at = 1.0 if block is None else max(block, within.block)  # a probability never reaches 1.0
    ham = choose_thresholds(y, p1).allow
    allow_below = 0.0 if allow is None else min(float(np.nextafter(allow, 2.0)), within.allow, ham)
    return Thresholds(block=block_at, allow=min(allow_below, block_at))


def unsure(p1: FloatArray, th: Thresholds) -> npt.NDArray[np.bool_]:
    """The rows the first stage leaves for the transformer and the full model."""
    return (p1 >= th.allow) & (p1 < th.block)


def served_decisions(full: Fitted, x: FloatArray) -> list[str]:
    """``full``'s decisions of the rows ``x`` as the worker serves them, its rules included: a post a
    text model reads as spam is never allowed (the default bundle's spam reading)."""
    held = never_allowed(x, TRUST_EVERYWHERE.reads_spam_from)
    bare = [full.thresholds.classify(float(p)) for p in full.predict(x)]
    return ["review" if h and d == "allow" else d for d, h in zip(bare, held, strict=True)]


def first_stage(xt: FloatArray, yt: Labels, xv: FloatArray, yv: Labels, full: Fitted, agree: Agreement) -> Fitted:
    """The cascade's first stage: LightGBM on the rows without the transformer's score, learning the
    decisions ``full`` serves (:func:`first_stage_targets`), its cuts where its decisions agree with
    those on the validation rows; between them the worker asks the transformer and the full model
    (workers/stages/decide.py)."""
    decisions = served_decisions(full, xv)
    fitted = fit(
        without_transformer(xt),
        first_stage_targets(served_decisions(full, xt), yt),
        without_transformer(xv),
        first_stage_targets(decisions, yv),
        objective=FIRST_STAGE_OBJECTIVE,
    )
    p1 = fitted.predict(without_transformer(xv))
    return Fitted(fitted.booster, agreeing_cuts(p1, decisions, agree, full.thresholds, yv))


def block_unjudged_alike(fitted: Fitted, xv: FloatArray, yv: Labels) -> Fitted:
    """The block cut that holds its precision for posts decided without text scores too: the higher
    of the cuts chosen on the validation rows with and without them.

    With text the classes are far apart, so any cut in a wide gap meets the precision target and the
    lowest is taken; posts without text scores land in that gap, and where the cut fell decided how
    many of their ham were blocked (21 to 215 of about 4,200 simulated, by training seed)."""
    cut = max(fitted.thresholds.block, choose_thresholds(yv, fitted.predict(without_text(xv))).block)
    return Fitted(fitted.booster, Thresholds(block=cut, allow=min(fitted.thresholds.allow, cut)))


def score_baseline(rows: FloatArray | None) -> dict[str, dict[str, int]]:
    """The validation rows' text scores on the live histogram's edges: the drift alert's baseline
    (workers/bundle/info.py). Rows without a text score (degraded) are not scores."""
    if rows is None:
        return {}
    scores = rows[:, FEATURES.index("text_spam_prob")]
    return {TEXT_SCORE_KEY: score_histogram(scores[~np.isnan(scores)].tolist())}


def save(
    fitted: Fitted,
    out: Path,
    text_version: str,
    rows: dict[str, int],
    *,
    validation: Evaluation | None,
    test: Evaluation,
    simulator: dict[str, float] | None = None,
    validation_rows: FloatArray | None = None,
    waves: dict[str, dict[str, int]] | None = None,
    without_text: dict[str, dict[str, int]] | None = None,
    targets: dict[str, float] | None = None,
) -> DecisionModelCard:
    """``model.txt`` and its card in ``out``; the version is the model file's hash."""
    booster = fitted.booster
    out.mkdir(parents=True, exist_ok=True)
    booster.save_model(str(out / "model.txt"), num_iteration=booster.best_iteration)
    gain = booster.feature_importance("gain")
    card = DecisionModelCard(
        version=hashlib.sha256((out / "model.txt").read_bytes()).hexdigest()[:12],
        features=list(FEATURES),
        feature_version=FEATURE_VERSION,
        thresholds=fitted.thresholds,
        targets=targets or {"block_precision": 0.99, "allow_npv": 0.995},
        best_iteration=booster.best_iteration,
        text_model_version=text_version,
        rows=rows,
        validation=None if validation is None else {**validation.__dict__, **score_baseline(validation_rows)},
        test=test.__dict__,
        importance_gain=dict(sorted(zip(FEATURES, map(float, gain), strict=True), key=lambda kv: -kv[1])),
        simulator=simulator,
        waves=waves,
        without_text=without_text,
    )
    card.save(out)
    return card


def train_decision(
    val_texts: Sequence[Example],
    test_texts: Sequence[Example],
    scorer: Scorer,
    out: Path,
    *,
    n_posts: int = 24_000,
    seed: int = 11,
    text_version: str = "unknown",
    monotone: bool = True,
    signals: bool = True,
    ngram: Scorer | None = None,
) -> DecisionModelCard:
    """Train on simulated posts around ``val_texts``; report on fresh ones around ``test_texts``.

    ``signals=False`` leaves the stream-kept signals missing everywhere, as on a platform where
    nothing counted them: the comparison that shows what they add."""
    from training.plots import feature_importance, pr_curve, roc

    rng = np.random.default_rng(seed)
    sim = Simulator(seed, now=1.8e9, scale=n_posts // 8)
    ids = sorted({e.id for e in val_texts})
    valid_ids = set(rng.choice(ids, size=len(ids) // 4, replace=False))
    train_ex = [e for e in val_texts if e.id not in valid_ids]
    valid_ex = [e for e in val_texts if e.id in valid_ids]
    parts = {}
    for name, examples, n in (
        ("train", train_ex, n_posts * 3 // 4),
        ("valid", valid_ex, n_posts // 4),
        ("test", test_texts, n_posts // 4),
    ):
        simulated = sim.posts(examples, n)
        posts, y = to_posts(simulated, sim.world)
        x = scored_rows(posts, sim.world, scorer, ngram)
        if not signals:
            x[:, [FEATURES.index(f) for f in SIGNALS]] = np.nan
        parts[name] = (x, y)

    (xt, yt), (xv, yv), (xs, ys) = parts["train"], parts["valid"], parts["test"]
    fitted = block_unjudged_alike(fit(_degrade(xt, rng), yt, xv, yv, monotone=monotone), xv, yv)
    th = fitted.thresholds
    ps = fitted.predict(xs)
    pb = fitted.predict(without_text(xs))
    card = save(
        fitted,
        out,
        text_version,
        {k: len(v[1]) for k, v in parts.items()},
        validation=evaluate(yv, fitted.predict(xv), th),
        validation_rows=xv,
        test=evaluate(ys, ps, th),
        without_text={label: _decisions(pb[ys == y], th) for label, y in (("ham", 0), ("spam", 1))},
        simulator={
            "seed": seed,
            "posts": n_posts,
            "degraded_text_share": DEGRADED_TEXT_SHARE,
            "degraded_redis_share": DEGRADED_REDIS_SHARE,
            "unjudged_text_share": UNJUDGED_TEXT_SHARE,
            "stream_signals": int(signals),
        },
    )
    # The crowds and campaigns apart: another platform's waves around the test texts, many of each kind.
    apart = Simulator(seed + 1, now=1.8e9, scale=n_posts // 8)
    simulated = apart.waves(test_texts, WAVES_PER_KIND)
    posts, _ = to_posts(simulated, apart.world)
    kinds = np.array([simulated[p.msg.offset].wave for p in posts])
    card = card.model_copy(update={"waves": served_waves(out, scored_rows(posts, apart.world, scorer, ngram), kinds)})
    card.save(out)
    stage1 = first_stage(_degrade(xt, rng), yt, xv, yv, fitted, FIRST_STAGE_AGREEMENT)
    p1v = stage1.predict(without_transformer(xv))
    save(
        stage1,
        out / FIRST_STAGE,
        text_version,
        {k: len(v[1]) for k, v in parts.items()},
        validation=evaluate(yv, p1v, stage1.thresholds),
        validation_rows=xv[unsure(p1v, stage1.thresholds)],  # the drift baseline of the posts it leaves
        # Its "review" is the share of the posts left for the transformer and the full model.
        test=evaluate(ys, stage1.predict(without_transformer(xs)), stage1.thresholds),
        targets=FIRST_STAGE_AGREEMENT.as_targets(),
    )
    gain = fitted.booster.feature_importance("gain")
    roc(ys, ps, out / "roc.png", title="Decision model ROC (simulated test)")
    pr_curve(ys, ps, out / "pr_curve.png", title="Decision model precision/recall (simulated test)")
    feature_importance(list(FEATURES), gain, out / "importance.png", title="Decision model feature importance (gain)")
    return card
