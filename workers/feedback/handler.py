"""Applies batches of feedback records; plain asyncio behind the client Protocols, no faust."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from redis.exceptions import RedisError

from schemas import FeedbackEvent
from workers.clients import ReputationStore, Sink
from workers.feedback.metrics import (
    BANS,
    BATCH_SECONDS,
    DEAD_LETTERS,
    DUPLICATES,
    EVENTS,
    REPORT_WEIGHT,
    REPORTERS_JUDGED,
    REPORTS_REPEATED,
    RETRIES,
)
from workers.kafka.delivery import DeadLetters, DeliveryFailed, deliver_dead_letters
from workers.records import Failure, InMsg
from workers.stages.validate import parse as parse_records  # one error format for every DLQ
from workers.state.reputation import (
    CONFIRMED,
    DOMAIN,
    POST,
    REFUTED,
    URL,
    USER,
    Applied,
    BanThresholds,
    decide_bans,
    plan,
    wanted,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


def event_id(msg: InMsg, event: FeedbackEvent) -> str:
    """The producer's id, else the record's place in its topic: the same on every redelivery."""
    return event.event_id or f"{msg.topic}:{msg.partition}:{msg.offset}"


def parse(msgs: Sequence[InMsg]) -> tuple[dict[str, FeedbackEvent], list[Failure]]:
    """Valid events keyed by :func:`event_id` (a repeat within the batch counts once), and failures."""
    events, failures = parse_records(msgs, FeedbackEvent)
    return {event_id(msg, event): event for msg, event in events}, failures


@dataclass
class FeedbackHandler:
    """Returns from :meth:`handle` only once every record of the batch is settled."""

    store: ReputationStore
    sink: Sink
    dlq: DeadLetters
    thresholds: BanThresholds
    publish_timeout_s: float
    retry_max_s: float

    async def handle(self, msgs: Sequence[InMsg]) -> None:
        start = time.perf_counter()
        events, failures = parse(msgs)
        if failures:
            await self._retry("kafka", lambda: self._dead_letter(failures))
            DEAD_LETTERS.inc(len(failures))
        if events:
            # Read before the batch: a report weighs its reporter's record as it was then, and a
            # label judges the reporters its post had.
            actors, posts = wanted(events.values())
            known = await self._retry("redis", lambda: self.store.reporters(actors, posts))
            batch = plan(events, self.store.keyspace, known)
            applied = await self._retry("redis", lambda: self.store.apply(batch))
            _observe(applied)
            bans = decide_bans(applied.domains, applied.ip_spam_labels, self.thresholds)
            if bans:
                new_domains, new_ips = await self._retry("redis", lambda: self.store.ban(bans))
                # Re-confirmed bans are not counted again.
                BANS.labels("domain").inc(new_domains)
                BANS.labels("ip").inc(new_ips)
                log.info("banned domains %s, IPs %s", sorted(bans.domains), sorted(bans.ips))
            for e in events.values():
                EVENTS.labels(e.kind, e.label).inc()
        BATCH_SECONDS.observe(time.perf_counter() - start)

    async def _retry(self, dependency: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Retry transient failures with capped exponential backoff: skipping would drop feedback.

        While this blocks, faust holds the batch unacked, so a kill leaves it for redelivery.
        """
        delay = 0.1
        while True:
            try:
                return await attempt()
            except (RedisError, OSError, TimeoutError, DeliveryFailed) as exc:
                RETRIES.labels(dependency).inc()
                log.warning("%s failed, retrying in %.1fs: %r", dependency, delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_max_s)

    async def _dead_letter(self, failures: Sequence[Failure]) -> None:
        # Resending all of them after a failure may duplicate a dead letter; losing one is worse.
        await asyncio.to_thread(deliver_dead_letters, self.sink, failures, self.dlq, self.publish_timeout_s)


def _observe(applied: Applied) -> None:
    """The batch's redeliveries, and what shows a moderator why its reports did or did not weigh."""
    DUPLICATES.inc(applied.duplicates)
    for target in (USER, URL, DOMAIN, POST):
        REPORTS_REPEATED.labels(target).inc(applied.repeated.get(target, 0))
    for outcome in (CONFIRMED, REFUTED):
        REPORTERS_JUDGED.labels(outcome).inc(applied.counted.get(outcome, 0))
    for weight in applied.weights:
        REPORT_WEIGHT.observe(weight)
