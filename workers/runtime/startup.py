"""Starting a worker: a one-line error for what retrying cannot fix (exit code 2), and patient,
quiet retries for dependencies that are not up yet (a deployment starts everything at once)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from workers.errors import Misconfigured, describe

log = logging.getLogger(__name__)

# Exit code for misconfiguration, as for a command-line usage error: restarting cannot help.
EXIT_MISCONFIGURED = 2


def model_dir_or_hint(model_dir: Path) -> Path:
    if not model_dir.is_dir():
        raise Misconfigured(
            f"model dir {model_dir} does not exist: run `modstream models` (it links the cache's `current` "
            "bundle) or set MODSTREAM_MODEL_DIR to a bundle with text/ and decision/"
        )
    return model_dir


async def until_up(
    what: str, check: Callable[[], Awaitable[object]], stop: asyncio.Event, max_delay_s: float = 10.0
) -> bool:
    """Call ``check`` until it succeeds (True) or ``stop`` is set (False), backing off
    exponentially; each failed attempt is one log line, never a traceback."""
    delay, attempt = 0.5, 1
    while True:
        try:
            await check()
            if attempt > 1:
                log.info("%s is up after %d attempts", what, attempt)
            return True
        except Exception as exc:
            log.warning("%s not reachable (attempt %d): %s; retrying in %.1fs", what, attempt, describe(exc), delay)
        try:
            await asyncio.wait_for(stop.wait(), delay)
            return False
        except TimeoutError:
            delay, attempt = min(delay * 2, max_delay_s), attempt + 1


# What lightgbm imports when installed, for APIs the worker never uses (scikit-learn pulls in
# scipy.stats): 3.7 s of the worker's 4.6 s of imports on two busy cores, paid on every restart.
OPTIONAL_FOR_THE_WORKER = ("sklearn", "pandas", "pyarrow", "dask")


@contextlib.contextmanager
def without(modules: tuple[str, ...] = OPTIONAL_FOR_THE_WORKER) -> Iterator[None]:
    """Imports inside see ``modules`` as not installed (unless already imported); later ones do."""
    blocked = [name for name in modules if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # None makes `import name` raise ImportError
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
