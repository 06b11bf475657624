"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from modstream.stack import Endpoints
from workers.config import Settings


def run_settings(stack: Endpoints, model_dir: Path, run: str, **overrides: Any) -> Settings:
    """The moderation worker's settings on the stack, with this run's own topics, group and keys."""
    return Settings(
        kafka_bootstrap=stack.kafka_bootstrap,
        redis_url=stack.redis_url,
        triton_url=stack.triton_grpc,
        model_dir=model_dir,
        redis_prefix=f"it:{run}:",
        group_id=f"it-{run}",
        input_topic=f"posts-{run}",
        output_topic=f"verdicts-{run}",
        dlq_topic=f"dlq-{run}",
        metrics_port=0,
        batch_max_wait_s=0.02,
        **overrides,
    )


@pytest.fixture
async def redis_client(stack: Endpoints) -> AsyncIterator[aioredis.Redis]:
    """A client of the stack's Redis that answers strings."""
    client = aioredis.Redis.from_url(stack.redis_url, decode_responses=True, socket_timeout=2)
    yield client
    await client.aclose()
