"""Pydantic v2 models for every record modstream consumes or produces.

All models are strict (no type coercion beyond JSON's own), bound every string and list
(a post's text is judged on its head, see :data:`TEXT_JUDGED_CHARS`), and reject NaN/inf,
so a hostile or buggy producer cannot push unbounded work onto the hot path.

What modstream writes (``Verdict``, ``DeadLetter``) forbids unknown fields. What platforms
write is read tolerantly, as schema evolution needs: a ``PostEvent`` ignores fields it does
not know (the worker counts them), leaves ``ip`` and ``platform`` optional, and takes ids as
strings or integers and ``created_at`` as RFC 3339 or epoch milliseconds.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    WithJsonSchema,
)

SCHEMA_VERSION: Literal[1] = 1

# Any printable characters (no C0/C1 controls or DEL): base64 ids with / = +, DIDs and AT URIs
# with paths. Safe as a Kafka key (bytes) and in a Redis key: on a cluster a `{...}` in an id
# only moves the key to another slot, which every script derives from the final key.
ID_MAX_CHARS = 256
_PRINTABLE = r"^[^\x00-\x1f\x7f-\x9f]+$"
Id = Annotated[str, Field(min_length=1, max_length=ID_MAX_CHARS, pattern=_PRINTABLE)]


# Integer ids: any 64-bit one, signed or not (snowflakes, database keys).
INT_ID_MIN, INT_ID_MAX = -(2**63), 2**64 - 1


def _integer_as_text(value: object) -> object:
    """A JSON integer id as its decimal text (never a boolean, which Python counts as an int)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not INT_ID_MIN <= value <= INT_ID_MAX:
            raise ValueError("an integer id must fit in 64 bits")
        return str(value)
    return value


# What producers may send as an id: a string, or an integer (kept as its decimal text).
InputId = Annotated[
    Id,
    BeforeValidator(_integer_as_text),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "minLength": 1, "maxLength": ID_MAX_CHARS, "pattern": _PRINTABLE},
                {"type": "integer", "minimum": INT_ID_MIN, "maximum": INT_ID_MAX},
            ]
        }
    ),
]

_DATETIME: TypeAdapter[datetime] = TypeAdapter(AwareDatetime)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Epoch milliseconds up to the last instant of year 9999, the largest a datetime holds.
EPOCH_MS_MAX = 253_402_300_799_999


def _event_time(value: object) -> object:
    """An RFC 3339 string or epoch milliseconds as a datetime. A validator before the field's own
    sees Python values, and strict mode takes a string as a datetime only from JSON: so the
    string is read here by pydantic's own parser, exactly as a plain strict field reads it."""
    if isinstance(value, str):
        return _DATETIME.validate_strings(value, strict=True)
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= EPOCH_MS_MAX:
            raise ValueError(f"epoch milliseconds must be in [0, {EPOCH_MS_MAX}]")
        return EPOCH + timedelta(milliseconds=value)  # exact, where a float of seconds is not
    return value


# RFC 3339 with an offset, or epoch milliseconds.
EventTime = Annotated[
    AwareDatetime,
    BeforeValidator(_event_time),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "format": "date-time"},
                {"type": "integer", "minimum": 0, "maximum": EPOCH_MS_MAX},
            ]
        }
    ),
]
# A post's text is judged on its first this many characters by default (MODSTREAM_MAX_TEXT_CHARS);
# a longer one is cut, not refused, and its verdict says so (reason "text_truncated").
TEXT_JUDGED_CHARS = 10_000
Url = Annotated[str, Field(min_length=1, max_length=2048)]


def canonical_ip(value: str) -> str:
    """An IPv4 or IPv6 address in its canonical text form.

    The C socket parser, not pydantic's ``IPvAnyAddress``: that one runs Python's
    ``ipaddress`` parser, which was 35 of the 55 µs a post event took to validate.
    """
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return socket.inet_ntop(family, socket.inet_pton(family, value))
        except OSError:
            continue
    raise ValueError("value is not a valid IPv4 or IPv6 address")


IPAddress = Annotated[
    str,
    Field(max_length=45),
    AfterValidator(canonical_ip),
    WithJsonSchema({"type": "string", "anyOf": [{"format": "ipv4"}, {"format": "ipv6"}]}),
]
Decision = Literal["allow", "review", "block"]
ReasonCode = Literal[
    "banned_domain",
    "banned_ip",
    "text_model",
    "user_history",
    "url_reputation",
    "ip_history",
    "journey",
    "campaign",
    "feature",
    "degraded",
    "text_truncated",
    "text_language",
    "sender_signals",
    "reports_only",
]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)


class _Tolerant(_Strict):
    """Unknown fields are kept aside (``model_extra``), for the worker to count, and never read."""

    model_config = ConfigDict(extra="allow")


class JourneyStep(_Tolerant):
    """One UI step the poster took before submitting, relative to opening the composer."""

    name: Annotated[str, Field(min_length=1, max_length=64)]
    offset_ms: Annotated[int, Field(ge=0, le=86_400_000)]


