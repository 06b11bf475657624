"""redis-py (asyncio) behind the HashStore and ReputationStore protocols, on one Redis or a
Redis Cluster (workers/adapters/redis_layout.py says where keys go). Every call carries a timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from workers.adapters.redis_layout import Calls, Layout, Script, connect
from workers.keyspace import Keyspace
from workers.reputation import REPORTS, REPUTATION, SPAM_LABELS, SPAM_POSTS, Applied, Bans, DomainCounts, Plan
from workers.signals import USERS_CAP, Count, FirstSeen
from workers.signals import Plan as SignalPlan

# Apply each feedback event's change at most once: its marker (SET NX, with a TTL longer
# than any redelivery) and its increments and reputation penalties (clamped at 0) go in one
# atomic script, so a crash can never leave counts applied without the marker or the reverse.
# On a cluster an event is applied in parts, one per slot its keys are in, each part with its
# own marker in that slot (Layout.beside). Keys are KEYS[i]; ARGV names them by i.
# ARGV: ttl, step, then per event (part): marker, n, n x (key, field, amount), m, m x (domain key, labels).
# Answers per event (part): 1 if applied now, 0 if it had been before.
_APPLY_ONCE = f"""
local ttl, step = tonumber(ARGV[1]), tonumber(ARGV[2])
local i, applied = 3, {{}}
local function key(at) return KEYS[tonumber(ARGV[at])] end
while i <= #ARGV do
  local fresh = redis.call('SET', key(i), '1', 'NX', 'EX', ttl)
  local n = tonumber(ARGV[i + 1])
  i = i + 2
  if fresh then
    for j = 0, n - 1 do
      redis.call('HINCRBY', key(i + 3 * j), ARGV[i + 3 * j + 1], ARGV[i + 3 * j + 2])
    end
  end
  i = i + 3 * n
  local m = tonumber(ARGV[i])
  i = i + 1
  if fresh then
    for j = 0, m - 1 do
      local k = key(i + 2 * j)
      local v = tonumber(redis.call('HINCRBYFLOAT', k, '{REPUTATION}', -step * tonumber(ARGV[i + 2 * j + 1])))
      if v < 0 then redis.call('HSET', k, '{REPUTATION}', 0) end
    end
  end
  i = i + 2 * m
  applied[#applied + 1] = fresh and 1 or 0
end
return applied
"""


def apply_calls(plan: Plan, ks: Keyspace, layout: Layout, applied_ttl_s: int, step: float) -> Calls[int]:
    """The script calls of a batch; each part notes its event's index in ``plan.changes``."""
    calls: Calls[int] = Calls([applied_ttl_s, step])
    for event, c in enumerate(plan.changes):
        parts: dict[int, tuple[list[tuple[str, str, int]], list[tuple[str, int]]]] = {}
        for (key, name), amount in c.increments.items():
            parts.setdefault(layout.group(key), ([], []))[0].append((key, name, amount))
        for domain, labels in c.penalties.items():
            key = ks.domain(domain)
            parts.setdefault(layout.group(key), ([], []))[1].append((key, labels))
        for group, (increments, penalties) in parts.items():
            call = calls(group)
            call.args += [call.key(layout.beside(ks.feedback_applied(c.event_id), group)), len(increments)]
            for key, name, amount in increments:
                call.args += [call.key(key), name, amount]
            call.args.append(len(penalties))
            for key, labels in penalties:
                call.args += [call.key(key), labels]
            call.parts.append(event)
    return calls


# The stream-kept signals of a batch (workers/signals.py has the semantics): for each post,
# its snapshot if it was counted before (a redelivery), else each count before adding the
# post, and first sightings; all in one atomic script, so an outage never half-counts a post.
# On a cluster a post is counted in parts, one per slot its (sharded) keys are in, each part
# with its own snapshot in that slot (Layout.beside). Keys are KEYS[i]; ARGV names them by i.
# ARGV: the users cap, then per post (part): snapshot key, post id, snapshot ttl,
# n, n x (key, field, member or '', ttl), m, m x (key, previous key, field, time, ttl).
_COUNT_SIGNALS = """
local cap, out, i = tonumber(ARGV[1]), {}, 2
local function key(at) return KEYS[tonumber(ARGV[at])] end
local expiring = {}  -- each bucket's TTL is set once per batch, not once per post
local function expire(key, ttl)
  if not expiring[key] then
    redis.call('EXPIRE', key, ttl, 'NX')
    expiring[key] = true
  end
end
while i <= #ARGV do
  local snap, pid, snap_ttl, n = key(i), ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  i = i + 4
  local m = tonumber(ARGV[i + 4 * n])
  local f = i + 4 * n + 1
  local stored = redis.call('HGET', snap, pid)
  local seen = {}
  if stored then
    for v in string.gmatch(stored, '[^,]+') do seen[#seen + 1] = tonumber(v) end
  else
    for j = 0, n - 1 do
      local k, field, member, ttl = key(i + 4 * j), ARGV[i + 4 * j + 1], ARGV[i + 4 * j + 2], ARGV[i + 4 * j + 3]
      if member == '' then
        seen[#seen + 1] = redis.call('HINCRBY', k, field, 1) - 1
      else
        local users = redis.call('HGET', k, field) or ''
        local w = #member
        local count, known = #users / w, false
        for k = 1, #users, w do
          if string.sub(users, k, k + w - 1) == member then known = true break end
        end
        seen[#seen + 1] = count
        if not known and count < cap then redis.call('HSET', k, field, users .. member) end
      end
      expire(k, ttl)
    end
    for j = 0, m - 1 do
      local k, prev, field, at, ttl = key(f + 5 * j), key(f + 5 * j + 1), ARGV[f + 5 * j + 2],
        tonumber(ARGV[f + 5 * j + 3]), ARGV[f + 5 * j + 4]
      local here, before = tonumber(redis.call('HGET', k, field)), tonumber(redis.call('HGET', prev, field))
      local earliest = at
      if here and here < earliest then earliest = here end
      if before and before < earliest then earliest = before end
      if not here or at < here then redis.call('HSET', k, field, at) end
      expire(k, ttl)
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


def signal_calls(plans: Sequence[SignalPlan], layout: Layout) -> Calls[tuple[int, list[int]]]:
    """The script calls of a batch; each part notes its plan's index and the positions (in
    :attr:`SignalPlan.features`) of the values it answers."""
    calls: Calls[tuple[int, list[int]]] = Calls([USERS_CAP])
    for i, p in enumerate(plans):
        parts: dict[int, tuple[list[tuple[int, str, Count]], list[tuple[int, str, FirstSeen]]]] = {}
        for at, c in enumerate(p.counts):
            key, group = layout.spread(c.key, c.field)
            parts.setdefault(group, ([], []))[0].append((at, key, c))
        for at, f in enumerate(p.first_seen, len(p.counts)):
            key, group = layout.spread(f.key, f.field)
            parts.setdefault(group, ([], []))[1].append((at, key, f))
        for group, (counts, firsts) in parts.items():
            call = calls(group)
            call.args += [call.key(layout.beside(p.snapshot, group)), p.post_id, p.snapshot_ttl_s, len(counts)]
            for _, key, c in counts:
                call.args += [call.key(key), c.field, c.member, c.ttl_s]
            call.args.append(len(firsts))
            for _, key, f in firsts:
                previous, _ = layout.spread(f.previous, f.field)  # same field: same shard, same group
                call.args += [call.key(key), call.key(previous), f.field, f.at, f.ttl_s]
            call.parts.append((i, [at for at, _, _ in counts] + [at for at, _, _ in firsts]))
    return calls


# Each key's HGETALL, as flat field-value lists (EVAL, not EVALSHA: nothing to reload after a flush).
_READ_HASHES = "local out = {} for i, key in ipairs(KEYS) do out[i] = redis.call('HGETALL', key) end return out"


def _as_dict(flat: Sequence[str]) -> dict[str, str]:
    fields = iter(flat)
    return dict(zip(fields, fields, strict=True))


class RedisStore:
    def __init__(self, url: str, timeout_s: float, layout: Layout | None = None) -> None:
        self.timeout_s = timeout_s
        self.layout = layout or Layout()
        self._redis = connect(url, timeout_s, self.layout.cluster)
        self._count_signals = Script(_COUNT_SIGNALS)

    async def ping(self) -> None:
        async with asyncio.timeout(self.timeout_s):
            await self._redis.ping()

    async def enrich(
        self, keys: Sequence[str], plans: Sequence[SignalPlan]
    ) -> tuple[list[dict[str, str]], list[list[float]]]:
        calls = list(signal_calls(plans, self.layout).by_group.values())

        # One Redis: every hash in one EVAL, which redis-py packs and parses for about a sixth of the
        # CPU of one HGETALL per key (docs/PERFORMANCE.md). A cluster spreads them over slots.
        one_call = bool(keys) and not self.layout.cluster

        def read(pipe: Any) -> None:
            if one_call:
                pipe.execute_command("EVAL", _READ_HASHES, len(keys), *keys)
            else:
                for key in keys:
                    pipe.hgetall(key)

        async with asyncio.timeout(self.timeout_s):
            answers, reads = await self._count_signals.pipeline(self._redis, calls, read)
        hashes = [_as_dict(flat) for flat in reads[0]] if one_call else reads
        seen = [[0.0] * len(p.features) for p in plans]
        for call, answer in zip(calls, answers, strict=True):
            for (i, positions), values in zip(call.parts, answer, strict=True):
                for at, value in zip(positions, values, strict=True):
                    seen[i][at] = float(value)
        return hashes, seen

    async def members(self, keys: Sequence[str]) -> list[set[str]]:
        async with asyncio.timeout(self.timeout_s):
            pipe = self._redis.pipeline(transaction=False)
            for key in keys:
                pipe.smembers(key)
            return list(await pipe.execute())

    async def close(self) -> None:
        await self._redis.aclose()


class RedisReputationStore:
    def __init__(
        self,
        url: str,
        timeout_s: float,
        keyspace: Keyspace,
        reputation_step: float,
        applied_ttl_s: int,
        layout: Layout | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.keyspace = keyspace
        self.reputation_step = reputation_step
        self.applied_ttl_s = applied_ttl_s
        self.layout = layout or Layout()
        self._redis = connect(url, timeout_s, self.layout.cluster)
        self._apply_once = Script(_APPLY_ONCE)

    async def apply(self, plan: Plan) -> Applied:
        ks, domains, ips = self.keyspace, sorted(plan.domains), sorted(plan.ips)
        calls = list(apply_calls(plan, ks, self.layout, self.applied_ttl_s, self.reputation_step).by_group.values())

        def read(pipe: Any) -> None:
            # After the writes, in the same pipeline (on a cluster, on the same node's
            # connection): the counts include this batch.
            for domain in domains:
                pipe.hmget(ks.domain(domain), [REPORTS, SPAM_LABELS])
            for ip in ips:
                pipe.hget(ks.ip(ip), SPAM_POSTS)

        async with asyncio.timeout(self.timeout_s):
            answers, reads = await self._apply_once.pipeline(self._redis, calls, read)
        fresh = {
            e
            for call, answer in zip(calls, answers, strict=True)
            for e, new in zip(call.parts, answer, strict=True)
            if new
        }
        return Applied(
            {
                d: DomainCounts(reports=int(r or 0), spam_labels=int(s or 0))
                for d, (r, s) in zip(domains, reads[: len(domains)], strict=True)
            },
            {ip: int(n or 0) for ip, n in zip(ips, reads[len(domains) :], strict=True)},
            # An event counts as applied now if any of its parts was (on one node it has one).
            duplicates=len(plan.changes) - len(fresh),
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
