"""Train the decision model on labelled rows and gate it against the serving one.

Every labelled row is the gate's evidence once, decided by a model that did not see it: the latest
``holdout`` share by the model that ships (trained on the earlier rows), each earlier row by the
fold model trained on the other folds, at cuts chosen on the other folds' out-of-fold scores. The
split is by time, never random: a random split would let the model see tomorrow's campaigns while
being tested on them; the latest slice is also the gate's drift check. The champion decides the
same rows as it logged them. The thresholds are chosen on out-of-fold predictions over all the earlier rows
(time-contiguous folds), not on a 10% slice: with a few hundred spam, a slice holds too few to place
a block cut. They are placed for the platform, at the gate's limits (the product's, where the gate
was loosened) as estimated on the labels the out-of-fold model does not doubt: block at the lowest
cut with the limit's precision that blocks at most its share of ham; the review band narrowed, from
below, to the gate's review ceiling less its sampling margin on the latest slice, where the gate
judges the share (a model that defers whatever it is unsure of to people is no model), counting
first the posts that the worker's rules never allow (a text model reads them as spam, from the
reading :func:`spam_reading` chooses on the latest slice). Whether the limits surely hold is the
gate's to say, on its bounds: it judges the decisions the worker would serve, those rules included.
The model that ships is trained on all of those rows for the folds' median number of rounds.

The labels that the models that did not see them contradict with confidence (confident learning)
are named for moderators to check again and set aside, from the cuts and from the gate's counts for
both models: on a new platform's first labels they are mostly scams labelled real, and a handful of
those would set the block cut far above most spam (docs/LOOP.md, "Labels to check again").
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from statistics import NormalDist
from typing import Any, NamedTuple, Protocol

import lightgbm as lgb
import numpy as np
import numpy.typing as npt
from cleanlab.filter import find_label_issues

from modstream.loop.champion import load_serving
from modstream.loop.gate import Cut, Gate, Judgement, RowCuts, Side, Workload, paired, settled
from modstream.loop.join import DatasetError, Labelled, read_parquet
from modstream.loop.report import Curves, write
from training.decision_model import (
    FIRST_STAGE_AGREEMENT,
    FIRST_STAGE_OBJECTIVE,
    PARAMS,
    UNCUT,
    Agreement,
    Evaluation,
    Fitted,
    Objective,
    Targets,
    agreeing_cuts,
    choose_thresholds,
    evaluate,
    first_stage_targets,
    fit,
    save,
    unsure,
    without_transformer,
)
from workers.model_cards import Thresholds
from workers.stages.decide import (
    FIRST_STAGE,
    DecisionModel,
    bought,
    never_allowed,
    reads_spam,
    sender_pull,
    text_reading,
    unknown_sender,
)
from workers.state.features import FEATURES, MONOTONE
from workers.text.trust import SPAM_READING, TRUST_EVERYWHERE, Trust

HOLDOUT = 0.2  # the latest share of the labelled posts: the gate's
FOLDS = 5
TARGETS = Gate()  # the product's limits, which the thresholds aim at
MIN_SPAM = MIN_HAM = 5  # per fold and in the gate's slice: fewer cannot fit or measure anything

FloatArray = npt.NDArray[np.float64]


def holdout_split(n: int, share: float = HOLDOUT) -> tuple[slice, slice]:
    """(earlier rows, the latest ``share``) over rows in time order."""
    cut = n - max(1, round(n * share))
    return slice(0, cut), slice(cut, n)


def _check(name: str, y: npt.NDArray[np.int_]) -> None:
    spam = int(y.sum())
    if spam < MIN_SPAM or len(y) - spam < MIN_HAM:
        raise DatasetError(
            f"the {name} has {spam} spam and {len(y) - spam} ham; need >= {MIN_SPAM} of each: "
            "label more posts or widen the range"
        )


def review_budget(ceiling: float, n: int, confidence: float) -> float:
    """The review share the cuts aim at: under the gate's ceiling by the one-sided sampling margin of
    a share over the ``n`` posts the gate judges it on (the latest slice), so that noise alone rarely
    tips the observed share over it; at a 10% ceiling, 320 judged posts leave 7.2%, 1,600 leave 8.8%."""
    z = NormalDist().inv_cdf(confidence)
    return max(0.0, ceiling - z * math.sqrt(ceiling * (1 - ceiling) / max(n, 1)))


def cap_review(th: Thresholds, p: FloatArray, budget: float, held: npt.NDArray[np.bool_]) -> Thresholds:
    """``th`` with ``allow`` raised until at most ``budget`` of the scores ``p`` fall in review
    (the highest below ``block`` stay there); ``block``, which keeps ham from being blocked, stays.
    The rows ``held`` out of allow by a rule (:func:`workers.stages.decide.never_allowed`) are
    reviewed below ``block`` whatever ``allow`` is: they spend the budget first."""
    below = p < th.block
    review = np.sort(p[(p >= th.allow) & below & ~held])
    keep = max(0, int(budget * len(p)) - int((held & below).sum()))
    if len(review) <= keep:
        return th
    return Thresholds(block=th.block, allow=float(review[len(review) - keep]) if keep else th.block)


def doubted_labels(y: npt.NDArray[np.int_], oof: FloatArray) -> npt.NDArray[np.bool_]:
    """The rows whose label the out-of-fold scores ``oof`` contradict with confidence (cleanlab's
    confident learning at its defaults: per class, scores past the class's own average, pruned to the
    noise rate they imply)."""
    return np.asarray(find_label_issues(y, np.c_[1 - oof, oof]), dtype=bool)


def folds_of(n: int, folds: int = FOLDS) -> list[npt.NDArray[np.intp]]:
    """Time-contiguous folds over ``n`` rows in time order."""
    return np.array_split(np.arange(n), folds)


def provable(
    th: Thresholds, y: npt.NDArray[np.int_], p: FloatArray, gate: Gate, also: npt.NDArray[np.bool_] | None = None
) -> Thresholds:
    """``th`` with ``block`` raised to the lowest cut at which the gate's bounds on ham blocked and on
    ham among blocked hold on these labels, counting the rows ``also`` blocked below the cut (by the
    confirmed text reading); ``th`` where no cut can show them (too few labels: the gate will say so).
    A cut placed on a limit's point estimate straddles the limit's bound on any sample, so a gate
    judging every label could never pass it; the margin this leaves shrinks as the labels grow."""
    desc = np.argsort(-p, kind="stable")
    ps, ys = p[desc], y[desc]
    n_ham = int((ys == 0).sum())
    extra = np.zeros(len(ys), dtype=bool) if also is None else also[desc]
    # Blocked at a cut after position i: the first i + 1, and the rows ``also`` blocked after them.
    below = extra.sum() - np.cumsum(extra)
    ham = np.cumsum(1 - ys) + ((extra & (ys == 0)).sum() - np.cumsum(extra & (ys == 0)))
    blocked = np.arange(1, len(ys) + 1) + below
    boundary = np.r_[ps[:-1] > ps[1:], True]  # a cut after position i separates distinct values
    ok = [
        i
        for i in range(len(ps))
        if boundary[i] and ps[i] >= th.block and gate.holds(int(ham[i]), n_ham, int(blocked[i]))
    ]
    if not ok:
        return th
    block = float(ps[max(ok)])
    return Thresholds(block=block, allow=min(th.allow, block))


@dataclass(frozen=True)
class CutPolicy:
    """Where the thresholds go on out-of-fold scores: block at the lowest cut with ``block_precision``
    that blocks at most ``max_ham_blocked`` of the ham, raised until ``proof``'s bounds hold (None:
    point estimates), all on the ``trusted`` labels (those the out-of-fold model does not doubt: a
    few scams labelled real would otherwise hold the cut above most spam); at most ``review_budget``
    of the posts in review."""

    review_budget: float
    block_precision: float = 0.99
    max_ham_blocked: float = 1.0
    proof: Gate | None = None

    def place(
        self,
        y: npt.NDArray[np.int_],
        p: FloatArray,
        held: npt.NDArray[np.bool_],
        trusted: npt.NDArray[np.bool_],
        also: npt.NDArray[np.bool_] | None = None,
    ) -> Thresholds:
        """Cuts as the class says; the rows ``also`` blocked whatever the block cut count in its proof."""
        y, p_trusted = y[trusted], p[trusted]
        th = choose_thresholds(y, p_trusted, self.block_precision, max_ham_blocked=self.max_ham_blocked)
        if self.proof is not None:
            th = provable(th, y, p_trusted, self.proof, None if also is None else also[trusted])
        return cap_review(th, p, self.review_budget, held)

    def within(self, ham_blocked: int, ham: int, blocked: int) -> bool:
        """Whether blocking ``blocked`` posts, ``ham_blocked`` of ``ham`` ham, keeps the limits at their
        point estimates and, where there is a ``proof``, on its bounds."""
        if blocked and (ham_blocked > self.max_ham_blocked * ham or ham_blocked > (1 - self.block_precision) * blocked):
            return False
        return self.proof is None or self.proof.holds(ham_blocked, ham, blocked)

    def confirms(self, ham: int, n: int) -> bool:
        """Whether ``n`` posts, ``ham`` of them ham, are spam with ``block_precision``: on the proof's
        bound where there is one (a few posts read alike confirm nothing), else on the point estimate."""
        limit = 1 - self.block_precision
        if self.proof is None:
            return ham <= limit * n
        return settled(ham, n, limit, self.proof.confidence) is True


class Policy(Protocol):
    def place(
        self, y: npt.NDArray[np.int_], p: FloatArray, held: npt.NDArray[np.bool_], trusted: npt.NDArray[np.bool_]
    ) -> Thresholds:
        """Cuts for the scores ``p`` of rows labelled ``y``, of which a rule never allows ``held``, and
        whose labels the out-of-fold model does not doubt where ``trusted``."""
        ...


@dataclass(frozen=True)
class Agreeing:
    """The first stage's cuts: where its out-of-fold scores agree with the full model's out-of-fold
    decisions as the worker serves them (``full``, by row, its rules included), within the shipped
    full model's cuts, allowing only where the labels show its allowed posts ham."""

    full: list[str]
    within: Thresholds  # the full model's own cuts
    agree: Agreement = FIRST_STAGE_AGREEMENT

    def place(
        self, y: npt.NDArray[np.int_], p: FloatArray, held: npt.NDArray[np.bool_], trusted: npt.NDArray[np.bool_]
    ) -> Thresholds:
        # A post a rule moves out of the first stage's allow is left for the full model (is_sure). Every
        # label counts against an allow, a doubted one too: the first stage skips the transformer.
        return agreeing_cuts(p, self.full, self.agree, self.within, y)


