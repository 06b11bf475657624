"""Where keys go on one Redis and on a Redis Cluster: every script call's keys in one hash slot."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from tests.unit.workers.state.test_signals import T0, post
from workers.adapters.redis_layout import Layout
from workers.adapters.redis_store import apply_calls, signal_calls
from workers.state import signals
from workers.state.keyspace import Keyspace
from workers.state.reputation import Change, Judgement, Plan, Report

KS = Keyspace("t:")


def signal_plans() -> list[signals.Plan]:
    posts = [post(f"p{i}", f"u{i % 5}", at=T0 + 60 * i, urls=[f"https://d{i % 7}.example/x"]) for i in range(40)]
    return signals.plans(posts, KS, 600)


def feedback_plan() -> Plan:
    changes = tuple(
        Change(
            f"e{i}",
            {(KS.user(f"u{i}"), "reports"): 1, (KS.domain(f"d{i % 3}.example"), "reports"): 1},
            {f"d{i % 3}.example": 1},
            frozenset({f"d{i % 3}.example"}),
            frozenset(),
            report=Report(f"a{i % 4}", f"p{i}", 0.5, {KS.user(f"u{i}"): "user", KS.domain("d.example"): "domain"}),
            judgement=Judgement(f"p{i + 1}", "confirmed", frozenset({f"a{i % 4}", "a{9}"})),  # braces: a hash tag
        )
        for i in range(20)
    )
    return Plan(changes, frozenset(d for c in changes for d in c.domains), frozenset())


def test_one_node_keeps_the_keyspace_names_in_one_call() -> None:
    plans = signal_plans()
    (call,) = signal_calls(plans, Layout()).by_group.values()
    names = {k for p in plans for k in (p.snapshot, *(c.key for c in p.counts), *(f.key for f in p.first_seen))}
    assert names <= set(call.keys)
    assert [i for i, _ in call.parts] == list(range(len(plans)))  # one part per post, in order
    (apply,) = apply_calls(feedback_plan(), KS, Layout(), 60, 0.1).by_group.values()
    assert KS.feedback_applied("e0") in apply.keys and [e for e, _ in apply.parts] == list(range(20))
    assert apply.parts[0] == (0, ["user", "domain", "post", "confirmed", "confirmed"])  # what each answer counts
    assert {KS.reported("a0", KS.user("u0")), KS.reporters("p0"), KS.judged("a{9}", "p1")} <= set(apply.keys)


def test_on_a_cluster_every_script_call_touches_one_slot_and_covers_every_value() -> None:
    layout = Layout(shards=16)
    plans = signal_plans()
    calls = signal_calls(plans, layout).by_group
    assert len(calls) > 4  # the shared hashes are spread over slots
    covered: dict[int, list[int]] = {}
    for slot, call in calls.items():
        assert {key_slot(k.encode()) for k in call.keys} == {slot}
        for i, positions in call.parts:
            covered.setdefault(i, []).extend(positions)
    assert {i: sorted(p) for i, p in covered.items()} == {i: list(range(len(p.features))) for i, p in enumerate(plans)}
    applies = apply_calls(feedback_plan(), KS, layout, 60, 0.1).by_group
    for slot, call in applies.items():
        assert {key_slot(k.encode()) for k in call.keys} == {slot}
    answers: dict[int, list[str]] = {}
    for call in applies.values():
        for e, labels in call.parts:
            answers.setdefault(e, []).extend(labels)
    every = ["confirmed", "confirmed", "domain", "post", "user"]  # each answer of an event, in some part
    assert sorted(answers) == list(range(20)) and all(sorted(labels) == every for labels in answers.values())


def test_a_signal_and_its_previous_bucket_share_a_shard() -> None:
    layout = Layout(shards=64)
    (a, group), (b, _) = layout.spread("t:sig:lf:172800:10", "abc"), layout.spread("t:sig:lf:172800:9", "abc")
    assert key_slot(a.encode()) == key_slot(b.encode()) == group
    assert layout.spread("t:sig:lf:172800:10", "abc") == (a, group) and a != "t:sig:lf:172800:10"
    assert Layout().spread("t:sig:lf:172800:10", "abc") == ("t:sig:lf:172800:10", 0)
    assert key_slot(layout.beside("t:sig:snap", 1234).encode()) == 1234


def test_one_redis_packs_commands_as_redis_py_would() -> None:
    from redis.asyncio.connection import Connection
    from redis.exceptions import DataError

    from workers.adapters.redis_layout import connect

    packing = connect("redis://127.0.0.1:1/0", 1.0).connection_pool.connection_class()
    commands = [
        ("EVALSHA", "ab" * 20, 2, "k:1", "k:2", "café", 0, -3, 86_400, 0.1, 1.5e-7, b"\x00\xff"),
        ("SCRIPT LOAD", "return 1"),  # a command name of two words
        ("HGETALL", "x" * 10_000),  # longer than redis-py's buffer cutoff
    ]
    assert b"".join(packing.pack_commands(commands)) == b"".join(Connection().pack_commands(commands))
    with pytest.raises(DataError):
        packing.pack_command("SET", "k", True)
