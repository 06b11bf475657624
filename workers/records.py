"""Values that flow between pipeline stages. Errors are values too."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from schemas import Decision, FeatureRow, PostEvent, Reason, Verdict
from workers.text.urls import Link


@dataclass(frozen=True, slots=True, repr=False)
class InMsg:
    """A consumed record, decoupled from the Kafka client."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    received_at: float  # time.monotonic() when the batch was polled
    produced_at_ms: int | None = None  # broker/producer timestamp, for end-to-end latency

    def __repr__(self) -> str:
        # Where the record is, never its bytes: a hostile record can be a megabyte long.
        return f"InMsg({self.topic}[{self.partition}]@{self.offset}, {len(self.value or b'')} bytes)"


@dataclass(frozen=True, slots=True)
class Post:
    msg: InMsg
    event: PostEvent
    links: tuple[Link, ...]
    text: str  # what the content model scores: post + link/media text
    # The text's length as sent, when it was longer than the worker judges and ``event`` holds its head.
    cut_from_chars: int | None = None


@dataclass(frozen=True, slots=True)
class Failure:
    """A record that goes to the dead-letter topic instead of producing a verdict."""

    msg: InMsg
    error_class: str
    error_message: str
    stage: str = "validate"


@dataclass(frozen=True, slots=True)
class Outcome:
    msg: InMsg
    verdict: Verdict


def verdict_for(
    post: Post,
    *,
    decision: Decision,
    score: float,
    reasons: list[Reason],
    stage_scores: dict[str, float],
    model_versions: dict[str, str],
    degraded: bool,
    features: FeatureRow | None = None,
) -> Outcome:
    if post.cut_from_chars is not None:
        cut = f"judged on the first {len(post.event.text)} of {post.cut_from_chars} characters"
        reasons = [*reasons, Reason.of("text_truncated", cut)]
    verdict = Verdict(
        post_id=post.event.post_id,
        user_id=post.event.user_id,
        decision=decision,
        score=score,
        reasons=reasons,
        stage_scores=stage_scores,
        model_versions=model_versions,
        degraded=degraded,
        latency_ms=max(0.0, (time.monotonic() - post.msg.received_at) * 1000),
        decided_at=datetime.now(UTC),
        features=features,
    )
    return Outcome(post.msg, verdict)
