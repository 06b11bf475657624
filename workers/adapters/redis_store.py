"""redis-py (asyncio) behind the HashStore and ReputationStore protocols, on one Redis or a
Redis Cluster (workers/adapters/redis_layout.py says where keys go). Every call carries a timeout."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from workers.adapters.redis_layout import Calls, Layout, Script, connect
from workers.state.keyspace import Keyspace
from workers.state.reputation import (
    CONFIRMED,
    NEW_REPORTERS,
    POST,
    REFUTED,
    REPORTERS_TTL_S,
    REPORTS,
    REPUTATION,
    SPAM_LABELS,
    SPAM_POSTS,
    Applied,
    Bans,
    DomainCounts,
    Plan,
    ReporterRecord,
    Reporters,
)
from workers.state.signals import USERS_CAP, Count, FirstSeen
from workers.state.signals import Plan as SignalPlan

# Apply each feedback event's change at most once: its marker (SET NX, with a TTL longer
# than any redelivery) and its increments and reputation penalties (clamped at 0) go in one
# atomic script, so a crash can never leave counts applied without the marker or the reverse.
# A report goes in with a marker per reporter and target (SET NX), so a reporter counts once per
# user, URL and domain, and with its reporter in the post's set (SADD answers whether they are
# new there); a label's mark on each reporter's record goes in with a marker per reporter and post.
# On a cluster an event is applied in parts, one per slot its keys are in, each part with its
# own markers in that slot (Layout.beside). Keys are KEYS[i]; ARGV names them by i.
# ARGV: ttl, step, reporters' ttl, then per event (part): marker, then five sections, each a count
# and that many items: increments (key, field, amount), penalties (domain key, labels),
# reports (key, marker, weight), reporters (post's set, reporter), judgements (record, marker, field).
# Answers per event (part): {0} if it had been applied before, else {1, then 1 (counted) or 0
# (its reporter had been counted there) for each report, reporter and judgement}.
_APPLY_ONCE = f"""
local ttl, step, kept = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local i, fresh, answer, applied = 4, false, {{}}, {{}}
local function key(at) return KEYS[tonumber(ARGV[at])] end
local function first(at, for_s) return redis.call('SET', key(at), '1', 'NX', 'EX', for_s) and 1 or 0 end
local function each(width, run)  -- a section: its items, when the event (part) is applied now
  local n = tonumber(ARGV[i])
  if fresh then
    for j = 0, n - 1 do run(i + 1 + width * j) end
  end
  i = i + 1 + width * n
end
local function increment(at) redis.call('HINCRBYFLOAT', key(at), ARGV[at + 1], ARGV[at + 2]) end
local function penalise(at)
  local v = tonumber(redis.call('HINCRBYFLOAT', key(at), '{REPUTATION}', -step * tonumber(ARGV[at + 1])))
  if v < 0 then redis.call('HSET', key(at), '{REPUTATION}', 0) end
