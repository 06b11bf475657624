"""The workers' errors, and the rule that one record's failure never fails its batch: per-record work
runs through :func:`each`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TypeVar

from pydantic import ValidationError

from workers.metrics import RECORD_FAILURES
from workers.records import Failure, InMsg

T = TypeVar("T")
R = TypeVar("R")


class Misconfigured(RuntimeError):
    """Settings or model files that cannot work; the message is one line that says what to fix."""


class EmptyRecord(ValueError):
    """A record with no value (a tombstone)."""


class Outage(RuntimeError):
    """A service every record of the batch needs did not answer (a Schema Registry): no record is
    to blame, so the batch fails whole, uncommitted, and none of its records is dead-lettered."""


# Cancellation, interpreter exit and outages are the process's business, never one record's.
_NOT_RECORD_ERRORS = (asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit, Outage)


def is_record_error(exc: BaseException) -> bool:
    # BaseException on purpose: Rust extensions (the tokenizer) raise pyo3's PanicException,
    # which derives from BaseException, and that is still one record's failure.
    return not isinstance(exc, _NOT_RECORD_ERRORS)


def describe(exc: BaseException) -> str:
    """One line: pydantic's errors summarised by location, anything else as its message."""
    if not isinstance(exc, ValidationError):
        return " ".join(str(exc).split()) or type(exc).__name__
    first = exc.errors(include_url=False)[:3]
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in first]
    more = f" (+{exc.error_count() - len(first)} more)" if exc.error_count() > len(first) else ""
    return "; ".join(parts) + more


def failure(msg: InMsg, stage: str, exc: BaseException) -> Failure:
    RECORD_FAILURES.labels(stage).inc()
    return Failure(msg, type(exc).__name__, f"in step {stage!r}: {describe(exc)}", stage)


def each(
    stage: str, items: Iterable[T], msg_of: Callable[[T], InMsg], step: Callable[[T], R]
) -> tuple[list[R], list[Failure]]:
    """``step`` applied to every item; an item whose step raises becomes a Failure naming ``stage``."""
    oks: list[R] = []
    failures: list[Failure] = []
    for item in items:
        try:
            oks.append(step(item))
        except BaseException as exc:
            if not is_record_error(exc):
                raise
            failures.append(failure(msg_of(item), stage, exc))
    return oks, failures
