"""Waits on what a test can observe (the workers' own metrics, in this process) instead of fixed sleeps."""

import time
from collections.abc import Callable

from prometheus_client import REGISTRY


def wait_until(done: Callable[[], bool], timeout_s: float, every_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every_s)
    return True


def reloads() -> float:
    """Promoted (or shadowed) bundles the workers of this process have switched to so far."""
    return REGISTRY.get_sample_value("modstream_model_reloads_total", {"outcome": "loaded"}) or 0.0
