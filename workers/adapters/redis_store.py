"""redis-py (asyncio) behind the HashStore and ReputationStore protocols. Every call carries a timeout."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis
from redis.exceptions import NoScriptError

from workers.keyspace import Keyspace
from workers.reputation import REPORTS, REPUTATION, SPAM_LABELS, SPAM_POSTS, Applied, Bans, DomainCounts, Plan
from workers.signals import USERS_CAP
from workers.signals import Plan as SignalPlan

# Apply each feedback event's change at most once: its marker (SET NX, with a TTL longer
# than any redelivery) and its increments and reputation penalties (clamped at 0) go in one
# atomic script, so a crash can never leave counts applied without the marker or the reverse.
# ARGV: ttl, step, then per event: marker, n, n x (key, field, amount), m, m x (domain key, labels).
# Keys travel in ARGV: fine on one node; a Redis Cluster needs them in KEYS and in one slot.
_APPLY_ONCE = f"""
local ttl, step = tonumber(ARGV[1]), tonumber(ARGV[2])
local i, applied = 3, 0
while i <= #ARGV do
  local fresh = redis.call('SET', ARGV[i], '1', 'NX', 'EX', ttl)
  local n = tonumber(ARGV[i + 1])
  i = i + 2
  if fresh then
    applied = applied + 1
    for j = 0, n - 1 do
      redis.call('HINCRBY', ARGV[i + 3 * j], ARGV[i + 3 * j + 1], ARGV[i + 3 * j + 2])
    end
  end
  i = i + 3 * n
  local m = tonumber(ARGV[i])
  i = i + 1
  if fresh then
    for j = 0, m - 1 do
      local key = ARGV[i + 2 * j]
      local v = tonumber(redis.call('HINCRBYFLOAT', key, '{REPUTATION}', -step * tonumber(ARGV[i + 2 * j + 1])))
      if v < 0 then redis.call('HSET', key, '{REPUTATION}', 0) end
    end
  end
  i = i + 2 * m
end
return applied
"""


def _apply_args(plan: Plan, ks: Keyspace, applied_ttl_s: int, reputation_step: float) -> list[str | int | float]:
    args: list[str | int | float] = [applied_ttl_s, reputation_step]
    for c in plan.changes:
        args += [ks.feedback_applied(c.event_id), len(c.increments)]
        for (key, field), amount in c.increments.items():
            args += [key, field, amount]
        args.append(len(c.penalties))
        for domain, labels in c.penalties.items():
            args += [ks.domain(domain), labels]
    return args


# The stream-kept signals of a batch (workers/signals.py has the semantics): for each post,
# its snapshot if it was counted before (a redelivery), else each count before adding the
# post, and first sightings; all in one atomic script, so an outage never half-counts a post.
# ARGV: the users cap, then per post: snapshot key, post id, snapshot ttl,
# n, n x (key, field, member or '', ttl), m, m x (key, previous key, field, time, ttl).
# Keys travel in ARGV: fine on one node; a Redis Cluster needs them in KEYS and in one slot.
_COUNT_SIGNALS = """
local cap, out, i = tonumber(ARGV[1]), {}, 2
local expiring = {}  -- each bucket's TTL is set once per batch, not once per post
local function expire(key, ttl)
  if not expiring[key] then
    redis.call('EXPIRE', key, ttl, 'NX')
    expiring[key] = true
  end
