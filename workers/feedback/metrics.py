"""The feedback worker's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

EVENTS = Counter("modstream_feedback_events_total", "Valid feedback events applied", ["kind", "label"])
DEAD_LETTERS = Counter("modstream_feedback_dead_letters_total", "Invalid feedback records sent to the DLQ")
DUPLICATES = Counter(
    "modstream_feedback_duplicates_total", "Feedback events skipped because they had been applied (redeliveries)"
)
BANS = Counter("modstream_feedback_bans_total", "Entities newly added to a ban list", ["entity"])
RETRIES = Counter("modstream_feedback_retries_total", "Transient failures retried", ["dependency"])
BATCH_SECONDS = Histogram(
    "modstream_feedback_batch_seconds",
    "Wall time to apply one feedback batch (DLQ and Redis included)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
