"""Stream-kept signals: window maths, idempotency under redelivery, near-duplicate hashing."""

from __future__ import annotations

import copy
import math
from datetime import UTC, datetime

import pytest

from tests.unit.fakes import event
from workers.records import InMsg, Post
from workers.stages.validate import validate
from workers.state import signals
from workers.state.features import stream_signals
from workers.state.keyspace import Keyspace
from workers.state.signals import COUNTED, DAY, HOUR, SIGNALS, TEMPLATE_COPIES, MemorySignals

KS = Keyspace("t:")
T0 = datetime(2026, 11, 23, 10, 0, tzinfo=UTC).timestamp()


def post(pid: str, user: str = "u1", at: float = T0, text: str = "win a free prize now", **kw: object) -> Post:
    created = datetime.fromtimestamp(at, UTC).isoformat()
    (p,), _ = validate([InMsg("posts", 0, 0, None, event(pid, text, user_id=user, created_at=created, **kw), 0.0)])
    return p


def run(store: MemorySignals, posts: list[Post]) -> list[dict[str, float]]:
    plans = signals.plans(posts, KS, 600)
    return [
        dict(zip(COUNTED, signals.values(pl, s), strict=True)) for pl, s in zip(plans, store.run(plans), strict=True)
    ]


def test_counts_are_as_before_the_post_and_windows_roll() -> None:
    """No count falls to zero at a clock hour or a UTC midnight: the bucket before weighs what of it
    the window still covers."""
    store = MemorySignals()
    first, second, next_hour, half_past, next_day = run(
        store,
        [
            post("a"),
            post("b", at=T0 + 60),
            post("c", at=T0 + HOUR),
            post("d", at=T0 + HOUR + HOUR / 2),
            post("e", at=T0 + DAY),
        ],
    )
    assert (first["user_posts_1h"], first["user_posts_24h"]) == (0, 0)
    assert (second["user_posts_1h"], second["user_posts_24h"]) == (1, 1)
    assert (next_hour["user_posts_1h"], next_hour["user_posts_24h"]) == (2, 2)  # the hour before, whole
    assert half_past["user_posts_1h"] == pytest.approx(1 + 2 / 2)  # c, and half of the hour before
    # T0 is 10:00 UTC: the day before still weighs 14/24 at 10:00 the next day.
    assert next_day["user_posts_1h"] == 0 and next_day["user_posts_24h"] == pytest.approx(4 * 14 / 24)


def test_distinct_users_count_users_not_posts() -> None:
    out = run(MemorySignals(), [post("a", "u1"), post("b", "u1"), post("c", "u2"), post("d", "u3")])
    assert [o["campaign_users_24h"] for o in out] == [0, 1, 1, 2]
    assert [o["ip_users_24h"] for o in out] == [0, 1, 1, 2]


def test_a_redelivered_post_counts_once_and_sees_what_it_saw_first() -> None:
    store = MemorySignals()
    batch = [post("a", "u1"), post("b", "u2", urls=["https://x.example/p"])]
    first = run(store, batch)
    run(store, [post("c", "u3", urls=["https://x.example/p"])])  # the state moves on...
    state = copy.deepcopy((store.posts, store.users, store.first))
    again = run(store, batch)  # ...then the batch comes back (a crash before its commit)
    assert again == first and (store.posts, store.users, store.first) == state


def test_first_sightings_and_missing_link_signals() -> None:
    link = "https://new.example/x"
    early, late, no_link = run(
        MemorySignals(), [post("a", urls=[link], at=T0), post("b", urls=[link], at=T0 + 3 * HOUR), post("c")]
    )
    assert early["url_first_seen_hours"] == 0 and late["url_first_seen_hours"] == pytest.approx(3)
    assert all(math.isnan(no_link[name]) for name in SIGNALS if name.startswith(("url_", "domain_")))


def test_near_duplicates_share_a_band_and_different_texts_do_not() -> None:
    base = "limited offer buy cheap watches today at the best price with free shipping worldwide"
    near, other = base + " 4821", "see you at the standup tomorrow, bring the slides please"
    a, b, c = signals.band_hashes([base, near, other])
    assert set(a) & set(b)
    assert not set(a) & set(c)
    assert signals.band_hashes([base]) == [a]  # the same in any batch


