"""Ordinary crowds that look like campaigns, through the whole pipeline on the real stack with the
real default models, beside the campaigns they look like (issue 49): every rule against a wave has
its false-positive twin here.

Every account is brand new (no profile in Redis, no domain profile either, but for the campaign's
domain, registered four days before: the ranking and the stream are all that know ``bbc.co.uk`` or
``github.com``). Posts are half a second apart in event
time, with human-paced journeys except where a script is the point."""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, datetime, timedelta

import pytest
import redis

from modstream.harness.traffic import Record
from schemas import FeedbackEvent
from tests.conftest import Figures
from tests.integration.conftest import default_models_stack, run_worker
from tests.integration.test_waves import counted, explain, human_journey, served, table
from workers.adapters.redis_store import RedisReputationStore
from workers.state.keyspace import Keyspace
from workers.state.reputation import plan, wanted
from workers.state.signals import MINUTES

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NEWS_URL = "https://www.bbc.co.uk/news/articles/c4g7x2v9w1ko"
REACTIONS = [  # short reactions in people's own words; a few are the same words, as in any crowd
    "Hmm, the photos from the harbour",
    "that bridge looked fine last week",
    "my cousin lives two streets from there",
    "glad nobody was hurt",
    "the council was warned about this",
    "unreal pictures",
    "how did they not see it coming",
    "sending love to everyone there",
    "the bus route goes right past it",
    "this is the third time this year",
]
COMMON = ["wow", "read this", "oh no"]  # what several sharers write, word for word
BUTTON = "Check out this video on YouTube: {}"
RELEASE_NOTES = [
    "Released v3.2 of my little parser, changelog here: https://github.com/{u}/parser/releases",
    "New version of my CLI is out, notes at https://github.com/{u}/cli/blob/main/CHANGELOG.md",
    "Shipped the 2.0 rewrite today https://github.com/{u}/tinyhttp/releases/tag/v2.0",
    "just tagged 0.9, release notes: https://github.com/{u}/dotfiles",
    "Version 1.4 of my theme is up: https://github.com/{u}/theme/releases",
]
# Registered four days ago, as its profile says: a domain no profile dates is unknown, not young, and
# a template of distinct links there is a share button's until the accounts show coordination (issue 60).
CAMPAIGN_DOMAIN = "clipvault-now.net"
MIRACLE = [  # spam from unknown accounts typing at a human pace
    "Lose 20 pounds in 2 weeks with this miracle pill, doctors hate it",
    "Earn $500 a day from home with this one simple trick, no experience needed, DM me",
    "Congratulations! You have won a free iPhone, claim your prize now before it expires",
    "Cheap viagra and cialis, no prescription needed, discreet worldwide shipping",
    "Get 10,000 followers instantly for just $5, guaranteed real accounts",
    "URGENT: your account will be suspended, verify your password at this link now",
]


def crowds(run: str, start: datetime) -> dict[str, list[dict[str, object]]]:
    rng = random.Random(49)

    def event(wave: str, i: int, text: str, at: float, urls: list[str], journey: object = None) -> dict[str, object]:
        return {
            "post_id": f"{wave}-{run}-{i}",
            "user_id": f"{wave}-{run}-{i % 11 if wave == 'release' else i}",
            "created_at": (start + timedelta(seconds=at)).isoformat().replace("+00:00", "Z"),
            "text": text,
            "urls": urls,
            "ip": f"198.51.{110 + list(CROWDS).index(wave)}.{10 + i % 200}",
            "platform": "web",
            "journey": human_journey(rng) if journey is None else journey,
        }

    reactions = [rng.choice(COMMON) if rng.random() < 0.1 else f"{r} {i}" for i, r in enumerate(REACTIONS * 6)]
    rng.shuffle(reactions)
    return {
        # People sharing one news article, short reactions, a few word for word.
        "viral": [event("viral", i, text, 0.5 * i, [NEWS_URL]) for i, text in enumerate(reactions)],
        # A share button's sentence, each with the sharer's own video.
        "share": [
            event("share", i, BUTTON.format(f"https://www.youtube.com/watch?v={rng.randbytes(6).hex()}"), 0.5 * i, [])
            for i in range(60)
        ],
        # Eleven developers post their release notes three times, a minute apart, each to their own
        # page; two of them, and github.com, were brigaded before (:func:`brigade`).
        "release": [
            event("release", 11 * k + j, RELEASE_NOTES[(j + k) % 5].format(u=f"dev{j}-{run}"), 60 * k + 0.5 * j, [])
            for k in range(3)
            for j in range(11)
        ],
        # The adversarial twin: the share button's sentence from fresh accounts, pointing at one new
        # domain, typed at a human pace (no script to give it away: the copies do).
        "campaign": [
            event("campaign", i, BUTTON.format(f"https://{CAMPAIGN_DOMAIN}/v/{rng.randbytes(5).hex()}"), 0.5 * i, [])
            for i in range(36)
        ],
        "miracle": [event("miracle", i, text, 0.5 * i, []) for i, text in enumerate(MIRACLE)],
    }


