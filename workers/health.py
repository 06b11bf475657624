"""``modstream health``: can this worker serve right now? One line per dependency, like arq's check.

It probes what the worker itself needs at start-up (workers/main.py), each within a
deadline and all at once: the broker answers a metadata request, Redis answers PING,
Triton has the text model loaded, and the model contract holds: the decision model's
features match this code's, and Triton serves the text model the bundle's tokenizer was
made for. Compose and Kubernetes run it as the readiness probe.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from workers.adapters.kafka import KafkaSink
from workers.adapters.redis_layout import Layout
from workers.adapters.redis_store import RedisStore
from workers.adapters.triton import TritonTextModel
from workers.bundle.load import load_models
from workers.config import Settings
from workers.errors import describe
from workers.model_cards import TextModelCard


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    seconds: float

    def __str__(self) -> str:
        return f"{self.name:<8} {'ok' if self.ok else 'FAIL':<4} {self.seconds * 1000:7.1f} ms  {self.detail}"


async def _run(name: str, probe: Callable[[], Awaitable[str]], timeout_s: float) -> Check:
    start = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            detail, ok = await probe(), True
    except TimeoutError:
        detail, ok = f"no answer within {timeout_s:g}s", False
    except Exception as exc:  # every failure is one line of the report, never a traceback
        detail, ok = describe(exc), False
    return Check(name, ok, detail, time.perf_counter() - start)


async def check(settings: Settings, timeout_s: float, models: bool = True) -> list[Check]:
    """Kafka and Redis, and with ``models`` (the moderation worker) Triton and the model contract."""

    async def kafka() -> str:
        # librdkafka's own log lines would bury the report: the probe's outcome says it all.
        sink = KafkaSink({**settings.producer_conf(), "log_level": 0})
        await asyncio.to_thread(sink.check, timeout_s * 0.9)
        return settings.kafka_bootstrap

    async def redis() -> str:
        store = RedisStore(
            settings.redis_url.get_secret_value(), min(settings.redis_timeout_s, timeout_s), Layout.of(settings)
        )
        try:
            await store.ping()
        finally:
            await store.close()
        return "PONG"

    async def serving() -> str:
        text = TextModelCard.load(settings.model_dir / "text").version
        triton = TritonTextModel(settings.triton_url, settings.triton_model, timeout_s, text)
        try:
            await triton.connect()  # raises unless Triton serves the bundle's text model
        finally:
            await triton.close()
        return f"{settings.triton_url} serves {settings.triton_model} at text model version {text}"

    async def contract(triton_up: bool) -> str:
        loaded = await asyncio.to_thread(load_models, settings)
        if not triton_up:
            raise RuntimeError(f"triton is down or does not serve the bundle's text model {loaded.text.version}")
        return f"decision {loaded.decision.version} on features of this code, text {loaded.text.version}"

    probes = [_run("kafka", kafka, timeout_s), _run("redis", redis, timeout_s)]
    if not models:
        return list(await asyncio.gather(*probes))
    *deps, served = await asyncio.gather(*probes, _run("triton", serving, timeout_s))
    return [*deps, served, await _run("models", lambda: contract(served.ok), timeout_s)]
