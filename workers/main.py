"""Wire the moderation worker from settings and run it until stopped (SIGTERM drains)."""

from __future__ import annotations

import asyncio
import json
import logging
import signal

from workers.adapters.kafka import KafkaSink, KafkaSource
from workers.adapters.redis_store import RedisStore
from workers.adapters.triton import TritonTextModel
from workers.config import Settings
from workers.keyspace import Keyspace
from workers.metrics import serve
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
    max_tokens = settings.max_tokens or int(json.loads((text_dir / "card.json").read_text()).get("max_length", 128))
    encoder = TextEncoder(text_dir / "tokenizer.json", max_tokens)
    store = RedisStore(settings.redis_url.get_secret_value(), settings.redis_timeout_ms / 1000)
    model = TritonTextModel(settings.triton_url, settings.triton_model, settings.triton_timeout_ms / 1000)
    sink = KafkaSink(settings.producer_conf())
    try:
        await model.connect()
        scorer = TextScorer(
            encoder,
            model,
            settings.triton_sub_batch,
            settings.triton_max_in_flight,
            ScoreCache(settings.text_cache_size),
        )
        bans = BanListCache(store, Keyspace(settings.redis_prefix), settings.banlist_refresh_s)
        source = KafkaSource(settings.consumer_conf(), [settings.input_topic])
        worker = ModerationWorker(settings, source, sink, store, scorer, decision, bans)
        log.info("moderation worker up: text model %s, decision model %s", model.version, decision.version)
        await worker.run(stop)
    finally:
        sink.flush(settings.publish_timeout_s)
        await model.close()
        await store.close()


def main(settings: Settings | None = None) -> None:
    settings = settings or Settings()
    serve(settings.metrics_port)

    async def _run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_moderation(settings, stop)

    asyncio.run(_run())