def decisions_at(p: FloatArray, cut: Cut) -> list[str]:
    decided: list[str] = np.where(p >= cut.block, "block", np.where(p < cut.allow, "allow", "review")).tolist()
    return decided


class Held(NamedTuple):
    """Per row, whether a rule never allows it (:func:`never_allowed`): as the full model reads the
    row, and as the first stage does (without the transformer's score, nor a sender nothing is known
    of: decide's ``unsure_allow``); and whether a text model's confirmed spam reading blocks it where
    the full model's score is in review (decide's ``confirmed``)."""

    full: npt.NDArray[np.bool_]
    first: npt.NDArray[np.bool_]
    blocks: npt.NDArray[np.bool_]

    @classmethod
    def of(cls, x: FloatArray, spam_reading: float, confirmed: float = math.inf) -> Held:
        first = never_allowed(without_transformer(x), spam_reading) | unknown_sender(x)
        return cls(never_allowed(x, spam_reading), first, reads_spam(x, confirmed))


class FirstView(NamedTuple):
    """The cascade's first stage on the rows: its scores, its cuts, and in each score the pull of
    what the sender reports of itself (:func:`workers.stages.decide.sender_pull`)."""

    p: FloatArray
    cuts: Thresholds
    pull: FloatArray


def cascaded(p: FloatArray, cut: Cut, first: FirstView | None, held: Held) -> tuple[FloatArray, RowCuts]:
    """Per row, what the worker's cascade serves: the first stage's score and cuts where it is sure
    (allow or block, no rule moved its allow, and the allow does not rest on the sender's pull: the
    worker's ``is_sure``), else the full model's; a row ``held`` out of allow gets an allow cut no
    score is under, so the gate counts the review the worker sends it to, and one whose spam reading
    is confirmed is blocked from the allow cut up."""
    block = np.where(held.blocks, cut.allow, np.broadcast_to(cut.block, p.shape))
    allow = np.where(held.full, 0.0, cut.allow)
    if first is None:
        return p, RowCuts(block, allow)
    p1, cut1 = first.p, first.cuts
    sure = ~unsure(p1, cut1) & ~((p1 < cut1.allow) & held.first) & ~bought(cut1, p1, first.pull)
    return np.where(sure, p1, p), RowCuts(np.where(sure, cut1.block, block), np.where(sure, cut1.allow, allow))


