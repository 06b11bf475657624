"""Wire the moderation worker from settings and run it until stopped (SIGTERM drains)."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable

from workers.adapters.kafka import KafkaSink, KafkaSource, KafkaTransactions
from workers.adapters.redis_layout import Layout
from workers.adapters.redis_store import RedisStore
from workers.adapters.triton import TritonTextModel
from workers.bundle.info import show_models
from workers.bundle.load import connect_text, load_models, shadow_text_of, text_scorer
from workers.bundle.reload import BundleReloader
from workers.bundle.shadow import Shadow
from workers.clients import Framing
from workers.config import Settings
from workers.errors import Misconfigured, describe
from workers.kafka.batch_ramp import BatchRamp
from workers.kafka.fetch_wait import FetchWait
from workers.moderation import ModerationWorker
from workers.runtime.lifecycle import run_until_signalled
from workers.runtime.probes import mark_ready
from workers.runtime.startup import until_up
from workers.stages.short_circuit import BanListCache
from workers.state.keyspace import Keyspace

log = logging.getLogger(__name__)


# How long one start-up probe of the broker may take before it counts as a failed attempt.
KAFKA_PROBE_S = 5.0
# The cyclic GC's (young, middle, old) thresholds once the models are frozen out of its sight.
# Old passes come after 5,000 young ones: about every 10 million posts, and when Python's own
# rule (a quarter more long-lived objects) calls for one.
GC_THRESHOLDS = (20_000, 50, 100)


async def run_moderation(settings: Settings, stop: asyncio.Event, framing: Framing | None = None) -> None:
    """Run until ``stop`` is set; the batch in hand is finished, published and committed first.
    ``framing`` replaces the Schema Registry framing the settings name (a test's registry double)."""
    loaded = load_models(settings)
    store = RedisStore(settings.redis_url.get_secret_value(), settings.redis_timeout_s, Layout.of(settings))
    model = TritonTextModel(settings.triton_url, settings.triton_model, settings.triton_timeout_s, loaded.text.version)
    framing = framing or registry_framing(settings)
    sink = KafkaSink(settings.producer_conf(settings.transactional_id))
    # The shadow's own producer, never transactional: it must not hold the champion's batches back.
    shadow_sink = KafkaSink(settings.producer_conf()) if loaded.challenger else None
    try:
        for what, check in (
            (f"kafka at {settings.kafka_bootstrap}", lambda: asyncio.to_thread(sink.check, KAFKA_PROBE_S)),
            ("redis", store.ping),
            (f"triton at {settings.triton_url}", model.connect),
            *(
                # The verdict schema registered before the first batch: a restart after an outage
                # waits here for the registry, quietly, instead of failing batch after batch.
                [(f"schema registry at {settings.schema_registry_url}", _registered(framing, settings.output_topic))]
                if framing is not None
                else []
            ),
        ):
            if not await until_up(what, check, stop):
                return
        shadow_text = shadow_text_of(settings, loaded.challenger_text) if loaded.challenger_text else None
        if shadow_text is not None:
            await shadow_text.connect()  # one log line if it is not served; the champion starts regardless
        bans = BanListCache(store, Keyspace(settings.redis_prefix), settings.banlist_refresh_s)
        fetch_wait = FetchWait(settings.fetch_wait_max_s, settings.fetch_wait_backoff_max_s, settings.fetch_stall)
        conf = settings.consumer_conf(transactional=settings.exactly_once)
        ramp = BatchRamp(min(settings.batch_start_size, settings.batch_max_size), settings.batch_max_size)
        source = KafkaSource(conf, [settings.input_topic], fetch_wait, on_assign=ramp.reset)
        timeout_s = settings.transaction_timeout_s
        transactions = KafkaTransactions(sink, source, timeout_s) if settings.exactly_once else None
        reloader = BundleReloader(
            settings.model_dir,
            loaded.text.version,
            settings.model_reload_s,
            max_tokens=settings.max_tokens,
            cascade=settings.cascade,
        )
        shadow_reloader = (
            BundleReloader(settings.shadow_model_dir, loaded.text.version, settings.model_reload_s, role="challenger")
            if settings.shadow_model_dir is not None
            else None
        )
        shadow = (
            Shadow(
                loaded.challenger,
                shadow_sink,
                settings.shadow_topic,
                settings.publish_timeout_s,
                shadow_text,
                settings.campaign_action,
            )
            if loaded.challenger and shadow_sink
            else None
        )
        worker = ModerationWorker(
            settings,
            source,
            sink,
            store,
            text_scorer(settings, loaded.text.encoder, model),
            loaded.decision,
            bans,
            reloader,
            shadow,
            transactions,
            loaded.text.ngram,
            ramp,
            lambda text: connect_text(settings, text),
            shadow_reloader,
            lambda text: shadow_text_of(settings, text),
            framing,
            languages=loaded.text.languages,
        )
        log.info(
            "moderation worker up: text model %s, decision model %s%s%s",
            model.version,
            loaded.decision.version,
            f", challenger {loaded.challenger.version} -> {settings.shadow_topic}" if loaded.challenger else "",
            f" with its own text model {shadow_text.version} ({settings.shadow_triton_model})" if shadow_text else "",
        )
        # Models, tokenizer, suffix list and schemas live as long as the process: take them out of
        # the cyclic GC, whose full passes over them were half the short-circuit path's CPU.
        gc.collect()
        gc.freeze()
        # A batch allocates tens of thousands of short-lived objects: at the default thresholds
        # (700, 10, 10) the collector ran 6 full passes per 8,000 posts, 33 µs a post in all;
        # at these, 4 young passes and 1.8 µs (docs/PERFORMANCE.md).
        gc.set_threshold(*GC_THRESHOLDS)
        show_models(
            settings.model_dir.resolve(), loaded.text.version, loaded.decision.version, cascade=settings.cascade
        )
        mark_ready(True)
        await worker.run(stop)
    finally:
        mark_ready(False)
        sink.flush(settings.publish_timeout_s)
        if shadow_sink is not None:
            shadow_sink.flush(settings.publish_timeout_s)
        await model.close()
        await store.close()


def registry_framing(settings: Settings) -> Framing | None:
    """Schema Registry framing for ``MODSTREAM_INPUT_FORMAT`` (None: plain JSON), or a one-line
    :class:`Misconfigured` when the ``registry`` extra is missing or the client settings are wrong."""
    if settings.input_format == "json":
        return None
    try:
        from workers.adapters.schema_registry import registry_framing as framing

        return framing(settings.schema_registry_conf(), settings.input_format)
    except ImportError as exc:
        raise Misconfigured(
            f"MODSTREAM_INPUT_FORMAT={settings.input_format} needs the registry extra "
            f"(pip install 'modstream[registry]'): {exc}"
        ) from None
    except (TypeError, ValueError) as exc:
        raise Misconfigured(f"schema registry settings: {describe(exc)}") from None


def _registered(framing: Framing, topic: str) -> Callable[[], Awaitable[object]]:
    return lambda: asyncio.to_thread(framing.register, topic)


def main(settings: Settings | None = None) -> None:
    """Entry point for ``modstream worker``; raises :class:`Misconfigured` for what retrying cannot fix."""
    settings = settings or Settings()
    run_until_signalled(lambda stop: run_moderation(settings, stop), settings)
