"""Feedback-only knobs; Kafka and Redis come from :class:`workers.config.Settings`."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from workers.state.reputation import BanThresholds


class FeedbackSettings(BaseSettings):
    """``MODSTREAM_FEEDBACK_*``."""

    model_config = SettingsConfigDict(env_prefix="MODSTREAM_FEEDBACK_", frozen=True, extra="ignore")

    app_id: str = "modstream-feedback"  # faust app id, and so the consumer group
    domain_spam_labels: Annotated[int, Field(ge=1)] = 3
    domain_reports: Annotated[int, Field(ge=1)] = 20
    domain_reports_spam_labels: Annotated[int, Field(ge=0)] = 2
    ip_spam_labels: Annotated[int, Field(ge=1)] = 5
    reputation_step: Annotated[float, Field(ge=0, le=1)] = 0.1  # per moderator spam label
    batch_max_size: Annotated[int, Field(ge=1, le=10_000)] = 100
    batch_max_wait_s: Annotated[float, Field(gt=0)] = 0.2
    # Tansu's group join waits about half of this; a real broker is fine with it too.
    session_timeout_s: Annotated[float, Field(gt=0)] = 6.0
    retry_max_s: Annotated[float, Field(gt=0)] = 5.0
    # How long an applied event's marker is kept: any redelivery must come sooner (faust
    # commits every few seconds; a week covers a consumer group reset from a backup too).
    applied_ttl_s: Annotated[int, Field(ge=60)] = 7 * 24 * 3600

    def thresholds(self) -> BanThresholds:
        return BanThresholds(
            self.domain_spam_labels, self.domain_reports, self.domain_reports_spam_labels, self.ip_spam_labels
        )