def served(model: DecisionModel, x: FloatArray) -> tuple[FloatArray, RowCuts]:
    """``model``'s scores and cuts on ``x`` as the worker's cascade decides (its first stage, if any)."""
    view = None
    if (first := model.first) is not None:
        p1, contrib = first.predict(without_transformer(x))
        view = FirstView(p1, first.thresholds, sender_pull(contrib))
    held = Held.of(x, model.trust.reads_spam_from, model.trust.confirms_spam_from)
    return cascaded(model.predict(x)[0], model.thresholds, view, held)


def spam_reading(y: npt.NDArray[np.int_], x: FloatArray, p: FloatArray, th: Cut, budget: float) -> float | None:
    """From what text score the worker's ``text_model`` rule holds a post out of allow on this
    platform, for the decision scores ``p`` at cuts ``th``. A calibrated score of 0.5 reads spam more
    likely than not (SPAM_READING), and the rule then sends to review the posts the decision model
    would allow. It is raised, to the lowest reading that meets both, where:

    * the posts it reads as spam that are not blocked would not fit ``budget`` (a share of the
      posts) in review: the surest readings keep their place, and the band has what they leave;
    * the allowed posts read at least that surely are, by their labels, mostly ham: the other
      signals are the ones right where the two disagree (a weak text model beside strong reports).

    None (never) where no reading meets both."""
    reading = text_reading(x)
    unblocked, allowed = p < th.block, p < th.allow
    read = unblocked & (reading >= SPAM_READING)
    for i, at in enumerate(np.unique(reading[read])):
        moved = allowed & (reading >= at)
        if (read & (reading >= at)).sum() <= budget * len(p) and (not moved.any() or y[moved].mean() >= 0.5):
            return SPAM_READING if i == 0 else float(at)
    return None if (allowed & read).any() else SPAM_READING


