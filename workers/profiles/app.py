"""``modstream ingest-profiles``: profile updates from Kafka, written to Redis, invalid ones dead-lettered."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from schemas.profiles import ProfileUpdate
from workers.adapters.kafka import KafkaSink, KafkaSource
from workers.adapters.redis_layout import Layout
from workers.adapters.redis_profiles import RedisProfileStore
from workers.clients import ProfileStore, Sink, Source
from workers.config import Settings
from workers.kafka.commit import settle
from workers.kafka.delivery import DeadLetters, deliver_dead_letters
from workers.profiles.metrics import DEAD_LETTERS, FIELDS, UPDATES
from workers.records import Failure, InMsg
from workers.runtime.lifecycle import run_until_signalled
from workers.runtime.probes import mark_ready
from workers.runtime.startup import until_up
from workers.stages.validate import parse
from workers.state.keyspace import Keyspace
from workers.state.profile_fields import ProfileWrite, plan

log = logging.getLogger(__name__)


@dataclass
class ProfileIngester:
    source: Source
    sink: Sink
    store: ProfileStore
    keyspace: Keyspace
    dlq: DeadLetters
    batch_max_size: int
    batch_max_wait_s: float
    publish_timeout_s: float

    async def run(self, stop: asyncio.Event) -> None:
        """Poll and settle batches until ``stop``; the batch in hand is settled first."""
        try:
            while not stop.is_set():
                msgs = await asyncio.to_thread(self.source.poll_batch, self.batch_max_size, self.batch_max_wait_s)
                if msgs and not await self.handle(msgs, stop):
                    return
        finally:
            self.source.close()  # commits what was stored and leaves the group now

    async def handle(self, msgs: Sequence[InMsg], stop: asyncio.Event) -> bool:
        """Dead letters delivered and Redis written, then the offsets stored: at-least-once, and
        a redelivered update is harmless (a field is only replaced by one at least as new).

        A failing dependency is retried with backoff rather than skipped, which would lose
        updates; False when ``stop`` came first, leaving the batch uncommitted for redelivery.
        """
        parsed, failures = parse(msgs, ProfileUpdate)
        writes = plan([update for _, update in parsed], self.keyspace)
        if failures and not await until_up(f"the DLQ {self.dlq.topic}", lambda: self._dead_letter(failures), stop):
            return False
        if writes and not await until_up("redis", lambda: self._write(writes), stop):
            return False
        self.source.store_offsets(settle(msgs, ()).store)
        return True

    async def _dead_letter(self, failures: Sequence[Failure]) -> None:
        await asyncio.to_thread(deliver_dead_letters, self.sink, failures, self.dlq, self.publish_timeout_s)
        DEAD_LETTERS.inc(len(failures))

    async def _write(self, writes: Sequence[ProfileWrite]) -> None:
        written, kept = await self.store.write(writes)
        FIELDS.labels("written").inc(written)
        FIELDS.labels("kept").inc(kept)
        for w in writes:
            UPDATES.labels(w.entity).inc()


async def run_profiles(settings: Settings, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set; the batch in hand is settled first."""
    store = RedisProfileStore(settings.redis_url.get_secret_value(), settings.redis_timeout_s, Layout.of(settings))
    sink = KafkaSink(settings.producer_conf())
    try:
        source = KafkaSource(settings.consumer_conf(settings.profiles_group_id), [settings.profiles_topic])
        ingester = ProfileIngester(
            source,
            sink,
            store,
            Keyspace(settings.redis_prefix),
            DeadLetters(settings.profiles_dlq_topic, settings.profiles_group_id, settings.dead_letter_max_bytes),
            settings.batch_max_size,
            settings.batch_max_wait_s,
            settings.publish_timeout_s,
        )
        log.info("profile ingester up: %s -> %s", settings.profiles_topic, settings.redis_prefix)
        mark_ready(True)  # Redis and the DLQ are retried per batch: the consumer is the one dependency
        await ingester.run(stop)
    finally:
        mark_ready(False)
        sink.flush(settings.publish_timeout_s)
        await store.close()


def main(settings: Settings) -> None:
    """Entry point for ``modstream ingest-profiles``."""
    run_until_signalled(lambda stop: run_profiles(settings, stop), settings)
