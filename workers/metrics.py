"""Prometheus metrics. Stage labels are the stages' own ``STAGE`` names."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
from prometheus_client import Counter, Gauge, Histogram

_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# A backlog is minutes old: end-to-end latency must not read "over 5 s" for all of it.
_BACKLOG = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
# The text score's edges, fine at both ends where ham and spam gather. Training records the
# validation scores on the same edges (the decision card's ``validation.text_score_le``), so the
# drift alert compares the live distribution with it bucket by bucket.
TEXT_SCORE_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999)
TEXT_SCORE_KEY = "text_score_le"

STAGE_SECONDS = Histogram("modstream_stage_seconds", "Wall time per stage per batch", ["stage"], buckets=_FAST)
STAGE_ERRORS = Counter("modstream_stage_errors_total", "Stage failures (the batch degrades or fails)", ["stage"])
RECORDS = Counter("modstream_records_total", "Records out, by outcome", ["outcome"])
BATCH_SIZE = Histogram("modstream_batch_size", "Records per micro-batch", buckets=(1, 8, 32, 64, 128, 256, 512, 1024))
E2E_SECONDS = Histogram(
    "modstream_end_to_end_seconds", "Produce timestamp to verdict delivered", buckets=_FAST + _BACKLOG
)
# Where a verdict's time goes, per post: from its producer's timestamp to the worker's poll (the
# producer's linger, the broker, the fetch wait), and from the poll to its verdict delivered (every
# stage, the batches ahead of it, the publish). The stages' own times are modstream_stage_seconds.
HOP_SECONDS = Histogram(
    "modstream_hop_seconds",
    "A post's time by hop: broker_in (produce to poll), in_worker (poll to delivered)",
    ["hop"],
    buckets=_FAST + _BACKLOG,
)
BROKER_IN, IN_WORKER = HOP_SECONDS.labels("broker_in"), HOP_SECONDS.labels("in_worker")
DEGRADED = Counter("modstream_degraded_total", "Verdicts decided without a dependency", ["cause"])
DECISION_RULES = Counter(
    "modstream_decision_rules_total",
    "Verdicts a rule of the decide stage moved from the model's own decision, by the rule's reason code "
    "(campaign, sender_signals, text_model, reports_only, text_language)",
    ["rule"],
)
CASCADE_POSTS = Counter(
    "modstream_cascade_posts_total", "Posts past the ban check, by the stage that decided them", ["stage"]
)
CASCADE_AUDITS = Counter(
    "modstream_cascade_audits_total",
    "First-stage verdicts decided by the full model too (a sample, off the verdict path), by both decisions",
    ["first_stage", "full"],
)
CACHE_HITS = Counter("modstream_text_cache_hits_total", "Text scores served from the campaign cache")
RECORD_FAILURES = Counter(
    "modstream_record_failures_total", "Records a step failed on, dead-lettered instead of failing the batch", ["stage"]
)
RECORD_RETRIES = Counter(
    "modstream_record_retries_total", "Records retried alone after an uncaught error failed their batch"
)
SHADOW_DECISIONS = Counter(
    "modstream_shadow_decisions_total",
    "Posts decided by both models, by their two decisions",
    ["champion", "challenger"],
)
SHADOW_FAILURES = Counter(
    "modstream_shadow_failures_total", "Posts the challenger skipped: it failed to decide or publish", ["step"]
)
MODEL_RELOADS = Counter(
    "modstream_model_reloads_total",
    "Promoted bundles picked up (loaded), refused, or waiting for Triton to serve their text model (pending)",
    ["outcome"],
)
UNJUDGED_LANGUAGE = Counter(
    "modstream_unjudged_language_posts_total",
    "Posts in a language the served text model cannot judge, decided without their text scores",
    ["language"],
)
UNKNOWN_FIELDS = Counter(
    "modstream_input_unknown_fields_total", "Input fields the schema does not know, ignored", ["field"]
)
MODEL_INFO = Gauge("modstream_model_info", "1 for the text and decision model versions served", ["text", "decision"])
TEXT_SCORE = Histogram(
    "modstream_text_score",
    "Text model scores of the posts it judged, by text model version",
    ["version"],
    buckets=TEXT_SCORE_BUCKETS,
)
TEXT_SCORE_VALIDATION = Gauge(
    "modstream_text_score_validation",
    "Share of the validation posts' text scores at or below le, by text model version (the decision card)",
    ["version", "le"],
)
BANLIST_SIZE = Gauge("modstream_banlist_entries", "Banned domains, IPs and ranges currently loaded")


class BoundedLabels:
    """Label values taken from input, bounded: each cut to ``chars``, and after ``limit`` distinct
    ones every new one is ``other``. Field names come from producers; a producer that puts data in
    its keys (an id per key) would otherwise make a Prometheus series per record."""

    def __init__(self, limit: int = 50, chars: int = 64) -> None:
        self.limit, self.chars = limit, chars
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        value = value[: self.chars]
        if value in self._seen:
            return value
        if len(self._seen) >= self.limit:
            return "other"
        self._seen.add(value)
        return value


_unknown_field = BoundedLabels()


def count_unknown_fields(names: Iterable[str]) -> None:
    for name in names:
        UNKNOWN_FIELDS.labels(_unknown_field(name)).inc()


@contextmanager
def timed(stage: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    except Exception:
        STAGE_ERRORS.labels(stage).inc()
        raise
    finally:
        STAGE_SECONDS.labels(stage).observe(time.perf_counter() - start)


def observe_text_scores(version: str, scores: Iterable[float | None]) -> None:
    histogram = TEXT_SCORE.labels(version)
    for score in scores:
        if score is not None:  # degraded: no score to count
            histogram.observe(score)


def score_histogram(scores: Sequence[float]) -> dict[str, int]:
    """Cumulative counts at each of :data:`TEXT_SCORE_BUCKETS` and ``+Inf``, keyed as Prometheus
    writes ``le``: what a ``modstream_text_score`` histogram of these scores would hold."""
    edges = [*TEXT_SCORE_BUCKETS, float("inf")]
    values = np.sort(np.asarray(scores, dtype=float))
    counts = np.searchsorted(values, edges, side="right")
    return {(repr(e) if e < float("inf") else "+Inf"): int(n) for e, n in zip(edges, counts, strict=True)}