class Placed(NamedTuple):
    """Cuts, and from what text reading a post they leave in review is blocked (None: never)."""

    cuts: Thresholds
    confirmed: float | None


def place_confirmed(
    policy: CutPolicy,
    y: npt.NDArray[np.int_],
    p: FloatArray,
    held: npt.NDArray[np.bool_],
    trusted: npt.NDArray[np.bool_],
    reading: FloatArray,
) -> Placed:
    """The ``policy``'s cuts for the scores ``p``, and from what text ``reading`` the labels confirm a
    text model's spam reading (the worker's ``confirmed`` rule: a post whose score falls in review
    and that reads at least that is blocked). Both spend one budget, the limits on ham blocked and
    on ham among blocked: per reading, from the surest down, the cuts are placed again counting the
    posts it blocks, and the pair that blocks the most spam on the ``trusted`` labels wins, where the
    posts the reading moves from review to block are themselves surely spam at the block precision
    (:meth:`CutPolicy.confirms`); no reading where none blocks more than the cuts alone. Review is
    for the posts the evidence disagrees on, not for those the platform's text model reads as surely
    as its labels confirm."""
    alone = policy.place(y, p, held, trusted)
    spam = trusted & (y == 1)
    n_ham = int((trusted & (y == 0)).sum())
    best, best_spam = Placed(alone, None), int((spam & (p >= alone.block)).sum())
    in_review = (p >= alone.allow) & (p < alone.block) & (reading >= SPAM_READING)
    for at in np.unique(reading[in_review])[::-1]:
        # Counted in the proof as the cuts alone would leave them in review; judged at the new cuts.
        th = policy.place(y, p, held, trusted, (reading >= at) & (p >= alone.allow))
        now = trusted & ((p >= th.block) | ((reading >= at) & (p >= th.allow)))
        n, added = int((now & spam).sum()), trusted & (reading >= at) & (p >= th.allow) & (p < th.block)
        if (
            n > best_spam
            and policy.within(int((now & (y == 0)).sum()), n_ham, int(now.sum()))
            and policy.confirms(int((added & (y == 0)).sum()), int(added.sum()))
        ):
            best, best_spam = Placed(th, float(at)), n
    return best


