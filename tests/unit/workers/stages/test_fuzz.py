"""Fuzzing the parts that read hostile input: validation, link extraction, ban matching. 0 crashes."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.events import canonical_ip
from workers.records import InMsg
from workers.stages.short_circuit import BanList, short_circuit
from workers.stages.validate import validate
from workers.text.urls import domain_candidates, extract_links

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text that looks like links often enough to reach the URL code's corners.
link_parts = st.sampled_from(
    ["http://", "hxxps://", "https:\\\\", "www.", "[.]", "(dot)", ".", "/", "\\", ":", "@", "?", "#", "%", "xn--",
     "evil", "com", "co.uk", "192.0.2.1", "[::1]", "\u200b", "ｅｖｉｌ", "é", "..", " ", "\x00", "-"]
)  # fmt: skip
linky_text = st.lists(st.one_of(link_parts, st.text(max_size=8)), max_size=40).map("".join)
labels = st.one_of(st.sampled_from(["evil", "com", "co", "uk", "xn--p1ai", "ü", ""]), st.text(max_size=6))
hosts = st.lists(labels, max_size=12).map(".".join)
ips = st.one_of(st.ip_addresses().map(str), st.text(max_size=45))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
fields = st.fixed_dictionaries(
    {},
    optional={
        "post_id": st.one_of(st.text(max_size=20), json_values),
        "user_id": st.one_of(st.just("u1"), json_values),
        "created_at": st.one_of(st.just("2026-11-21T10:00:00Z"), st.text(max_size=30), json_values),
        "text": st.one_of(linky_text, json_values),
        "urls": st.one_of(st.lists(linky_text, max_size=4), json_values),
        "ip": st.one_of(ips, json_values),
        "platform": st.one_of(st.just("web"), json_values),
        "journey": json_values,
        "link_text": st.one_of(st.none(), linky_text),
        "media_text": st.one_of(st.none(), linky_text),
    },
)
records = st.one_of(st.binary(max_size=300), fields.map(lambda d: json.dumps(d).encode()))


@FUZZ
@given(st.lists(records, min_size=1, max_size=8))
def test_validate_turns_every_record_into_a_post_or_a_failure(values: list[bytes]) -> None:
    batch = [InMsg("posts", 0, i, None, v, 0.0) for i, v in enumerate(values)]
    posts, failures = validate(batch)
    assert sorted([p.msg.offset for p in posts] + [f.msg.offset for f in failures]) == list(range(len(batch)))
    # Only the input's own faults: nothing was caught from a crash inside a step.
    assert {f.error_class for f in failures} <= {"ValidationError", "EmptyRecord"}


@FUZZ
@given(linky_text, st.lists(linky_text, max_size=4))
def test_link_extraction_never_raises(text: str, explicit: list[str]) -> None:
    for link in extract_links(text, explicit):
        assert link.host and link.domain and domain_candidates(link.host)


@FUZZ
@given(hosts, ips, st.lists(hosts, max_size=4), st.lists(st.sampled_from(["10.0.0.0/8", "2001:db8::/32", "192.0.2.7"])))
def test_ban_matching_never_raises(host: str, ip: str, banned: list[str], banned_ips: list[str]) -> None:
    bans = BanList.parse(banned, banned_ips)
    bans.domain_hit(host)
    try:
        canonical = canonical_ip(ip)
    except ValueError:
        return  # validation rejects it before matching
    bans.ip_hit(canonical)


@FUZZ
@given(st.lists(linky_text, min_size=1, max_size=4), st.lists(hosts, max_size=3))
def test_short_circuit_decides_or_fails_every_post(texts: list[str], banned: list[str]) -> None:
    batch = [
        InMsg("posts", 0, i, None, json.dumps({"post_id": f"p{i}", "user_id": "u", "created_at": "2026-11-21T10:00:00Z",
              "text": t[:10_000], "ip": "192.0.2.7", "platform": "web"}).encode(), 0.0)
        for i, t in enumerate(texts)
    ]  # fmt: skip
    posts, _ = validate(batch)
    blocked, rest, failed = short_circuit(posts, BanList.parse([*banned, "evil.com"], ["192.0.2.0/24"]), {})
    assert not failed and len(blocked) + len(rest) == len(posts)
