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
from workers.keyspace import Keyspace
from workers.lifecycle import run_until_signalled
from workers.moderation import ModerationWorker
from workers.stages.decide import DecisionModel
from workers.stages.score import ScoreCache, TextScorer
from workers.stages.short_circuit import BanListCache
from workers.textenc import TextEncoder

log = logging.getLogger(__name__)


async def run_moderation(settings: Settings, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set; the batch in hand is finished, published and committed first."""
    decision = DecisionModel.load(settings.model_dir / "decision")  # fails fast on a contract mismatch
    text_dir = settings.model_dir / "text"
    max_tokens = settings.max_tokens or TextModelCard.load(text_dir).max_length
    encoder = TextEncoder(text_dir / "tokenizer.json", max_tokens)
    store = RedisStore(settings.redis_url.get_secret_value(), settings.redis_timeout_s)
    model = TritonTextModel(settings.triton_url, settings.triton_model, settings.triton_timeout_s)
    sink = KafkaSink(settings.producer_conf())
    try:
        await model.connect()
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
        worker = ModerationWorker(settings, source, sink, store, scorer, decision, bans)
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
    """Entry point for ``modstream worker``."""
    settings = settings or Settings()
    run_until_signalled(lambda stop: run_moderation(settings, stop), settings.metrics_port)