class PostEvent(_Tolerant):
    schema_version: Literal[1] = 1
    post_id: InputId
    user_id: InputId
    created_at: EventTime
    # Unbounded here: the record's size bounds it, and the worker judges only its head.
    text: str
    urls: Annotated[list[Url], Field(max_length=32)] = []
    ip: IPAddress | None = None  # not every platform knows it: missing is a feature value
    journey: Annotated[list[JourneyStep], Field(max_length=64)] = []
    link_text: Annotated[str, Field(max_length=20_000)] | None = None
    media_text: Annotated[str, Field(max_length=20_000)] | None = None
    platform: Annotated[str, Field(min_length=1, max_length=64)] | None = None

    def unknown_fields(self) -> set[str]:
        """The names of the fields this event carried that its schema does not know."""
        nested = (f"journey.{name}" for step in self.journey for name in step.model_extra or ())
        return {*(self.model_extra or ()), *nested}


REASON_DETAIL_MAX = 512
DEAD_LETTER_MESSAGE_MAX = 4096


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Reason(_Strict):
    code: ReasonCode
    detail: Annotated[str, Field(max_length=REASON_DETAIL_MAX)]

    @classmethod
    def of(cls, code: ReasonCode, detail: str) -> Reason:
        """A reason whose detail is cut to fit: details quote input (a host name can be
        thousands of characters), and one long quote must not fail the post's verdict."""
        return cls(code=code, detail=clip(detail, REASON_DETAIL_MAX))


class FeatureRow(_Strict):
    """The exact row the decision model saw: ``values`` in the order of the feature contract
    ``contract`` (the decision card lists its names), a missing value as null."""

    contract: Annotated[str, Field(min_length=1, max_length=64)]
    values: Annotated[list[float | None], Field(max_length=1024)]


class Verdict(_Strict):
    schema_version: Literal[1] = 1
    post_id: Id
    user_id: Id
    decision: Decision
    score: Annotated[float, Field(ge=0.0, le=1.0)]
    reasons: list[Reason]
    # Stage name -> score that stage produced (e.g. text, decision); absent when skipped.
    stage_scores: dict[str, float]
    # Component -> version string of the model that produced this verdict.
    model_versions: dict[str, str]
    degraded: bool
    latency_ms: Annotated[float, Field(ge=0.0)]
    decided_at: AwareDatetime
    # What the decision model decided from; absent when no model decided (a ban).
    features: FeatureRow | None = None


class FeedbackEvent(_Strict):
    """A user report or a moderator label about a post; consumed by the feedback worker.

    ``event_id`` makes a re-sent event count once; without one, the record's place in
    the topic (topic, partition, offset) identifies it, which covers redelivery."""

    schema_version: Literal[1] = 1
    event_id: InputId | None = None
    kind: Literal["user_report", "moderator_label"]
    post_id: InputId
    user_id: InputId  # the poster
    actor_id: InputId  # the reporter or moderator
    label: Literal["spam", "ham"]
    urls: Annotated[list[Url], Field(max_length=32)] = []
    ip: IPAddress | None = None
    note: Annotated[str, Field(max_length=1024)] = ""
    created_at: AwareDatetime


class DeadLetter(_Strict):
    """Provenance of a record that could not be processed.

    On the DLQ topic the record value is the original bytes untouched and these
    fields travel as headers (``dlq.*``), so replaying a fixed record is a plain copy.
    An original too large for the broker is cut: then ``truncated`` is true and
    ``original_size`` and ``original_sha256`` describe the whole record.
    """

    schema_version: Literal[1] = 1
    original: bytes
    topic: str
    partition: int
    offset: int
    group: str
    stage: str = "validate"  # the pipeline step that failed
    error_class: str
    error_message: Annotated[str, Field(max_length=DEAD_LETTER_MESSAGE_MAX)]
    failed_at: AwareDatetime
    truncated: bool = False
    original_size: int | None = None
    original_sha256: str | None = None

    def headers(self) -> list[tuple[str, str | bytes | None]]:
        fields: dict[str, Any] = self.model_dump(exclude={"original"}, exclude_none=True, mode="json")
        # JSON scalars (true, 12), which model_validate_strings reads back in from_record.
        return [(f"dlq.{k}", (v if isinstance(v, str) else json.dumps(v)).encode()) for k, v in fields.items()]

    @classmethod
    def from_record(cls, value: bytes, headers: Sequence[tuple[str, str | bytes | None]]) -> DeadLetter:
        fields = {
            k.removeprefix("dlq."): v.decode() if isinstance(v, bytes) else v
            for k, v in headers
            if k.startswith("dlq.")
        }
        if (version := fields.pop("schema_version", "1")) != "1":
            raise ValueError(f"unsupported dead-letter schema_version {version!r}")
        # Header values are strings; validate them as such, then attach the raw bytes untouched.
        return cls.model_validate_strings({**fields, "original": ""}).model_copy(update={"original": value})
