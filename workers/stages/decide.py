"""Stage 5: LightGBM combines the text score with the context into allow / review / block.

A bundle may hold a first stage (``decision/first_stage/``): a model of the same features with the
transformer's score missing, whose cuts were chosen on validation posts so that what it decides
agrees with the full model there (``training.decision_model.first_stage``). :func:`first_stage`
decides the posts it is sure of before any transformer reads them; the rest go to the text model
and :func:`decide`, as without it."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import lightgbm as lgb
import numpy as np
import numpy.typing as npt
import scipy.sparse as sp  # type: ignore[import-untyped]  # no stubs here; lightgbm imports it anyway
from scipy.special import logit  # type: ignore[import-untyped]

from schemas import Decision, FeatureRow, Reason, ReasonCode
from workers.config import DEFAULT_CAMPAIGN_ACTION, CampaignAction
from workers.errors import each
from workers.metrics import CASCADE_AUDITS, DECISION_RULES
from workers.model_cards import CARD_FILE, DecisionModelCard, Thresholds
from workers.records import Failure, InMsg, Outcome, Post, verdict_for
from workers.state.features import (
    CAMPAIGN,
    FEATURE_VERSION,
    FEATURES,
    MONOTONE,
    ContractMismatch,
    PostFacts,
    Profile,
    assemble,
    check_contract,
)
from workers.state.signals import SIGNALS
from workers.text.trust import SPAM_READING, TRUST_EVERYWHERE, Trust
from workers.text.urls import POPULAR

STAGE = "decide"
FIRST_STAGE = "first_stage"  # the stage's metric label, its stage score's key and its directory in a bundle
FloatArray = npt.NDArray[np.float64]
TOP_REASONS = 3


@dataclass(frozen=True, slots=True)
class Unavailable:
    """The inputs a batch is decided without. Any of them makes its verdicts ``degraded``."""

    redis: bool = False  # no history: every profile is empty
    text_model: bool = False  # no text score

    def __bool__(self) -> bool:
        return self.redis or self.text_model

    @property
    def reason(self) -> Reason:
        names = [name for name, down in (("redis", self.redis), ("text model", self.text_model)) if down]
        return Reason.of("degraded", f"decided without {' and '.join(names)}")


_REASON_BY_PREFIX: dict[str, ReasonCode] = {
    "text": "text_model",
    "has": "text_model",
    "user": "user_history",
    "url": "url_reputation",
    "domain": "url_reputation",
    "ip": "ip_history",
    "journey": "journey",
    "campaign": "campaign",
}
_REASON_CODES: list[ReasonCode] = [_REASON_BY_PREFIX.get(f.split("_", 1)[0], "feature") for f in FEATURES]


def path_tables(booster: lgb.Booster) -> tuple[FloatArray, npt.NDArray[np.int64], float]:
    """Per (tree, leaf), each feature's share of the value change on the path from the root.

    These are path (Saabas) attributions: like SHAP they add up exactly to the raw score,
    but they cost one ``pred_leaf`` call and a table lookup, ~40x less than LightGBM's
    ``pred_contrib`` (TreeSHAP, ~0.5-2 ms per row here: more than the text model).
    Returns ``(table [total leaves, features], first row of each tree, bias)``.
    """
    n_features = booster.num_feature()
    tables, offsets, bias, offset = [], [], 0.0, 0
    for tree in booster.dump_model()["tree_info"]:
        root, table = tree["tree_structure"], np.zeros((tree["num_leaves"], n_features))
        if "split_index" not in root:  # a single-leaf tree only shifts the bias
            bias += root["leaf_value"]
        else:
            bias += root["internal_value"]
            stack = [(root, np.zeros(n_features))]
            while stack:
                node, acc = stack.pop()
                for child in (node["left_child"], node["right_child"]):
                    delta = acc.copy()
                    value = child.get("internal_value", child.get("leaf_value"))
                    delta[node["split_feature"]] += value - node["internal_value"]
                    if "leaf_index" in child:
                        table[child["leaf_index"]] = delta
                    else:
                        stack.append((child, delta))
        tables.append(table)
        offsets.append(offset)
        offset += tree["num_leaves"]
    return np.vstack(tables), np.array(offsets, dtype=np.int64), bias


class DecisionModel:
    def __init__(
        self,
        booster: lgb.Booster,
        thresholds: Thresholds,
        version: str,
        first: DecisionModel | None = None,
        trust: Trust = TRUST_EVERYWHERE,
    ) -> None:
        self.booster = booster
        self.thresholds = thresholds
        self.version = version
        # The cascade's first stage, deciding without the transformer; its "review" is "not sure".
        self.first = first
        self.trust = trust  # the languages it decides without the transformer's score
        self._table, self._offsets, self.bias = path_tables(booster)

    @classmethod
    def load(cls, directory: Path, trust: Trust | None = None) -> DecisionModel:
        """The model in ``directory``, with its trust file's (``trust``: its full model's, for a first stage)."""
        card = DecisionModelCard.load(directory)
        check_contract(card.features, card.feature_version)
        booster = lgb.Booster(model_file=str(directory / "model.txt"))
        check_directions(booster, directory)
        trust = Trust.load(directory) if trust is None else trust
        first = directory / FIRST_STAGE
        return cls(
            booster,
            card.thresholds,
            card.version,
            cls.load(first, trust) if (first / CARD_FILE).exists() else None,
            trust,
        )

    def predict(self, rows: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(spam probability, per-feature contributions to the raw score) for a batch."""
        # One thread: the worker shares its cores with tokenisation and Triton, and
        # OpenMP start-up costs more than it saves on a micro-batch.
        leaves = np.asarray(self.booster.predict(rows, pred_leaf=True, num_threads=1), dtype=np.int64)
        # The sum of each row's leaf rows as a sparse product: a gather of [rows, trees, features]
        # first would copy ~10 MB per batch (18 vs 3.5 µs a row, docs/PERFORMANCE.md).
        at = (self._offsets + leaves.reshape(len(rows), -1)).ravel()
        hits = sp.csr_matrix(
            (np.ones(at.size), at, np.arange(0, at.size + 1, len(self._offsets))), shape=(len(rows), len(self._table))
        )
        contrib: FloatArray = np.asarray(hits @ self._table)
        raw = self.bias + contrib.sum(axis=1)
        return 1.0 / (1.0 + np.exp(-raw)), contrib


