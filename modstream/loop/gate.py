"""The gate: is the challenger better than the champion on the same labelled posts?

Every labelled post is evidence once: the challenger decides each by a model that did not see it
(modstream/loop/retrain_decision.py: the earlier posts out of fold, the latest slice by the model
that ships), the champion by its logged verdict. Small data is the common case (1–2k labels, a few
hundred spam), so every rate is judged by a one-sided Wilson bound at the sample size there is,
never by its point estimate alone:

- review share: at most the ceiling (default the champion's share or 10%, whichever is higher).
  A model sending more posts to people is not better, whatever its precision; the ceiling is a
  policy on what the model did, so the observed share is compared, on the latest slice where
  there is one: the posts that the models that ship decide.
- share of ham blocked: its upper bound at most ``max_ham_blocked``;
- block precision: its lower bound at least ``min_block_precision``;
- better: the posts that exactly one of the two gets right (spam blocked, ham not blocked) are
  mostly the challenger's, by a one-sided sign test; or the champion is surely over the limits on
  ham blocked or block precision, which the challenger meets.

A bound that straddles its limit says nothing yet: the gate then says how many more labelled
posts, at the rates seen, would settle it, rather than passing or failing on noise.

The latest slice alone is the drift check: a bound that it settles against the challenger refuses
it, whatever the earlier posts say (they were decided by fold models of an older world). Its sign
test does not veto: a slice holds too few disagreements to tell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from statistics import NormalDist
from typing import Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from schemas import Decision

FloatArray = npt.NDArray[np.float64]

REVIEW_FLOOR = 0.10  # the default review ceiling is never below this
MAX_LABELS = 1_000_000  # beyond this many more labels "how many more" is not an answer


def wilson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """One-sided Wilson bounds (lower, upper) of a rate of ``k`` in ``n`` at ``confidence``."""
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(confidence)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def settled(k: int, n: int, limit: float, confidence: float) -> bool | None:
    """True when the rate is surely at most ``limit``, False when surely above, None when the bound cannot tell."""
    lo, hi = wilson(k, n, confidence)
    if hi <= limit:
        return True
    if lo > limit:
        return False
    return None


def needed(k: int, n: int, limit: float, confidence: float) -> int | None:
    """How many more trials, at the observed rate ``k/n``, until its bound settles against ``limit``;
    None when the rate sits on the limit (no sample size would tell)."""
    rate = k / n if n else 0.0
    if rate == limit:
        return None
    m = max(n, 1)
    while m <= MAX_LABELS and settled(round(rate * m), m, limit, confidence) is None:
        m *= 2
    if m > MAX_LABELS:
        return None
    lo = max(n, m // 2)  # bisect down to the smallest m that settles
    while lo < m:
        mid = (lo + m) // 2
        if settled(round(rate * mid), mid, limit, confidence) is None:
            lo = mid + 1
        else:
            m = mid
    return m - n


def sign_test(k: int, n: int) -> float:
    """One-sided p of at least ``k`` of ``n`` coin flips coming up heads: P(X >= k), X ~ Bin(n, 1/2)."""
    if n == 0:
        return 1.0
    return float(sum(math.comb(n, i) for i in range(max(k, 0), n + 1)) / 2**n)


class Cut(Protocol):
    """Block and allow cuts: one model's ``workers.model_cards.Thresholds``, or :class:`RowCuts`."""

    @property
    def block(self) -> float | FloatArray: ...

    @property
    def allow(self) -> float | FloatArray: ...


class RowCuts(NamedTuple):
    """A cut per post: each fold's thresholds on the posts its model decided."""

    block: FloatArray
    allow: FloatArray


class Limit(NamedTuple):
    """``k`` of ``n``, a rate that must stay at most ``limit``."""

    what: str
    k: int
    n: int
    limit: float


