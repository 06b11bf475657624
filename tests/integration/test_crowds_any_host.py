"""Crowds and campaigns judged without a host list (issue 60), through the whole pipeline on the real
stack with the real default models.

Every host here is generated from a seed: none is named in the code, and the one "inside the ranking"
is drawn from the shipped ranking file, not picked. Accounts are brand new (no profile) unless a wave
says otherwise, each sharer posts from an address of their own at a human pace, one post every 0.4 s.
Each benign crowd has its adversarial twin in the same run: what tells them apart is the domain's age
(a profile's registration date) and coordination between the accounts, never the host's name."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest
import redis

from modstream.harness.traffic import Record
from schemas import Verdict
from tests.conftest import Figures
from tests.integration.conftest import default_models_stack, run_worker
from tests.integration.test_waves import OPENERS, TAKES, counted, explain, human_journey, served, table
from workers.state.keyspace import Keyspace
from workers.state.signals import MINUTES
from workers.text.urls import POPULAR, SHARED

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SYLLABLES = ("lum", "tra", "vek", "sol", "ori", "pax", "nim", "dra", "quo", "zel", "fen", "rik", "ama", "tov")
TLDS = ("com", "net", "io", "app", "co", "fm")
BENIGN = ("share_unranked", "share_ranked", "newspaper", "viral_one_journey")
CAMPAIGNS = ("campaign_new_domain", "campaign_pre_seeded", "campaign_aged_accounts")
WAVES = (*BENIGN, *CAMPAIGNS)
SIZE = 60
READS_SPAM = 0.5  # the transformer's reading from which the text_model rule holds a post (default bundle)


def made_up_host(rng: random.Random) -> str:
    """A host no list or ranking the code ships knows."""
    while True:
        host = "".join(rng.choice(SYLLABLES) for _ in range(3)) + "." + rng.choice(TLDS)
        if host not in POPULAR and host not in SHARED:
            return host


def sharer(
    rng: random.Random, run: str, start: datetime, wave: str, i: int, text: str, journey: object = None
) -> dict[str, object]:
    """The ``i``-th post of ``wave``, 0.4 s after the one before, from its own new account and address."""
    return {
        "post_id": f"{wave}-{run}-{i}",
        "user_id": f"{wave}-{run}-{i}",
        "created_at": (start + timedelta(seconds=0.4 * i)).isoformat().replace("+00:00", "Z"),
        "text": text,
        "urls": [],
        "ip": f"{rng.randint(11, 200)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
        "platform": rng.choice(("web", "ios", "android")),
        "journey": human_journey(rng) if journey is None else journey,
    }


def generated(run: str, start: datetime, seed: int) -> tuple[dict[str, list[dict[str, object]]], dict[str, str]]:
    """The waves' events, and the generated hosts by role (for the profiles the platform knows)."""
    rng = random.Random(seed)
    ranked = sorted(POPULAR)
    hosts = {
        "unranked": made_up_host(rng),
        "ranked": rng.choice(ranked),
        "newspaper": made_up_host(rng),
        "news": rng.choice(ranked),
        "young": made_up_host(rng),
        "seeded": made_up_host(rng),
        "bait": made_up_host(rng),
    }
    noun = rng.choice(("track", "workout", "recipe", "petition", "playlist"))
    button = f"Just shared my {noun}, have a listen: {{}}"
    one_journey = human_journey(rng)

    def event(wave: str, i: int, text: str, journey: object = None) -> dict[str, object]:
        return sharer(rng, run, start, wave, i, text, journey)

    def link(host: str) -> str:
        return f"https://{host}/{noun[0]}/{rng.randbytes(5).hex()}"

    takes = rng.sample([f"{o} {t}".strip() for o in OPENERS for t in TAKES], SIZE)  # people's own words
    news_url = f"https://www.{hosts['news']}/2026/11/{rng.randbytes(4).hex()}"
    seed_texts = [event("campaign_pre_seeded", i, f"note {i} {link(hosts['seeded'])}") for i in range(40)]
    for i, e in enumerate(seed_texts):
        e["user_id"], e["post_id"] = f"seeder-{run}-{i % 4}", f"seed-{run}-{i}"
    waves = {
        "share_unranked": [event("share_unranked", i, button.format(link(hosts["unranked"]))) for i in range(SIZE)],
        "share_ranked": [event("share_ranked", i, button.format(link(hosts["ranked"]))) for i in range(SIZE)],
        "newspaper": [event("newspaper", i, f"Read in our paper: {link(hosts['newspaper'])}") for i in range(SIZE)],
        "viral_one_journey": [
            event("viral_one_journey", i, f"{takes[i]} {news_url}", journey=one_journey) for i in range(SIZE)
        ],
        "campaign_new_domain": [
            event("campaign_new_domain", i, button.format(link(hosts["young"]))) for i in range(SIZE)
        ],
        "campaign_pre_seeded": [
            *seed_texts,
            *(event("campaign_pre_seeded", 40 + i, button.format(link(hosts["seeded"]))) for i in range(SIZE)),
        ],
        "campaign_aged_accounts": [
            event("campaign_aged_accounts", i, f"Lovely day, a little gift for you {link(hosts['bait'])}")
            for i in range(SIZE)
        ],
    }
    return waves, hosts


