"""Re-decide logged verdicts from their feature rows with another (or the same) decision model.

The row a verdict logged is exactly what its model saw (JSON floats round-trip exactly,
null is NaN), and a row's prediction does not depend on its batch, so the bundle that
served reproduces every recorded decision: replay's determinism check. A bundle with a first
stage decides as the worker's cascade does: the first stage on the row without the transformer's
score (what it saw when it decided the post, and what it sees again), the full model where it is
not sure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from schemas import Decision, Reason, ReasonCode, Verdict
from workers.config import DEFAULT_CAMPAIGN_ACTION, CampaignAction
from workers.stages.decide import FIRST_STAGE, DecisionModel, FloatArray, is_sure, judge, unsure_allow
from workers.state.features import FEATURE_VERSION, FEATURES

_TEXT = FEATURES.index("text_spam_prob")

# Reasons about what the post's inputs were, not about the model: another model keeps them.
INPUT_REASONS: frozenset[ReasonCode] = frozenset({"degraded", "text_truncated", "text_language"})


@dataclass
class Redecided:
    pairs: list[tuple[Verdict, Verdict]] = field(default_factory=list)  # (recorded, re-decided)
    no_feature_row: int = 0  # short-circuited (banned) posts: no model decided them
    other_contract: int = 0


def has_row(v: Verdict) -> bool:
    """Whether ``v`` logged a feature row of this contract: one that can be decided again."""
    return v.features is not None and v.features.contract == FEATURE_VERSION and len(v.features.values) == len(FEATURES)


def redecide(
    recorded: Iterable[Verdict],
    model: DecisionModel,
    text_version: str | None = None,
    campaign_action: CampaignAction = DEFAULT_CAMPAIGN_ACTION,
) -> Redecided:
    """Each verdict with a row of this contract, decided again by ``model`` as the worker decides
    (``campaign_action`` included); its ``model_versions`` name ``model`` (and ``text_version`` when given)."""
    out, rows = Redecided(), []
    for v in recorded:
        if v.features is None:
            out.no_feature_row += 1
        elif not has_row(v):
            out.other_contract += 1
        else:
            rows.append(v)
    if not rows:
        return out
    matrix = np.array([[math.nan if x is None else x for x in v.features.values] for v in rows if v.features])
    probs, contribs = model.predict(matrix)
    sure = _first_stage(model.first, matrix, campaign_action)
    judged = judge(model, matrix, probs, contribs, campaign_action)
    for i, v in enumerate(rows):
        versions = v.model_versions | {"decision": model.version} | ({"text": text_version} if text_version else {})
        if i in sure:
            prob, decision, reasons = sure[i]
            scores = v.stage_scores | {FIRST_STAGE: prob}
        else:
            prob, (decision, reasons) = float(probs[i]), judged[i]
            scores = v.stage_scores | {"decision": prob}
        reasons += [r for r in v.reasons if r.code in INPUT_REASONS]
        again = v.model_copy(
            update={
                "decision": decision,
                "score": prob,
                "reasons": reasons,
                "stage_scores": scores,
                "model_versions": versions,
            }
        )
        out.pairs.append((v, again))
    return out


def _first_stage(
    first: DecisionModel | None, matrix: FloatArray, campaign_action: CampaignAction
) -> dict[int, tuple[float, Decision, list[Reason]]]:
    """The rows the first stage is sure of (as workers.stages.decide.first_stage), by index."""
    if first is None:
        return {}
    blind = matrix.copy()
    blind[:, _TEXT] = math.nan
    probs, contribs = first.predict(blind)
    unsure = unsure_allow(first.thresholds, probs, contribs, blind)
    judged = judge(first, blind, probs, contribs, campaign_action)
    out = {}
    for i, (p, (decision, reasons)) in enumerate(zip(probs.tolist(), judged, strict=True)):
        if is_sure(first, p, decision, bool(unsure[i])):
            out[i] = (p, decision, reasons)
    return out
