"""Stage 6: produce verdicts and dead letters, wait for their delivery reports, settle offsets."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

from schemas import DeadLetter
from workers.clients import Sink
from workers.commit import Settlement, settle
from workers.metrics import E2E_SECONDS, RECORDS
from workers.records import Failure, InMsg, Outcome

STAGE = "publish"


def dead_letter(failure: Failure, group: str) -> DeadLetter:
    m = failure.msg
    return DeadLetter(
        original=m.value or b"",
        topic=m.topic,
        partition=m.partition,
        offset=m.offset,
        group=group,
        error_class=failure.error_class,
        error_message=failure.error_message[:4096],
        failed_at=datetime.now(UTC),
    )


def publish(
    msgs: Sequence[InMsg],
    outcomes: Sequence[Outcome],
    failures: Sequence[Failure],
    sink: Sink,
    *,
    verdict_topic: str,
    dlq_topic: str,
    group: str,
    timeout_s: float,
) -> Settlement:
    """Every message in ``msgs`` must have exactly one outcome or failure."""
    token = {(m.topic, m.partition, m.offset): i for i, m in enumerate(msgs)}
    for o in outcomes:
        value = o.verdict.model_dump_json().encode()
        sink.produce(
            verdict_topic,
            o.verdict.post_id.encode(),
            value,
            [],
            token[o.msg.topic, o.msg.partition, o.msg.offset],
        )
    for f in failures:
        dl = dead_letter(f, group)
        sink.produce(dlq_topic, f.msg.key, dl.original, dl.headers(), token[f.msg.topic, f.msg.partition, f.msg.offset])
    reports = sink.flush(timeout_s)
    undelivered = {i for i in range(len(msgs)) if reports.get(i, "no delivery report in time") is not None}

    now_ms = time.time() * 1000
    for o in outcomes:
        RECORDS.labels(o.verdict.decision).inc()
    RECORDS.labels("dead_letter").inc(len(failures))
    for i, m in enumerate(msgs):
        if i not in undelivered and m.produced_at_ms is not None:
            E2E_SECONDS.observe(max(0.0, now_ms - m.produced_at_ms) / 1000)
    return settle(msgs, undelivered)
