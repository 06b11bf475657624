"""Wire the moderation worker from settings and run it until stopped (SIGTERM drains)."""

from __future__ import annotations

import asyncio
import gc
import logging

from workers.adapters.kafka import KafkaSink, KafkaSource
from workers.adapters.redis_store import RedisStore
from workers.adapters.triton import TritonTextModel
from workers.cards import TextModelCard
from workers.config import Settings
from workers.isolation import describe
from workers.keyspace import Keyspace
from workers.lifecycle import run_until_signalled
from workers.moderation import ModerationWorker
from workers.ngram import NGRAM_FILE, NgramModel
from workers.stages.decide import DecisionModel
from workers.stages.score import ScoreCache, TextScorer
from workers.stages.short_circuit import BanListCache
from workers.startup import Misconfigured, model_dir_or_hint, until_up
from workers.textenc import TextEncoder

log = logging.getLogger(__name__)


# How long one start-up probe of the broker may take before it counts as a failed attempt.
KAFKA_PROBE_S = 5.0


def load_models(settings: Settings) -> tuple[DecisionModel, TextEncoder, NgramModel | None]:
    """The decision model, the tokenizer and the n-gram model (None for a text model trained
    without one), or a one-line :class:`Misconfigured`."""
    model_dir = model_dir_or_hint(settings.model_dir)
    try:
        decision = DecisionModel.load(model_dir / "decision")  # fails fast on a contract mismatch
        text_dir = model_dir / "text"
        max_tokens = settings.max_tokens or TextModelCard.load(text_dir).max_length
        ngram = NgramModel.load(text_dir) if (text_dir / NGRAM_FILE).is_file() else None
        return decision, TextEncoder(text_dir / "tokenizer.json", max_tokens), ngram
    except Exception as exc:  # a card, a contract or a tokenizer that cannot serve: restarting won't help
        raise Misconfigured(f"cannot load the models in {model_dir}: {describe(exc)}") from None


async def run_moderation(settings: Settings, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set; the batch in hand is finished, published and committed first."""
    decision, encoder, ngram = load_models(settings)
    store = RedisStore(settings.redis_url.get_secret_value(), settings.redis_timeout_s)
    model = TritonTextModel(settings.triton_url, settings.triton_model, settings.triton_timeout_s)
    sink = KafkaSink(settings.producer_conf())
    try:
        for what, check in (
            (f"kafka at {settings.kafka_bootstrap}", lambda: asyncio.to_thread(sink.check, KAFKA_PROBE_S)),
            ("redis", store.ping),
            (f"triton at {settings.triton_url}", model.connect),
        ):
            if not await until_up(what, check, stop):
                return
        scorer = TextScorer(
            encoder,
            model,
            settings.triton_sub_batch,
            settings.triton_max_in_flight,
            ScoreCache(settings.text_cache_size),
            settings.triton_pad_multiple,
        )
        bans = BanListCache(store, Keyspace(settings.redis_prefix), settings.banlist_refresh_s)
        source = KafkaSource(settings.consumer_conf(), [settings.input_topic])
        worker = ModerationWorker(settings, source, sink, store, scorer, decision, bans, ngram)
        log.info("moderation worker up: text model %s, decision model %s", model.version, decision.version)
        # Models, tokenizer, suffix list and schemas live as long as the process: take them out of
        # the cyclic GC, whose full passes over them were half the short-circuit path's CPU.
        gc.collect()
        gc.freeze()
        await worker.run(stop)
    finally:
        sink.flush(settings.publish_timeout_s)
        await model.close()
        await store.close()


def main(settings: Settings | None = None) -> None:
    """Entry point for ``modstream worker``; raises :class:`Misconfigured` for what retrying cannot fix."""
    settings = settings or Settings()
    run_until_signalled(lambda stop: run_moderation(settings, stop), settings.metrics_port)
