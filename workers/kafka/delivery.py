"""Producing outputs and settling their delivery reports: one way, for every worker.

An output the broker refuses because of the record itself (too large, invalid) would be
refused again on every redelivery, stalling its partition for good; such an output is
replaced (a verdict by its input's dead letter, a dead letter by a shorter one) and sent
again. Anything else undelivered is an outage: it stays uncommitted for redelivery.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from schemas import DeadLetter
from schemas.events import DEAD_LETTER_MESSAGE_MAX, clip
from workers.clients import DeliveryError, Headers, Sink
from workers.records import Failure

NO_REPORT = DeliveryError("_NO_REPORT", "no delivery report in time")
# What a dead letter keeps of an original that even the configured limit could not get through.
LAST_RESORT_ORIGINAL_BYTES = 1024


class DeliveryFailed(RuntimeError):
    """Some outputs were not acknowledged; their inputs stay uncommitted for redelivery."""


@dataclass(frozen=True, slots=True)
class Output:
    topic: str
    key: bytes | None
    value: bytes
    headers: Headers = ()


def dead_letter(failure: Failure, group: str, max_original_bytes: int) -> DeadLetter:
    """The dead letter of ``failure``; an original over ``max_original_bytes`` is cut, and
    its size and hash describe the whole record."""
    m, original = failure.msg, failure.msg.value or b""
    cut = len(original) > max_original_bytes
    return DeadLetter(
        original=original[:max_original_bytes],
        topic=m.topic,
        partition=m.partition,
        offset=m.offset,
        group=group,
        stage=failure.stage,
        error_class=failure.error_class,
        error_message=clip(failure.error_message, DEAD_LETTER_MESSAGE_MAX),
        failed_at=datetime.now(UTC),
        truncated=cut,
        original_size=len(original) if cut else None,
        original_sha256=hashlib.sha256(original).hexdigest() if cut else None,
    )


@dataclass(frozen=True, slots=True)
class DeadLetters:
    """How one worker writes dead letters: its DLQ topic, its group, the size limit."""

    topic: str
    group: str
    max_original_bytes: int

    def output(self, failure: Failure, max_original_bytes: int | None = None) -> Output:
        dl = dead_letter(failure, self.group, max_original_bytes or self.max_original_bytes)
        return Output(self.topic, failure.msg.key, dl.original, tuple(dl.headers()))

    def shrink(self, failure: Failure, refused: Output) -> Output | None:
        """A shorter dead letter after the broker refused ``refused``; None when it is already minimal."""
        if len(refused.value) <= LAST_RESORT_ORIGINAL_BYTES:
            return None
        return self.output(failure, LAST_RESORT_ORIGINAL_BYTES)


def deliver(
    sink: Sink,
    outputs: Mapping[int, Output],
    timeout_s: float,
    replace: Callable[[int, Output, DeliveryError], Output | None],
) -> dict[int, DeliveryError]:
    """Produce ``outputs`` (token -> output) and wait for their reports.

    An output refused for the record itself is swapped for ``replace(token, output, error)``
    and sent again, until ``replace`` returns None. Returns the tokens left undelivered.
    """
    pending, undelivered = dict(outputs), {}
    while pending:
        for token, out in pending.items():
            sink.produce(out.topic, out.key, out.value, out.headers, token)
        reports = sink.flush(timeout_s)
        retry: dict[int, Output] = {}
        for token, out in pending.items():
            if (error := reports.get(token, NO_REPORT)) is None:
                continue
            if error.blames_record and (replacement := replace(token, out, error)) is not None:
                retry[token] = replacement
            else:
                undelivered[token] = error
        pending = retry
    return undelivered


def deliver_dead_letters(sink: Sink, failures: Sequence[Failure], dlq: DeadLetters, timeout_s: float) -> None:
    """Every failure's dead letter, delivered; raises :class:`DeliveryFailed` otherwise."""
    undelivered = deliver(
        sink,
        {token: dlq.output(f) for token, f in enumerate(failures)},
        timeout_s,
        lambda token, refused, _error: dlq.shrink(failures[token], refused),
    )
    if undelivered:
        raise DeliveryFailed(
            f"{len(undelivered)} dead letters not delivered; first: {next(iter(undelivered.values()))}"
        )