class FoldCuts(NamedTuple):
    cuts: RowCuts
    confirmed: FloatArray  # per row, the text reading from which its fold's cuts block it in review


def fold_cuts(
    y: npt.NDArray[np.int_],
    oof: FloatArray,
    policy: CutPolicy,
    held: npt.NDArray[np.bool_],
    trusted: npt.NDArray[np.bool_],
    reading: FloatArray,
    folds: int = FOLDS,
) -> FoldCuts:
    """Each fold's cuts and confirmed reading for its own rows, placed as the shipped model's
    (:func:`place_confirmed`), on the other folds' out-of-fold scores only: a row's decision never
    rests on a cut its own label moved."""
    block, allow, confirmed = np.empty(len(y)), np.empty(len(y)), np.empty(len(y))
    for part in folds_of(len(y), folds):
        rest = np.ones(len(y), dtype=bool)
        rest[part] = False
        th, at = place_confirmed(policy, y[rest], oof[rest], held[rest], trusted[rest], reading[rest])
        block[part], allow[part], confirmed[part] = th.block, th.allow, math.inf if at is None else at
    return FoldCuts(RowCuts(block, allow), confirmed)


class OutOfFold(NamedTuple):
    scores: FloatArray  # each row's, by the model trained on the other folds
    rounds: list[int]  # each fold model's
    models: list[tuple[npt.NDArray[np.intp], Fitted]]  # each fold's rows and the model that scored them

    def pull(self, x: FloatArray) -> FloatArray:
        """Per row of ``x`` (the rows scored), the sender's pull in its out-of-fold score."""
        out = np.empty(len(x))
        for part, model in self.models:
            out[part] = pull_of(model, x[part])
        return out


def pull_of(model: Fitted, x: FloatArray) -> FloatArray:
    """The sender's pull (:func:`workers.stages.decide.sender_pull`) in ``model``'s scores of ``x``,
    attributed as the worker attributes them (lightgbm keeps a model stopped early at its best round)."""
    return sender_pull(DecisionModel(model.booster, model.thresholds, "").predict(x)[1])


def out_of_fold(
    x: FloatArray, y: npt.NDArray[np.int_], folds: int = FOLDS, learn: FloatArray | None = None
) -> OutOfFold:
    """Each row's score by the model trained on the other time-contiguous folds, with the fold models:
    models of the labels ``y``, or of a first stage's targets ``learn`` (:func:`first_stage_targets`)."""
    oof = np.empty(len(y), dtype=np.float64)
    rounds, models = [], []
    target, objective = _learned(y, learn)
    for i, part in enumerate(folds_of(len(y), folds)):
        _check(f"fold {i + 1} of {folds}", y[part])
        rest = np.setdiff1d(np.arange(len(y)), part)
        fold = fit(x[rest], target[rest], x[part], target[part], objective=objective)
        oof[part] = fold.predict(x[part])
        rounds.append(max(1, fold.booster.best_iteration))
        models.append((part, fold))
    return OutOfFold(oof, rounds, models)


