"""The challenger: a second decision model deciding every post beside the served one.

Its verdicts go to their own topic (same key and schema, its own ``model_versions``), in
the background: the champion's verdicts are published first, and nothing the challenger
does can fail or hold back the champion's batch. A post the challenger cannot decide or
publish is counted and skipped. Both read the same feature rows and text scores.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from workers.clients import Sink
from workers.delivery import Output, deliver
from workers.features import Profile
from workers.metrics import SHADOW_DECISIONS, SHADOW_FAILURES
from workers.records import Outcome, Post
from workers.stages.decide import DecisionModel, Unavailable, decide

log = logging.getLogger(__name__)

# Batches of challenger verdicts waiting to be published; past this (a slow or absent shadow
# topic) a batch is skipped and counted rather than held in memory behind the others.
MAX_PENDING = 8


@dataclass
class Shadow:
    model: DecisionModel
    sink: Sink  # its own producer: its flushes never wait on the champion's records
    topic: str
    timeout_s: float
    _last: asyncio.Task[None] | None = field(default=None, init=False)
    _pending: int = field(default=0, init=False)

    def run(
        self,
        posts: Sequence[Post],
        profiles: Sequence[Profile],
        text_probs: Sequence[float | None],
        ngram_probs: Sequence[float | None] | None,
        champion: Sequence[Outcome],
        versions: dict[str, str],
        unavailable: Unavailable,
    ) -> None:
        """Decide ``posts`` and publish in the background; never raises."""
        try:
            outcomes, failures = decide(posts, profiles, text_probs, self.model, versions, unavailable, ngram_probs)
        except Exception as exc:
            SHADOW_FAILURES.labels("decide").inc(len(posts))
            log.warning("the challenger failed a batch of %d: %r", len(posts), exc)
            return
        SHADOW_FAILURES.labels("decide").inc(len(failures))
        served = {o.verdict.post_id: o.verdict.decision for o in champion}
        for o in outcomes:
            if (theirs := served.get(o.verdict.post_id)) is not None:
                SHADOW_DECISIONS.labels(theirs, o.verdict.decision).inc()
        if self._pending >= MAX_PENDING:
            SHADOW_FAILURES.labels("backlog").inc(len(outcomes))
            return
        # One publish at a time, in batch order: each waits for the one before.
        self._pending += 1
        self._last = asyncio.create_task(self._publish(outcomes, self._last))

    async def _publish(self, outcomes: Sequence[Outcome], before: asyncio.Task[None] | None) -> None:
        if before is not None:
            await before
        try:
            await self._deliver(outcomes)
        finally:
            self._pending -= 1

    async def _deliver(self, outcomes: Sequence[Outcome]) -> None:
        outputs = {
            i: Output(self.topic, o.verdict.post_id.encode(), o.verdict.model_dump_json().encode())
            for i, o in enumerate(outcomes)
        }
        try:
            failed = len(await asyncio.to_thread(deliver, self.sink, outputs, self.timeout_s, lambda *_: None))
        except Exception as exc:
            log.warning("the challenger's verdicts were not published: %r", exc)
            failed = len(outputs)
        SHADOW_FAILURES.labels("publish").inc(failed)

    async def drain(self) -> None:
        """Wait for the publishes under way (on shutdown)."""
        if self._last is not None:
            await self._last
