"""redis-py (asyncio) behind the HashStore and ReputationStore protocols. Every call carries a timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis

from workers.keyspace import Keyspace
from workers.reputation import REPORTS, REPUTATION, SPAM_LABELS, SPAM_POSTS, Bans, DomainCounts, Plan

# Lower a domain's reputation, clamped at 0 (the scale is [0, 1]); atomic, and one
# EVALSHA in the pipeline rather than a read-modify-write round trip.
_LOWER_REPUTATION = f"""
local v = tonumber(redis.call('HINCRBYFLOAT', KEYS[1], '{REPUTATION}', -tonumber(ARGV[1])))
if v < 0 then
  redis.call('HSET', KEYS[1], '{REPUTATION}', 0)
  v = 0
end
return tostring(v)
"""


def connect(url: str, timeout_s: float) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, decode_responses=True)


class RedisStore:
    def __init__(self, url: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._redis = connect(url, timeout_s)

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


class RedisReputationStore:
    def __init__(self, url: str, timeout_s: float, keyspace: Keyspace) -> None:
        self.timeout_s = timeout_s
        self.keyspace = keyspace
        self._redis = connect(url, timeout_s)
        self._lower_reputation = self._redis.register_script(_LOWER_REPUTATION)

    async def apply(self, plan: Plan, reputation_step: float) -> tuple[dict[str, DomainCounts], dict[str, int]]:
        ks, domains, ips = self.keyspace, sorted(plan.domains), sorted(plan.ips)
        async with asyncio.timeout(self.timeout_s):
            pipe = self._redis.pipeline(transaction=False)
            for (key, field), amount in plan.increments.items():
                pipe.hincrby(key, field, amount)
            for domain, labels in plan.penalties.items():
                await self._lower_reputation([ks.domain(domain)], [reputation_step * labels], client=pipe)
            # Read after the writes on the same connection: the counts include this batch.
            for domain in domains:
                pipe.hmget(ks.domain(domain), [REPORTS, SPAM_LABELS])
            for ip in ips:
                pipe.hget(ks.ip(ip), SPAM_POSTS)
            results: list[Any] = await pipe.execute()
        reads = results[len(results) - len(domains) - len(ips) :]
        domain_counts = {
            d: DomainCounts(reports=int(r or 0), spam_labels=int(s or 0))
            for d, (r, s) in zip(domains, reads[: len(domains)], strict=True)
        }
        ip_counts = {ip: int(n or 0) for ip, n in zip(ips, reads[len(domains) :], strict=True)}
        return domain_counts, ip_counts

    async def ban(self, bans: Bans) -> tuple[int, int]:
        async with asyncio.timeout(self.timeout_s):
            pipe = self._redis.pipeline(transaction=False)
            for key, members in ((self.keyspace.banned_domains, bans.domains), (self.keyspace.banned_ips, bans.ips)):
                for member in sorted(members):
                    pipe.sadd(key, member)
            added: list[int] = await pipe.execute()
        # SADD answers 1 only for a new member.
        return sum(added[: len(bans.domains)]), sum(added[len(bans.domains) :])

    async def close(self) -> None:
        await self._redis.aclose()
