"""Stage 1: bytes -> PostEvent, splitting a batch into oks and errors.

The reader is tolerant (schemas/events.py): fields it does not know are counted, not refused,
and a text longer than the worker judges is cut to its head, which its verdict then says."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel

from schemas import PostEvent
from schemas.events import TEXT_JUDGED_CHARS
from workers.isolation import EmptyRecord, each
from workers.metrics import count_unknown_fields
from workers.records import Failure, InMsg, Post
from workers.textenc import post_text
from workers.urls import extract_links

STAGE = "validate"
M = TypeVar("M", bound=BaseModel)


def parse(msgs: Sequence[InMsg], model: type[M]) -> tuple[list[tuple[InMsg, M]], list[Failure]]:
    """Strictly parse each record as ``model``; whatever fails becomes a Failure value."""

    def one(msg: InMsg) -> tuple[InMsg, M]:
        if msg.value is None:
            raise EmptyRecord("record has no value (tombstone?)")
        return msg, model.model_validate_json(msg.value, strict=True)

    return each(STAGE, msgs, lambda m: m, one)


def _prepare(msg: InMsg, event: PostEvent, max_text_chars: int = TEXT_JUDGED_CHARS) -> Post:
    """The post the later stages judge: its text cut to ``max_text_chars`` (before the link
    extraction and normalisation that would otherwise run over all of it), its links found."""
    count_unknown_fields(event.unknown_fields())
    cut_from = None
    if len(event.text) > max_text_chars:
        cut_from = len(event.text)
        event = event.model_copy(update={"text": event.text[:max_text_chars]})
    return Post(
        msg,
        event,
        extract_links(" ".join((event.text, event.link_text or "")), event.urls),
        post_text(event.text, event.link_text, event.media_text),
        cut_from,
    )


def validate(msgs: Sequence[InMsg], max_text_chars: int = TEXT_JUDGED_CHARS) -> tuple[list[Post], list[Failure]]:
    events, failures = parse(msgs, PostEvent)
    posts, unreadable = each(STAGE, events, lambda e: e[0], lambda e: _prepare(*e, max_text_chars))
    return posts, failures + unreadable