@dataclass(frozen=True)
class Side:
    """One model's decisions on the held-out posts."""

    n: int
    spam: int
    ham: int
    spam_blocked: int
    ham_blocked: int
    review: int
    roc_auc: float

    @classmethod
    def of(cls, y: npt.NDArray[np.int_], p: FloatArray, th: Cut) -> Side:
        from sklearn.metrics import roc_auc_score

        block, allow = p >= th.block, p < th.allow
        return cls(
            n=len(y),
            spam=int(y.sum()),
            ham=int((y == 0).sum()),
            spam_blocked=int((block & (y == 1)).sum()),
            ham_blocked=int((block & (y == 0)).sum()),
            review=int((~block & ~allow).sum()),
            roc_auc=float(roc_auc_score(y, p)) if 0 < y.sum() < len(y) else math.nan,
        )

    @classmethod
    def of_decisions(cls, y: Sequence[int], decisions: Sequence[Decision]) -> Side:
        """Logged decisions on labelled posts (ROC-AUC needs scores: NaN)."""
        pairs = list(zip(y, decisions, strict=True))
        spam = sum(1 for label in y if label)
        return cls(
            n=len(pairs),
            spam=spam,
            ham=len(pairs) - spam,
            spam_blocked=sum(1 for label, d in pairs if label and d == "block"),
            ham_blocked=sum(1 for label, d in pairs if not label and d == "block"),
            review=sum(1 for _, d in pairs if d == "review"),
            roc_auc=math.nan,
        )

    def __add__(self, other: Side) -> Side:
        """Two disjoint sets of posts judged as one; ROC-AUC does not add (NaN)."""
        return Side(
            n=self.n + other.n,
            spam=self.spam + other.spam,
            ham=self.ham + other.ham,
            spam_blocked=self.spam_blocked + other.spam_blocked,
            ham_blocked=self.ham_blocked + other.ham_blocked,
            review=self.review + other.review,
            roc_auc=math.nan,
        )

    @property
    def blocked(self) -> int:
        return self.spam_blocked + self.ham_blocked

    @property
    def block_precision(self) -> float:
        return self.spam_blocked / self.blocked if self.blocked else math.nan

    @property
    def block_recall(self) -> float:
        return self.spam_blocked / self.spam if self.spam else math.nan

    @property
    def block_f1(self) -> float:
        both = self.blocked + self.spam
        return 2 * self.spam_blocked / both if both else math.nan

    @property
    def ham_blocked_share(self) -> float:
        return self.ham_blocked / self.ham if self.ham else math.nan

    @property
    def review_share(self) -> float:
        return self.review / self.n if self.n else math.nan

    def as_dict(self) -> dict[str, float]:
        rates = ("block_precision", "block_recall", "block_f1", "ham_blocked_share", "review_share")
        return {**asdict(self), **{r: round(getattr(self, r), 4) for r in rates}}


