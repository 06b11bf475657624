"""Event contracts: what modstream reads and writes on Kafka."""

from schemas.events import (
    SCHEMA_VERSION,
    DeadLetter,
    Decision,
    FeatureRow,
    FeedbackEvent,
    JourneyStep,
    PostEvent,
    Reason,
    ReasonCode,
    Verdict,
)

__all__ = [
    "SCHEMA_VERSION",
    "DeadLetter",
    "Decision",
    "FeatureRow",
    "FeedbackEvent",
    "JourneyStep",
    "PostEvent",
    "Reason",
    "ReasonCode",
    "Verdict",
]
