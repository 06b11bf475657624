"""Kubernetes probes served beside ``/metrics`` on the metrics port, answered in-process.

``/livez`` is the event loop's heartbeat: a task beats every second, so a loop that has not run
it for ``stale_after_s`` (a blocking call, a deadlock) is reported dead, while the exporter's own
thread would still answer. ``/readyz`` is the last dependency check: ready once the worker found
its dependencies up at start, not ready while starting or draining. Neither starts a process,
opens a connection or loads a model, unlike ``modstream health``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from workers.kafka.lag import READY

LIVEZ, READYZ = "/livez", "/readyz"
BEAT_EVERY_S = 1.0

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


@dataclass
class Heartbeat:
    """The last time the event loop ran its beat; stale once older than ``stale_after_s``."""

    stale_after_s: float
    clock: Callable[[], float] = time.monotonic
    last: float = field(init=False)

    def __post_init__(self) -> None:
        self.last = self.clock()

    def beat(self) -> None:
        self.last = self.clock()

    def age_s(self) -> float:
        return self.clock() - self.last

    def alive(self) -> bool:
        return self.age_s() <= self.stale_after_s

    async def pulse(self, every_s: float = BEAT_EVERY_S) -> None:
        """Beat while the loop runs: cancelled with it."""
        while True:
            self.beat()
            await asyncio.sleep(every_s)


class _Readiness:
    """Process-wide, like the metrics: set by the worker, read by the probe server's thread."""

    def __init__(self) -> None:
        self.ready = False

    def set(self, ready: bool) -> None:
        self.ready = ready
        READY.set(ready)


readiness = _Readiness()


def mark_ready(ready: bool) -> None:
    """After the worker's dependency checks passed (True), or when it starts draining (False)."""
    readiness.set(ready)


def probe_app(heartbeat: Heartbeat) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """``/livez`` and ``/readyz`` (200 or 503, one line of text); every other path is ``/metrics``."""
    metrics = make_wsgi_app()

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == LIVEZ:
            ok, text = heartbeat.alive(), f"event loop last beat {heartbeat.age_s():.1f}s ago"
        elif path == READYZ:
            ok, text = readiness.ready, "ready" if readiness.ready else "not ready: starting or draining"
        else:
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")])
        return [text.encode() + b"\n"]

    return app


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds would flood the log."""


def serve(port: int, heartbeat: Heartbeat) -> None:
    """Serve metrics and probes on ``port`` from a daemon thread; 0 serves nothing."""
    if not port:
        return
    server = make_server("0.0.0.0", port, probe_app(heartbeat), ThreadingWSGIServer, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
