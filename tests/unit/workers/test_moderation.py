"""The whole worker loop over in-memory fakes: one output per input, bans, degradation, commits."""

import asyncio
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from schemas import DeadLetter, Verdict
from tests.unit.fakes import (
    FakeSink,
    FakeSource,
    FakeStore,
    FakeTextModel,
    FakeTransactions,
    event,
    tiny_decision_model,
)
from workers.config import Settings
from workers.kafka.batch_ramp import BatchRamp
from workers.kafka.delivery import DeliveryFailed
from workers.moderation import ModerationWorker
from workers.records import InMsg
from workers.stages.score import ScoreCache, TextScorer
from workers.stages.short_circuit import BanListCache
from workers.state.keyspace import Keyspace
from workers.state.signals import Plan as SignalPlan
from workers.text.encoder import TextEncoder

KS = Keyspace("t:")


def msgs(*values: bytes | None) -> list[InMsg]:
    return [InMsg("posts", 0, i, f"k{i}".encode(), v, 0.0) for i, v in enumerate(values)]


def make_worker(
    encoder: TextEncoder,
    batch: list[InMsg],
    *,
    store: FakeStore | None = None,
    model: FakeTextModel | None = None,
    sink: FakeSink | None = None,
    transactions: FakeTransactions | None = None,
    ramp: BatchRamp | None = None,
    settings: Settings | None = None,
) -> ModerationWorker:
    store = store or FakeStore(sets={KS.banned_domains: {"evil.com"}, KS.banned_ips: {"203.0.113.0/24"}})
    model = model or FakeTextModel(encoder.tokenize(["cheap"])[0][1])
    return ModerationWorker(
        settings or Settings(redis_prefix="t:"),
        FakeSource([batch]),
        sink or FakeSink(),
        store,
        TextScorer(encoder, model, sub_batch=2, max_in_flight=2, cache=ScoreCache(100)),
        tiny_decision_model(),
        BanListCache(store, KS, refresh_s=60),
        transactions=transactions,
        ramp=ramp,
    )


def verdicts(sink: FakeSink) -> dict[str, Verdict]:
    return {v.post_id: v for v in (Verdict.model_validate_json(r[2]) for r in sink.records if r[0] == "verdicts")}


async def test_every_input_gets_exactly_one_output_and_offsets_are_stored(encoder: TextEncoder) -> None:
    batch = msgs(
        event("ok1"),
        event("spam1", "buy cheap pills"),
        b"{broken",
        event("ban1", "see hxxp://x.evil[.]com"),
        event("ban2", ip="203.0.113.9"),
        None,
    )
    w = make_worker(encoder, batch)
    await w.handle(batch)
    out = verdicts(w.sink)  # type: ignore[arg-type]
    dlq = [r for r in w.sink.records if r[0] == "posts.dlq"]  # type: ignore[attr-defined]
    assert len(out) + len(dlq) == len(batch)
    assert out["spam1"].decision == "block" and out["ok1"].decision == "allow"
    assert [r.code for r in out["ban1"].reasons] == ["banned_domain"] and out["ban1"].decision == "block"
    assert out["ban2"].reasons[0].code == "banned_ip"
    assert w.source.stored == {("posts", 0): len(batch)}  # type: ignore[attr-defined]
    assert all(v.model_versions["text"] == "fake-1" for v in out.values())


async def test_banned_posts_never_reach_the_text_model(encoder: TextEncoder) -> None:
    batch = msgs(event("ban1", "cheap http://evil.com"), event("ban2", urls=["https://a.b.evil.com/p"]))
    w = make_worker(encoder, batch)
    await w.handle(batch)
    assert w.scorer.model.batches == []  # type: ignore[attr-defined]
    assert {v.decision for v in verdicts(w.sink).values()} == {"block"}  # type: ignore[arg-type]