def check_directions(booster: lgb.Booster, where: Path) -> None:
    """Refuse a model trained without the known directions (features.DIRECTIONS): one that could
    learn that a lower text score, or more accounts sharing a link, raises the spam score."""
    raw = (booster.params or {}).get("monotone_constraints", [])
    given = tuple(int(x) for x in (raw.split(",") if isinstance(raw, str) else raw))
    if given != MONOTONE:
        raise ContractMismatch(
            f"{where}: decision model trained without this worker's monotone constraints; "
            "retrain with `modstream train-decision`"
        )


def facts_of(post: Post) -> PostFacts:
    e, link = post.event, post.links[0] if post.links else None
    return PostFacts(
        text_chars=len(e.text),
        has_link_text=e.link_text is not None,
        has_media_text=e.media_text is not None,
        url_count=len(post.links),
        suffix=link.suffix if link else None,
        subdomain_depth=link.subdomain_depth if link else None,
        popular=link is not None and link.domain in POPULAR,
        journey=e.journey,
        created_at=e.created_at.timestamp(),
    )


def _decisions(t: Thresholds, raw: FloatArray) -> list[Decision]:
    """Per raw score, its decision by ``t``'s cuts."""
    return [t.classify(p) for p in (1.0 / (1.0 + np.exp(-raw))).tolist()]


def sender_pull(contrib: FloatArray) -> FloatArray:
    """The pull toward allow, in raw score, of what the sender reports of itself (the client-reported
    journey), per row of feature contributions ``contrib``."""
    return np.asarray(np.minimum(contrib[..., SENDER_MASK], 0.0).sum(axis=-1))


