"""Wire the moderation worker from settings and run it until stopped (SIGTERM drains)."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from workers.adapters.kafka import KafkaSink, KafkaSource, KafkaTransactions
from workers.adapters.redis_layout import Layout
from workers.adapters.redis_store import RedisStore
from workers.adapters.triton import TritonTextModel
from workers.cards import TextModelCard
from workers.clients import Framing, TextModel
from workers.config import Settings
from workers.fetchwait import FetchWait
from workers.isolation import describe
from workers.keyspace import Keyspace
from workers.lifecycle import run_until_signalled
from workers.modelinfo import show_models
from workers.moderation import ModerationWorker
from workers.probes import mark_ready
from workers.ramp import BatchRamp
from workers.reload import BundleReloader
from workers.shadow import Shadow, ShadowText
from workers.stages.decide import DecisionModel
from workers.stages.score import ScoreCache, TextScorer
from workers.stages.short_circuit import BanListCache
from workers.startup import Misconfigured, model_dir_or_hint, until_up
from workers.textenc import TextEncoder
from workers.textmodel import LocalText

log = logging.getLogger(__name__)


# How long one start-up probe of the broker may take before it counts as a failed attempt.
KAFKA_PROBE_S = 5.0
# The cyclic GC's (young, middle, old) thresholds once the models are frozen out of its sight.
# Old passes come after 5,000 young ones: about every 10 million posts, and when Python's own
# rule (a quarter more long-lived objects) calls for one.
GC_THRESHOLDS = (20_000, 50, 100)


@dataclass(frozen=True)
class Loaded:
    decision: DecisionModel
    text: LocalText  # the served text model's worker-side parts: a promoted bundle must have its version
    challenger: DecisionModel | None
    challenger_text: LocalText | None = None  # the challenger's own text model; None: the served one


def load_models(settings: Settings) -> Loaded:
    """The models and the tokenizer, or a one-line :class:`Misconfigured`."""
    model_dir = model_dir_or_hint(settings.model_dir)
    try:
        decision = DecisionModel.load(model_dir / "decision")  # fails fast on a contract mismatch
        text = LocalText.load(model_dir / "text", settings.max_tokens)
    except Exception as exc:  # a card, a contract or a tokenizer that cannot serve: restarting won't help
        raise Misconfigured(f"cannot load the models in {model_dir}: {describe(exc)}") from None
    challenger, challenger_text = None, None
    if settings.shadow_model_dir is not None:
        try:
            bundle = model_dir_or_hint(settings.shadow_model_dir)
            challenger = DecisionModel.load(bundle / "decision")  # raises ContractMismatch for another contract
            if TextModelCard.load(bundle / "text").version != text.version:
                # Its own token length, the one it was trained with: max_tokens tunes the served model.
                challenger_text = LocalText.load(bundle / "text")
        except Exception as exc:
            raise Misconfigured(f"cannot shadow {settings.shadow_model_dir}: {describe(exc)}") from None
    return Loaded(decision, text, challenger, challenger_text)


def text_scorer(settings: Settings, encoder: TextEncoder, model: TextModel) -> TextScorer:
    return TextScorer(
        encoder,
        model,
        settings.triton_sub_batch,
        settings.triton_max_in_flight,
        ScoreCache(settings.text_cache_size),
        settings.triton_pad_multiple,
    )


async def connect_text(settings: Settings, text: LocalText) -> TextScorer:
    """A scorer of ``text``'s model as the champion's Triton model serves it; raises when it does not (yet)."""
    model = TritonTextModel(settings.triton_url, settings.triton_model, settings.triton_timeout_s, text.version)
    try:
        await model.connect()
    except BaseException:
        await model.close()
        raise
    return text_scorer(settings, text.encoder, model)


def shadow_text_of(settings: Settings, text: LocalText) -> ShadowText:
    """The challenger's own text model, as the same Triton serves it under the challenger's model name."""
    model = TritonTextModel(settings.triton_url, settings.shadow_triton_model, settings.triton_timeout_s, text.version)
    return ShadowText(text, text_scorer(settings, text.encoder, model))


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
            settings.model_dir, loaded.text.version, settings.model_reload_s, max_tokens=settings.max_tokens
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
        show_models(settings.model_dir.resolve(), loaded.text.version, loaded.decision.version)
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
        from workers.adapters.registry import registry_framing as framing

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
