"""The moderation worker: poll a micro-batch, run the stages, publish, then commit."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from workers.bundle.local_text import LocalText
from workers.bundle.reload import BundleReloader, Promoted
from workers.bundle.shadow import Batch, Shadow, ShadowText
from workers.clients import Framing, HashStore, Sink, Source
from workers.config import Settings
from workers.errors import describe, failure
from workers.kafka.batch_ramp import BatchRamp
from workers.kafka.commit import (
    BatchCommit,
    Guarded,
    Rewound,
    Settlement,
    Transactions,
    batch_commit,
    is_record_error,
    settle,
)
from workers.kafka.delivery import DeadLetters
from workers.metrics import (
    BATCH_SIZE,
    CASCADE_POSTS,
    DEGRADED,
    RECORD_RETRIES,
    UNJUDGED_LANGUAGE,
    observe_text_scores,
    timed,
)
from workers.records import Failure, InMsg, Outcome, Post
from workers.stages import decide, enrich, publish, score, short_circuit, validate
from workers.stages.decide import DecisionModel
from workers.stages.score import TextScorer
from workers.stages.short_circuit import BanListCache
from workers.state.features import FEATURE_VERSION, Profile
from workers.state.keyspace import Keyspace
from workers.text.language import EVERY_LANGUAGE, Languages
from workers.text.ngram import NgramModel, ngram_probs
from workers.text.trust import Trust

log = logging.getLogger(__name__)


# The stage label of a record that failed where no step caught it.
WORKER_STAGE = "worker"
NGRAM_STAGE = "ngram"
LANGUAGE_STAGE = "language"


@dataclass
class ModerationWorker:
    settings: Settings
    source: Source
    sink: Sink
    store: HashStore
    scorer: TextScorer
    decision: DecisionModel
    bans: BanListCache
    reloader: BundleReloader | None = None  # picks up a promoted bundle between batches
    shadow: Shadow | None = None  # a challenger deciding beside ``decision``, published apart
    transactions: Transactions | None = None  # exactly-once: outputs and offsets commit together
    ngram: NgramModel | None = None  # None: a text model without ngram.npz; the feature stays NaN
    # Batch sizes, reset small when partitions are assigned (workers/kafka/batch_ramp.py); None: always full size.
    ramp: BatchRamp | None = None
    # A scorer of another text model, connected (raises when Triton does not serve it): how a promoted
    # bundle's text model is switched to. None: this worker serves one text model.
    connect_text: Callable[[LocalText], Awaitable[TextScorer]] | None = None
    # The challenger's link, looked at as the served one's: a bundle shadowed there replaces the challenger
    # between batches, its own text model scored through ``shadow_text``.
    shadow_reloader: BundleReloader | None = None
    shadow_text: Callable[[LocalText], ShadowText] | None = None
    # Records and verdicts framed by a Schema Registry (MODSTREAM_INPUT_FORMAT); None: plain JSON.
    framing: Framing | None = None
    languages: Languages = EVERY_LANGUAGE  # the served text model's; None judges every post

    def __post_init__(self) -> None:
        full = self.settings.batch_max_size
        self._ramp = self.ramp or BatchRamp(full, full)
        self._closing: set[asyncio.Task[None]] = set()  # old text models' clients, closed when unused
        self._counted: asyncio.Future[None] | None = None  # the last batch's Turn.mine
        # Every transactional call off the event loop, under a deadline (workers/kafka/commit.py).
        txns, timeout_s = self.transactions, self.settings.transaction_timeout_s
        self._transactions = Guarded(txns, timeout_s) if txns is not None else None

    @property
    def dlq(self) -> DeadLetters:
        s = self.settings
        return DeadLetters(s.dlq_topic, s.group_id, s.dead_letter_max_bytes)

    def versions(self, decision: DecisionModel, scorer: TextScorer) -> dict[str, str]:
        return {"text": scorer.model.version, "decision": decision.version, "features": FEATURE_VERSION}

    async def run(self, stop: asyncio.Event) -> None:
        """Poll and handle batches, up to ``max_batches_in_flight`` at once, until ``stop``.

        The next batch is validated and tokenised while the last one is still in Triton,
        so the model's cores don't idle between batches. Commits stay in poll order:
        each batch stores its offsets only after the batch before it has.
        """
        s = self.settings
        in_flight: deque[asyncio.Task[None]] = deque()
        try:
            await self._init_transactions()
            while not stop.is_set():
                if self.reloader is not None and self.reloader.due():
                    # Between batches: one in flight keeps the models it started with.
                    promoted = await asyncio.to_thread(self.reloader.check)
                    if promoted is not None:
                        await self._switch(self.reloader, promoted, list(in_flight))
                if self.shadow is not None and self.shadow_reloader is not None and self.shadow_reloader.due():
                    challenger = await asyncio.to_thread(self.shadow_reloader.check)
                    if challenger is not None:
                        self._switch_shadow(self.shadow, self.shadow_reloader, challenger)
                msgs = await asyncio.to_thread(self.source.poll_batch, self._ramp.size, s.batch_max_wait_s)
                self._ramp.polled(len(msgs))
                if msgs:
                    in_flight.append(asyncio.create_task(self.handle(msgs, after=in_flight[-1] if in_flight else None)))
                # DeliveryFailed and an Outage surface here: the worker stops and uncommitted input is redelivered.
                while in_flight and (in_flight[0].done() or len(in_flight) >= s.max_batches_in_flight):
                    try:
                        await in_flight.popleft()
                    except Rewound as exc:
                        await self._rewind(in_flight, exc)
            while in_flight:
                try:
                    await in_flight.popleft()
                except Rewound as exc:  # stopping: what did not commit is polled again by the next owner
                    log.warning("%s; dropping %d batches in flight", exc, len(in_flight))
                    break
        finally:
            for task in in_flight:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)
            if self.shadow is not None:
                await _retire_shadow(self.shadow)
            await asyncio.gather(*self._closing, return_exceptions=True)
            # On every exit, a failed batch or cancellation included: commit what is stored
            # and leave the group now rather than after a session timeout.
            self.source.close()

    async def _switch(self, reloader: BundleReloader, promoted: Promoted, in_flight: list[asyncio.Task[None]]) -> None:
        """Serve ``promoted`` from the next batch on; the old text model's client is closed once the
        batches in flight, which keep it, are done."""
        if promoted.text is not None:
            if self.connect_text is None:
                reloader.not_served(promoted, RuntimeError("this worker cannot switch text models"))
                return
            try:
                scorer = await self.connect_text(promoted.text)
            except Exception as exc:
                reloader.not_served(promoted, exc)
                return
            old, self.scorer, self.ngram = self.scorer, scorer, promoted.text.ngram
            self.languages = promoted.text.languages
            self._closing.add(asyncio.create_task(_close_after(old, in_flight)))
        self.decision = promoted.decision
        reloader.switched(promoted)
        if self.shadow_reloader is not None:  # a challenger without its own text model reads the new one's
            self.shadow_reloader.text_version = reloader.text_version

    def _switch_shadow(self, old: Shadow, reloader: BundleReloader, promoted: Promoted) -> None:
        """Shadow ``promoted`` from the next batch on; the old challenger finishes its publishes first."""
        text = None
        if promoted.text is not None:
            if self.shadow_text is None:
                reloader.not_served(promoted, RuntimeError("this worker cannot switch text models"))
                return
            text = self.shadow_text(promoted.text)  # connects at its first batch; skipped until served
        self.shadow = replace(old, model=promoted.decision, text=text)
        self._closing.add(asyncio.create_task(_retire_shadow(old)))
        reloader.switched(promoted)

    async def _init_transactions(self) -> None:
        """Exactly-once: fence a predecessor with this worker's transactional id (and abort what it
        left open) before the first poll, so its offsets are settled when the group hands them
        over. One that fails is tried again before the first transaction."""
        if self._transactions is None:
            return
        try:
            await self._transactions.init()
        except Exception as exc:
            log.warning("init_transactions failed (%s); trying again before the first transaction", describe(exc))

    async def _rewind(self, in_flight: deque[asyncio.Task[None]], exc: Rewound) -> None:
        """Exactly-once: a transaction aborted. Drop the batches polled after it (they cannot
        commit past it) and poll again from the committed offsets."""
        log.warning("%s; dropping %d batches in flight and rewinding", exc, len(in_flight))
        await asyncio.gather(*in_flight, return_exceptions=True)
        in_flight.clear()
        assert self._transactions is not None  # only exactly-once raises Rewound
        await self._transactions.rewind()

    async def handle(self, msgs: Sequence[InMsg], after: Awaitable[None] | None = None) -> None:
        """Run one batch through the stages and publish it; its offsets become final once
        ``after`` (the previous batch) has settled, by the commit policy (workers/kafka/commit.py).
        Its stream signals are counted after the previous batch's: batches start in poll order, and
        take their turn before their first await."""
        BATCH_SIZE.observe(len(msgs))
        turn = Turn(self._counted, asyncio.get_running_loop().create_future())
        self._counted = turn.mine
        try:
            await self._handle(msgs, after, turn)
        finally:
            turn.taken()  # whatever happened to this batch, the next one counts

    async def _handle(self, msgs: Sequence[InMsg], after: Awaitable[None] | None, turn: Turn) -> None:
        commit = batch_commit(self.source, self._transactions, after)
        try:
            settlement = await self._process(msgs, commit, turn)
        except BaseException as exc:
            # An Outage (a Schema Registry that does not answer for a schema id not cached yet) is
            # not a record error: retried record by record it would dead-letter every record of the
            # stream while the registry is away. It fails the batch, uncommitted, like an undelivered
            # one: the worker stops and, restarted, waits for the registry, then reads the batch again.
            if not is_record_error(exc):
                raise
            await commit.discard()
            settlement = await self._isolate(msgs, exc, commit)
        await commit.settle(settlement)

    async def _process(self, msgs: Sequence[InMsg], commit: BatchCommit, turn: Turn | None = None) -> Settlement:
        # The whole batch is scored, decided and named by one set of models, whatever is promoted meanwhile.
        model, scorer, ngram, languages = self.decision, self.scorer, self.ngram, self.languages
        versions = self.versions(model, scorer)
        with timed(validate.STAGE):
            posts, failures = validate.validate(msgs, self.settings.max_text_chars, self.framing)
        with timed(short_circuit.STAGE):
            blocked, rest, unchecked = short_circuit.short_circuit(posts, await self.bans.current(), versions)
        # A challenger with its own text model: its scores are requested now, beside the champion's,
        # and awaited only by the shadow, after the champion's verdicts are out.
        own = self.shadow.score(rest) if self.shadow is not None else None
        later: asyncio.Task[_Later] | None = None
        try:
            (profiles, no_redis), ngram_probs, unjudged = await asyncio.gather(
                self._enrich(rest, turn), self._ngram(rest, ngram), self._languages(rest, languages)
            )
            facts = _Facts(rest, profiles, ngram_probs, unjudged, no_redis)
            first = self._first_stage(facts, model, versions)
            later = asyncio.create_task(self._decide(facts, first, model, scorer, versions))
            await asyncio.sleep(0)  # the rest is on its way to Triton before the publish below holds the loop
            audited = _msgs(facts.posts, first.audited)
            early = [o for o in first.outcomes if o.msg not in audited]
            ready, dead, out = blocked + early, failures + unchecked + first.failures, set[InMsg]()
            if self._transactions is None:
                # At-least-once, a verdict is read once produced: what is decided already goes out while
                # the transformer scores the rest. Exactly-once, every verdict is read at the batch's
                # commit: one publish, as a second would only add a flush.
                out, ready, dead = await self._publish(ready, dead, commit), [], []
            decided = await later
            out |= await self._publish(ready + decided.outcomes, dead + decided.failures, commit)
        except BaseException:
            if later is not None:
                later.cancel()
                await asyncio.gather(later, return_exceptions=True)  # its own error, if any, is this batch's
            if own is not None:
                own.cancel()  # the batch is retried or given up: nothing for the challenger to decide
            raise
        if self.shadow is not None:  # after the champion's verdicts are out
            versions = self.versions(self.shadow.model, scorer)
            batch = Batch(rest, profiles, early + decided.outcomes, versions, decided.unavailable, unjudged)
            self.shadow.run(batch, decided.probs, ngram_probs, own)
        return settle(msgs, [i for i, m in enumerate(msgs) if m in out])

    def _first_stage(self, facts: _Facts, model: DecisionModel, versions: dict[str, str]) -> decide.FirstStage:
        """The cascade's first stage: the posts it is sure of, decided without the transformer."""
        s = self.settings
        with timed(decide.FIRST_STAGE):
            return decide.first_stage(
                facts.posts,
                facts.profiles,
                model.first if s.cascade else None,
                versions,
                decide.Unavailable(redis=facts.no_redis),
                facts.ngram_probs,
                s.campaign_action,
                facts.languages,
                s.cascade_audit_share,
            )

    async def _decide(
        self,
        facts: _Facts,
        first: decide.FirstStage,
        model: DecisionModel,
        scorer: TextScorer,
        versions: dict[str, str],
    ) -> _Later:
        """The rest of the cascade: the transformer scores what the first stage left (every post while a
        challenger is shadowed, which decides from the champion's scores; never a post in a language it
        cannot judge) and the full model decides it. Audited first-stage posts are decided in full too;
        their first-stage verdict stands, published with these."""
        s, posts = self.settings, facts.posts
        later = sorted(first.later + first.audited)
        withheld = dict(zip(later, await self._withheld([posts[i] for i in later], model.trust), strict=True))
        # Not a post whose text scores are withheld (a language the text model cannot judge, or one whose
        # transformer score the decision model does not read): no use. A shadow decides from all of them.
        scored = [
            i
            for i in (range(len(posts)) if self.shadow is not None else later)
            if facts.languages[i] is None and (self.shadow is not None or withheld[i] is None)
        ]
        probs: list[float | None] = [None] * len(posts)
        no_text = False
        if scored:
            got, no_text = await self._score([posts[i] for i in scored], scorer)
            for i, p in zip(scored, got, strict=True):
                probs[i] = p
        # The drift alert's population: the posts the full model decides (the card's baseline is theirs).
        observe_text_scores(scorer.model.version, [probs[i] for i in first.later if withheld[i] is None])
        unavailable = decide.Unavailable(redis=facts.no_redis, text_model=no_text)
        # Audited: published by the first stage, whatever the full model decides.
        checked = _msgs(posts, first.audited)
        with timed(decide.STAGE):
            decided, undecided = decide.decide(
                [posts[i] for i in later],
                [facts.profiles[i] for i in later],
                [probs[i] for i in later],
                model,
                versions,
                unavailable,
                [facts.ngram_probs[i] for i in later],
                s.campaign_action,
                [facts.languages[i] for i in later],
                checked,
                [withheld[i] for i in later],
            )
        full = [o for o in decided if o.msg not in checked]
        CASCADE_POSTS.labels(decide.FIRST_STAGE).inc(len(first.outcomes))
        CASCADE_POSTS.labels(decide.STAGE).inc(len(full))
        audits = decide.audit([o for o in first.outcomes if o.msg in checked], [o for o in decided if o.msg in checked])
        return _Later(audits + full, [f for f in undecided if f.msg not in checked], probs, unavailable)

    async def _publish(self, outcomes: list[Outcome], failures: list[Failure], commit: BatchCommit) -> set[InMsg]:
        """Publish these verdicts and dead letters (nothing when there are none); returns the messages
        whose output was not acknowledged."""
        if not outcomes and not failures:
            return set()
        await commit.before_publish()
        with timed(publish.STAGE):
            return publish.publish(
                outcomes,
                failures,
                self.sink,
                verdict_topic=self.settings.output_topic,
                dlq=self.dlq,
                timeout_s=self.settings.publish_timeout_s,
                framing=self.framing,
            )

    async def _isolate(self, msgs: Sequence[InMsg], exc: BaseException, commit: BatchCommit) -> Settlement:
        """An error no step caught failed the batch: retry each record alone, a bounded number
        of times, and dead-letter one that keeps failing instead of crash-looping on it."""
        log.error(
            "a batch of %d failed (%s: %s); retrying its records alone", len(msgs), type(exc).__name__, describe(exc)
        )
        undelivered = []
        for i, msg in enumerate(msgs):
            if not (await self._alone(msg, commit)).complete:
                undelivered.append(i)
        return settle(msgs, undelivered)

    async def _alone(self, msg: InMsg, commit: BatchCommit) -> Settlement:
        for _ in range(self.settings.max_record_attempts):
            try:
                return await self._process([msg], commit)
            except BaseException as exc:
                if not is_record_error(exc):
                    raise
                RECORD_RETRIES.inc()
                last = exc
        log.error("dead-lettering %r after %d attempts: %s", msg, self.settings.max_record_attempts, describe(last))
        return settle([msg], [0] if await self._publish([], [failure(msg, WORKER_STAGE, last)], commit) else [])

    # Enrichment and scoring degrade instead of failing the batch: a verdict without
    # history or without a text score is still a verdict, flagged `degraded`.
    async def _enrich(self, posts: list[Post], turn: Turn | None) -> tuple[list[Profile], bool]:
        """Profiles and stream signals; ``turn`` (None for a record retried alone) holds the signals
        until the batch polled before has counted its own: a campaign's first copies and the stream's
        first sighting are counted in the order the posts came."""
        try:
            if turn is not None:
                await turn.wait()
            with timed(enrich.STAGE):
                ks, ttl = Keyspace(self.settings.redis_prefix), self.settings.signal_snapshot_ttl_s
                return await enrich.enrich(posts, self.store, ks, ttl), False
        except Exception as exc:
            log.warning("enrich failed, degrading %d posts: %r", len(posts), exc)
            DEGRADED.labels("redis").inc(len(posts))
            return [Profile() for _ in posts], True
        finally:
            if turn is not None:
                turn.taken()

    async def _ngram(self, posts: list[Post], ngram: NgramModel | None) -> list[float | None]:
        """The n-gram model's scores: local, so they need no server and never degrade."""
        if ngram is None:  # no stage to time
            return [None] * len(posts)
        with timed(NGRAM_STAGE):
            return await ngram_probs(ngram, [p.text for p in posts])

    async def _languages(self, posts: list[Post], languages: Languages) -> list[str | None]:
        """Per post, a language the text model cannot judge, or None. In a thread: fastText releases the GIL."""
        if languages.judged is None:  # no stage to time
            return [None] * len(posts)
        with timed(LANGUAGE_STAGE):
            found = await asyncio.to_thread(languages.unjudged, [p.text for p in posts])
        for language, n in Counter(filter(None, found)).items():  # how much of the traffic no text model reads
            UNJUDGED_LANGUAGE.labels(language).inc(n)
        return found

    async def _withheld(self, posts: list[Post], trust: Trust) -> list[str | None]:
        """Per post, a language whose transformer score ``trust`` withholds, or None. In a thread, as above."""
        if not trust.ngram_only:  # no stage to time
            return [None] * len(posts)
        with timed(LANGUAGE_STAGE):
            return await asyncio.to_thread(trust.withheld, [p.text for p in posts])

    async def _score(self, posts: list[Post], scorer: TextScorer) -> tuple[list[float | None], bool]:
        try:
            with timed(score.STAGE):
                probs: list[float | None] = list(await scorer.score([p.text for p in posts]))
            return probs, False
        except Exception as exc:
            log.warning("text scoring failed, degrading %d posts: %r", len(posts), exc)
            DEGRADED.labels("text_model").inc(len(posts))
            return [None] * len(posts), True


