"""The feedback worker's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

EVENTS = Counter("modstream_feedback_events_total", "Valid feedback events applied", ["kind", "label"])
DEAD_LETTERS = Counter("modstream_feedback_dead_letters_total", "Invalid feedback records sent to the DLQ")
DUPLICATES = Counter(
    "modstream_feedback_duplicates_total", "Feedback events skipped because they had been applied (redeliveries)"
)
REPORTS_REPEATED = Counter(
    "modstream_feedback_reports_repeated_total",
    "Spam reports not counted on a target (user, url, domain, post) because their reporter had reported it",
    ["target"],
)
REPORT_WEIGHT = Histogram(
    "modstream_feedback_report_weight",
    "What each counted spam report weighed, from its reporter's confirmed and refuted reports",
    buckets=(0.02, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0),
)
REPORTERS_JUDGED = Counter(
    "modstream_feedback_reporters_judged_total",
    "Reporters' records marked by a moderator's label of a post they reported",
    ["outcome"],
)
BANS = Counter("modstream_feedback_bans_total", "Entities newly added to a ban list", ["entity"])
RETRIES = Counter("modstream_feedback_retries_total", "Transient failures retried", ["dependency"])
BATCH_SECONDS = Histogram(
    "modstream_feedback_batch_seconds",
    "Wall time to apply one feedback batch (DLQ and Redis included)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