end
local function report(at)
  local new = first(at + 1, ttl)
  if new == 1 then redis.call('HINCRBYFLOAT', key(at), '{REPORTS}', ARGV[at + 2]) end
  answer[#answer + 1] = new
end
local function reporter(at)
  answer[#answer + 1] = redis.call('SADD', key(at), ARGV[at + 1])
  redis.call('EXPIRE', key(at), kept)
end
local function judge(at)
  local new = first(at + 1, kept)  -- kept as long as the post's reporters: a later label judges none twice
  if new == 1 then redis.call('HINCRBY', key(at), ARGV[at + 2], 1) end
  answer[#answer + 1] = new
end
while i <= #ARGV do
  fresh = first(i, ttl) == 1
  answer = {{fresh and 1 or 0}}
  i = i + 1
  each(3, increment)
  each(2, penalise)
  each(3, report)
  each(2, reporter)
  each(3, judge)
  applied[#applied + 1] = answer
end
return applied
"""

# One item of a section of _APPLY_ONCE: its keys (the first one's slot is the item's), its other
# args, and what its answer counts (Applied's keys), if it answers.
_Item = tuple[tuple[str, ...], tuple[str | int | float, ...], str | None]
_INCREMENTS, _PENALTIES, _REPORTS, _REPORTERS, _JUDGEMENTS = range(5)  # the script's sections, in order


@dataclass
class _Parts:
    """One event's items by slot group; markers go beside the key they guard (Layout.beside)."""

    layout: Layout
    groups: dict[int, list[list[_Item]]] = field(default_factory=dict)

    def add(
        self, section: int, key: str, values: tuple[str | int | float, ...], marker: str = "", label: str | None = None
    ) -> None:
        group = self.layout.group(key)
        keys = (key, self.layout.beside(marker, group)) if marker else (key,)
        self.groups.setdefault(group, [[] for _ in range(_JUDGEMENTS + 1)])[section].append((keys, values, label))


def apply_calls(
    plan: Plan, ks: Keyspace, layout: Layout, applied_ttl_s: int, step: float
) -> Calls[tuple[int, list[str]]]:
    """The script calls of a batch; each part notes its event's index in ``plan.changes`` and what
    each of its answers after the first counts."""
    calls: Calls[tuple[int, list[str]]] = Calls([applied_ttl_s, step, REPORTERS_TTL_S])
    for event, c in enumerate(plan.changes):
        parts = _Parts(layout)
        for (key, name), amount in c.increments.items():
            parts.add(_INCREMENTS, key, (name, amount))
        for domain, labels in c.penalties.items():
            parts.add(_PENALTIES, ks.domain(domain), (labels,))
        if (r := c.report) is not None:
            for key, target in r.targets.items():
                parts.add(_REPORTS, key, (r.weight,), ks.reported(r.reporter, key), target)
            parts.add(_REPORTERS, ks.reporters(r.post_id), (r.reporter,), label=POST)
        if (j := c.judgement) is not None:
            for reporter in sorted(j.reporters):
                parts.add(_JUDGEMENTS, ks.reporter(reporter), (j.outcome,), ks.judged(reporter, j.post_id), j.outcome)
        for group, sections in parts.groups.items():
            call = calls(group)
            call.args.append(call.key(layout.beside(ks.feedback_applied(c.event_id), group)))
            for items in sections:
                call.args.append(len(items))
                for keys, values, _ in items:
                    call.args += [*map(call.key, keys), *values]
            call.parts.append((event, [label for items in sections for _, _, label in items if label]))
    return calls


# The stream-kept signals of a batch (workers/state/signals.py has the semantics, and
# MemorySignals the reference): for each post, its snapshot if it was counted before (a
# redelivery), else each count over its rolling window before adding the post, and first
# sightings; all in one atomic script, so an outage never half-counts a post.
# On a cluster a post is counted in parts, one per slot its (sharded) keys are in, each part
# with its own snapshot in that slot (Layout.beside); a gate and the count it gates share a part.
# Keys are KEYS[i]; ARGV names them by i. ARGV: the users cap; b, then b buckets, each (key,
# previous key, ttl, since or ''): a batch's posts count into a few dozen, named once; then per post
# (part): snapshot key, post id, snapshot ttl, the post's time, n, n x (bucket, field, member or '',
# gate: the gating count's place in the part or 0), m, m x (bucket, field, time). Values go back as
# strings: a Lua number would be cut to an integer.
_COUNT_SIGNALS = """
local cap, out = tonumber(ARGV[1]), {}
local function key(at) return KEYS[tonumber(ARGV[at])] end
local buckets = {}
for b = 0, tonumber(ARGV[2]) - 1 do
  local a = 3 + 4 * b
  buckets[b + 1] = {key(a), key(a + 1), tonumber(ARGV[a + 2]), ARGV[a + 3]}
end
local i = 3 + 4 * #buckets
local expiring = {}  -- each bucket's TTL is set once per batch, not once per post
local function expire(key, ttl)
  if not expiring[key] then
    redis.call('EXPIRE', key, ttl, 'NX')
    expiring[key] = true
  end
end
local function scan(users, w, member, since)  -- (members at or after since, whether member is one)
  local count, known = 0, false
  for k = 1, #users, w do
    local m = string.sub(users, k, k + w - 1)
    if m == member then known = true end
    if since == '' or m >= since then count = count + 1 end
  end
  return count, known
end
while i <= #ARGV do
  local snap, pid, snap_ttl, at, n = key(i), ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  i = i + 5
  local m = tonumber(ARGV[i + 4 * n])
  local f = i + 4 * n + 1
  local stored = redis.call('HGET', snap, pid)
  local seen = {}
  if stored then
    for v in string.gmatch(stored, '[^,]+') do seen[#seen + 1] = v end
  else
    local others = {}
    for j = 0, n - 1 do
      local a = i + 4 * j
      local k, prev, ttl, since = unpack(buckets[tonumber(ARGV[a])])
      local field, member, gate = ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
      local window = ttl / 2
      local w = 1 - (at % window) / window
      local held = member == ''  -- whether the key holds the post's count now (a gated one may not)
      if member == '' then
        local before = tonumber(redis.call('HGET', prev, field) or '0')
        local v = redis.call('HINCRBY', k, field, 1) - 1 + w * before
        others[#others + 1] = v
        seen[#seen + 1] = string.format('%.17g', v)
      else
        local users, earlier = redis.call('HGET', k, field) or '', redis.call('HGET', prev, field) or ''
        local width = #member
        local count, known = scan(users, width, member, since)
        local before, known_before = scan(earlier, width, member, since)
        if since ~= '' then w = 1 end  -- a window of days: the members say which days are in it
        local mine = (known and 1 or 0) + w * (known_before and 1 or 0)
        others[#others + 1] = count + w * before - mine
        seen[#seen + 1] = string.format('%.17g', count + w * before)
        local joins = (gate == 0 or others[gate] > 0) and not known and #users / width < cap
        if joins then redis.call('HSET', k, field, users .. member) end
        held = joins or users ~= ''
      end
      if held then expire(k, ttl) end
    end
    for j = 0, m - 1 do
      local a = f + 3 * j
      local k, prev, ttl = unpack(buckets[tonumber(ARGV[a])])
      local field, t = ARGV[a + 1], tonumber(ARGV[a + 2])
      local here, before = tonumber(redis.call('HGET', k, field)), tonumber(redis.call('HGET', prev, field))
      local earliest = t
      if here and here < earliest then earliest = here end
      if before and before < earliest then earliest = before end
      if not here or t < here then redis.call('HSET', k, field, t) end
      expire(k, ttl)
      seen[#seen + 1] = tostring(earliest)
    end
    redis.call('HSET', snap, pid, table.concat(seen, ','))
    expire(snap, snap_ttl)
  end
  out[#out + 1] = seen
  i = f + 3 * m
end
return out
"""


def signal_calls(plans: Sequence[SignalPlan], layout: Layout) -> Calls[tuple[int, list[int]]]:
    """The script calls of a batch; each part notes its plan's index and the positions (in
    :attr:`SignalPlan.features`) of the values it answers."""
    calls: Calls[tuple[int, list[int]]] = Calls([USERS_CAP])
    tables: dict[int, _Buckets] = {}
    for i, p in enumerate(plans):
        parts: dict[int, tuple[list[tuple[int, str, Count]], list[tuple[int, str, FirstSeen]]]] = {}
        for at, c in enumerate(p.counts):
            key, group = layout.spread(c.key, c.shard or c.field)
            parts.setdefault(group, ([], []))[0].append((at, key, c))
        for at, f in enumerate(p.first_seen, len(p.counts)):
            key, group = layout.spread(f.key, f.field)
            parts.setdefault(group, ([], []))[1].append((at, key, f))
        for group, (counts, firsts) in parts.items():
            call, table = calls(group), tables.setdefault(group, _Buckets())
            body = table.body
            body += [call.key(layout.beside(p.snapshot, group)), p.field, p.snapshot_ttl_s, p.created_at]
            body.append(len(counts))
            place = {at: n for n, (at, _, _) in enumerate(counts, 1)}  # a gate's place in this part
            for _, key, c in counts:
                # The bucket before lives in the same shard, so in the same group.
                previous = layout.spread(c.previous, c.shard or c.field)[0] if layout.cluster else c.previous
                gate = place[c.gate] if c.gate >= 0 else 0
                body += [table.of(key, previous, c.ttl_s, c.since), c.field, c.member, gate]
            body.append(len(firsts))
            for _, key, f in firsts:
                previous, _ = layout.spread(f.previous, f.field)  # same field: same shard, same group
                body += [table.of(key, previous, f.ttl_s), f.field, f.at]
            call.parts.append((i, [at for at, _, _ in counts] + [at for at, _, _ in firsts]))
    for group, table in tables.items():
        call = calls(group)
        call.args.append(len(table.buckets))
        for key, previous, ttl, since in table.buckets:
            call.args += [call.key(key), call.key(previous), ttl, since]
        call.args += table.body
    return calls


@dataclass
class _Buckets:
    """One signal call's buckets, each (key, previous key, ttl, since) numbered once, and its posts'
    args that name them by number: about half the args of each count naming its own."""

    buckets: dict[tuple[str, str, int, str], int] = field(default_factory=dict)
    body: list[str | int | float] = field(default_factory=list)

    def of(self, key: str, previous: str, ttl_s: int, since: str = "") -> int:
        return self.buckets.setdefault((key, previous, ttl_s, since), len(self.buckets) + 1)


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

    async def reporters(self, actors: Collection[str], posts: Collection[str]) -> Reporters:
        if not actors and not posts:
            return NEW_REPORTERS
        ks, actors, posts = self.keyspace, sorted(actors), sorted(posts)
        async with asyncio.timeout(self.timeout_s):
            pipe = self._redis.pipeline(transaction=False)
            for actor in actors:
                pipe.hmget(ks.reporter(actor), [CONFIRMED, REFUTED])
            for post in posts:
                pipe.smembers(ks.reporters(post))
            answers = await pipe.execute()
        return Reporters(
            {
                a: ReporterRecord(int(c or 0), int(r or 0))
                for a, (c, r) in zip(actors, answers[: len(actors)], strict=True)
            },
            {p: frozenset(m) for p, m in zip(posts, answers[len(actors) :], strict=True) if m},
        )

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
        fresh: set[int] = set()
        counted: Counter[str] = Counter()
        repeated: Counter[str] = Counter()
        weights: list[float] = []
        for call, answer in zip(calls, answers, strict=True):
            for (event, labels), (new, *once) in zip(call.parts, answer, strict=True):
                if not new:
                    continue  # applied before: it answers nothing more
                fresh.add(event)
                for label, first in zip(labels, once, strict=True):
                    (counted if first else repeated)[label] += 1
                    if first and label == POST and (report := plan.changes[event].report) is not None:
                        weights.append(report.weight)
        return Applied(
            {
                d: DomainCounts(reports=float(r or 0), spam_labels=int(s or 0))
                for d, (r, s) in zip(domains, reads[: len(domains)], strict=True)
            },
            {ip: int(n or 0) for ip, n in zip(ips, reads[len(domains) :], strict=True)},
            # An event counts as applied now if any of its parts was (on one node it has one).
            duplicates=len(plan.changes) - len(fresh),
            counted=dict(counted),
            repeated=dict(repeated),
            weights=tuple(weights),
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