def test_campaign_near_copies_by_new_accounts_raise_the_near_duplicate_count() -> None:
    base = "limited offer buy cheap watches today at the best price with free shipping worldwide"
    posts = [post(f"p{i}", f"bot{i}", text=f"{base} {1000 + i}") for i in range(6)]
    out = run(MemorySignals(), posts)
    assert [o["campaign_users_24h"] for o in out] == [0] * 6  # every text differs exactly...
    assert out[-1]["campaign_neardup_users_24h"] >= 3  # ...but not in substance


JOURNEY = [{"name": "open_composer", "offset_ms": 0}, {"name": "paste_link", "offset_ms": 900}]


def copies(row: dict[str, float], domain_age_days: float = math.nan, popular: bool = False) -> float:
    """``campaign_domain_copies_1h`` as the decision model reads it (features.assemble)."""
    counted = tuple(row[name] for name in COUNTED)
    return stream_signals(counted, domain_age_days, popular)[SIGNALS.index("campaign_domain_copies_1h")]


def test_a_template_with_a_path_per_copy_is_copies_on_a_young_domain_or_by_one_journey() -> None:
    """A campaign's copies with a path of their own each: one template on the domain. Counted as copies
    where the domain is young; one journey replayed by many accounts shows on any domain."""
    base = "new post on my page, have a look"
    out = run(
        MemorySignals(),
        [
            post(f"p{i}", f"u{i}", at=T0 + i, text=f"{base} https://promo.example/r/{i}x{i}", journey=JOURNEY)
            for i in range(8)
        ],
    )
    assert [o["campaign_users_24h"] for o in out] == [0] * 8  # each links its own page: no two the same
    assert [o[TEMPLATE_COPIES] for o in out] == [0, 0, 1, 2, 3, 4, 5, 6]  # the 2nd account on is a copy
    assert [o["campaign_journey_users_1h"] for o in out] == [0, 0, 1, 2, 3, 4, 5, 6]
    assert [copies(o) for o in out] == [0, 0, 1, 2, 3, 4, 5, 6]  # one journey replayed: coordination
    assert copies(out[-1], domain_age_days=4) == 6
    assert copies(out[-1], popular=True) == 0  # a crowd's share flow on a popular host is no campaign
    paced = run(
        MemorySignals(),
        [post(f"q{i}", f"u{i}", at=T0 + i, text=f"{base} https://promo.example/r/{i}x{i}") for i in range(8)],
    )
    assert copies(paced[-1]) == 0  # each at a pace of their own, on a domain no profile dates: unknown
    assert copies(paced[-1], domain_age_days=4) == 6  # young
    assert out[-1]["domain_users_10m"] == out[-1]["domain_users_1h"] == 7


def test_a_domain_first_seen_after_weeks_of_the_stream_is_young_and_a_new_stream_dates_nothing() -> None:
    """Where no profile dates a domain, the stream's first sighting does once the stream has weeks of
    history: one sentence with a link of its own per account is a campaign's copies on a domain new to
    the platform, and a share button's on a domain the platform has long seen, or on a new stream."""
    button = "just shared my playlist, have a listen"

    def wave(host: str, at: float) -> list[Post]:
        return [
            post(f"{host}{i}", f"{host}u{i}", at=at + 7 * i, text=f"{button} https://{host}/p/{i}x") for i in range(8)
        ]

    store = MemorySignals()
    history = [post("h0", "early", at=T0 - 35 * DAY, text="hello https://first.example/a")]
    run(store, [*history, post("h1", "later", at=T0 - 33 * DAY, text="look https://known.example/a")])
    fresh, known = run(store, wave("fresh.example", T0)), run(store, wave("known.example", T0 + HOUR))
    assert fresh[0]["stream_first_seen_hours"] == pytest.approx(35 * 24)
    assert [copies(o) for o in fresh] == [0, 0, 1, 2, 3, 4, 5, 6]  # first seen after 35 days of stream
    assert copies(known[-1]) == 0  # seen 33 days ago, 2 days into the stream: nothing dates it
    assert copies(known[-1], domain_age_days=4) == 6  # a profile dates a domain first
    new_stream = run(MemorySignals(), wave("fresh.example", T0))
    assert copies(new_stream[-1]) == 0  # a stream without history: unknown, not young


