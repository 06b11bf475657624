"""Event contracts: what modstream reads and writes on Kafka."""

from schemas.events import (
    SCHEMA_VERSION,
    DeadLetter,
    Decision,
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
    "FeedbackEvent",
    "JourneyStep",
    "PostEvent",
    "ProfileUpdate",
    "Reason",
    "ReasonCode",
    "UserProfile",
    "Verdict",
]
