"""redis-py (asyncio) behind the ProfileStore protocol: a batch of profile updates in one script call."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from workers.adapters.redis_store import connect
from workers.profiles.contract import STAMP_SUFFIX, ProfileWrite

# A field is written when its stored stamp is not newer than the update (equal: a redelivery,
# harmless to apply again); a prior only while the field is absent. In one script, so a
# concurrent ingester cannot interleave between the comparison and the write.
# ARGV: stamp suffix, then per write: key, at_us, n, n x (field, value), m, m x (field, value).
# Keys travel in ARGV: fine on one node; a Redis Cluster needs them in KEYS and in one slot.
_WRITE = """
local suffix, i, written, kept = ARGV[1], 2, 0, 0
while i <= #ARGV do
  local key, at = ARGV[i], ARGV[i + 1]
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


def write_args(writes: Sequence[ProfileWrite]) -> list[str | int]:
    args: list[str | int] = [STAMP_SUFFIX]
    for w in writes:
        args += [w.key, w.at_us, len(w.newest)]
        for pair in w.newest:
            args += pair
        args.append(len(w.initial))
        for pair in w.initial:
            args += pair
    return args


class RedisProfileStore:
    def __init__(self, url: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._redis = connect(url, timeout_s)
        self._write = self._redis.register_script(_WRITE)

    async def write(self, writes: Sequence[ProfileWrite]) -> tuple[int, int]:
        async with asyncio.timeout(self.timeout_s):
            written, kept = await self._write(args=write_args(writes))
        return int(written), int(kept)

    async def close(self) -> None:
        await self._redis.aclose()
