"""The input contract: a tolerant reader (schema evolution, what real producers send) and a
strict writer. Contract tests are generated from the exported JSON Schema."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from prometheus_client import REGISTRY
from pydantic import ValidationError
from typer.testing import CliRunner

from modstream.cli import app
from schemas import Verdict
from tests.unit.fakes import DROP, KINDS, FakeStore, body
from tests.unit.schema_strategy import from_schema
from tests.unit.workers.test_moderation import KS, make_worker, verdicts
from workers.metrics import BoundedLabels
from workers.records import InMsg
from workers.stages import enrich
from workers.stages.decide import facts_of
from workers.stages.short_circuit import BanList, short_circuit
from workers.stages.validate import validate
from workers.state.signals import COUNTED
from workers.text.encoder import TextEncoder


def as_msgs(*events: dict[str, Any] | bytes) -> list[InMsg]:
    return [
        InMsg("posts", 0, i, f"k{i}".encode(), e if isinstance(e, bytes) else json.dumps(e).encode(), 0.0)
        for i, e in enumerate(events)
    ]


def unknown_count(field: str) -> float:
    return REGISTRY.get_sample_value("modstream_input_unknown_fields_total", {"field": field}) or 0.0


def test_every_kind_of_post_producers_send_is_read() -> None:
    posts, failures = validate(as_msgs(*KINDS.values()))
    assert not failures and len(posts) == len(KINDS)
    by = {list(KINDS)[p.msg.offset]: p.event for p in posts}
    assert by["no-ip"].ip is None and by["null-ip"].ip is None and by["no-platform"].platform is None
    assert by["int-id"].post_id == "1234567890123"  # an id is text from here on: verdicts carry it so
    assert by["epoch-ms"].created_at.isoformat() == "2026-11-21T10:00:00+00:00"
    assert by["slashy-user"].user_id == "aGVsbG8/d29y+bGQ=/=="


def test_unknown_fields_are_ignored_and_counted_with_nested_ones_by_path() -> None:
    before = unknown_count("surprise"), unknown_count("journey.pressure")
    journey = [{"name": "open", "offset_ms": 0, "pressure": 0.5}, {"name": "submit", "offset_ms": 900, "pressure": 1}]
    (post,), _ = validate(as_msgs(body("x", surprise=1, journey=journey)))
    assert post.event.journey[1].offset_ms == 900
    # Counted once per post that carried it, however many journey steps did.
    assert (unknown_count("surprise"), unknown_count("journey.pressure")) == (before[0] + 1, before[1] + 1)


def test_unknown_field_labels_are_cut_and_capped() -> None:
    labels = BoundedLabels(limit=3, chars=8)
    assert [labels(n) for n in ("a", "b", "a-very-long-name", "c", "a", "d")] == [
        "a",
        "b",
        "a-very-l",
        "other",
        "a",
        "other",
    ]


@pytest.mark.parametrize(
    ("kw", "where"),
    [
        ({"post_id": True}, "post_id"),  # a boolean is no integer id
        ({"post_id": 2**64}, "post_id"),
        ({"post_id": 1.5}, "post_id"),
        ({"user_id": "tab\there"}, "user_id"),  # control characters would garble logs and keys
        ({"user_id": "x" * 257}, "user_id"),
        ({"user_id": ""}, "user_id"),
        ({"created_at": -1}, "created_at"),
        ({"created_at": 253_402_300_800_000}, "created_at"),  # past year 9999
        ({"created_at": "2026-11-21T10:00:00"}, "created_at"),  # no offset: which time is it?
        ({"ip": "999.0.0.1"}, "ip"),
        ({"platform": ""}, "platform"),
        ({"text": DROP}, "text"),
        ({"link_text": "x" * 20_001}, "link_text"),
    ],
)
def test_what_is_still_refused_is_refused_with_its_field_named(kw: dict[str, Any], where: str) -> None:
    posts, (failure,) = validate(as_msgs(body("bad", **kw)))
    assert not posts and failure.error_class == "ValidationError" and where in failure.error_message


def test_an_over_long_text_is_judged_on_its_head() -> None:
    (post,), _ = validate(as_msgs(KINDS["long-text"]), max_text_chars=1000)
    assert len(post.event.text) == 1000 and post.cut_from_chars == 50_000
    assert facts_of(post).text_chars == 1000  # the feature sees what was judged, as in training
    (whole,), _ = validate(as_msgs(body("short", text="x" * 1000)), max_text_chars=1000)
    assert whole.cut_from_chars is None


async def test_a_post_without_an_ip_is_enriched_without_ip_history() -> None:
    posts, _ = validate(as_msgs(KINDS["no-ip"], KINDS["control"]))
    store = FakeStore()
    no_ip, control = await enrich.enrich(posts, store, KS, 600)
    assert [k for k in store.keys_asked if k.startswith(KS.ip(""))] == [KS.ip("192.0.2.10")]
    without, with_ip = dict(zip(COUNTED, no_ip.signals, strict=True)), dict(zip(COUNTED, control.signals, strict=True))
    assert math.isnan(without["ip_posts_24h"]) and math.isnan(without["ip_users_24h"])  # missing, as a feature
    assert without["user_posts_1h"] == 0 and with_ip["ip_posts_24h"] == 0 and with_ip["user_posts_1h"] == 1


def test_a_post_without_an_ip_is_not_matched_against_banned_ips() -> None:
    posts, _ = validate(as_msgs(KINDS["no-ip"], KINDS["null-ip"]))
    blocked, rest, failed = short_circuit(posts, BanList.parse([], ["0.0.0.0/0", "::/0"]), {})
    assert not blocked and not failed and len(rest) == 2


async def test_each_kind_gets_a_strict_verdict_and_a_cut_text_says_so(encoder: TextEncoder) -> None:
    batch = as_msgs(*KINDS.values())
    w = make_worker(encoder, batch)
    await w.handle(batch)
    out = verdicts(w.sink)  # type: ignore[arg-type]
    ids = {e["post_id"] if isinstance(e["post_id"], str) else str(e["post_id"]) for e in KINDS.values()}
    assert set(out) == ids and w.source.stored == {("posts", 0): len(KINDS)}  # type: ignore[attr-defined]
    (cut,) = [r for r in out["long-text"].reasons if r.code == "text_truncated"]
    assert cut.detail == "judged on the first 10000 of 50000 characters"
    assert not any(r.code == "text_truncated" for v in out.values() if v.post_id != "long-text" for r in v.reasons)
    # The writer stays strict: a verdict has no room for what a producer added.
    with pytest.raises(ValidationError):
        Verdict.model_validate({**out["extra"].model_dump(), "surprise": True})


# --- contract tests generated from the exported JSON Schema ---


def exported_schema(name: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    schema: dict[str, Any] = json.loads(result.stdout)[name]
    return schema


POST_SCHEMA = exported_schema("PostEvent")
SCHEMA_CHECK = Draft202012Validator(POST_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER)
CONTRACT = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@CONTRACT
@given(from_schema(POST_SCHEMA))
def test_every_event_the_schema_allows_is_read(instance: dict[str, Any]) -> None:
    posts, failures = validate(as_msgs(instance))
    assert not failures, failures[0].error_message
    assert posts[0].event.post_id == str(instance["post_id"])
    SCHEMA_CHECK.validate(instance)  # and the generator made what the schema says


def _breakage(instance: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``instance`` with one field dropped, nulled or replaced by another JSON value."""
    values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20), st.just([]))
    field = st.sampled_from([*POST_SCHEMA["properties"], "surprise"])
    return st.one_of(
        field.map(lambda f: {k: v for k, v in instance.items() if k != f}),
        st.tuples(field, values).map(lambda fv: {**instance, fv[0]: fv[1]}),
    )


@settings(
    max_examples=40,
    deadline=None,
    # The encoder fixture is stateless: one per test, not per example, is fine.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(
    instances=st.lists(from_schema(POST_SCHEMA).flatmap(_breakage) | from_schema(POST_SCHEMA), min_size=1, max_size=6)
)
def test_every_event_near_the_schema_becomes_a_verdict_or_a_dead_letter(
    instances: list[dict[str, Any]], encoder: TextEncoder
) -> None:
    """Through the whole worker (fakes for the servers): one output per record, never a crash."""
    import asyncio

    batch = as_msgs(*instances)
    w = make_worker(encoder, batch)
    asyncio.run(w.handle(batch))
    keys = [r[1] for r in w.sink.records]  # type: ignore[attr-defined]
    assert len(keys) == len(batch) and w.source.stored == {("posts", 0): len(batch)}  # type: ignore[attr-defined]
    # Only the input's own faults are dead-lettered, by validation: no step crashed on a post.
    stages = {dict(r[3])["dlq.stage"] for r in w.sink.records if r[0] == "posts.dlq"}  # type: ignore[attr-defined]
    assert stages <= {b"validate"}