async def test_dead_letters_keep_original_bytes_and_provenance(encoder: TextEncoder) -> None:
    batch = msgs(b'{"post_id": true}')
    w = make_worker(encoder, batch)
    await w.handle(batch)
    ((topic, key, value, headers),) = w.sink.records  # type: ignore[attr-defined]
    dl = DeadLetter.from_record(value, headers)
    assert (topic, key, dl.original, dl.topic, dl.offset) == ("posts.dlq", b"k0", b'{"post_id": true}', "posts", 0)
    assert dl.error_class == "ValidationError" and "post_id" in dl.error_message and dl.group


async def test_text_model_outage_degrades_instead_of_failing(encoder: TextEncoder) -> None:
    batch = msgs(event("a"), event("b", "cheap"))
    w = make_worker(encoder, batch, model=FakeTextModel(0, fail=True))
    await w.handle(batch)
    out = verdicts(w.sink)  # type: ignore[arg-type]
    assert len(out) == 2 and all(v.degraded and "text" not in v.stage_scores for v in out.values())
    assert all(any(r.code == "degraded" for r in v.reasons) for v in out.values())


async def test_redis_outage_degrades_instead_of_failing(encoder: TextEncoder) -> None:
    batch = msgs(event("a"))
    w = make_worker(encoder, batch, store=FakeStore(fail=True))
    await w.handle(batch)
    (v,) = verdicts(w.sink).values()  # type: ignore[arg-type]
    assert v.degraded and "text" in v.stage_scores


async def test_enrichment_is_one_round_trip_per_batch(encoder: TextEncoder) -> None:
    batch = msgs(*(event(f"p{i}", f"text {i} https://site{i}.org/") for i in range(20)))
    store = FakeStore()
    w = make_worker(encoder, batch, store=store)
    await w.handle(batch)
    assert store.calls == 1
    # 20 URLs and 20 domains, but one user and one IP, each asked once
    assert len(store.keys_asked) == len(set(store.keys_asked)) == 20 * 2 + 2


async def test_undelivered_output_holds_back_the_commit(encoder: TextEncoder) -> None:
    batch = msgs(event("a"), event("b"), event("c"))
    w = make_worker(encoder, batch, sink=FakeSink(fail_tokens={1}))
    with pytest.raises(DeliveryFailed):
        await w.handle(batch)
    assert w.source.stored == {("posts", 0): 1}  # type: ignore[attr-defined]


async def test_run_drains_and_closes_on_stop(encoder: TextEncoder) -> None:
    batch = msgs(event("a"))
    w = make_worker(encoder, batch)
    stop = asyncio.Event()

    async def stop_soon() -> None:
        while not w.sink.records:  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
        stop.set()

    await asyncio.gather(w.run(stop), stop_soon())
    assert w.source.closed and w.source.stored  # type: ignore[attr-defined]


async def test_batches_start_small_after_an_assignment_and_grow(encoder: TextEncoder) -> None:
    w = make_worker(encoder, [], ramp=BatchRamp(2, 6))
    w.source.batches = [msgs(event(f"p{i}")) for i in range(3)]  # type: ignore[attr-defined]
    stop = asyncio.Event()

    # Stop after the fourth poll, not when the queue empties: the worker may see the stop
    # before it polls again, which made this test flaky.
    async def stop_after_four_polls() -> None:
        while len(w.source.sizes) < 4:  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
        stop.set()

    await asyncio.gather(w.run(stop), stop_after_four_polls())
    assert w.source.sizes[:4] == [2, 4, 6, 6]  # type: ignore[attr-defined]


def test_padding_rounds_widths_up_to_the_multiple() -> None:
    from workers.text.encoder import pad

    ids, mask = pad([[1, 2, 3], [4]], multiple=16)
    assert ids.shape == mask.shape == (2, 16) and mask.sum() == 4
    assert pad([[1, 2, 3]])[0].shape == (1, 3)


async def test_repeated_texts_are_scored_once(encoder: TextEncoder) -> None:
    model = FakeTextModel(encoder.tokenize(["cheap"])[0][1])
    scorer = TextScorer(encoder, model, sub_batch=8, max_in_flight=2, cache=ScoreCache(100))
    first = await scorer.score(["Buy CHEAP  pills", "hello", "buy cheap pills"])
    assert first[0] == first[2] > 0.9 > first[1]
    assert sum(shape[0] for shape in model.batches) == 2  # the campaign duplicate was not re-scored
    await scorer.score(["buy cheap pills"])
    assert len(model.batches) == 1  # served from the cache