def fit_all(
    x: FloatArray, y: Targets, rounds: list[int], thresholds: Thresholds, objective: Objective = "binary"
) -> Fitted:
    """The model on all rows, for the fold models' median number of rounds, at ``thresholds``."""
    params = PARAMS | {"objective": objective, "monotone_constraints": list(MONOTONE)}  # as decision_model.fit
    n_rounds = int(np.median(rounds))
    booster = lgb.train(params, lgb.Dataset(x, y, feature_name=list(FEATURES)), num_boost_round=n_rounds)
    booster.best_iteration = n_rounds
    return Fitted(booster, thresholds)


def fit_oof(
    x: FloatArray, y: npt.NDArray[np.int_], policy: Policy, folds: int = FOLDS, learn: FloatArray | None = None
) -> tuple[Fitted, OutOfFold]:
    """The model on all rows (of the labels ``y``, or of ``learn``: :func:`out_of_fold`), its thresholds
    placed by ``policy`` on its out-of-fold predictions (returned beside it), no row held out of allow
    by a rule, every label trusted."""
    oof = out_of_fold(x, y, folds, learn)
    rows = np.ones(len(y), dtype=bool)
    target, objective = _learned(y, learn)
    return fit_all(x, target, oof.rounds, policy.place(y, oof.scores, ~rows, rows), objective), oof


def _learned(y: npt.NDArray[np.int_], learn: FloatArray | None) -> tuple[Targets, Objective]:
    """What a model learns, and by which objective: the labels, or a first stage's targets."""
    return (y, "binary") if learn is None else (learn, FIRST_STAGE_OBJECTIVE)


@dataclass(frozen=True)
class Decided:
    """The decision stage's outcome: a model in ``<out>/decision`` and the gate's judgement."""

    version: str
    rows: dict[str, int]
    split_times: dict[str, str]  # where each part starts (ISO)
    oof: Evaluation  # the challenger's out-of-fold predictions over the earlier rows, at its thresholds
    recheck: dict[str, list[str]]  # post ids whose labels the out-of-fold model doubts, by their label
    challenger: Side  # on every labelled row, each decided by a model that did not see it
    champion: Side  # on the same rows, as logged
    won: int  # rows right (spam blocked, ham not) by the challenger alone
    lost: int  # by the champion alone
    latest: dict[str, Side]  # both on the latest slice alone: the drift check's
    judgement: Judgement
    curves: Curves
    trust: Trust  # saved beside the model: its languages and its spam reading

    def as_dict(self) -> dict[str, Any]:
        j = self.judgement
        return {
            "version": self.version,
            "rows": self.rows,
            "split_times": self.split_times,
            "out_of_fold": self.oof.__dict__,
            "labels_to_recheck": self.recheck,
            "spam_reading": self.trust.spam_reading,
            "spam_confirmed": self.trust.spam_confirmed,
            "challenger": self.challenger.as_dict(),
            "champion": self.champion.as_dict(),
            "won": self.won,
            "lost": self.lost,
            "latest": {name: side.as_dict() for name, side in self.latest.items()},
            "gate": {
                "outcome": j.outcome.value,
                "line": j.line(),
                "failures": j.failures,
                "unsure": j.unsure,
                "more_labels": j.more_labels,
                "review_ceiling": j.review_ceiling,
                "sign_test_p": j.sign_test_p,
                "champion_broken": j.champion_broken,
            },
        }

    def write_report(self, out: Path, confidence: float, report: dict[str, Any] | None = None) -> dict[str, Any]:
        """``report.json`` (``report``, by default this outcome's) and ``report.png`` in ``out``."""
        report = self.as_dict() if report is None else report
        sides = {"challenger": self.challenger, "champion": self.champion}
        write(out, report, self.curves, sides, self.judgement.review_ceiling, confidence)
        return report


