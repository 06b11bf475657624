"""redis-py (asyncio) behind the HashStore protocol. Every call carries a timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis


class RedisStore:
    def __init__(self, url: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._redis = redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, decode_responses=True
        )

    async def _pipeline(self, command: str, keys: Sequence[str]) -> list[Any]:
        async with asyncio.timeout(self.timeout_s):
            pipe = self._redis.pipeline(transaction=False)
            for key in keys:
                getattr(pipe, command)(key)
            return list(await pipe.execute())

    async def hgetall_many(self, keys: Sequence[str]) -> list[dict[str, str]]:
        return await self._pipeline("hgetall", keys)

    async def members(self, keys: Sequence[str]) -> list[set[str]]:
        return await self._pipeline("smembers", keys)

    async def close(self) -> None:
        await self._redis.aclose()