end
while i <= #ARGV do
  local snap, pid, snap_ttl, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  i = i + 4
  local m = tonumber(ARGV[i + 4 * n])
  local f = i + 4 * n + 1
  local stored = redis.call('HGET', snap, pid)
  local seen = {}
  if stored then
    for v in string.gmatch(stored, '[^,]+') do seen[#seen + 1] = tonumber(v) end
  else
    for j = 0, n - 1 do
      local key, field, member, ttl = ARGV[i + 4 * j], ARGV[i + 4 * j + 1], ARGV[i + 4 * j + 2], ARGV[i + 4 * j + 3]
      if member == '' then
        seen[#seen + 1] = redis.call('HINCRBY', key, field, 1) - 1
      else
        local users = redis.call('HGET', key, field) or ''
        local w = #member
        local count, known = #users / w, false
        for k = 1, #users, w do
          if string.sub(users, k, k + w - 1) == member then known = true break end
        end
        seen[#seen + 1] = count
        if not known and count < cap then redis.call('HSET', key, field, users .. member) end
      end
      expire(key, ttl)
    end
    for j = 0, m - 1 do
      local key, prev, field, at, ttl = ARGV[f + 5 * j], ARGV[f + 5 * j + 1], ARGV[f + 5 * j + 2],
        tonumber(ARGV[f + 5 * j + 3]), ARGV[f + 5 * j + 4]
      local here, before = tonumber(redis.call('HGET', key, field)), tonumber(redis.call('HGET', prev, field))
      local earliest = at
      if here and here < earliest then earliest = here end
      if before and before < earliest then earliest = before end
      if not here or at < here then redis.call('HSET', key, field, at) end
      expire(key, ttl)
      seen[#seen + 1] = earliest
    end
    redis.call('HSET', snap, pid, table.concat(seen, ','))
    expire(snap, snap_ttl)
  end
  out[#out + 1] = seen
  i = f + 5 * m
end
return out
"""


def _signal_args(plans: Sequence[SignalPlan]) -> list[str | int]:
    args: list[str | int] = [USERS_CAP]
    for p in plans:
        args += [p.snapshot, p.post_id, p.snapshot_ttl_s, len(p.counts)]
        for c in p.counts:
            args += [c.key, c.field, c.member, c.ttl_s]
        args.append(len(p.first_seen))
        for f in p.first_seen:
            args += [f.key, f.previous, f.field, f.at, f.ttl_s]
    return args


def connect(url: str, timeout_s: float) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, decode_responses=True)


class RedisStore:
    def __init__(self, url: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._redis = connect(url, timeout_s)
        self._count_signals = hashlib.sha1(_COUNT_SIGNALS.encode()).hexdigest()

    async def _pipeline(self, command: str, keys: Sequence[str]) -> list[Any]:
        async with asyncio.timeout(self.timeout_s):
            pipe = self._redis.pipeline(transaction=False)
            for key in keys:
                getattr(pipe, command)(key)
            return list(await pipe.execute())

    async def ping(self) -> None:
        async with asyncio.timeout(self.timeout_s):
            await self._redis.ping()

    async def enrich(
        self, keys: Sequence[str], plans: Sequence[SignalPlan]
    ) -> tuple[list[dict[str, str]], list[list[float]]]:
        async with asyncio.timeout(self.timeout_s):
            pipe = self._redis.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(key)
            if plans:
                # EVALSHA, not a redis-py Script: that checks SCRIPT EXISTS on every pipeline,
                # a second round trip per batch. The script is loaded again only after a flush.
                pipe.evalsha(self._count_signals, 0, *_signal_args(plans))
            results = await pipe.execute(raise_on_error=False)
        if plans and isinstance(results[-1], NoScriptError):
            self._count_signals = await self._redis.script_load(_COUNT_SIGNALS)
            return await self.enrich(keys, plans)
        for r in results:
            if isinstance(r, Exception):
                raise r
        seen = results[len(keys) :][0] if plans else []
        return results[: len(keys)], [[float(v) for v in row] for row in seen]

    async def members(self, keys: Sequence[str]) -> list[set[str]]:
        return await self._pipeline("smembers", keys)

    async def close(self) -> None:
        await self._redis.aclose()


class RedisReputationStore:
    def __init__(
        self, url: str, timeout_s: float, keyspace: Keyspace, reputation_step: float, applied_ttl_s: int
    ) -> None:
        self.timeout_s = timeout_s
        self.keyspace = keyspace
        self.reputation_step = reputation_step
        self.applied_ttl_s = applied_ttl_s
        self._redis = connect(url, timeout_s)
        self._apply_once = self._redis.register_script(_APPLY_ONCE)

    async def apply(self, plan: Plan) -> Applied:
        ks, domains, ips = self.keyspace, sorted(plan.domains), sorted(plan.ips)
        async with asyncio.timeout(self.timeout_s):
            pipe = self._redis.pipeline(transaction=False)
            await self._apply_once(args=_apply_args(plan, ks, self.applied_ttl_s, self.reputation_step), client=pipe)
            # Read after the writes on the same connection: the counts include this batch.
            for domain in domains:
                pipe.hmget(ks.domain(domain), [REPORTS, SPAM_LABELS])
            for ip in ips:
                pipe.hget(ks.ip(ip), SPAM_POSTS)
            applied, *reads = await pipe.execute()
        return Applied(
            {
                d: DomainCounts(reports=int(r or 0), spam_labels=int(s or 0))
                for d, (r, s) in zip(domains, reads[: len(domains)], strict=True)
            },
            {ip: int(n or 0) for ip, n in zip(ips, reads[len(domains) :], strict=True)},
            duplicates=len(plan.changes) - int(applied),
        )

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