def test_a_domain_seen_since_the_streams_first_hour_has_no_first_sighting_and_one_new_after_it_has() -> None:
    """A new stream sees every domain for the first time: release notes to github.com in its first
    minutes read as posts to a brand-new domain (three of eleven developers' first posts were sent to
    review on one training). Seen since the stream's first hour with links, a domain is as old as the
    stream can tell; one first seen later keeps its first sighting, as a campaign's new domain does."""

    def first_seen(row: dict[str, float]) -> float:
        counted = tuple(row[name] for name in COUNTED)
        return stream_signals(counted, math.nan)[SIGNALS.index("domain_first_seen_hours")]

    store = MemorySignals()
    early = run(
        store, [post(f"r{i}", f"dev{i}", at=T0 + 60 * i, text=f"v1.{i} https://github.com/d{i}") for i in range(3)]
    )
    later = run(store, [post("c0", "x", at=T0 + 2 * HOUR, text="win now https://promo.example/a")])
    assert [math.isnan(first_seen(o)) for o in early] == [True, True, True]
    assert first_seen(later[0]) == pytest.approx(0.0)  # first seen two hours into the stream: new


def test_sharers_in_their_own_words_are_not_copies_and_greetings_have_no_domain_signals() -> None:
    link = ["https://www.news.example/2026/11/23/story"]
    words = ["wow", "read this", "big news today", "cannot believe it", "finally", "sad day", "thread below"]
    shared = run(
        MemorySignals(),
        [post(f"s{i}", f"u{i}", at=T0 + i, text=w, urls=link, journey=JOURNEY) for i, w in enumerate(words)],
    )
    assert shared[-1]["domain_users_1h"] == 6 and shared[-1]["campaign_domain_copies_1h"] == 0
    assert shared[-1]["campaign_journey_users_1h"] == 0  # one journey, but each their own words
    assert copies(shared[-1], domain_age_days=2) == 0
    (greeting,) = run(MemorySignals(), [post("g", text="good morning everyone!")])
    assert math.isnan(greeting["campaign_domain_copies_1h"]) and math.isnan(greeting["domain_days_30d"])


def test_two_sharers_whose_journeys_match_by_chance_make_no_template_copies() -> None:
    """A journey's fingerprint is coarse: among sixty people at their own pace two can match. One journey
    is coordination only when a third of the domain's accounts in the hour repeated a template by it."""
    own = [
        [{"name": "open_composer", "offset_ms": 0}, {"name": "paste_link", "offset_ms": int(1000 * 1.3**i)}]
        for i in range(28)
    ]
    journeys = [JOURNEY, JOURNEY, *own]  # two alike by chance, each other its own
    out = run(
        MemorySignals(),
        [
            post(
                f"n{i}",
                f"u{i}",
                at=T0 + i,
                text=f"Read in our paper: https://paper.example/a/{i}x",
                journey=journeys[i],
            )
            for i in range(30)
        ],
    )
    assert out[-1]["campaign_journey_users_1h"] > 0  # a few matched...
    assert copies(out[-1]) == 0  # ...which is no campaign


def test_the_same_words_and_the_same_landing_are_copies_however_the_link_was_shared() -> None:
    texts = [f"wow https://www.news.example/story?utm_source=app{i}&fbclid=x{i}" for i in range(5)]
    out = run(MemorySignals(), [post(f"w{i}", f"u{i}", at=T0 + i, text=t) for i, t in enumerate(texts)])
    assert [o["campaign_domain_copies_1h"] for o in out] == [0, 0, 1, 2, 3]
    assert [o["campaign_users_24h"] for o in out] == [0, 1, 2, 3, 4]