def test_cutting_long_texts_before_tokenizing_keeps_the_same_ids(tokenizer_json: Path) -> None:
    from tokenizers import Tokenizer

    enc = TextEncoder(tokenizer_json, 16)
    reference = Tokenizer.from_file(str(tokenizer_json))
    reference.no_padding()
    reference.enable_truncation(max_length=16)
    texts = [
        "Subject: cheap meds " + "buy now and save big on everything you need " * 100,
        "short",
        "x" * 5000,  # one word across every cut
        "see " + "https://example.com/" + "a/b?c=d&" * 300,  # many characters per token
        "ok " * 31 + "supercalifragilisticexpialidocious" * 40,  # the cut lands inside a long word
        "café naïve résumé " * 200,  # accents are stripped after the cut
        "spam! " * 15 + "word" * 30 + " tail" * 500,
    ]
    assert enc.tokenize(texts) == [e.ids for e in reference.encode_batch(texts)]


@pytest.mark.parametrize(
    ("n", "sub_batch", "parallelism", "sizes"),
    [
        (0, 16, 2, []),
        (1, 16, 2, [1]),
        (7, 16, 2, [3, 4]),  # a small batch still uses both instances
        (20, 16, 1, [10, 10]),  # balanced, not 16 + 4
        (256, 16, 2, [16] * 16),
        (33, 16, 4, [8, 8, 8, 9]),  # at least one request per instance
    ],
)
def test_split_is_balanced_and_spreads_small_batches(
    n: int, sub_batch: int, parallelism: int, sizes: list[int]
) -> None:
    from workers.stages.score import split

    parts = split(n, sub_batch, parallelism)
    assert [len(p) for p in parts] == sizes
    assert [i for p in parts for i in p] == list(range(n))


def test_requests_cut_where_lengths_jump_and_keep_sizes_in_bounds() -> None:
    from workers.stages.score import requests, split

    lengths = sorted([10] * 20 + [40] * 12)  # fixed requests of 16 would pad four 10s to 40
    parts = requests(lengths, 16, 2)
    assert len(parts) == 3
    assert all(lengths[p[0]] == lengths[p[-1]] for p in parts)  # nothing padded
    assert [i for p in parts for i in p] == list(range(len(lengths)))
    # A batch too small for a full request per instance is split evenly, as before.
    assert requests([5] * 20, 16, 2) == split(20, 16, 2)