def bought(t: Thresholds, prob: FloatArray, pull: FloatArray) -> npt.NDArray[np.bool_]:
    """Per score ``prob``, whether its allow rests on the sender's ``pull`` (:func:`sender_pull`):
    without it the score would not be under the allow cut."""
    with np.errstate(divide="ignore"):  # a cut or score of 0 or 1 is an infinite raw score
        raw, cut = logit(prob), logit(t.allow)
    return np.asarray((raw < cut) & (raw - pull >= cut))


def unknown_sender(x: FloatArray) -> npt.NDArray[np.bool_]:
    """Per row, whether the platform has no profile of its sender (a first day's accounts, or Redis
    away): only the stream's counts of its posts, which say nothing of who it is."""
    return np.asarray(np.isnan(x[..., _SENDER_PROFILE]).all(axis=-1))


def unsure_allow(t: Thresholds, prob: FloatArray, contrib: FloatArray, x: FloatArray) -> npt.NDArray[np.bool_]:
    """Per row of ``x``, whether a first stage (cuts ``t``; its score ``prob`` and contributions
    ``contrib``) may not allow it, whatever its cut: the allow rests on what the sender reports of
    itself (:func:`bought`), or nothing is known of the sender (:func:`unknown_sender`). There the text
    decides, and the first stage reads no transformer: on the validation texts as a first day's posts,
    the default bundle's allowed 2 spams that the transformer's reading sends to review
    (docs/journal/2026-12-08-first-day-posts-ask-the-transformer.md)."""
    return np.asarray(bought(t, prob, sender_pull(contrib)) | unknown_sender(x))


def _value(row: FloatArray, i: int) -> str:
    return "missing" if math.isnan(row[i]) else f"{row[i]:.4g}"


def coordination(x: FloatArray) -> FloatArray:
    """Per row of ``x`` (a row alone: a 0-d array), how much of a link's crowd is coordinated, 0 to 1:
    the accounts that repeated a text already posted to the link's site, or came by the same scripted
    UI journey, as a share of the distinct accounts posting its domain in the hour. Two coincidental
    matches among sixty sharers are 0.03; a campaign's copies are most of its accounts, on a domain
    without history. A post without UI steps has no journey to match (many platforms send none), so a
    journey count only counts when the post has steps."""
    copies = np.where(x[..., _COPIES] > 0, x[..., _COPIES], 0.0)  # NaN (no link) is not > 0
    journey = np.where((x[..., _JOURNEY] > 0) & (x[..., _STEPS] > 0), x[..., _JOURNEY], 0.0)
    coordinated = np.maximum(copies, journey)
    sharers = np.where(x[..., _SHARERS] > 0, x[..., _SHARERS], 0.0)
    with np.errstate(invalid="ignore"):  # 0 / 0 where nothing was coordinated: 0 below
        share = np.where(coordinated > 0, coordinated / np.maximum(sharers, coordinated), 0.0)
    # A domain with a history (the stream saw it on many days, or the platform has known it for a
    # year) is where crowds gather: the same copies weigh half there.
    established = (x[..., _DAYS] >= ESTABLISHED_DAYS) | (x[..., _AGE] >= ESTABLISHED_AGE_DAYS)  # NaN: neither
    return np.asarray(share * np.where(established, 0.5, 1.0))


def text_score(x: FloatArray) -> FloatArray:
    """Per row, the transformer's score, else the n-gram model's (Triton down); 0 where neither judged the text."""
    transformer, ngram = x[..., _TEXT_SCORES[0]], x[..., _TEXT_SCORES[1]]
    return np.asarray(np.where(np.isnan(transformer), np.where(np.isnan(ngram), 0.0, ngram), transformer))


def _spam_reading(x: FloatArray, at: float) -> npt.NDArray[np.int64]:
    """Per row, the first text score (its feature index) at or above ``at``, or -1."""
    first, second = _TEXT_SCORES
    # NaN compares false: a score withheld reads nothing.
    return np.where(x[..., first] >= at, first, np.where(x[..., second] >= at, second, -1))


