"""Where keys live, on one Redis or on a Redis Cluster, and how a batch's Lua calls are split.

A Lua script may touch only keys it is given in KEYS, and on a cluster only keys of one
hash slot. So every script here takes its keys in KEYS (ARGV refers to them by index), and
a batch becomes one script call per slot group: one call on a single node, one per slot
the batch touches on a cluster. The calls go in one pipeline, which the cluster client
splits per node and sends to all nodes at once: still one round trip per batch.

State that many posts share is spread so that no slot holds all of it:

* a stream-kept signal's hash (one per signal and time bucket) is split into ``shards``
  hashes by the entity's field, each with its own hash tag (:meth:`Layout.spread`);
* what must be written atomically with those keys (a post's snapshot, a feedback event's
  applied-marker) is kept once per slot group, beside the keys, under a hash tag that maps
  to that slot (:meth:`Layout.beside`). Each part of a post or an event is then counted at
  most once by itself, so the whole is still counted exactly once.

On a single node keys are exactly what :class:`~workers.state.keyspace.Keyspace` names.
"""

from __future__ import annotations

import functools
import hashlib
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.connection import HiredisRespSerializer
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.exceptions import NoScriptError

from workers.config import Settings

Client = redis.Redis | RedisCluster
T = TypeVar("T")


def connect(url: str, timeout_s: float, cluster: bool = False) -> Client:
    """A client for ``url``: a cluster client (any node's address is enough) with ``cluster``."""
    options: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "decode_responses": True,
    }
    if cluster:
        return RedisCluster.from_url(url, **options)
    client = redis.Redis.from_url(url, **options)
    pool = client.connection_pool
    pool.connection_class = _hiredis_packing(pool.connection_class)  # TCP, TLS or a socket file, as the URL says
    return client


class _HiredisPacking(AbstractConnection):
    """Commands packed by hiredis in C, as redis-py does on its blocking connections. On asyncio
    ones it packs in Python, copying its growing buffer for each argument: one batch's signal
    script (about 30,000 arguments) took 46 µs a post to pack, hiredis 9 (docs/PERFORMANCE.md).
    A cluster's calls are one per slot group, far shorter, and keep redis-py's own packing."""

    _serializer = HiredisRespSerializer()  # type: ignore[no-untyped-call,unused-ignore]  # untyped from redis 8.2

    def pack_command(self, *args: Any) -> list[bytes]:
        packed: list[bytes] = self._serializer.pack(*args)
        return packed


def _hiredis_packing(cls: type[AbstractConnection]) -> type[AbstractConnection]:
    return type(f"Hiredis{cls.__name__}", (_HiredisPacking, cls), {})


@functools.cache
def _tag_slot(tag: str) -> int:
    return key_slot(tag.encode())


@functools.cache
def _slot_tags() -> tuple[str, ...]:
    """For each hash slot, a short string that hashes to it (built once, in about 0.4 s)."""
    tags: dict[int, str] = {}
    n = 0
    while len(tags) < REDIS_CLUSTER_HASH_SLOTS:
        tags.setdefault(key_slot(str(n).encode()), str(n))
        n += 1
    return tuple(tags[slot] for slot in range(REDIS_CLUSTER_HASH_SLOTS))


@dataclass(frozen=True, slots=True)
class Layout:
    """``shards`` 0: one Redis. Otherwise a cluster, signal hashes split into ``shards`` slots."""

    shards: int = 0

    @classmethod
    def of(cls, settings: Settings) -> Layout:
        return cls(settings.redis_signal_shards if settings.redis_cluster else 0)

    @property
    def cluster(self) -> bool:
        return self.shards > 0

    def spread(self, key: str, entity: str) -> tuple[str, int]:
        """The key that holds ``entity``'s field of the shared hash ``key``, and its group."""
        if not self.cluster:
            return key, 0
        tag = f"s{zlib.crc32(entity.encode()) % self.shards}"
        return f"{key}{{{tag}}}", _tag_slot(tag)

    def group(self, key: str) -> int:
        """The script call ``key`` belongs to: its slot on a cluster; on one node, the only one."""
        return key_slot(key.encode()) if self.cluster else 0

    def beside(self, key: str, group: int) -> str:
        """``key``'s copy for slot ``group``: a key in that slot (on one node, ``key`` itself)."""
        return f"{key}{{{_slot_tags()[group]}}}" if self.cluster else key


@dataclass
class ScriptCall(Generic[T]):
    """One script call's KEYS (de-duplicated) and ARGV, which names keys by their index in KEYS;
    ``parts`` is the caller's note of what each element of the script's answer belongs to."""

    args: list[str | int | float]
    keys: dict[str, int] = field(default_factory=dict)
    parts: list[T] = field(default_factory=list)

    def key(self, key: str) -> int:
        return self.keys.setdefault(key, len(self.keys) + 1)  # Lua's KEYS is 1-based


@dataclass
class Calls(Generic[T]):
    """A batch's script calls, one per slot group, each starting with the same ``head`` args."""

    head: list[str | int | float]
    by_group: dict[int, ScriptCall[T]] = field(default_factory=dict)

    def __call__(self, group: int) -> ScriptCall[T]:
        if group not in self.by_group:
            self.by_group[group] = ScriptCall(list(self.head))
        return self.by_group[group]


class Script:
    """A Lua script run by EVALSHA inside pipelines. Not redis-py's Script, which checks SCRIPT
    EXISTS on every pipeline (a second round trip per batch); loaded again only after a flush
    or a failover, on every primary of a cluster."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def pipeline(
        self, client: Client, calls: Sequence[ScriptCall[Any]], then: Callable[[Any], None] = lambda _: None
    ) -> tuple[list[Any], list[Any]]:
        """Run ``calls`` and whatever ``then`` adds to the pipeline in one round trip; the
        script answers, and the other results. A call that found the script missing is
        sent again with the others, which the scripts make harmless (they apply nothing twice)."""
        for attempt in (1, 2):
            pipe = client.pipeline(transaction=False)
            for call in calls:
                # execute_command: redis-py blocks the evalsha method in cluster pipelines, not the
                # command, which it routes by its keys (all in one slot here).
                pipe.execute_command("EVALSHA", self.sha, len(call.keys), *call.keys, *call.args)
            then(pipe)
            results = await pipe.execute(raise_on_error=False)
            if attempt == 1 and any(isinstance(r, NoScriptError) for r in results[: len(calls)]):
                await client.script_load(self.source)
                continue
            for r in results:
                if isinstance(r, Exception):
                    raise r
            break
        return results[: len(calls)], results[len(calls) :]