@dataclass(frozen=True, slots=True)
class Turn:
    """A batch's place in the order its stream signals are counted in: after ``before`` (the
    previous batch's ``mine``), done when ``mine`` is."""

    before: asyncio.Future[None] | None
    mine: asyncio.Future[None]

    async def wait(self) -> None:
        if self.before is not None:
            await asyncio.shield(self.before)  # a cancelled batch must not cancel its predecessor's turn

    def taken(self) -> None:
        if not self.mine.done():
            self.mine.set_result(None)


@dataclass(frozen=True, slots=True)
class _Facts:
    """What a batch's posts are decided from besides the text model, by post."""

    posts: list[Post]
    profiles: list[Profile]
    ngram_probs: list[float | None]
    languages: list[str | None]  # a language the text model cannot judge, or None
    no_redis: bool


class _Later(NamedTuple):
    """What the full model decided of a batch, after the first stage's verdicts went out."""

    outcomes: list[Outcome]  # the full model's verdicts, and the audited first-stage ones with its scores
    failures: list[Failure]
    probs: list[float | None]  # the transformer's score by post
    unavailable: decide.Unavailable  # what the batch lacked


def _msgs(posts: Sequence[Post], at: Sequence[int]) -> frozenset[InMsg]:
    return frozenset(posts[i].msg for i in at)


async def _retire_shadow(shadow: Shadow) -> None:
    await shadow.drain()
    if shadow.text is not None:
        await shadow.text.scorer.model.close()


async def _close_after(scorer: TextScorer, in_flight: list[asyncio.Task[None]]) -> None:
    await asyncio.gather(*in_flight, return_exceptions=True)  # their errors are the run loop's to raise
    await scorer.model.close()