def _unread_link(x: FloatArray) -> npt.NDArray[np.bool_]:
    """Per row, whether it carries a link that no text model read."""
    return np.asarray((x[..., _URLS] > 0) & np.isnan(x[..., TEXT_MASK]).all(axis=-1))


def _held(row: FloatArray, spam: int, spam_reading: float) -> Reason:
    """Why a rule that reads the row alone never allows it (:func:`judge`): its text score ``spam``
    (a feature index; -1: none, its link unread)."""
    if spam >= 0:
        return Reason.of(
            "text_model",
            f"{FEATURES[spam]}={row[spam]:.2f} reads it as spam (from {spam_reading:.2f} on this platform); "
            "the other signals may lower its score, not allow it: review",
        )
    return Reason.of(
        "text_language",
        f"no text model read it and it carries {_value(row, _URLS)} link(s): review, "
        "not allowed on its other signals alone",
    )


def confirmed(row: FloatArray, spam: int, at: float) -> Reason:
    """Why a text reading of ``at`` or more (feature ``spam``) blocks a post the decision model leaves to
    review (the platform's labels confirm it there: ``Trust.spam_confirmed``)."""
    return Reason.of(
        "text_model",
        f"{FEATURES[spam]}={row[spam]:.2f} reads it as spam, from {at:.2f} as this platform's labels "
        "confirm, where the other signals leave it unsure: block",
    )


def text_reading(x: FloatArray) -> FloatArray:
    """Per row, the surer of the two text scores; NaN where neither text model read it."""
    return np.asarray(np.fmax(x[:, _TEXT_SCORES[0]], x[:, _TEXT_SCORES[1]]))


def reads_spam(x: FloatArray, at: float) -> npt.NDArray[np.bool_]:
    """Per row, whether a text model's score is ``at`` or more (:func:`confirmed`'s test, on a batch)."""
    return np.asarray(text_reading(x) >= at)


def never_allowed(x: FloatArray, spam_reading: float) -> npt.NDArray[np.bool_]:
    """Per row, whether a rule that reads the row alone keeps it out of allow whatever its score
    (a bundle's ``trust.reads_spam_from``): the loop places and judges its cuts on the decisions the
    worker serves."""
    return np.asarray((_spam_reading(x, spam_reading) >= 0) | _unread_link(x))


def top_reasons(x: FloatArray, contrib: FloatArray, k: int = TOP_REASONS) -> list[list[Reason]]:
    """Per row, the ``k`` features that moved its score most."""
    order = np.argsort(-np.abs(contrib), axis=1)[:, :k]
    # As Python floats: formatting a numpy scalar costs several times more.
    at = np.arange(len(x))[:, None]
    values, pushes = x[at, order].tolist(), contrib[at, order].tolist()
    return [
        [
            Reason.of(_REASON_CODES[i], f"{FEATURES[i]}={'missing' if math.isnan(v) else f'{v:.4g}'} ({c:+.3f})")
            for i, v, c in zip(row, vs, cs, strict=True)
        ]
        for row, vs, cs in zip(order.tolist(), values, pushes, strict=True)
    ]