def decide(
    data: Labelled,
    champion_x: FloatArray,
    champion: DecisionModel,
    out: Path,
    gate: Gate,
    text_version: str,
    holdout: float = HOLDOUT,
    trust: Trust = TRUST_EVERYWHERE,
) -> Decided:
    """Train on ``data``'s earlier rows, save to ``out/decision`` with ``trust`` (and the spam reading
    chosen here) and judge both models on every row: the challenger on ``data.x`` (out of fold, the
    latest slice by the saved model), the champion on ``champion_x`` (the rows as logged)."""
    early, late = holdout_split(len(data.y), holdout)
    _check("gate's latest slice", data.y[late])
    p_old, old_cuts = served(champion, champion_x)  # the champion's decisions as its cascade logged them
    ceiling = gate.ceiling(Side.of(data.y, p_old, old_cuts))  # the champion's decisions only
    n_late = late.stop - late.start
    budget = review_budget(ceiling, n_late, gate.confidence)  # the gate judges the review share there
    # Block where the product's limits (or a stricter gate's) hold out of fold at their point estimates,
    # then raised until the gate's own bounds hold (a cut on a limit's point estimate straddles its bound
    # on any sample), all on the labels the out-of-fold models do not doubt: counting a handful of scams
    # labelled real, the provable cut sits far above most spam (docs/LOOP.md, "Settings that matter").
    # A looser gate passes a model on weaker bounds; it does not make the model block more than the
    # product's limits.
    policy = CutPolicy(
        review_budget=budget,
        block_precision=max(gate.min_block_precision, TARGETS.min_block_precision),
        max_ham_blocked=min(gate.max_ham_blocked, TARGETS.max_ham_blocked),
        proof=gate,
    )
    x_early, y_early = data.x[early], data.y[early]
    oof, rounds, _ = out_of_fold(x_early, y_early)
    uncut = fit_all(x_early, y_early, rounds, UNCUT)  # its cuts come below
    p_late = uncut.predict(data.x[late])
    # Every row's label as a model that did not see it reads it (the earlier rows out of fold, the latest by
    # the model that ships): the doubted ones are set aside, from the cuts and from the gate's counts for
    # both models, for moderators to check again. One set for both, so the gate counts what the cuts saw.
    doubted = doubted_labels(data.y, np.r_[oof, p_late])
    trusted = ~doubted[early]
    none = np.zeros(len(y_early), dtype=bool)
    model = Fitted(uncut.booster, policy.place(y_early, oof, none, trusted))  # its allow cut comes below
    # Chosen on the latest slice, as the models that ship decide it: the fold text models, trained on
    # less, read more of the earlier posts between the classes, and a reading that fit their review
    # left spam that the text models catch allowed (docs/LOOP.md, "The gate"). It moves posts between
    # allow and review only, so no bound on what is blocked rests on it.
    reading = spam_reading(data.y[late], data.x[late], p_late, model.thresholds, budget)
    trust = trust.model_copy(update={"spam_reading": reading})
    held = Held.of(data.x, trust.reads_spam_from)
    # From what text reading the labels confirm spam where the decision model is unsure, spending the
    # limits' budget with the block cut: each fold's rows at the other folds' choice, the latest slice
    # at the one every earlier row makes, which ships.
    reading_of = text_reading(data.x)
    placed = place_confirmed(policy, y_early, oof, held.full[early], trusted, reading_of[early])
    fitted = Fitted(model.booster, placed.cuts)
    cuts, confirmed = fold_cuts(y_early, oof, policy, held.full[early], trusted, reading_of[early])
    trust = trust.model_copy(update={"spam_confirmed": placed.confirmed})
    at = np.r_[confirmed, np.full(n_late, math.inf if placed.confirmed is None else placed.confirmed)]
    held = held._replace(blocks=reading_of >= at)  # NaN (no text model read it) compares false
    # The cascade's first stage, learning the full model's served decisions (its rules included) out of
    # fold, its cuts where it agrees with them.
    blind = without_transformer(data.x)
    full = decisions_at(*cascaded(oof, cuts, None, Held(*(rows[early] for rows in held))))
    first, first_oof = fit_oof(
        blind[early], y_early, Agreeing(full, fitted.thresholds), learn=first_stage_targets(full, y_early)
    )
    oof1, p1_late = first_oof.scores, first.predict(blind[late])
    pull1 = np.r_[first_oof.pull(blind[early]), pull_of(first, blind[late])]
    every = _then(cuts, fitted.thresholds, n_late)
    view = FirstView(np.r_[oof1, p1_late], first.thresholds, pull1)
    p_new, new_cuts = cascaded(np.r_[oof, p_late], every, view, held)
    kept = ~doubted
    challenger, champion_side, won, lost = paired(
        data.y[kept], (p_new[kept], _at(new_cuts, kept)), (p_old[kept], _at(old_cuts, kept))
    )
    kept_late = kept.copy()
    kept_late[early] = False
    latest, latest_served, _, _ = paired(
        data.y[kept_late], (p_new[kept_late], _at(new_cuts, kept_late)), (p_old[kept_late], _at(old_cuts, kept_late))
    )
    workload = Side.of(data.y[late], p_new[late], _at(new_cuts, late))  # the review share: every post there
    rows = {"train": early.stop, "held_out": n_late}
    oof_eval = evaluate(y_early, oof, fitted.thresholds)
    test = evaluate(data.y[late], p_late, fitted.thresholds)
    # The drift alert's baseline: the earlier rows' text scores, out of fold in a retrain, as on new posts.
    card = save(fitted, out / "decision", text_version, rows, validation=oof_eval, test=test, validation_rows=x_early)
    # Its "review" is the share of the posts left for the transformer and the full model.
    save(
        first,
        out / "decision" / FIRST_STAGE,
        text_version,
        rows,
        validation=evaluate(y_early, oof1, first.thresholds),
        validation_rows=x_early[unsure(oof1, first.thresholds)],  # the drift baseline of the posts it leaves
        test=evaluate(data.y[late], p1_late, first.thresholds),
        targets=FIRST_STAGE_AGREEMENT.as_targets(),
    )

    def start(s: slice) -> str:
        return datetime.fromtimestamp(float(data.times[s.start]), UTC).isoformat()

    trust.save(out / "decision")
    return Decided(
        version=card.version,
        rows=rows,
        split_times={"train": start(early), "held_out": start(late)},
        oof=oof_eval,
        recheck={
            label: [data.post_ids[i] for i in np.nonzero(doubted & (data.y == value))[0]]
            for label, value in (("labelled_ham", 0), ("labelled_spam", 1))
        },
        challenger=challenger,
        champion=champion_side,
        won=won,
        lost=lost,
        latest={"challenger": latest, "champion": latest_served},
        # The review share is judged where the models that ship decide.
        judgement=gate.judge(
            challenger,
            champion_side,
            won,
            lost,
            latest,
            Workload(workload.review, workload.n, f"the latest {workload.n} posts"),
        ),
        curves=Curves(data.y, p_new, p_old),
        trust=trust,
    )


