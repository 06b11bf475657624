"""redis-py (asyncio) behind the ProfileStore protocol: a batch of profile updates in one round
trip (one script call per hash slot on a Redis Cluster: workers/adapters/redis_layout.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from workers.adapters.redis_layout import Calls, Layout, Script, connect
from workers.state.profile_fields import STAMP_SUFFIX, ProfileWrite

# A field is written when its stored stamp is not newer than the update (equal: a redelivery,
# harmless to apply again); a prior only while the field is absent. In one script, so a
# concurrent ingester cannot interleave between the comparison and the write.
# Keys are KEYS[i]; ARGV names them by i (all of one call's keys are in one slot).
# ARGV: stamp suffix, then per write: key, at_us, n, n x (field, value), m, m x (field, value).
_WRITE = """
local suffix, i, written, kept = ARGV[1], 2, 0, 0
while i <= #ARGV do
  local key, at = KEYS[tonumber(ARGV[i])], ARGV[i + 1]
  local n = tonumber(ARGV[i + 2])
  i = i + 3
  for j = 0, n - 1 do
    local field = ARGV[i + 2 * j]
    local stamp = tonumber(redis.call('HGET', key, field .. suffix))
    if stamp == nil or stamp <= tonumber(at) then
      redis.call('HSET', key, field, ARGV[i + 2 * j + 1], field .. suffix, at)
      written = written + 1
    else
      kept = kept + 1
    end
  end
  i = i + 2 * n
  local m = tonumber(ARGV[i])
  i = i + 1
  for j = 0, m - 1 do
    local fresh = redis.call('HSETNX', key, ARGV[i + 2 * j], ARGV[i + 2 * j + 1])
    written, kept = written + fresh, kept + 1 - fresh
  end
  i = i + 2 * m
end
return {written, kept}
"""


def write_calls(writes: Sequence[ProfileWrite], layout: Layout) -> Calls[None]:
    calls: Calls[None] = Calls([STAMP_SUFFIX])
    for w in writes:
        call = calls(layout.group(w.key))
        call.args += [call.key(w.key), w.at_us, len(w.newest)]
        for pair in w.newest:
            call.args += pair
        call.args.append(len(w.initial))
        for pair in w.initial:
            call.args += pair
    return calls


class RedisProfileStore:
    def __init__(self, url: str, timeout_s: float, layout: Layout | None = None) -> None:
        self.timeout_s = timeout_s
        self.layout = layout or Layout()
        self._redis = connect(url, timeout_s, self.layout.cluster)
        self._write = Script(_WRITE)

    async def write(self, writes: Sequence[ProfileWrite]) -> tuple[int, int]:
        async with asyncio.timeout(self.timeout_s):
            answers, _ = await self._write.pipeline(
                self._redis, list(write_calls(writes, self.layout).by_group.values())
            )
        return sum(int(w) for w, _ in answers), sum(int(k) for _, k in answers)

    async def close(self) -> None:
        await self._redis.aclose()