def profiles(r: redis.Redis, ks: Keyspace, run: str, hosts: dict[str, str], now: datetime) -> None:
    """What the platform knows: the newspaper's domain for 20 years, the campaigns' domains for 4 days,
    the aged accounts for 4 to 9 years with followers. Nothing else."""
    day = 86_400
    t = now.timestamp()
    r.hset(ks.domain(hosts["newspaper"]), mapping={"created_at": str(int(t - 7500 * day))})
    for role in ("young", "seeded", "bait"):
        r.hset(ks.domain(hosts[role]), mapping={"created_at": str(int(t - 4 * day))})
    rng = random.Random(run)
    for i in range(SIZE):
        age = rng.uniform(4 * 365, 9 * 365)
        r.hset(
            ks.user(f"campaign_aged_accounts-{run}-{i}"),
            mapping={
                "created_at": str(int(t - age * day)),
                "friends": rng.randint(40, 400),
                "followers": rng.randint(50, 900),
            },
        )


@pytest.mark.parametrize("seed", [60, 61, 62])
def test_a_share_is_not_a_copy_on_any_host_and_coordinated_campaigns_are_stopped(seed: int, figures: Figures) -> None:
    now = datetime.now(UTC)
    start = datetime.fromtimestamp(int(now.timestamp()) // MINUTES * MINUTES - 2 * MINUTES, UTC)
    with default_models_stack("modstream-any-host-") as (models, ep, settings):
        waves, hosts = generated(settings.group_id, start, seed)
        profiles(redis.Redis.from_url(ep.redis_url), Keyspace(settings.redis_prefix), settings.group_id, hosts, now)
        events = sorted((e for w in WAVES for e in waves[w]), key=lambda e: (str(e["created_at"]), str(e["post_id"])))
        records = [Record(str(e["post_id"]), json.dumps(e).encode(), None) for e in events]
        verdicts = run_worker(settings, records, timeout_s=300).outcomes.verdicts
    got = {
        w: [verdicts[str(e["post_id"])] for e in waves[w] if not str(e["post_id"]).startswith("seed-")] for w in WAVES
    }
    print(hosts)
    figures.write(f"any-host-{seed}", {"models": served(models), "hosts": hosts, "waves": recorded(got, BENIGN)})
    judged(got, BENIGN, CAMPAIGNS)


def shaped(vs: list[Verdict]) -> list[Verdict]:
    """The reviews a crowd's shape made: of posts the transformer itself does not read as spam."""
    return [v for v in vs if v.decision == "review" and v.stage_scores.get("text", 0.0) < READS_SPAM]


def recorded(got: dict[str, list[Verdict]], benign: tuple[str, ...]) -> dict[str, dict[str, int]]:
    return {w: {**counted(vs), **({"shape_reviews": len(shaped(vs))} if w in benign else {})} for w, vs in got.items()}


def judged(got: dict[str, list[Verdict]], benign: tuple[str, ...], campaigns: tuple[str, ...]) -> None:
    """Each benign crowd: nothing blocked, at most 3 of its posts reviewed for its shape; each campaign
    at least 90% stopped."""
    for w in (*benign, *campaigns):
        print(w, table(got[w]))
    for crowd in benign:
        assert not [v for v in got[crowd] if v.decision == "block"], explain(got[crowd])
        # What this test is about: the crowd's shape (one sentence, one journey, one page) moves nothing.
        # Posts the transformer itself reads as spam are the text model's to answer for, and printed.
        by_shape = shaped(got[crowd])
        print(crowd, "reviewed where the text does not read as spam:", len(by_shape))
        assert len(by_shape) <= 3, explain(by_shape)
    for campaign in campaigns:
        stopped = sum(v.decision != "allow" for v in got[campaign])
        assert stopped >= 0.9 * len(got[campaign]), explain(got[campaign])


HISTORY_DAYS = 35  # the stream before the waves: more than features.STREAM_HISTORY_DAYS


@pytest.mark.parametrize("seed", [63, 64])
def test_a_domain_new_to_a_stream_with_weeks_of_history_is_young_and_one_it_has_long_seen_is_not(
    seed: int, figures: Figures
) -> None:
    """Nothing dates either host but the stream's own history: five weeks of posts, in which the app's
    host shows up from the first day on. The app's share button passes; the same sentence, each
    account linking a page of its own on a host first seen today, is a campaign's copies: stopped."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    start = datetime.fromtimestamp(int(now.timestamp()) // MINUTES * MINUTES - 2 * MINUTES, UTC)
    known, fresh = made_up_host(rng), made_up_host(rng)
    button = "Just shared my workout, have a look: https://{}/w/{}"
    with default_models_stack("modstream-history-") as (models, _ep, settings):
        run = settings.group_id
        history = [
            sharer(rng, run, start - timedelta(days=HISTORY_DAYS - day), "history", day, f"{take} {link}")
            for day, take, link in (
                (day, rng.choice(TAKES), f"https://{rng.choice((known, made_up_host(rng)))}/w/{rng.randbytes(5).hex()}")
                for day in range(0, HISTORY_DAYS, 2)
            )
        ]
        history[0]["text"] = f"{TAKES[0]} https://{known}/w/first"  # the stream's first post names it
        waves = {
            wave: [sharer(rng, run, start, wave, i, button.format(host, rng.randbytes(5).hex())) for i in range(SIZE)]
            for wave, host in (("share_long_seen", known), ("campaign_first_seen", fresh))
        }
        events = [*history, *sorted((e for w in waves.values() for e in w), key=lambda e: str(e["created_at"]))]
        records = [Record(str(e["post_id"]), json.dumps(e).encode(), None) for e in events]
        verdicts = run_worker(settings, records, timeout_s=300).outcomes.verdicts
    print(known, fresh)
    got = {w: [verdicts[str(e["post_id"])] for e in es] for w, es in waves.items()}
    hosts = {"known": known, "fresh": fresh}
    figures.write(
        f"history-{seed}", {"models": served(models), "hosts": hosts, "waves": recorded(got, ("share_long_seen",))}
    )
    judged(got, ("share_long_seen",), ("campaign_first_seen",))
