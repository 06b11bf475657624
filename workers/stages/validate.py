"""Stage 1: bytes -> PostEvent, splitting a batch into oks and errors.

The reader is tolerant (schemas/events.py): fields it does not know are counted, not refused,
and a text longer than the worker judges is cut to its head, which its verdict then says.
A record framed by a Schema Registry is read into its fields first (``framing``), then validated
by the same model: one contract whatever the wire format."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel

from schemas import PostEvent
from schemas.events import TEXT_JUDGED_CHARS
from workers.clients import Framing
from workers.errors import EmptyRecord, each
from workers.metrics import count_unknown_fields
from workers.records import Failure, InMsg, Post
from workers.text.encoder import post_text
from workers.text.urls import extract_links

STAGE = "validate"
M = TypeVar("M", bound=BaseModel)


def parse(
    msgs: Sequence[InMsg], model: type[M], framing: Framing | None = None
) -> tuple[list[tuple[InMsg, M]], list[Failure]]:
    """Strictly parse each record as ``model``; whatever fails becomes a Failure value. A registry
    that does not answer fails the whole batch instead (:class:`workers.errors.Outage`)."""

    def one(msg: InMsg) -> tuple[InMsg, M]:
        if msg.value is None:
            raise EmptyRecord("record has no value (tombstone?)")
        if framing is not None:
            return msg, model.model_validate(framing.read(msg.topic, msg.value), strict=True)
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


def validate(
    msgs: Sequence[InMsg], max_text_chars: int = TEXT_JUDGED_CHARS, framing: Framing | None = None
) -> tuple[list[Post], list[Failure]]:
    events, failures = parse(msgs, PostEvent, framing)
    posts, unreadable = each(STAGE, events, lambda e: e[0], lambda e: _prepare(*e, max_text_chars))
    return posts, failures + unreadable