def _then(cuts: RowCuts, th: Thresholds, n: int) -> RowCuts:
    """``cuts`` followed by ``n`` rows at ``th``: the folds' rows, then the latest slice's."""
    return RowCuts(np.r_[cuts.block, np.full(n, th.block)], np.r_[cuts.allow, np.full(n, th.allow)])


def _at(cut: RowCuts, rows: slice | npt.NDArray[np.bool_]) -> RowCuts:
    return RowCuts(cut.block[rows], cut.allow[rows])


def copy_text(text_dir: Path, out: Path) -> None:
    """``text_dir`` copied into ``out/text``: a bundle the loop writes holds its own files."""
    shutil.rmtree(out / "text", ignore_errors=True)
    (out / "text").unlink(missing_ok=True)
    shutil.copytree(text_dir.resolve(), out / "text")


def retrain_decision(data: Path, serving_bundle: Path, out: Path, gate: Gate, holdout: float = HOLDOUT) -> Decided:
    """``modstream train-decision --data``: the decision model alone, on a `dataset build` file
    scored by the serving text model, into a bundle with that text model. Raises DatasetError."""
    serving, text_version = load_serving(serving_bundle)
    d = read_parquet(data)
    if d.text_versions - {text_version}:
        raise DatasetError(
            f"{data}: rows scored by text model(s) {sorted(d.text_versions)}, the serving bundle has {text_version!r}"
        )
    decided = decide(d, d.x, serving, out, gate, text_version, holdout)
    copy_text(serving_bundle / "text", out)
    return decided
