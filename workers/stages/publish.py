"""Stage 6: produce verdicts and dead letters and wait for their delivery reports; the commit policy
(workers/kafka/commit.py) settles the offsets."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from workers.clients import DeliveryError, Framing, Sink
from workers.errors import each
from workers.kafka.delivery import DeadLetters, Output, deliver
from workers.metrics import BROKER_IN, E2E_SECONDS, IN_WORKER, RECORDS
from workers.records import Failure, InMsg, Outcome

STAGE = "publish"


def publish(
    outcomes: Sequence[Outcome],
    failures: Sequence[Failure],
    sink: Sink,
    *,
    verdict_topic: str,
    dlq: DeadLetters,
    timeout_s: float,
    framing: Framing | None = None,
) -> set[InMsg]:
    """One output a message: its verdict or its dead letter (a message has one outcome or one failure).
    Verdicts are plain JSON, or framed by ``framing`` (a Schema Registry's). Returns the messages
    whose output was not acknowledged.

    A verdict that cannot be written (it does not serialise, or the broker refuses it)
    becomes its input's dead letter, so no record can hold its partition back."""
    msgs = [o.msg for o in outcomes] + [f.msg for f in failures]
    token = {(m.topic, m.partition, m.offset): i for i, m in enumerate(msgs)}

    def verdict_output(o: Outcome) -> tuple[int, Output]:
        value = (
            o.verdict.model_dump_json().encode()
            if framing is None
            else framing.write(verdict_topic, o.verdict.model_dump(mode="json"))
        )
        return token[o.msg.topic, o.msg.partition, o.msg.offset], Output(
            verdict_topic, o.verdict.post_id.encode(), value
        )

    rendered, unwritable = each(STAGE, outcomes, lambda o: o.msg, verdict_output)
    dead = {token[f.msg.topic, f.msg.partition, f.msg.offset]: f for f in [*failures, *unwritable]}
    outputs = dict(rendered) | {t: dlq.output(f) for t, f in dead.items()}

    def replace(t: int, refused: Output, error: DeliveryError) -> Output | None:
        if t in dead:
            return dlq.shrink(dead[t], refused)
        dead[t] = Failure(msgs[t], error.code, f"in step {STAGE!r}: the broker refused the verdict: {error}", STAGE)
        return dlq.output(dead[t])

    undelivered = deliver(sink, outputs, timeout_s, replace)

    now_ms, now = time.time() * 1000, time.monotonic()
    delivered = Counter[str](
        o.verdict.decision
        for o in outcomes
        if (t := token[o.msg.topic, o.msg.partition, o.msg.offset]) not in dead and t not in undelivered
    )
    delivered["dead_letter"] = sum(t not in undelivered for t in dead)
    for outcome, n in delivered.items():  # once a label a batch: a labelled inc costs as much as an observe
        RECORDS.labels(outcome).inc(n)
    for i, m in enumerate(msgs):
        if i in undelivered:
            continue
        in_worker = now - m.received_at
        IN_WORKER.observe(in_worker)
        if m.produced_at_ms is not None:
            end_to_end = max(0.0, now_ms - m.produced_at_ms) / 1000
            E2E_SECONDS.observe(end_to_end)
            BROKER_IN.observe(max(0.0, end_to_end - in_worker))
    return {msgs[t] for t in undelivered}
