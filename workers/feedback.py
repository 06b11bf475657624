"""The feedback worker: user reports and moderator labels -> reputation counters and bans in Redis.

A faust-streaming agent takes small batches off the feedback topic; :class:`FeedbackHandler`
(plain asyncio, no faust) validates them, dead-letters what is invalid, and applies one
aggregated :class:`~workers.reputation.Plan` per batch in a single pipelined round trip.
The moderation worker picks the new bans up on its next ban-list refresh.

Delivery is at-least-once: faust acks a batch only after the handler returns, and the
handler only returns once Redis and the DLQ acknowledged it (transient failures are
retried, never skipped). A redelivery after a crash, or a retry after a Redis timeout,
may count a batch twice; the ban thresholds tolerate that, and bans are idempotent set
adds. One gap is faust's: a graceful stop cancels the agent and acks the batch in hand,
so stopping while Redis is down can lose that batch (a SIGKILL would not).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import faust
import redis.asyncio as aioredis
from prometheus_client import Counter, Histogram
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from redis.exceptions import RedisError

from schemas import FeedbackEvent
from workers.adapters.kafka import KafkaSink
from workers.clients import Sink
from workers.config import Settings
from workers.keyspace import Keyspace
from workers.lifecycle import run_until_signalled
from workers.records import Failure, InMsg
from workers.reputation import (
    REPORTS,
    REPUTATION,
    SPAM_LABELS,
    SPAM_POSTS,
    Bans,
    DomainCounts,
    Plan,
    decide_bans,
    plan,
)
from workers.reputation import BanThresholds as Thresholds
from workers.stages.publish import dead_letter
from workers.stages.validate import parse as parse_records  # one error format for every DLQ

log = logging.getLogger(__name__)
T = TypeVar("T")

EVENTS = Counter("modstream_feedback_events_total", "Valid feedback events applied", ["kind", "label"])
DEAD_LETTERS = Counter("modstream_feedback_dead_letters_total", "Invalid feedback records sent to the DLQ")
BANS = Counter("modstream_feedback_bans_total", "Entities newly added to a ban list", ["entity"])
RETRIES = Counter("modstream_feedback_retries_total", "Transient failures retried", ["dependency"])
BATCH_SECONDS = Histogram(
    "modstream_feedback_batch_seconds",
    "Wall time to apply one feedback batch (DLQ and Redis included)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)

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

# librdkafka client tunables in MODSTREAM_KAFKA_EXTRA mean nothing to aiokafka and are
# ignored; security keys must be mapped, or the worker would connect without them.
_SECURITY_KEYS = {"security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password"}


class DeliveryError(RuntimeError):
    """Some dead letters were not acknowledged by the broker."""


class FeedbackSettings(BaseSettings):
    """Feedback-only knobs (``MODSTREAM_FEEDBACK_*``); Kafka and Redis come from :class:`Settings`."""

    model_config = SettingsConfigDict(env_prefix="MODSTREAM_FEEDBACK_", frozen=True, extra="ignore")

    app_id: str = "modstream-feedback"  # faust app id, and so the consumer group
    domain_spam_labels: Annotated[int, Field(ge=1)] = 3
    domain_reports: Annotated[int, Field(ge=1)] = 20
    domain_reports_spam_labels: Annotated[int, Field(ge=0)] = 2
    ip_spam_labels: Annotated[int, Field(ge=1)] = 5
    reputation_step: Annotated[float, Field(ge=0, le=1)] = 0.1  # per moderator spam label
    batch_max_size: Annotated[int, Field(ge=1, le=10_000)] = 100
    batch_max_wait_s: Annotated[float, Field(gt=0)] = 0.2
    # Tansu's group join waits about half of this; a real broker is fine with it too.
    session_timeout_s: Annotated[float, Field(gt=0)] = 6.0
    retry_max_s: Annotated[float, Field(gt=0)] = 5.0

    def thresholds(self) -> Thresholds:
        return Thresholds(
            self.domain_spam_labels, self.domain_reports, self.domain_reports_spam_labels, self.ip_spam_labels
        )


def parse(msgs: Sequence[InMsg]) -> tuple[list[FeedbackEvent], list[Failure]]:
    events, failures = parse_records(msgs, FeedbackEvent)
    return [event for _, event in events], failures


@dataclass
class FeedbackHandler:
    """Applies batches of feedback records; returns only once every record is settled."""

    redis: aioredis.Redis
    sink: Sink
    ks: Keyspace
    thresholds: Thresholds
    reputation_step: float
    dlq_topic: str
    group: str
    redis_timeout_s: float
    publish_timeout_s: float
    retry_max_s: float

    def __post_init__(self) -> None:
        self._lower_reputation = self.redis.register_script(_LOWER_REPUTATION)

    async def handle(self, msgs: Sequence[InMsg]) -> None:
        start = time.perf_counter()
        events, failures = parse(msgs)
        if failures:
            await self._retry("kafka", lambda: self._dead_letter(failures))
            DEAD_LETTERS.inc(len(failures))
        if events:
            batch = plan(events, self.ks)
            counts = await self._retry("redis", lambda: self._apply(batch))
            bans = decide_bans(*counts, self.thresholds)
            if bans:
                await self._retry("redis", lambda: self._ban(bans))
            for e in events:
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
            except (RedisError, OSError, TimeoutError, DeliveryError) as exc:
                RETRIES.labels(dependency).inc()
                log.warning("%s failed, retrying in %.1fs: %r", dependency, delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_max_s)

    async def _dead_letter(self, failures: Sequence[Failure]) -> None:
        for token, f in enumerate(failures):
            dl = dead_letter(f, self.group)
            self.sink.produce(self.dlq_topic, f.msg.key, dl.original, dl.headers(), token)
        reports = await asyncio.to_thread(self.sink.flush, self.publish_timeout_s)
        undelivered = {t: reports.get(t, "no delivery report in time") for t in range(len(failures))}
        if errors := {t: e for t, e in undelivered.items() if e is not None}:
            # Resending all of them may duplicate a dead letter; losing one is worse.
            raise DeliveryError(f"{len(errors)} dead letters not delivered; first: {next(iter(errors.values()))}")

    async def _apply(self, batch: Plan) -> tuple[dict[str, DomainCounts], dict[str, int]]:
        """Increments, reputation and the counters the ban rules need, in one round trip."""
        domains, ips = sorted(batch.domains), sorted(batch.ips)
        async with asyncio.timeout(self.redis_timeout_s):
            pipe = self.redis.pipeline(transaction=False)
            for (key, field), amount in batch.increments.items():
                pipe.hincrby(key, field, amount)
            for domain, labels in batch.penalties.items():
                await self._lower_reputation([self.ks.domain(domain)], [self.reputation_step * labels], client=pipe)
            # Read after the writes on the same connection: the counts include this batch.
            for domain in domains:
                pipe.hmget(self.ks.domain(domain), [REPORTS, SPAM_LABELS])
            for ip in ips:
                pipe.hget(self.ks.ip(ip), SPAM_POSTS)
            results: list[Any] = await pipe.execute()
        reads = results[len(results) - len(domains) - len(ips) :]
        domain_counts = {
            d: DomainCounts(reports=int(r or 0), spam_labels=int(s or 0))
            for d, (r, s) in zip(domains, reads[: len(domains)], strict=True)
        }
        ip_counts = {ip: int(n or 0) for ip, n in zip(ips, reads[len(domains) :], strict=True)}
        return domain_counts, ip_counts

    async def _ban(self, bans: Bans) -> None:
        async with asyncio.timeout(self.redis_timeout_s):
            pipe = self.redis.pipeline(transaction=False)
            for key, members in ((self.ks.banned_domains, bans.domains), (self.ks.banned_ips, bans.ips)):
                for member in sorted(members):
                    pipe.sadd(key, member)
            added: list[int] = await pipe.execute()
        # SADD answers 1 only for a new member: re-confirmed bans are not counted again.
        BANS.labels("domain").inc(sum(added[: len(bans.domains)]))
        BANS.labels("ip").inc(sum(added[len(bans.domains) :]))
        log.info("banned domains %s, IPs %s", sorted(bans.domains), sorted(bans.ips))


def broker_credentials(settings: Settings) -> faust.SASLCredentials | faust.SSLCredentials | None:
    """The librdkafka security settings, as faust (aiokafka) credentials."""
    conf = {k: v for k, v in settings.kafka_common().items() if k in _SECURITY_KEYS or k.startswith(("ssl.", "sasl."))}
    if unsupported := sorted(set(conf) - _SECURITY_KEYS - {"ssl.ca.location"}):
        raise ValueError(f"the feedback worker cannot map these Kafka security settings to faust: {unsupported}")
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    context = ssl.create_default_context(cafile=conf.get("ssl.ca.location")) if protocol.endswith("SSL") else None
    if protocol.startswith("SASL"):
        mechanism = conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "PLAIN"))
        return faust.SASLCredentials(
            username=conf.get("sasl.username"),
            password=conf.get("sasl.password"),
            mechanism=mechanism,
            ssl_context=context,
        )
    return faust.SSLCredentials(context) if context else None


def build_app(settings: Settings, fb: FeedbackSettings, handler: FeedbackHandler) -> faust.App:
    app = faust.App(
        fb.app_id,
        broker=[f"kafka://{host.strip()}" for host in settings.kafka_bootstrap.split(",")],
        broker_credentials=broker_credentials(settings),
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
    )
    # Raw bytes: validation is ours, so a malformed record is dead-lettered instead of
    # crashing faust's deserializer.
    topic = app.topic(settings.feedback_topic, key_serializer="raw", value_serializer="raw")

    # Any: the decorator types the argument as StreamT, which lacks take_events (faust.Stream has it).
    @app.agent(topic)
    async def feedback(stream: Any) -> None:
        async for events in stream.take_events(fb.batch_max_size, within=fb.batch_max_wait_s):
            now = time.monotonic()
            # message.value is the record's bytes as consumed: what a dead letter must carry.
            await handler.handle(
                [InMsg(m.topic, m.partition, m.offset, m.key, m.value, now) for m in (e.message for e in events)]
            )

    return app


async def run_feedback(settings: Settings, fb: FeedbackSettings, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set (or faust crashes, which is raised); the batch in hand is settled first."""
    timeout_s = settings.redis_timeout_s
    client = aioredis.Redis.from_url(
        settings.redis_url.get_secret_value(),
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        decode_responses=True,
    )
    # The project's librdkafka producer (idempotent, acks=all, same security settings)
    # for dead letters: faust's producer cannot be made idempotent outside transactions.
    sink = KafkaSink(settings.producer_conf())
    handler = FeedbackHandler(
        client,
        sink,
        Keyspace(settings.redis_prefix),
        fb.thresholds(),
        fb.reputation_step,
        dlq_topic=f"{settings.feedback_topic}.dlq",
        group=fb.app_id,
        redis_timeout_s=timeout_s,
        publish_timeout_s=settings.publish_timeout_s,
        retry_max_s=fb.retry_max_s,
    )
    app = build_app(settings, fb, handler)
    try:
        await app.start()
        log.info("feedback worker up: %s -> %s", settings.feedback_topic, settings.redis_prefix)
        await app.wait(stop.wait())  # returns early when the app crashes
        if app.crashed:
            raise RuntimeError("the feedback worker's faust app crashed") from app.crash_reason
    finally:
        await app.stop()
        sink.flush(settings.publish_timeout_s)
        await client.aclose()


def main(settings: Settings | None = None, fb: FeedbackSettings | None = None) -> None:
    """Entry point for ``modstream feedback``."""
    settings = settings or Settings()
    fb_settings = fb or FeedbackSettings()
    run_until_signalled(lambda stop: run_feedback(settings, fb_settings, stop), settings.metrics_port)