CROWDS = ("viral", "share", "release", "campaign", "miracle")


def brigade(run: str, start: datetime) -> dict[str, FeedbackEvent]:
    """Two brigades against two of the release-note authors and github.com: one account filing 300
    reports, and 300 brand-new accounts filing one each."""

    def report(i: int, author: int, actor: str) -> FeedbackEvent:
        return FeedbackEvent(
            kind="user_report",
            post_id=f"release-{run}-old{i}",
            user_id=f"release-{run}-{author}",
            actor_id=actor,
            label="spam",
            urls=[f"https://github.com/dev{author}-{run}/parser"],
            created_at=start - timedelta(minutes=5),
        )

    return {f"troll-{i}": report(i, 0, "troll") for i in range(300)} | {
        f"throwaway-{i}": report(i, 1, f"throwaway-{run}-{i}") for i in range(300)
    }


async def report_all(redis_url: str, ks: Keyspace, events: dict[str, FeedbackEvent]) -> None:
    """As the feedback worker applies a batch: the reporters' records read first, then the plan."""
    store = RedisReputationStore(redis_url, 5.0, ks, reputation_step=0.1, applied_ttl_s=3600)
    try:
        await store.apply(plan(events, ks, await store.reporters(*wanted(events.values()))))
    finally:
        await store.close()


def test_crowds_pass_and_the_campaign_that_looks_like_one_is_stopped(figures: Figures) -> None:
    now = datetime.now(UTC)
    start = datetime.fromtimestamp(int(now.timestamp()) // MINUTES * MINUTES - 2 * MINUTES, UTC)
    with default_models_stack("modstream-crowds-") as (models, ep, settings):
        ks = Keyspace(settings.redis_prefix)
        asyncio.run(report_all(ep.redis_url, ks, brigade(settings.group_id, start)))
        registered = str(int((now - timedelta(days=4)).timestamp()))
        redis.Redis.from_url(ep.redis_url).hset(ks.domain(CAMPAIGN_DOMAIN), mapping={"created_at": registered})
        posts = crowds(settings.group_id, start)
        events = sorted((e for wave in CROWDS for e in posts[wave]), key=lambda e: str(e["created_at"]))
        records = [Record(str(e["post_id"]), json.dumps(e).encode(), None) for e in events]
        verdicts = run_worker(settings, records, timeout_s=240).outcomes.verdicts
    got = {w: [verdicts[str(e["post_id"])] for e in posts[w]] for w in CROWDS}
    for w in CROWDS:
        print(w, table(got[w]))
    figures.write("named-crowds", {"models": served(models), "waves": {w: counted(got[w]) for w in CROWDS}})
    for crowd in ("viral", "share", "release"):
        assert not [v for v in got[crowd] if v.decision == "block"], explain(got[crowd])
        assert sum(v.decision == "review" for v in got[crowd]) <= 2, explain(got[crowd])
    campaign = got["campaign"][9:]  # from its 10th post
    assert sum(v.decision != "allow" for v in campaign) >= 0.9 * len(campaign), explain(campaign)
    assert sum(v.decision == "block" for v in campaign) >= 0.5 * len(campaign), explain(campaign)
    assert not [v for v in got["miracle"] if v.decision == "allow"], explain(got["miracle"])