@pytest.mark.parametrize("sub_batch", [1, 2, 3, 7, 16])
def test_requests_cover_every_text_once_within_sizes(sub_batch: int) -> None:
    from workers.stages.score import requests

    rng = random.Random(sub_batch)
    for n in range(2 * sub_batch, 2 * sub_batch + 40):
        parts = requests(sorted(rng.randint(1, 60) for _ in range(n)), sub_batch, 2)
        assert [i for p in parts for i in p] == list(range(n))
        assert all(-(-sub_batch // 2) <= len(p) <= sub_batch for p in parts)


async def test_small_batches_are_split_across_model_instances(encoder: TextEncoder) -> None:
    model = FakeTextModel(encoder.tokenize(["cheap"])[0][1], parallelism=2)
    scorer = TextScorer(encoder, model, sub_batch=16, max_in_flight=4, cache=ScoreCache(0))
    await scorer.score(["a", "bb", "cheap", "dd dd"])
    assert sorted(shape[0] for shape in model.batches) == [2, 2]


class WaitsForWord(FakeTextModel):
    """A request holding ``word_id`` hangs until ``gate`` is set, so a later batch without the
    word can overtake it. (Waiting on the first request raced: a later batch's tokens can reach
    the model first.)"""

    def __init__(self, cheap_id: int, word_id: int, gate: asyncio.Event) -> None:
        super().__init__(cheap_id)
        self.word_id, self.gate = word_id, gate

    async def logits(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        out = await super().logits(input_ids, attention_mask)
        if (input_ids == self.word_id).any():
            await self.gate.wait()
        return out


class RecordingSource(FakeSource):
    """Keeps every ``store_offsets`` call in order (partition 0 only)."""

    def __init__(self, batches: list[list[InMsg]]) -> None:
        super().__init__(batches)
        self.order: list[int] = []

    def store_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        super().store_offsets(offsets)
        self.order.append(offsets[("posts", 0)])


def overtaking_worker(
    encoder: TextEncoder, sink: FakeSink, transactions: FakeTransactions | None = None
) -> tuple[ModerationWorker, RecordingSource, asyncio.Event]:
    """Batch one ("a", "b": "hello friends") waits in the model for the gate; batch two ("c")
    runs past it."""
    source = RecordingSource(
        [msgs(event("a"), event("b")), [InMsg("posts", 0, 2, b"k2", event("c", "see you soon"), 0.0)]]
    )
    gate = asyncio.Event()
    cheap_id, friends_id = (encoder.tokenize([word])[0][1] for word in ("cheap", "friends"))
    w = make_worker(encoder, [], model=WaitsForWord(cheap_id, friends_id, gate), sink=sink, transactions=transactions)
    w.source = source
    return w, source, gate


async def open_when_published(w: ModerationWorker, source: RecordingSource, gate: asyncio.Event) -> None:
    while "c" not in verdicts(w.sink):  # type: ignore[arg-type]
        await asyncio.sleep(0.005)
    assert source.order == []  # "c" is published, but its offset waits for batch one
    gate.set()


async def test_batches_overlap_but_offsets_are_stored_in_poll_order(encoder: TextEncoder) -> None:
    w, source, gate = overtaking_worker(encoder, FakeSink())
    stop = asyncio.Event()

    async def stop_when_stored() -> None:
        await open_when_published(w, source, gate)
        while len(source.order) < 2:
            await asyncio.sleep(0.005)
        stop.set()

    await asyncio.gather(w.run(stop), stop_when_stored())
    assert source.order == [2, 3] and set(verdicts(w.sink)) == {"a", "b", "c"}  # type: ignore[arg-type]


async def test_a_failed_batch_keeps_the_next_batch_from_committing(encoder: TextEncoder) -> None:
    """Batch one loses "b"; batch two is fully delivered but must not store its offset past
    the loss, or a restart would skip "b"."""
    w, source, gate = overtaking_worker(encoder, FakeSink(fail_tokens={1}))
    with pytest.raises(DeliveryFailed):
        await asyncio.gather(w.run(asyncio.Event()), open_when_published(w, source, gate))
    assert source.order == [1]  # only "a"


class SlowFirstBanList(FakeStore):
    """The ban list's first read is slow: the batch polled first still waits for it when the next
    batch, reading it again, reaches enrichment."""

    def __init__(self) -> None:
        super().__init__()
        self.reads, self.enriched = 0, list[list[str]]()

    async def members(self, keys: Sequence[str]) -> list[set[str]]:
        self.reads += 1
        if self.reads == 1:
            await asyncio.sleep(0.05)
        return await super().members(keys)

    async def enrich(
        self, keys: Sequence[str], plans: Sequence[SignalPlan]
    ) -> tuple[list[dict[str, str]], list[list[float]]]:
        self.enriched.append(list(keys))
        return await super().enrich(keys, plans)


async def test_batches_count_their_stream_signals_in_poll_order(encoder: TextEncoder) -> None:
    """A campaign's first copies and the stream's first sighting are counted in the order the posts
    came, even when the batch polled first is held up before its enrichment."""
    one, two = msgs(event("a", user_id="first")), msgs(event("b", user_id="second"))
    store = SlowFirstBanList()
    w = make_worker(encoder, one, store=store)
    await asyncio.gather(w.handle(one), w.handle(two))
    assert [any(k == KS.user("first") for k in keys) for keys in store.enriched] == [True, False]
