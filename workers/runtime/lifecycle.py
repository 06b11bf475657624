"""Process entry point shared by the workers: metrics and probes, signal handling, asyncio run."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable

from workers.config import Settings
from workers.runtime.probes import Heartbeat, serve


def run_until_signalled(run: Callable[[asyncio.Event], Awaitable[None]], settings: Settings) -> None:
    """Run ``run(stop)``; SIGTERM or SIGINT sets ``stop`` so the worker drains and exits cleanly.
    ``/livez`` on the metrics port fails once the event loop has not run for ``liveness_stale_s``."""
    heartbeat = Heartbeat(settings.liveness_stale_s)
    serve(settings.metrics_port, heartbeat)

    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        pulse = asyncio.create_task(heartbeat.pulse())
        try:
            await run(stop)
        finally:
            pulse.cancel()

    asyncio.run(_main())
