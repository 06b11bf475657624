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
from schemas.profiles import DomainProfile, ProfileUpdate, UserProfile

__all__ = [
    "SCHEMA_VERSION",
    "DeadLetter",
    "Decision",
    "DomainProfile",
    "FeatureRow",
    "FeedbackEvent",
    "JourneyStep",
    "PostEvent",
    "ProfileUpdate",
    "Reason",
    "ReasonCode",
    "UserProfile",
    "Verdict",
]