def judge(
    model: DecisionModel, x: FloatArray, probs: FloatArray, contrib: FloatArray, campaign_action: CampaignAction
) -> list[tuple[Decision, list[Reason]]]:
    """Per row of ``x`` (the model's ``probs`` and ``contrib`` of it), the decision and its reasons,
    with the rules that the model's score alone cannot keep:

    * A link's wave discounts the pull toward allow of what its senders choose (the text, the
      client-reported journey) in proportion to its :func:`coordination`: a campaign's harmless text
      and human-paced journey are bait, while a crowd's coincidental matches change nothing. A wave
      without a link (greetings, a meme) sells nothing, and its text counts as ever. In a wave
      mostly coordinated (:data:`CAMPAIGN_SHARE`), a post the wave took out of "allow" (without the
      campaign signals' push and the discount it would be decided lower) gets ``campaign_action``,
      its first reason naming the signal. The discount alone moves a post at most to review.
    * What the sender controls (the client-reported journey) may lower a spam score, but never to
      allow a post that its text calls spam more likely than not.
    * Nothing else allows such a post either: where a text model (the transformer or the n-gram
      model) calls it spam more likely than not and the other signals pull it into allow, the two
      disagree, and a person decides: review. From what score is the bundle's (``trust``): a retrain
      raises it where the platform's labels show the other signals right when the two disagree.
    * A post the decision model leaves to review, without a wave or the sender's journey in it, is
      blocked where a text model reads it as spam at least as surely as the platform's labels confirm
      (the bundle's ``trust.spam_confirmed``, which only a retrain sets): review is for the posts the
      evidence disagrees on.
    * Reports alone never block: a post that only users' reports lift into block is sent to review.
      Nor do the copies of a wave without a link (greetings, a meme: it sells nothing): a post that
      only its wave's counts lift into block is sent to review.
    * A post no text model read (in a language none of the bundle's reads) is not allowed with a link
      on its other signals alone: it goes to review. Its link is what can be judged without the
      language; the account's and the journey's pull toward allow were learned beside a text score.

    Each rule's evidence is read batch-wide; only a row that a rule moves is looked at alone.
    """
    t, trust = model.thresholds, model.trust
    raw = model.bias + contrib.sum(axis=1)
    # Only a campaign signal that saw a wave is evidence: a missing or zero count (no link, no copy)
    # can still carry a positive contribution, and must never turn a review into the campaign action.
    push = np.where(CAMPAIGN_MASK & (x > 0), np.maximum(contrib, 0.0), 0.0)
    reported = np.where(REPORT_MASK & (x > 0), np.maximum(contrib, 0.0), 0.0)
    # Each post without any of the wave's evidence (before the discount below).
    without_waves = _decisions(t, raw - push.sum(axis=1))
    share = coordination(x)
    # The text and the journey are the senders' choices: bait, in proportion.
    bait = np.minimum(contrib, 0.0)[:, TEXT_MASK | SENDER_MASK].sum(axis=1)
    raw = np.where(share > 0, raw - share * bait, raw)
    pushed, pushed_at = push.any(axis=1).tolist(), push.argmax(axis=1).tolist()
    copied = (x[:, _COPIES] > 0).tolist()
    spam = _spam_reading(x, trust.reads_spam_from).tolist()
    confirming = _spam_reading(x, trust.confirms_spam_from).tolist()
    columns = zip(
        [t.classify(p) for p in probs.tolist()],  # the model's own
        _decisions(t, raw),  # with the wave's discount
        without_waves,
        share.tolist(),
        (text_score(x) >= SPAM_READING).tolist(),
        _decisions(t, raw - sender_pull(contrib)),  # without the sender's pull
        _unread_link(x).tolist(),
        _decisions(t, raw - reported.sum(axis=1)),  # without users' reports
        reported.any(axis=1).tolist(),
        (x[:, _URLS] > 0).tolist(),
        strict=True,
    )
    out = []
    for j, (decision, seen, without_wave, coordinated, spammy, capped, unread, unreported, reports, link) in enumerate(
        columns
    ):
        row, notes = x[j], list[Reason]()
        i = pushed_at[j] if pushed[j] else _COPIES if copied[j] else _JOURNEY
        if pushed[j] and coordinated >= CAMPAIGN_SHARE and without_wave != seen:
            seen = campaign_action
            notes.append(
                Reason.of(
                    "campaign", f"{FEATURES[i]}={_value(row, i)} ({push[j, i]:+.3f}) decided it: {campaign_action}"
                )
            )
        elif seen != decision:  # only the discount moved it
            if seen == "block":  # blocking for a wave is the campaign action's, and only for campaigns
                seen = "review"
            notes.append(
                Reason.of(
                    "campaign",
                    f"{FEATURES[i]}={_value(row, i)} ({contrib[j, i]:+.3f}): in a coordinated wave "
                    f"({coordinated:.0%} of its accounts) the pull of its text and journey toward allow is discounted",
                )
            )
        if seen == "allow" and spammy and capped != "allow":
            seen = capped
            notes.append(
                Reason.of(
                    "sender_signals",
                    f"the text reads as spam ({float(text_score(row)):.2f}); the client-reported journey "
                    f"({float(sender_pull(contrib[j])):+.3f}) cannot allow it: {capped}",
                )
            )
        if seen == "allow" and (spam[j] >= 0 or unread):
            seen = "review"
            notes.append(_held(row, spam[j], trust.reads_spam_from))
        if seen == "block" and reports and unreported != "block":
            i = int(np.argmax(reported[j]))
            seen = "review"
            notes.append(
                Reason.of(
                    "reports_only",
                    f"{FEATURES[i]}={_value(row, i)} ({reported[j, i]:+.3f}): reports alone never block: review",
                )
            )
        # Without a link's coordination (share 0) nothing discounted raw, so ``without_wave`` is this
        # post without its wave's counts.
        if seen == "block" and coordinated == 0 and not link and pushed[j] and without_wave != "block":
            i = pushed_at[j]
            seen = "review"
            notes.append(
                Reason.of(
                    "campaign",
                    f"{FEATURES[i]}={_value(row, i)} ({push[j, i]:+.3f}): "
                    "a wave without a link never blocks on its copies: review",
                )
            )
        if (
            decision == seen == "review"
            and not notes
            and coordinated == 0  # blocking in a wave is the campaign action's, for campaigns
            and confirming[j] >= 0
            and unreported == "review"  # not where reports lifted it there
        ):
            seen = "block"
            notes.append(confirmed(row, int(confirming[j]), trust.confirms_spam_from))
        out.append((seen, notes))
    reasons = top_reasons(x, contrib)
    return [(seen, [*notes, *top]) for (seen, notes), top in zip(out, reasons, strict=True)]


