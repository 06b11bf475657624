"""Stage 1: bytes -> PostEvent, splitting a batch into oks and errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel

from schemas import PostEvent
from workers.isolation import EmptyRecord, each
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


def _post(parsed: tuple[InMsg, PostEvent]) -> Post:
    msg, event = parsed
    return Post(
        msg,
        event,
        extract_links(" ".join((event.text, event.link_text or "")), event.urls),
        post_text(event.text, event.link_text, event.media_text),
    )


def validate(msgs: Sequence[InMsg]) -> tuple[list[Post], list[Failure]]:
    events, failures = parse(msgs, PostEvent)
    posts, unreadable = each(STAGE, events, lambda e: e[0], _post)
    return posts, failures + unreadable
