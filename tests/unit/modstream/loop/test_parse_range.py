"""The command line's range options, parsed: ISO times (UTC unless they name a zone) or offsets, and a
one-line RangeError for anything else."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from modstream.loop.topics import Range, RangeError, parse_range


def test_nothing_given_is_the_whole_topic() -> None:
    assert parse_range(None, None, None) == Range()


def test_a_time_without_a_zone_is_utc_and_one_with_a_zone_keeps_it() -> None:
    rng = parse_range("2026-11-23T10:00", "2026-11-23T12:00+01:00", None)
    assert rng.from_time == datetime(2026, 11, 23, 10, tzinfo=UTC)
    assert rng.to_time == datetime(2026, 11, 23, 12, tzinfo=timezone(timedelta(hours=1)))


def test_offsets_name_their_partitions() -> None:
    assert parse_range(None, None, "0:120,1:98") == Range(from_offsets={0: 120, 1: 98})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("yesterday", None, None), "'yesterday' is not an ISO time"),
        ((None, "soon", None), "'soon' is not an ISO time"),
        (("2026-11-23T10:00", "2026-11-23T09:00", None), "the range is empty"),
        ((None, None, "0:1,x"), "PARTITION:OFFSET"),
        (("2026-11-23T10:00", None, "0:1"), "not both"),
    ],
)
def test_what_cannot_be_a_range_is_a_range_error(args: tuple[str | None, str | None, str | None], message: str) -> None:
    with pytest.raises(RangeError, match=message):
        parse_range(*args)