CAMPAIGN_MASK = np.array([f in CAMPAIGN for f in FEATURES])
# The campaign action is the platform's, for campaigns: a crowd with a few coincidental copies keeps
# the model's own decision. Half: most of the wave's accounts repeated one another.
CAMPAIGN_SHARE = 0.5
TEXT_MASK = np.array([f in ("text_spam_prob", "text_ngram_spam_prob") for f in FEATURES])
# What the sender's client reports about itself; a spammer's script can fake a human pace.
SENDER_MASK = np.array([f.startswith("journey_") for f in FEATURES])
# Users' reports; moderators' labels and bans are other features and rules.
REPORT_MASK = np.array([f.endswith("_reports") for f in FEATURES])
# The platform's profile of the sender (workers/profiles), not the stream's counts of its posts.
_SENDER_PROFILE = np.array([f.startswith("user_") and f not in SIGNALS for f in FEATURES])
ESTABLISHED_DAYS = 7  # days the stream saw a domain on, in 30
ESTABLISHED_AGE_DAYS = 365  # the platform's domain profile: known this long
_TEXT_SCORES = (FEATURES.index("text_spam_prob"), FEATURES.index("text_ngram_spam_prob"))
_COPIES, _JOURNEY, _SHARERS, _STEPS, _DAYS, _AGE, _URLS = (
    FEATURES.index(f)
    for f in (
        "campaign_domain_copies_1h",
        "campaign_journey_users_1h",
        "domain_users_1h",
        "journey_steps",
        "domain_days_30d",
        "domain_age_days",
        "url_count",
    )
)


@dataclass(frozen=True, slots=True)
class _Row:
    at: int  # the post's place in the batch
    post: Post
    features: list[float]
    text_prob: float | None
    language: str | None  # a language the text model cannot judge: its scores were withheld
    withheld: str | None  # a language whose transformer score the decision model does not read (Trust)


def _row(
    at: int,
    post: Post,
    profile: Profile,
    text_prob: float | None,
    ngram_prob: float | None,
    language: str | None,
    withheld: str | None,
) -> _Row:
    if language is not None:  # never decided on text that the text model cannot read
        text_prob = ngram_prob = None
    if withheld is not None:
        text_prob = None
    return _Row(at, post, assemble(facts_of(post), profile, text_prob, ngram_prob), text_prob, language, withheld)


def language_reason(language: str) -> Reason:
    return Reason.of(
        "text_language", f"written in {language!r}, which the text model was not trained on: decided without it"
    )


