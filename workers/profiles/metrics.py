"""The profile ingester's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import Counter

UPDATES = Counter("modstream_profile_updates_total", "Valid profile updates written to Redis", ["entity"])
FIELDS = Counter(
    "modstream_profile_fields_total",
    "Profile fields by outcome: written, or kept (a newer value, or a prior, was already stored)",
    ["outcome"],
)
DEAD_LETTERS = Counter("modstream_profile_dead_letters_total", "Invalid profile records sent to the DLQ")
