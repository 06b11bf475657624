"""Stage 1: bytes -> PostEvent, splitting a batch into oks and errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from schemas import PostEvent
from workers.records import Failure, InMsg, Post
from workers.textenc import post_text
from workers.urls import extract_links

STAGE = "validate"
M = TypeVar("M", bound=BaseModel)


def _summary(err: ValidationError) -> str:
    first = err.errors(include_url=False)[:3]
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in first]
    more = f" (+{err.error_count() - len(first)} more)" if err.error_count() > len(first) else ""
    return "; ".join(parts) + more


def parse(msgs: Sequence[InMsg], model: type[M]) -> tuple[list[tuple[InMsg, M]], list[Failure]]:
    """Strictly parse each record as ``model``; whatever fails becomes a Failure value."""
    oks: list[tuple[InMsg, M]] = []
    failures: list[Failure] = []
    for msg in msgs:
        if msg.value is None:
            failures.append(Failure(msg, "EmptyRecord", "record has no value (tombstone?)"))
            continue
        try:
            oks.append((msg, model.model_validate_json(msg.value, strict=True)))
        except ValidationError as err:
            failures.append(Failure(msg, "ValidationError", _summary(err)))
    return oks, failures


def validate(msgs: Sequence[InMsg]) -> tuple[list[Post], list[Failure]]:
    events, failures = parse(msgs, PostEvent)
    posts = [
        Post(
            msg,
            event,
            extract_links(" ".join((event.text, event.link_text or "")), event.urls),
            post_text(event.text, event.link_text, event.media_text),
        )
        for msg, event in events
    ]
    return posts, failures