def withheld_reason(language: str) -> Reason:
    return Reason.of(
        "text_language",
        f"written in {language!r}, where the n-gram model read this platform's labels better than the "
        "transformer: decided without the transformer's score",
    )


@dataclass(frozen=True, slots=True)
class _Judged:
    row: _Row
    prob: float
    decision: Decision
    reasons: list[Reason]
    values: list[float | None]  # the feature row, missing as None
    moved: bool  # a rule moved the decision from the model's own (judge puts its reason first)
    unsure_allow: bool  # a first stage may not allow it (:func:`unsure_allow`)


def _rows(
    posts: Sequence[Post],
    profiles: Sequence[Profile],
    text_probs: Sequence[float | None],
    ngram_probs: Sequence[float | None] | None,
    languages: Sequence[str | None] | None,
    withheld: Sequence[str | None] | None = None,
) -> tuple[list[_Row], list[Failure]]:
    none = [None] * len(posts)
    items = zip(
        range(len(posts)),
        posts,
        profiles,
        text_probs,
        ngram_probs or none,
        languages or none,
        withheld or none,
        strict=True,
    )
    return each(STAGE, items, lambda x: x[1].msg, lambda x: _row(*x))


def _judge_rows(
    rows: Sequence[_Row], model: DecisionModel, campaign_action: CampaignAction
) -> tuple[list[_Judged], list[Failure]]:
    if not rows:
        return [], []
    matrix = np.array([r.features for r in rows], dtype=np.float64)
    probs, contribs = model.predict(matrix)
    unsure = unsure_allow(model.thresholds, probs, contribs, matrix)
    nullable = matrix.astype(object)  # missing as null, for the whole batch at once
    nullable[np.isnan(matrix)] = None
    values = nullable.tolist()

    judged = judge(model, matrix, probs, contribs, campaign_action)
    scores, unsure_allows = probs.tolist(), unsure.tolist()

    def one(i: int) -> _Judged:
        prob, (decision, reasons) = scores[i], judged[i]
        moved = decision != model.thresholds.classify(prob)
        return _Judged(rows[i], prob, decision, reasons, values[i], moved, unsure_allows[i])

    return each(STAGE, range(len(rows)), lambda i: rows[i].post.msg, one)


def _outcome(
    j: _Judged, stage_scores: dict[str, float], model_versions: dict[str, str], unavailable: Unavailable
) -> Outcome:
    reasons = list(j.reasons)
    if (language := j.row.language) is not None:
        reasons.append(language_reason(language))
    if (language := j.row.withheld) is not None:
        reasons.append(withheld_reason(language))
    if unavailable:
        reasons.append(unavailable.reason)
    return verdict_for(
        j.row.post,
        decision=j.decision,
        score=j.prob,
        reasons=reasons,
        stage_scores=stage_scores,
        model_versions=model_versions,
        degraded=bool(unavailable),
        features=FeatureRow(contract=FEATURE_VERSION, values=j.values),
    )


def decide(
    posts: Sequence[Post],
    profiles: Sequence[Profile],
    text_probs: Sequence[float | None],
    model: DecisionModel,
    model_versions: dict[str, str],
    unavailable: Unavailable,
    ngram_probs: Sequence[float | None] | None = None,
    campaign_action: CampaignAction = DEFAULT_CAMPAIGN_ACTION,
    languages: Sequence[str | None] | None = None,
    audit_only: frozenset[InMsg] = frozenset(),
    withheld: Sequence[str | None] | None = None,
) -> tuple[list[Outcome], list[Failure]]:
    """The verdicts, and the posts this step failed on. ``languages``: per post, a language the text
    model cannot judge (workers/text/language.py), whose text scores are then left out, or None;
    ``withheld``: per post, a language whose transformer score ``model`` does not read (Trust), or None.
    ``audit_only``: posts decided to audit the first stage's verdicts, which stand: a rule that
    moves one of these is not counted as moving a verdict."""
    rows, failures = _rows(posts, profiles, text_probs, ngram_probs, languages, withheld)
    judged, unjudged = _judge_rows(rows, model, campaign_action)

    def verdict(j: _Judged) -> Outcome:
        if j.moved and j.row.post.msg not in audit_only:
            DECISION_RULES.labels(j.reasons[0].code).inc()
        tp = j.row.text_prob
        return _outcome(j, {"decision": j.prob} | ({} if tp is None else {"text": tp}), model_versions, unavailable)

    outcomes, unverdicted = each(STAGE, judged, lambda j: j.row.post.msg, verdict)
    return outcomes, failures + unjudged + unverdicted


