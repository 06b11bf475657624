"""Profile updates: the schema, the contract derived from it, the writes planned, the ingester's settling."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from modstream.cli import app
from schemas import DeadLetter, ProfileUpdate
from schemas.profiles import PROFILE_FIELDS
from tests.unit.fakes import FakeSink, FakeSource
from workers.adapters.redis_layout import Layout
from workers.adapters.redis_profiles import write_calls
from workers.kafka.delivery import DeadLetters
from workers.profiles.app import ProfileIngester
from workers.records import InMsg
from workers.state.keyspace import Keyspace
from workers.state.profile_fields import ENCODINGS, STAMP_SUFFIX, ProfileWrite, contract, plan

KS = Keyspace("p:")
AT = "2025-03-01T12:00:00Z"


def record(entity: str = "user", id: str = "u1", updated_at: str = AT, **fields: Any) -> bytes:
    return json.dumps({"entity": entity, "id": id, "updated_at": updated_at, "fields": fields}).encode()


def update(value: bytes) -> ProfileUpdate:
    return ProfileUpdate.model_validate_json(value, strict=True)


def test_a_partial_user_update_is_valid() -> None:
    u = update(record(followers=120, verified=False)).root
    assert (u.entity, u.id, u.updated_at) == ("user", "u1", datetime(2025, 3, 1, 12, tzinfo=UTC))
    assert u.fields.model_dump(exclude_none=True) == {"followers": 120, "verified": False}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (record(reputation=0.5), "a domain field on a user"),
        (record("domain", "example.com", verified=True), "a user field on a domain"),
        (record("ip", "192.0.2.1", posts=1), "an entity without profile fields"),
        (record(friends=-1), "a negative count"),
        (record(friends="3"), "a string for a number (strict)"),
        (record(verified=1), "an integer for a bool (strict)"),
        (record("domain", "example.com", reputation=1.5), "a reputation over 1"),
        (record("domain", "Example.com", reputation=0.5), "an upper-case domain"),
        (record("domain", "localhost", reputation=0.5), "a domain without a dot"),
        (record(created_at="2019-06-01T08:30:00"), "a naive datetime"),
        (record(updated_at="2025-03-01T12:00:00", friends=1), "a naive updated_at"),
        (record(), "no fields"),
        (record(friends=None), "only nulls"),
        (record(posts=3), "a counter modstream keeps"),
        (b'{"entity": "user", "id": "u1", "fields": {"friends": 1}}', "no updated_at"),
    ],
)
def test_invalid_updates_are_rejected(value: bytes, why: str) -> None:
    with pytest.raises(ValidationError):
        update(value)


def test_the_contract_lists_every_profile_field_under_the_prefix() -> None:
    c = contract(Keyspace("modstream:"))["entities"]
    assert {e: c[e]["key"] for e in c} == {"user": "modstream:user:{id}", "domain": "modstream:domain:{id}"}
    assert {e: set(c[e]["fields"]) for e in c} == {e: set(m.model_fields) for e, m in PROFILE_FIELDS.items()}
    assert c["user"]["fields"]["verified"]["encoding"] == ENCODINGS["boolean"].describes
    assert c["user"]["fields"]["created_at"]["encoding"] == ENCODINGS["date-time"].describes
    assert c["domain"]["fields"]["reputation"] | {"description": ""} == {
        "encoding": ENCODINGS["number"].describes,
        "minimum": 0.0,
        "maximum": 1.0,
        "write": "if absent",
        "description": "",
    }
    assert STAMP_SUFFIX in c["user"]["fields"]["friends"]["write"]
    json.dumps(c)  # JSON-ready


def test_plan_encodes_only_the_given_fields() -> None:
    updates = [
        update(record(created_at="2019-06-01T08:30:00+02:00", friends=3, verified=True, email_disposable=None)),
        update(record("domain", "example.com", "2025-03-01T12:00:00.000001Z", reputation=1, created_at=AT)),
    ]
    user, domain = plan(updates, KS)
    assert user == ProfileWrite(
        "user",
        "p:user:u1",
        1_740_830_400_000_000,
        (
            ("created_at", str(int(datetime(2019, 6, 1, 6, 30, tzinfo=UTC).timestamp()))),
            ("friends", "3"),
            ("verified", "1"),
        ),
        (),
    )
    assert domain == ProfileWrite(
        "domain",
        "p:domain:example.com",
        1_740_830_400_000_001,
        (("created_at", "1740830400"),),
        (("reputation", "1.0"),),
    )


def test_write_args_frame_each_write_and_name_keys_by_index() -> None:
    (w,) = plan([update(record("domain", "example.com", reputation=0.25, created_at=AT))], KS)
    (u,) = plan([update(record("user", "u1", created_at=AT))], KS)
    one = [1, w.at_us, 1, "created_at", "1740830400", 1, "reputation", "0.25"]
    (call,) = write_calls([w, w], Layout()).by_group.values()
    assert call.keys == {"p:domain:example.com": 1} and call.args == [STAMP_SUFFIX, *one, *one]
    # On a cluster, one call per slot: every script touches keys of one slot only.
    calls = write_calls([w, u, w], Layout(shards=16)).by_group
    assert sorted(c.keys.popitem()[0] for c in calls.values()) == ["p:domain:example.com", "p:user:u1"]


class FakeProfileStore:
    def __init__(self, failures: int = 0) -> None:
        self.writes: list[ProfileWrite] = []
        self.failures = failures

    async def write(self, writes: Sequence[ProfileWrite]) -> tuple[int, int]:
        if self.failures:
            self.failures -= 1
            raise TimeoutError("redis down")
        self.writes += writes
        return sum(len(w.newest) + len(w.initial) for w in writes), 0


def msg(offset: int, value: bytes | None) -> InMsg:
    return InMsg("profiles", 0, offset, b"k", value, 0.0)


def ingester(source: FakeSource, sink: FakeSink, store: FakeProfileStore) -> ProfileIngester:
    dlq = DeadLetters("profiles.dlq", "modstream-profiles", 1024)
    return ProfileIngester(source, sink, store, KS, dlq, 10, 0.01, 1.0)


async def test_a_batch_is_written_and_dead_lettered_before_its_offsets_are_stored() -> None:
    msgs = [msg(0, record(friends=1)), msg(1, b"{not json"), msg(2, None), msg(3, record(verified=True))]
    source, sink, store = FakeSource([msgs]), FakeSink(), FakeProfileStore()
    stop = asyncio.Event()
    assert await ingester(source, sink, store).handle(msgs, stop)
    assert [w.newest for w in store.writes] == [(("friends", "1"),), (("verified", "1"),)]
    letters = [DeadLetter.from_record(value, headers) for _, _, value, headers in sink.records]
    assert [(d.offset, d.original) for d in letters] == [(1, b"{not json"), (2, b"")]
    assert {r[0] for r in sink.records} == {"profiles.dlq"}
    assert source.stored == {("profiles", 0): 4}


async def test_redis_is_retried_and_a_stop_leaves_the_batch_uncommitted() -> None:
    msgs = [msg(0, record(friends=1))]
    source, store = FakeSource([]), FakeProfileStore(failures=1)
    stop = asyncio.Event()
    assert await ingester(source, FakeSink(), store).handle(msgs, stop)  # retried after one failure
    assert len(store.writes) == 1 and source.stored == {("profiles", 0): 1}

    source, store = FakeSource([]), FakeProfileStore(failures=100)
    stop.set()
    assert not await ingester(source, FakeSink(), store).handle(msgs, stop)
    assert source.stored == {}


async def test_run_settles_batches_until_stopped_and_closes_the_source() -> None:
    source, store = FakeSource([[msg(0, record(friends=1))], [msg(1, record(friends=2))]]), FakeProfileStore()
    stop = asyncio.Event()
    task = asyncio.create_task(ingester(source, FakeSink(), store).run(stop))

    # Wait for the second batch's offset, not a fixed pause after the queue empties: a busy machine
    # may take longer than any pause to settle it.
    async def settled() -> None:
        while source.stored.get(("profiles", 0)) != 2:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(settled(), 5)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert source.stored == {("profiles", 0): 2} and source.closed


def test_the_cli_exports_the_contract_and_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "contract.json"
    result = CliRunner().invoke(app, ["profile-contract", "--out", str(out)], env={"MODSTREAM_REDIS_PREFIX": "x:"})
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == contract(Keyspace("x:"))
    result = CliRunner().invoke(app, ["schema", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    schema = json.loads((tmp_path / "ProfileUpdate.schema.json").read_text())
    assert schema["discriminator"]["propertyName"] == "entity"
