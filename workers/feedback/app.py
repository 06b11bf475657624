"""The feedback worker's wiring: faust consumes the feedback topic and hands batches to the handler."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import faust
import faust.tables
from faust.types import ConsumerT, Message

from workers.adapters.kafka import KafkaSink
from workers.adapters.redis_layout import Layout
from workers.adapters.redis_store import RedisReputationStore
from workers.config import Settings
from workers.feedback.handler import FeedbackHandler
from workers.feedback.settings import FeedbackSettings
from workers.kafka.delivery import DeadLetters
from workers.kafka.security import broker_credentials
from workers.records import InMsg
from workers.runtime.lifecycle import run_until_signalled
from workers.runtime.probes import mark_ready
from workers.state.keyspace import Keyspace

log = logging.getLogger(__name__)


class NoTables(faust.tables.TableManager):
    """faust's table manager waits a fixed second at start for tables declared late; this app
    declares none, so a restarted feedback worker skips that second."""

    async def on_start(self) -> None:
        if len(self):  # tables after all: keep faust's grace for late ones
            await super().on_start()
            return
        await self._update_channels()
        await self.recovery.start()


async def apply(handler: FeedbackHandler, messages: Sequence[Message], consumer: ConsumerT) -> None:
    """Hand one batch to ``handler``; its messages become committable only once it returned.

    faust's ``take_events`` acks the batch in hand even when the agent is cancelled mid-batch (a
    graceful stop): holding a reference of our own on each message keeps that ack from being the
    last, so a batch not applied is never committed and comes again.
    """
    for m in messages:
        m.incref()
    now = time.monotonic()
    # message.value is the record's bytes as consumed: what a dead letter must carry.
    await handler.handle([InMsg(m.topic, m.partition, m.offset, m.key, m.value, now) for m in messages])
    for m in messages:
        m.ack(consumer)


def build_app(
    settings: Settings,
    fb: FeedbackSettings,
    handler: FeedbackHandler,
    credentials: faust.types.auth.CredentialsT | None,
) -> faust.App:
    app = faust.App(
        fb.app_id,
        broker=[f"kafka://{host.strip()}" for host in settings.kafka_bootstrap.split(",")],
        broker_credentials=credentials,
        broker_session_timeout=fb.session_timeout_s,
        broker_heartbeat_interval=fb.session_timeout_s / 3,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,  # all in-sync replicas; faust's own producer carries no records of ours
        store="memory://",  # no tables: nothing to persist locally
        topic_partitions=1,  # faust's internal topics only; ours exist already
        topic_allow_declare=False,  # the deployment owns topics and their partition counts
        topic_disable_leader=True,  # no assignor leader topic: nothing here needs a leader
        web_enabled=False,
        autodiscover=False,
        TableManager=NoTables,
    )
    # Raw bytes: validation is ours, so a malformed record is dead-lettered instead of
    # crashing faust's deserializer.
    topic = app.topic(settings.feedback_topic, key_serializer="raw", value_serializer="raw")

    # Any: the decorator types the argument as StreamT, which lacks take_events (faust.Stream has it).
    @app.agent(topic)
    async def feedback(stream: Any) -> None:
        async for events in stream.take_events(fb.batch_max_size, within=fb.batch_max_wait_s):
            await apply(handler, [e.message for e in events], app.consumer)

    return app


async def run_feedback(settings: Settings, fb: FeedbackSettings, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set (or faust crashes, which is raised); the batch in hand is settled first."""
    credentials = broker_credentials(settings.kafka_common())  # before anything connects: raises Misconfigured
    timeout_s = settings.redis_timeout_s
    store = RedisReputationStore(
        settings.redis_url.get_secret_value(),
        timeout_s,
        Keyspace(settings.redis_prefix),
        fb.reputation_step,
        fb.applied_ttl_s,
        Layout.of(settings),
    )
    # The project's librdkafka producer (idempotent, acks=all, same security settings)
    # for dead letters: faust's producer cannot be made idempotent outside transactions.
    sink = KafkaSink(settings.producer_conf())
    handler = FeedbackHandler(
        store,
        sink,
        DeadLetters(f"{settings.feedback_topic}.dlq", fb.app_id, settings.dead_letter_max_bytes),
        fb.thresholds(),
        publish_timeout_s=settings.publish_timeout_s,
        retry_max_s=fb.retry_max_s,
    )
    app = build_app(settings, fb, handler, credentials)
    try:
        await app.start()
        mark_ready(True)
        log.info("feedback worker up: %s -> %s", settings.feedback_topic, settings.redis_prefix)
        await app.wait(stop.wait())  # returns early when the app crashes
        if app.crashed:
            raise RuntimeError("the feedback worker's faust app crashed") from app.crash_reason
    finally:
        mark_ready(False)
        await app.stop()
        sink.flush(settings.publish_timeout_s)
        await store.close()


def main(settings: Settings | None = None, fb: FeedbackSettings | None = None) -> None:
    """Entry point for ``modstream feedback``."""
    settings = settings or Settings()
    fb_settings = fb or FeedbackSettings()
    run_until_signalled(lambda stop: run_feedback(settings, fb_settings, stop), settings)
