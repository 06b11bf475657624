"""The challenger: a second decision model deciding every post beside the served one.

Its verdicts go to their own topic (same key and schema, its own ``model_versions``), in
the background: the champion's verdicts are published first, and nothing the challenger
does can fail or hold back the champion's batch. A post the challenger cannot decide or
publish is counted and skipped.

With the served text model, the challenger reads the champion's text scores. With its own
(another card version), Triton serves that under a second model name: its scores of the same
posts are requested beside the champion's, and awaited only in the background, after the
champion's verdicts are out. A batch its text model cannot score (not served, too slow) is
counted and skipped, not decided degraded: a verdict without the challenger's text score says
nothing about the challenger.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from workers.bundle.local_text import LocalText, Scores
from workers.clients import Sink
from workers.config import DEFAULT_CAMPAIGN_ACTION, CampaignAction
from workers.errors import describe
from workers.kafka.delivery import Output, deliver
from workers.metrics import SHADOW_DECISIONS, SHADOW_FAILURES
from workers.records import Outcome, Post
from workers.stages.decide import DecisionModel, Unavailable, decide
from workers.stages.score import TextScorer
from workers.state.features import Profile

log = logging.getLogger(__name__)

# Batches of challenger verdicts waiting to be published; past this (a slow or absent shadow
# topic) a batch is skipped and counted rather than held in memory behind the others.
MAX_PENDING = 8
# After its text model failed (not served, too slow), the challenger asks Triton again only after
# this long: the batches in between are skipped at once, and a struggling Triton is left to the champion.
RETRY_S = 5.0


@dataclass
class ShadowText:
    """The challenger's own text model: its tokenizer and n-gram model, and a scorer on the
    Triton model name that serves it. Never raises: a failure is counted and logged once."""

    local: LocalText
    scorer: TextScorer
    clock: Callable[[], float] = time.monotonic
    _up: bool | None = field(default=None, init=False)  # None: not asked yet
    _retry_at: float = field(default=0.0, init=False)

    @property
    def version(self) -> str:
        return self.local.version

    async def connect(self) -> bool:
        """Whether Triton serves the challenger's text model, at its card's version (the one its
        verdicts name); logs one line when that changes."""
        try:
            await self.local.connect(self.scorer.model)
        except Exception as exc:
            self._down(exc)
            return False
        if not self._up:
            log.info("the challenger's text model %s is served; shadowing with its own scores", self.version)
        self._up = True
        return True

    async def score(self, posts: Sequence[Post]) -> Scores | None:
        """The challenger's scores of ``posts``, or None (counted) when its text model failed."""
        if not self._up and (self.clock() < self._retry_at or not await self.connect()):
            SHADOW_FAILURES.labels("score").inc(len(posts))
            return None
        try:
            return await self.local.score(self.scorer, [p.text for p in posts])
        except Exception as exc:
            self._down(exc)
            SHADOW_FAILURES.labels("score").inc(len(posts))
            return None

    def _down(self, exc: BaseException) -> None:
        if self._up is not False:  # once per outage, from start-up on
            log.warning(
                "the challenger's text model %s is unavailable, its verdicts are skipped: %s",
                self.version,
                describe(exc),
            )
        self._up, self._retry_at = False, self.clock() + RETRY_S


@dataclass(frozen=True)
class Batch:
    """What the challenger decides from, as the champion's batch left it."""

    posts: Sequence[Post]
    profiles: Sequence[Profile]
    champion: Sequence[Outcome]  # the champion's verdicts, for the flip counts
    versions: dict[str, str]  # the challenger's model versions
    unavailable: Unavailable  # what the champion's batch was decided without
    languages: Sequence[str | None] | None = None  # per post, a language the served text model cannot judge


@dataclass
class Shadow:
    model: DecisionModel
    sink: Sink  # its own producer: its flushes never wait on the champion's records
    topic: str
    timeout_s: float
    text: ShadowText | None = None  # None: the served text model, whose scores it reads
    campaign_action: CampaignAction = DEFAULT_CAMPAIGN_ACTION  # as the champion's (settings)
    _last: asyncio.Task[None] | None = field(default=None, init=False)
    _pending: int = field(default=0, init=False)

    def score(self, posts: Sequence[Post]) -> asyncio.Task[Scores | None] | None:
        """Start the challenger's own scores of ``posts`` beside the champion's; None when it reads the champion's."""
        return None if self.text is None else asyncio.create_task(self.text.score(posts))

    def run(
        self,
        batch: Batch,
        text_probs: Sequence[float | None],
        ngram_probs: Sequence[float | None] | None,
        own: asyncio.Task[Scores | None] | None = None,
    ) -> None:
        """Decide ``batch`` and publish in the background; never raises. ``own`` (from :meth:`score`)
        replaces the champion's scores: then the posts are decided once it is done, in the background too."""
        if self._pending >= MAX_PENDING:
            if own is not None:
                own.cancel()
            SHADOW_FAILURES.labels("backlog").inc(len(batch.posts))
            return
        if own is None:
            decided = _ready(self._decide(batch, text_probs, ngram_probs))
        else:
            assert self.text is not None  # only it starts ``own``
            decided = self._decide_own(own, replace(batch, versions=batch.versions | {"text": self.text.version}))
        # One publish at a time, in batch order: each waits for the one before.
        self._pending += 1
        self._last = asyncio.create_task(self._publish(decided, self._last))

    async def _decide_own(self, own: Awaitable[Scores | None], batch: Batch) -> list[Outcome]:
        if (scores := await own) is None:
            return []
        # Its own text scores are in: only the champion's missing history can degrade it. Its own
        # text model withheld the scores of the languages it cannot judge (LocalText.score).
        mine = replace(batch, unavailable=replace(batch.unavailable, text_model=False), languages=None)
        return self._decide(mine, *scores)

    def _decide(
        self, batch: Batch, text_probs: Sequence[float | None], ngram_probs: Sequence[float | None] | None
    ) -> list[Outcome]:
        posts, profiles, champion = batch.posts, batch.profiles, batch.champion
        versions, unavailable = batch.versions, batch.unavailable
        try:
            outcomes, failures = decide(
                posts,
                profiles,
                text_probs,
                self.model,
                versions,
                unavailable,
                ngram_probs,
                self.campaign_action,
                batch.languages,
                withheld=self.model.trust.withheld([p.text for p in posts]),  # the challenger's own trust
            )
        except Exception as exc:
            SHADOW_FAILURES.labels("decide").inc(len(posts))
            log.warning("the challenger failed a batch of %d: %r", len(posts), exc)
            return []
        SHADOW_FAILURES.labels("decide").inc(len(failures))
        served = {o.verdict.post_id: o.verdict.decision for o in champion}
        for o in outcomes:
            if (theirs := served.get(o.verdict.post_id)) is not None:
                SHADOW_DECISIONS.labels(theirs, o.verdict.decision).inc()
        return outcomes

    async def _publish(self, decided: Awaitable[list[Outcome]], before: asyncio.Task[None] | None) -> None:
        try:
            outcomes = await decided
            if before is not None:
                await before
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


async def _ready(outcomes: list[Outcome]) -> list[Outcome]:
    """Outcomes decided already, in the form :meth:`Shadow._publish` awaits."""
    return outcomes