def is_sure(first: DecisionModel, prob: float, decision: Decision, unsure: bool) -> bool:
    """Whether the first stage decides a post: past one of its cuts, no rule moved it there, and, for
    an allow, not one it may not make (``unsure``: :func:`unsure_allow`). The first stage reads
    no transformer score; where the transformer reads the text as spam, the journey may not allow it
    (:func:`judge`), so a scripted human pace must not buy skipping the transformer either, nor may an
    account nothing is known of, whose post only its text can judge."""
    return decision != "review" and decision == first.thresholds.classify(prob) and not (unsure and decision == "allow")


class FirstStage(NamedTuple):
    outcomes: list[Outcome]  # the posts the first stage is sure of, decided
    failures: list[Failure]
    later: list[int]  # the other posts' places in the batch: for the transformer and the full model
    audited: list[int]  # decided here, and also by the full model off the verdict path (:func:`audit`)


def audited(post: Post, share: float) -> bool:
    """Whether a first-stage verdict is checked by the full model too: a fixed ``share`` of the posts
    by their id, so a redelivered post is audited again alike."""
    digest = hashlib.blake2b(post.event.post_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest) < share * 2**64


def first_stage(
    posts: Sequence[Post],
    profiles: Sequence[Profile],
    first: DecisionModel | None,
    model_versions: dict[str, str],
    unavailable: Unavailable,
    ngram_probs: Sequence[float | None] | None = None,
    campaign_action: CampaignAction = DEFAULT_CAMPAIGN_ACTION,
    languages: Sequence[str | None] | None = None,
    audit_share: float = 0.0,
) -> FirstStage:
    """The cascade's first stage: ``first`` (a bundle's ``DecisionModel.first``) decides, without the
    transformer's score, the posts it is sure of (allow or block, by its cuts), as it decided them and no
    rule moved them; any other post is left for the full model. Its verdicts log the row it saw (the
    transformer's score missing) and its score under ``FIRST_STAGE``, so replay decides them again by
    the same stage. ``first`` None (no first stage, or the cascade off) leaves every post for later."""
    if first is None:
        return FirstStage([], [], list(range(len(posts))), [])
    rows, failures = _rows(posts, profiles, [None] * len(posts), ngram_probs, languages)
    judged, unjudged = _judge_rows(rows, first, campaign_action)
    sure = [j for j in judged if is_sure(first, j.prob, j.decision, j.unsure_allow)]
    later = sorted({j.row.at for j in judged} - {j.row.at for j in sure})
    outcomes = [_outcome(j, {FIRST_STAGE: j.prob}, model_versions, unavailable) for j in sure]
    audit = [j.row.at for j in sure if audited(j.row.post, audit_share)]
    return FirstStage(outcomes, failures + unjudged, later, audit)


def audit(first: Sequence[Outcome], full: Sequence[Outcome]) -> list[Outcome]:
    """The first stage's verdicts as published; an audited one (decided by the full model too: in
    ``full``) gets the full model's scores beside its own, so the loop's dataset holds both, and
    each audited pair of decisions is counted."""
    by_msg = {o.msg: o.verdict for o in full}
    out = []
    for o in first:
        if (v := by_msg.get(o.msg)) is None:
            out.append(o)
            continue
        CASCADE_AUDITS.labels(o.verdict.decision, v.decision).inc()
        scores = v.stage_scores | o.verdict.stage_scores
        out.append(replace(o, verdict=o.verdict.model_copy(update={"stage_scores": scores})))
    return out