@dataclass(frozen=True)
class Evidence:
    """Both models on the same labelled posts, paired: what the gate judges. Evidence from disjoint
    posts adds up: a shadowed challenger's labelled verdicts extend its retrain's out-of-fold posts."""

    challenger: Side
    champion: Side
    won: int  # posts right (spam blocked, ham not) by the challenger alone
    lost: int  # by the champion alone

    @classmethod
    def of_decisions(cls, y: Sequence[int], challenger: Sequence[Decision], champion: Sequence[Decision]) -> Evidence:
        right = [
            [(d == "block") == bool(label) for label, d in zip(y, side, strict=True)] for side in (challenger, champion)
        ]
        return cls(
            Side.of_decisions(y, challenger),
            Side.of_decisions(y, champion),
            won=sum(1 for a, b in zip(*right, strict=True) if a and not b),
            lost=sum(1 for a, b in zip(*right, strict=True) if b and not a),
        )

    def __add__(self, other: Evidence) -> Evidence:
        return Evidence(
            self.challenger + other.challenger,
            self.champion + other.champion,
            self.won + other.won,
            self.lost + other.lost,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "challenger": self.challenger.as_dict(),
            "champion": self.champion.as_dict(),
            "won": self.won,
            "lost": self.lost,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Evidence:
        names = [f.name for f in fields(Side)]
        return cls(
            Side(**{k: d["challenger"][k] for k in names}),
            Side(**{k: d["champion"][k] for k in names}),
            int(d["won"]),
            int(d["lost"]),
        )


class Outcome(StrEnum):
    BETTER = "better"
    NOT_BETTER = "not_better"
    TOO_FEW_LABELS = "too_few_labels"


class Workload(NamedTuple):
    """The challenger's posts to review among ``n`` decided by the models that ship, and which posts
    (``where``): the retrain's latest slice, or every post a shadowed challenger decided. The
    earlier rows' fold text models, trained on less, read fewer posts surely: on three of the
    trial's four histories every label's share was 1.3-1.9 times the latest slice's."""

    review: int
    n: int
    where: str

    @property
    def share(self) -> float:
        return self.review / self.n if self.n else 0.0


@dataclass(frozen=True)
class Gate:
    """What the challenger must show; the defaults are the issue's product targets."""

    max_ham_blocked: float = 0.01
    min_block_precision: float = 0.95
    max_review_share: float | None = None  # None: the champion's review share or REVIEW_FLOOR, the higher
    confidence: float = 0.95  # one-sided, for every bound and the sign test

    def ceiling(self, champion: Side) -> float:
        if self.max_review_share is not None:
            return self.max_review_share
        return max(champion.review_share, REVIEW_FLOOR)

    def judge(
        self,
        challenger: Side,
        champion: Side,
        won: int,
        lost: int,
        latest: Side | None = None,
        workload: Workload | None = None,
    ) -> Judgement:
        """The outcome on the posts both models decided; ``won`` posts the challenger alone got
        right, ``lost`` the champion alone (:func:`paired`); ``latest``: the challenger on the latest
        slice alone, whose settled bounds veto (the drift check); ``workload``: where its review
        share is judged (None: on every post)."""
        failures: list[str] = []
        unsure: list[str] = []
        more: list[int] = []  # labelled posts each unsettled check needs
        c = challenger
        ceiling = self.ceiling(champion)
        work = workload or Workload(c.review, c.n, "posts")
        if work.share > ceiling:
            failures.append(f"sends {work.share:.1%} of {work.where} to review, over the ceiling {ceiling:.1%}")

        checks = self.limits(c.ham_blocked, c.ham, c.blocked)
        for (what, k, n, limit), per_post in zip(checks, (c.ham / c.n, c.blocked / c.n), strict=True):
            ok = settled(k, n, limit, self.confidence)
            shown = f"{what} {k}/{n} ({self.confidence:.0%} bound {wilson(k, n, self.confidence)[1]:.2%})"
            if ok is None:
                unsure.append(f"{shown} straddles {limit:.2%}")
                extra = needed(k, n, limit, self.confidence)
                more.append(MAX_LABELS if extra is None or per_post == 0 else math.ceil(extra / per_post))
            elif not ok:
                failures.append(f"{shown} over {limit:.2%}")
        if latest is not None:
            failures += [f"on the latest {latest.n} posts alone, {f}" for f in self.broken(latest)]
        p = sign_test(won, won + lost)
        # A champion surely over the product's limits is no bar to measure accuracy against: blocking
        # a fifth of the ham buys it spam "right" that a model within the limits must leave to review.
        champion_broken = self.broken(champion)
        if not champion_broken and won <= lost:
            failures.append(
                f"no better than the champion: block-F1 {c.block_f1:.3f} vs {champion.block_f1:.3f}, "
                f"{won} posts right only by the challenger, {lost} only by the champion"
            )
        elif not champion_broken and p > 1 - self.confidence:
            unsure.append(f"{won} posts right only by the challenger against {lost}: sign test p {p:.3f}")
            more.append(_sign_test_labels(won, lost, c.n, self.confidence))
        outcome = Outcome.NOT_BETTER if failures else Outcome.TOO_FEW_LABELS if unsure else Outcome.BETTER
        more_labels = max(more) if unsure else 0
        return Judgement(outcome, failures, unsure, more_labels, ceiling, round(p, 6), champion_broken)

    def limits(self, ham_blocked: int, ham: int, blocked: int) -> tuple[Limit, Limit]:
        """The bounded checks, each a rate that must stay at most its limit: ham blocked among the
        ham, and ham among the blocked (block precision is one minus it)."""
        return (
            Limit("ham blocked", ham_blocked, ham, self.max_ham_blocked),
            Limit("ham among blocked", ham_blocked, blocked, 1 - self.min_block_precision),
        )

    def holds(self, ham_blocked: int, ham: int, blocked: int) -> bool:
        """Every bounded check surely within its limit."""
        checks = self.limits(ham_blocked, ham, blocked)
        return all(settled(k, n, limit, self.confidence) is True for _, k, n, limit in checks)

    def broken(self, side: Side) -> list[str]:
        """The bounded checks that ``side`` is surely over."""
        return [
            f"{x.what} {x.k}/{x.n} ({self.confidence:.0%} bound {wilson(x.k, x.n, self.confidence)[0]:.2%}) "
            f"over {x.limit:.2%}"
            for x in self.limits(side.ham_blocked, side.ham, side.blocked)
            if settled(x.k, x.n, x.limit, self.confidence) is False
        ]


def paired(
    y: npt.NDArray[np.int_],
    challenger: tuple[FloatArray, Cut],
    champion: tuple[FloatArray, Cut],
) -> tuple[Side, Side, int, int]:
    """Both models' sides on the same posts, and the posts right (spam blocked, ham not) by the
    challenger alone and by the champion alone."""
    right = [(p >= th.block) == (y == 1) for p, th in (challenger, champion)]
    won, lost = int((right[0] & ~right[1]).sum()), int((~right[0] & right[1]).sum())
    return Side.of(y, *challenger), Side.of(y, *champion), won, lost


def _sign_test_labels(won: int, lost: int, n: int, confidence: float) -> int:
    """More labelled posts until the sign test at the observed split and discordance would pass."""
    share, rate = won / (won + lost), (won + lost) / n
    m = n
    while m <= MAX_LABELS:
        d = max(1, round(rate * m))
        if sign_test(math.ceil(share * d), d) <= 1 - confidence:
            return m - n
        m = math.ceil(m * 1.25)
    return MAX_LABELS


@dataclass(frozen=True)
class Judgement:
    outcome: Outcome
    failures: list[str]  # settled: the challenger is not better
    unsure: list[str]  # bounds that straddle their limits at this sample size
    more_labels: int  # labelled posts the slowest unsure check needs (0 when none is unsure)
    review_ceiling: float
    sign_test_p: float
    champion_broken: list[str]  # the limits the champion is surely over: then within them is better

    @property
    def better(self) -> bool:
        return self.outcome is Outcome.BETTER

    def line(self) -> str:
        """One line saying why."""
        if self.failures:
            return "not better: " + "; ".join(self.failures)
        if self.unsure:
            more = "more labels than a platform has" if self.more_labels >= MAX_LABELS else f"{self.more_labels}"
            return f"too few labels to tell ({'; '.join(self.unsure)}): label about {more} more posts"
        if self.champion_broken:
            return f"better: every bound holds, and the champion's do not ({'; '.join(self.champion_broken)})"
        return "better: every bound holds and the challenger gets more posts right"
