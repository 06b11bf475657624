"""Generated waves through the whole pipeline on the real stack, with the real default models:
a coordinated campaign is seen, and people sharing the news or greeting each other are not punished.

Every account is brand new (no profile in Redis). Posts are half a second apart in event time
(the signals count event time), sent at once and counted in that order."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import redis

from modstream.harness.traffic import Record
from modstream.serving.artifacts import Models
from schemas import Verdict
from tests.conftest import Figures
from tests.integration.conftest import default_models_stack, run_worker
from workers.model_cards import DecisionModelCard
from workers.state.keyspace import Keyspace
from workers.state.signals import MINUTES

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CAMPAIGN_DOMAIN = "brightpagehub.net"  # new: no profile, never seen
NEWS_URL = "https://www.northgazette.co.uk/world/2026/11/23/coastal-summit-reaches-agreement"
CAMPAIGN_VARIANTS = [
    f"{opener} {middle}{end}"
    for opener in ("new post on my page,", "New post on my page -", "just put a new post on my page,", "my new post:")
    for middle in ("have a look", "take a look")
    for end in ("", " :)")
]  # 16 variants of one harmless-looking sentence
SCRIPTED = [  # one script, replayed to the millisecond by every account
    {"name": "open_composer", "offset_ms": 0},
    {"name": "paste_link", "offset_ms": 412},
    {"name": "submit", "offset_ms": 655},
]
OPENERS = [
    "wow,",
    "Finally!",
    "big news:",
    "this is good to hear.",
    "read this",
    "huh.",
    "about time!",
    "ok so",
    "",
    "Sharing this:",
    "worth reading",
    "hope it holds",
]
TAKES = [
    "the summit actually reached a deal",
    "they agreed on the coastal plan",
    "an agreement after all those talks",
    "the coast gets its protection funds",
    "my town is on the list",
    "did not expect a deal this week",
    "the fishing quotas part is interesting",
    "my dad will be pleased",
    "good for the harbour towns",
    "curious how they pay for it",
]
GREETINGS = [
    "good morning everyone, have a lovely day",
    "Good morning everyone! have a lovely day",
    "good morning everyone, have a lovely day :)",
    "good morning everyone have a lovely day!!",
]


def human_journey(rng: random.Random) -> list[dict[str, object]]:
    t, out = 0, []
    for name in ("open_composer", "type_text", *(["paste_link"] if rng.random() < 0.7 else []), "submit"):
        out.append({"name": name, "offset_ms": t})
        t += int(rng.lognormvariate(8.0, 0.8))
    return out


def waves(run: str, start: datetime) -> dict[str, list[dict[str, object]]]:
    rng = random.Random(29)
    takes = rng.sample([f"{o} {t}".strip() for o in OPENERS for t in TAKES], 60)

    def event(wave: str, i: int, text: str, journey: list[dict[str, object]], urls: list[str]) -> dict[str, object]:
        return {
            "post_id": f"{wave}-{run}-{i}",
            "user_id": f"{wave}-{run}-{i}",  # each its own account, unknown to the platform
            "created_at": (start + timedelta(seconds=0.5 * i)).isoformat().replace("+00:00", "Z"),
            "text": text,
            "urls": urls,
            "ip": f"198.51.{100 + list(WAVES).index(wave)}.{10 + i}",
            "platform": "web",
            "journey": journey,
        }

    return {
        "campaign": [
            event(
                "campaign",
                i,
                f"{rng.choice(CAMPAIGN_VARIANTS)} https://{CAMPAIGN_DOMAIN}/p/{uuid.uuid4().hex[:10]}",
                SCRIPTED,
                [],
            )
            for i in range(36)
        ],
        "news": [event("news", i, take, human_journey(rng), [NEWS_URL]) for i, take in enumerate(takes)],
        "greeting": [event("greeting", i, rng.choice(GREETINGS), human_journey(rng), []) for i in range(60)],
    }


WAVES = ("campaign", "news", "greeting")


def test_a_campaign_is_seen_and_sharing_the_news_is_not_punished(figures: Figures) -> None:
    now = datetime.now(UTC)
    start = datetime.fromtimestamp(int(now.timestamp()) // MINUTES * MINUTES - 2 * MINUTES, UTC)  # one 10-min bucket
    with default_models_stack("modstream-waves-") as (models, ep, settings):
        # A major outlet: the platform has known the domain for years.
        r = redis.Redis.from_url(ep.redis_url)
        years_ago = str(int((now - timedelta(days=5000)).timestamp()))
        mapping = {"created_at": years_ago, "reputation": "0.97", "posts": "250000", "reports": "3"}
        r.hset(Keyspace(settings.redis_prefix).domain("northgazette.co.uk"), mapping=mapping)
        posts = waves(settings.group_id, start)
        records = [
            Record(str(e["post_id"]), json.dumps(e).encode(), None)
            for i in range(60)
            for wave in WAVES
            if i < len(posts[wave])
            for e in [posts[wave][i]]
        ]
        verdicts = run_worker(settings, records, timeout_s=240).outcomes.verdicts
    got = {w: [verdicts[str(e["post_id"])] for e in posts[w]] for w in WAVES}
    for w in WAVES:
        print(w, table(got[w][:20]), table(got[w][-20:]))
    halves = {
        f"{w}, {half}": counted(vs)
        for w in WAVES
        for half, vs in (("first 20", got[w][:20]), ("last 20", got[w][-20:]))
    }
    figures.write("named-waves", {"models": served(models), "waves": halves})
    campaign = got["campaign"][9:]  # from its 10th post
    stopped = sum(v.decision != "allow" for v in campaign) / len(campaign)
    blocked = sum(v.decision == "block" for v in campaign) / len(campaign)
    assert stopped >= 0.9 and blocked >= 0.5, explain(campaign)
    # Each post the campaign signals decided (blocked below the model's own block threshold) names the one
    # that did; a post the text alone blocks need not.
    block_at = DecisionModelCard.load(models.bundle / "decision").thresholds.block
    by_campaign = [v for v in campaign if v.decision == "block" and v.score < block_at]
    assert all(v.reasons[0].code == "campaign" and "decided it" in v.reasons[0].detail for v in by_campaign), explain(
        by_campaign
    )
    news = got["news"]
    assert not [v for v in news if v.decision == "block"], explain(news)
    assert sum(v.decision == "review" for v in news) <= 0.05 * len(news), explain(news)
    assert not [v for v in got["greeting"] if v.decision == "block"], explain(got["greeting"])


def counted(vs: list[Verdict]) -> dict[str, int]:
    c = Counter(v.decision for v in vs)
    return {d: c[d] for d in ("allow", "review", "block")}


def table(vs: list[Verdict]) -> str:
    return " / ".join(map(str, counted(vs).values()))


def served(models: Models) -> dict[str, str]:
    """The text model's cache key and the decision model's version: what a page's figures were served by."""
    return {"text": models.text.name, "decision": DecisionModelCard.load(models.decision).version}


def explain(vs: list[Verdict]) -> str:
    return "\n".join(f"{v.post_id} {v.decision} {v.score:.3f} {[r.detail for r in v.reasons]}" for v in vs)
