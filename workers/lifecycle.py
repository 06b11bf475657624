"""Process entry point shared by the workers: metrics exporter, signal handling, asyncio run."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable

from workers.metrics import serve


def run_until_signalled(run: Callable[[asyncio.Event], Awaitable[None]], metrics_port: int) -> None:
    """Run ``run(stop)``; SIGTERM or SIGINT sets ``stop`` so the worker drains and exits cleanly."""
    serve(metrics_port)

    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run(stop)

    asyncio.run(_main())
