"""No single record can stop a partition: per-record failures become dead letters or verdicts."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from prometheus_client import REGISTRY

from schemas import DeadLetter, Reason
from schemas.events import REASON_DETAIL_MAX
from tests.unit.fakes import FakeSink, FakeStore, event
from tests.unit.workers.test_moderation import KS, make_worker, msgs, verdicts
from workers.kafka.delivery import LAST_RESORT_ORIGINAL_BYTES, DeliveryFailed
from workers.moderation import WORKER_STAGE
from workers.stages import decide as decide_stage
from workers.text.encoder import TextEncoder


def dead_letters(sink: FakeSink) -> list[DeadLetter]:
    return [DeadLetter.from_record(r[2], r[3]) for r in sink.records if r[0] == "posts.dlq"]


def test_a_reason_quoting_a_long_host_is_cut_to_fit() -> None:
    reason = Reason.of("banned_domain", "a" * 10_000 + " matches banned evil.com")
    assert len(reason.detail) == REASON_DETAIL_MAX and reason.detail.endswith("…")


async def test_a_very_long_host_under_a_banned_domain_is_blocked_not_a_crash(encoder: TextEncoder) -> None:
    host = ".".join(["x" * 60] * 30) + ".evil.com"  # ~1.8k characters, under the URL limit
    batch = msgs(event("long", urls=[f"https://{host}/p"]), event("ok"))
    w = make_worker(encoder, batch)
    await w.handle(batch)
    out = verdicts(w.sink)  # type: ignore[arg-type]
    assert out["long"].decision == "block" and out["long"].reasons[0].code == "banned_domain"
    assert w.source.stored == {("posts", 0): 2}  # type: ignore[attr-defined]


async def test_a_record_too_large_for_the_broker_is_dead_lettered_cut_with_its_size_and_hash(
    encoder: TextEncoder,
) -> None:
    huge = event("big", link_text="x" * 1_000_000)  # invalid (link text too long), over the producer's limit
    batch = msgs(huge, event("ok"))
    sink = FakeSink(max_bytes=1_000_000)
    w = make_worker(encoder, batch, sink=sink)
    await w.handle(batch)
    (dl,) = dead_letters(sink)
    assert dl.truncated and dl.original_size == len(huge) and dl.original_sha256 == hashlib.sha256(huge).hexdigest()
    assert huge.startswith(dl.original) and len(dl.original) == w.settings.dead_letter_max_bytes
    assert set(verdicts(sink)) == {"ok"} and w.source.stored == {("posts", 0): 2}  # type: ignore[attr-defined]


async def test_a_dead_letter_the_broker_still_refuses_is_cut_to_the_last_resort(encoder: TextEncoder) -> None:
    huge = event("big", link_text="x" * 200_000)
    batch = msgs(huge)
    sink = FakeSink(max_bytes=100_000)  # a broker stricter than the configured dead-letter limit
    w = make_worker(encoder, batch, sink=sink)
    await w.handle(batch)
    (dl,) = dead_letters(sink)
    assert dl.truncated and len(dl.original) == LAST_RESORT_ORIGINAL_BYTES and dl.original_size == len(huge)
    assert sink.refused == 1 and w.source.stored == {("posts", 0): 1}  # type: ignore[attr-defined]


async def test_a_verdict_the_broker_refuses_dead_letters_its_input(encoder: TextEncoder) -> None:
    batch = msgs(event("a"))
    sink = FakeSink(max_bytes=200)  # verdicts are larger than this; the small input is not
    w = make_worker(encoder, batch, sink=sink)
    await w.handle(batch)
    (dl,) = dead_letters(sink)
    assert dl.stage == "publish" and dl.error_class == "MSG_SIZE_TOO_LARGE" and dl.original == batch[0].value
    assert w.source.stored == {("posts", 0): 1}  # type: ignore[attr-defined]


async def test_an_error_no_step_catches_dead_letters_only_its_record(
    encoder: TextEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = decide_stage.decide

    def decide_choking_on_poison(posts, *args, **kw):  # type: ignore[no-untyped-def]
        if any(p.event.post_id == "poison" for p in posts):
            raise RecursionError("a bug that one record triggers")
        return real(posts, *args, **kw)

    monkeypatch.setattr(decide_stage, "decide", decide_choking_on_poison)
    retries = REGISTRY.get_sample_value("modstream_record_retries_total") or 0.0
    batch = msgs(event("a"), event("poison"), event("b"))
    w = make_worker(encoder, batch)
    await w.handle(batch)
    assert set(verdicts(w.sink)) == {"a", "b"}  # type: ignore[arg-type]
    (dl,) = dead_letters(w.sink)  # type: ignore[arg-type]
    assert (dl.offset, dl.stage, dl.error_class) == (1, WORKER_STAGE, "RecursionError")
    assert "a bug that one record triggers" in dl.error_message
    assert REGISTRY.get_sample_value("modstream_record_retries_total") == retries + w.settings.max_record_attempts
    assert w.source.stored == {("posts", 0): 3}  # type: ignore[attr-defined]


async def test_a_failed_batch_still_closes_the_source(encoder: TextEncoder) -> None:
    batch = msgs(event("a"))
    w = make_worker(encoder, batch, sink=FakeSink(fail_tokens={0}))
    with pytest.raises(DeliveryFailed):
        await w.run(asyncio.Event())
    assert w.source.closed  # type: ignore[attr-defined]


async def test_a_cancelled_worker_still_closes_the_source(encoder: TextEncoder) -> None:
    w = make_worker(encoder, [], store=FakeStore(sets={KS.banned_domains: set()}))
    task = asyncio.create_task(w.run(asyncio.Event()))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert w.source.closed  # type: ignore[attr-defined]