def test_a_domain_posted_on_many_days_is_established_over_a_rolling_thirty_days() -> None:
    link = ["https://daily.example/x"]
    out = run(MemorySignals(), [post(f"d{i}", f"u{i}", at=T0 + i * DAY, urls=link) for i in range(40)])
    assert [o["domain_days_30d"] for o in out[:5]] == [0, 1, 2, 3, 4]
    # Never new again at a 30-day boundary: from the 30th day on, the last 29 days before it.
    assert [o["domain_days_30d"] for o in out[29:]] == [29] * 11


BUTTON = "Check out this track on {}: https://{}/t/{}"


@pytest.mark.parametrize("host", ["www.tunewave.example", "cdn.listen-daily.test", "audiograph.example.org"])
def test_a_share_button_wave_is_no_copy_on_any_host_and_a_campaign_reusing_its_sentence_on_a_young_one_is(
    host: str,
) -> None:
    """Sixty people sharing their own tracks through one share button are not a campaign, on a host no
    list names; the same sentence from sixty accounts to one young domain is (the adversarial twin)."""
    wave = [post(f"b{i}", f"u{i}", at=T0 + i, text=BUTTON.format("the app", host, f"{i:03d}x")) for i in range(60)]
    shared = run(MemorySignals(), wave)
    assert {copies(o) for o in shared} == {0}
    assert {o["campaign_users_24h"] for o in shared} == {0}
    assert {o["campaign_journey_users_1h"] for o in shared} == {0}
    assert shared[-1]["domain_users_1h"] == signals.USERS_CAP  # popular: which never counts against a post
    campaign = [
        post(f"c{i}", f"c{i}", at=T0 + i, text=BUTTON.format("the app", "brightpagehub.example", f"{i}x"))
        for i in range(20)
    ]
    assert copies(run(MemorySignals(), campaign)[-1], domain_age_days=4) == 18  # 19 accounts, one template


def test_pre_filling_a_domain_with_distinct_texts_erases_no_copy() -> None:
    """A campaign that first posts many distinct texts to its domain from a few accounts (to fill a set of
    distinct texts) still shows every account that repeated the template after."""
    seed = [post(f"s{i}", f"seed{i % 4}", at=T0 + i, text=f"note {i}: https://promo.example/{i}") for i in range(40)]
    copy_posts = [
        post(f"c{i}", f"c{i}", at=T0 + 40 + i, text=f"have a look https://promo.example/x{i}") for i in range(40)
    ]
    out = run(MemorySignals(), seed + copy_posts)
    assert copies(out[-1], domain_age_days=4) == signals.USERS_CAP  # 38 copies before it, capped


def test_release_notes_linking_each_authors_own_page_on_a_shared_host_are_no_copies() -> None:
    notes = [
        "Released v3.2 of my little parser, changelog here: https://github.com/{}/parser/releases",
        "New release is out! Notes: https://github.com/{}/tool/blob/main/CHANGELOG.md",
    ]
    out = run(
        MemorySignals(),
        [post(f"r{i}", f"dev{i}", at=T0 + i, text=notes[i % 2].format(f"dev{i}")) for i in range(33)],
    )
    assert {copies(o) for o in out} == {0}
    assert out[-1]["domain_users_1h"] == signals.USERS_CAP  # github.com: popular, never evidence


def test_a_post_that_reuses_another_posts_id_is_counted_as_the_post_it_is() -> None:
    """A platform's id clash (or integer ids that collide) is not a redelivery: the second post gets
    its own values, as many as it asks for, and a true redelivery of either still counts once."""
    store = MemorySignals()
    linked = post("12345", "u1", urls=["https://x.example/p"])
    plain = post("12345", "u2", text="no link here", ip=None)
    first, second = run(store, [linked, plain])
    assert not math.isnan(first["domain_users_1h"]) and math.isnan(second["domain_users_1h"])
    assert second["user_posts_1h"] == 0  # u2's first post, not u1's snapshot
    assert run(store, [linked, plain]) == [first, second]
