"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from modstream.stack import Endpoints


@pytest.fixture
async def redis_client(stack: Endpoints) -> AsyncIterator[aioredis.Redis]:
    """A client of the stack's Redis that answers strings."""
    client = aioredis.Redis.from_url(stack.redis_url, decode_responses=True, socket_timeout=2)
    yield client
    await client.aclose()
