"""Prometheus metrics. Stage labels are the stages' own ``STAGE`` names."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram, start_http_server

_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

STAGE_SECONDS = Histogram("modstream_stage_seconds", "Wall time per stage per batch", ["stage"], buckets=_FAST)
STAGE_ERRORS = Counter("modstream_stage_errors_total", "Stage failures (the batch degrades or fails)", ["stage"])
RECORDS = Counter("modstream_records_total", "Records out, by outcome", ["outcome"])
BATCH_SIZE = Histogram("modstream_batch_size", "Records per micro-batch", buckets=(1, 8, 32, 64, 128, 256, 512, 1024))
E2E_SECONDS = Histogram("modstream_end_to_end_seconds", "Produce timestamp to verdict delivered", buckets=_FAST)
DEGRADED = Counter("modstream_degraded_total", "Verdicts decided without a dependency", ["cause"])
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
BANLIST_SIZE = Gauge("modstream_banlist_entries", "Banned domains, IPs and ranges currently loaded")


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


def serve(port: int) -> None:
    if port:
        start_http_server(port)
