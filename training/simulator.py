"""A simulated platform around real corpus texts: users, URLs and domains, IPs and journeys.

The label of a simulated post is the label of its corpus text. Everything around it
is drawn from label-conditional distributions that overlap on purpose, so no single
feature gives the label away (``tests/unit/training/test_simulator.py`` checks that no one
feature separates the classes). The assumptions, in short (docs/SIMULATOR.md has more):

* Spam comes from bot accounts (55%), aged "sleeper" accounts whose profiles look
  like normal users' (25%) and compromised normal accounts (20%); ham from
  established users (80%) or new users (20%), who look a lot like bots.
* Bots are young, with few friends, high posting rates, prior spam and reports, often
  disposable e-mail; they post from a pool of busy datacenter IPs that VPN users
  share, often straight through the API (no UI journey) or with fast UI steps.
  Every timing distribution overlaps: people paste and post fast too.
* Spam links point mostly to young, low-reputation domains, often on cheap TLDs and
  deep subdomains; 25% of spam links point to reputable domains (redirectors,
  hacked sites) and 8% of ham links to young, obscure ones.
* 8% of users, 15% of domains and 10% of IPs are unknown to the platform (missing).
* A few spam domains, IPs and one CIDR range are banned; those posts never reach the
  models.
* Waves, many accounts within minutes (:meth:`Simulator.posts`): campaigns, where fresh
  accounts (a fifth of them aged ones) post templated copies of one text (a spam text, or in half
  of them a harmless one as bait: coordination is what makes them spam) with a path of their own on
  one domain registered days before (its profile says so, when the platform has one), all by one
  scripted journey; viral links, one new URL on an established domain
  shared by many accounts in their own words (short reactions collide: "wow", "read this");
  share-button waves, one fixed sentence with each sharer's own link, on a well-known host or
  (half of them) on an app's own host that no list names;
  release notes, a few sentences from many accounts, each linking its own page on a shared
  host (``github.com/<user>``); greetings, near-copies without a link. A quarter of the
  campaigns reuse a share button's sentence, pointing at their own new domain, and 30% fake a
  human-paced journey per account instead of replaying one script.
* Reports are weighted sums of distinct reporters (workers/state/reputation.py): honest reports come
  from reporters with a record, and 2% of ordinary accounts and 3% of ordinary domains carry a
  brigade of tens to hundreds of throwaway reporters, who weigh almost nothing each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from schemas import JourneyStep, PostEvent
from training.corpora.labelled import Example
from workers.state.keyspace import Keyspace

DAY = 86_400.0
KS = Keyspace("")  # the simulator's keys; seeding Redis adds the deployment's prefix

HAM_TLDS = ("com", "org", "net", "co.uk", "io", "de", "edu", "info")
HAM_TLD_P = (0.5, 0.14, 0.1, 0.06, 0.06, 0.06, 0.05, 0.03)
SPAM_TLDS = ("com", "net", "biz", "info", "xyz", "top", "ru", "click", "cn", "loan")
SPAM_TLD_P = (0.3, 0.1, 0.1, 0.1, 0.1, 0.08, 0.07, 0.05, 0.05, 0.05)
KINDS = ("normal", "new", "bot", "sleeper", "compromised")
HAM_KIND_P = (0.8, 0.2, 0.0, 0.0, 0.0)
SPAM_KIND_P = (0.0, 0.0, 0.55, 0.25, 0.2)
CAMPAIGN_P = 0.6  # spam posted in bursts of near-copies by a few accounts
THREAD_P = 0.1  # ham posted in bursts by one user (a conversation)
BURST_GAP_S = 300.0  # mean time between the posts of a burst
VIRAL_LINK_P = 0.15  # ham links to a few URLs that many users share
# Waves (per draw of a text of their label; a wave stands for its size in draws): about 15%
# of spam posts are campaign waves, 7% of ham posts viral links and 4% greeting waves.
CAMPAIGN_WAVE_P = 0.005
# Ham waves, by kind: the chance a ham draw starts one.
HAM_WAVE_P = {"viral": 0.002, "share": 0.001, "release": 0.0005, "greeting": 0.001}
WAVE_SIZE = (20, 60)
WAVE_GAP_S = 30.0  # mean time between a wave's posts
WAVES = ("campaign", *HAM_WAVE_P)
# Kept apart from the crowds the integration tests generate (tests/integration/test_crowds.py): other
# words, other hosts, so those tests judge what the decision model never saw.
REACTIONS = ("omg", "this!!", "unbelievable", "so sad", "big if true", "huge", "yikes", "good news at last", "wild")
REACTION_P = 0.15  # a viral sharer who writes only a short reaction, which others write too
# What share buttons write: one sentence for everyone, each with the sharer's own link.
SHARE_BUTTONS = (
    "Just read this on CNN https://www.cnn.com/2026/11/{}",
    "Shared from the NYT app: https://www.nytimes.com/2026/11/{}.html",
    "Look at this on Amazon https://www.amazon.com/dp/{}",
    "Found this on eBay: https://www.ebay.com/itm/{}",
    "My photo on Flickr https://www.flickr.com/photos/{}",
)
# What apps' own share buttons write (the integration tests' sentences and hosts are others).
APP_BUTTONS = ("My {noun} on {app}:", "Check out my {noun} on {app}", "I just finished this {noun} with {app}")
APP_SYLLABLES = ("ka", "ro", "mi", "sta", "ve", "lo", "bu", "zi", "nor", "pe", "tu", "gra")
CAMPAIGN_BUTTON_P = 0.25  # campaigns that reuse a share button's sentence for their own domain
CAMPAIGN_HUMAN_PACE_P = 0.3  # campaigns whose accounts each fake a human-paced journey (no script to see)
CAMPAIGN_DOMAIN_DAYS = 21.0  # a campaign's domain was registered this many days ago at most
CAMPAIGN_AGED_P = 0.2  # campaigns from aged accounts (bought, or sleepers woken) posting harmless bait
RELEASE_NOTES = (
    "Tagged {v} of the toolkit: https://gitlab.com/{user}/toolkit/-/tags",
    "{v} is out, see https://codeberg.org/{user}/notes-app/releases",
    "Changelog for {v}: https://github.com/{user}/scraper/blob/main/NEWS.md",
    "bugfix release {v} https://bitbucket.org/{user}/plugin/downloads",
    "My game jam entry, version {v}: https://github.com/{user}/jam-entry",
)
BRIGADED_USER_P, BRIGADED_DOMAIN_P = 0.02, 0.03
THROWAWAY_WEIGHT = 0.02  # a reporter without a record (workers/state/reputation.py)
HUMAN_STEPS = ("open_composer", "type_text", "paste_link", "add_image", "preview", "submit")


@dataclass
class World:
    """Entity hashes keyed as the worker looks them up (``KS`` keys), plus ban lists."""

    hashes: dict[str, dict[str, str]] = field(default_factory=dict)
    banned_domains: set[str] = field(default_factory=set)
    banned_ips: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class SimPost:
    event: PostEvent
    label: int  # 1 spam, 0 ham
    wave: str = ""  # one of WAVES, or "" for a post of no wave


def pick(rng: np.random.Generator, items: Sequence[str]) -> str:
    """``rng.choice(items)``: the same draw (one bounded integer), without copying ``items`` into an
    array on every call, which took a fifth of the decision model's first build."""
    return items[int(rng.integers(len(items)))]


def _lognormal(rng: np.random.Generator, median: float, sigma: float) -> float:
    return float(rng.lognormal(np.log(median), sigma))


def _reports(rng: np.random.Generator, honest: float, brigade_p: float) -> float:
    """Weighted distinct reporters: ``honest`` (mean count) from reporters with a record of mostly
    confirmed reports, and now and then a brigade of throwaways (which an ordinary account draws as
    easily as a spammer)."""
    weight = float(rng.poisson(honest) * rng.beta(6, 2))
    if rng.random() < brigade_p:
        weight += THROWAWAY_WEIGHT * int(rng.integers(20, 300))
    return weight


class Simulator:
    def __init__(self, seed: int, now: float | None = None, scale: int = 1000) -> None:
        self.rng = np.random.default_rng(seed)
        self.now = now if now is not None else datetime.now(UTC).timestamp()
        self.world = World()
        self.seq = 0
        n = max(scale, 50)
        self.ham_domains = [self._domain(spam=False, i=i) for i in range(n // 3)]
        self.spam_domains = [self._domain(spam=True, i=i) for i in range(n // 2)]
        self.ham_ips = [self._ip(spam=False) for _ in range(n)]
        self.spam_ips = [self._ip(spam=True) for _ in range(n // 8)]
        self.users = {kind: [self._user(kind) for _ in range(max(n // 4, 10))] for kind in KINDS}
        self.viral_urls = [self._url(str(d), spam=False) for d in self.rng.choice(self.ham_domains, size=10)]
        self._ban()

    # -- entities ---------------------------------------------------------------------------
    def _id(self, prefix: str) -> str:
        self.seq += 1
        return f"{prefix}{self.seq:07d}"

    def _put(self, key: str, fields: dict[str, float], known_p: float) -> None:
        if self.rng.random() < known_p:
            self.world.hashes[key] = {k: f"{v:.12g}" for k, v in fields.items()}

    def _user(self, kind: str, known_p: float = 0.92) -> str:
        r, uid = self.rng, self._id("u")
        age = {
            "normal": _lognormal(r, 600, 1.1),
            "new": r.uniform(0, 30),
            "bot": _lognormal(r, 20, 1.4),
            "sleeper": _lognormal(r, 300, 1.1),
            "compromised": _lognormal(r, 500, 1.1),
        }[kind]
        rate = _lognormal(r, {"bot": 4, "sleeper": 0.8}.get(kind, 0.5), 1.1)
        posts = max(1, int(rate * max(age, 1)))
        spam_rate = {
            "normal": r.beta(0.5, 60),
            "new": r.beta(0.5, 30),
            "bot": r.beta(1, 4),
            "sleeper": r.beta(0.5, 25),
            "compromised": r.beta(0.6, 20),
        }[kind]
        social = {"normal": 150, "new": 8, "bot": 10, "sleeper": 90, "compromised": 120}[kind]
        self._put(
            KS.user(uid),
            {
                "created_at": self.now - age * DAY,
                "friends": int(_lognormal(r, social, 1.1)),
                "followers": int(_lognormal(r, social * 1.2, 1.4)),
                "verified": float(r.random() < {"normal": 0.06, "new": 0.01, "compromised": 0.05}.get(kind, 0.005)),
                "posts": posts,
                "spam_posts": r.binomial(posts, spam_rate),
                "reports": _reports(
                    r,
                    {"normal": 0.3, "new": 0.3, "bot": 1.5, "sleeper": 0.8, "compromised": 1.0}[kind],
                    BRIGADED_USER_P if kind in ("normal", "new") else 0.0,
                ),
                "email_disposable": float(r.random() < {"new": 0.12, "bot": 0.3, "sleeper": 0.1}.get(kind, 0.04)),
            },
            known_p=known_p,
        )
        return uid

    def _domain(self, spam: bool, i: int, age_days: float | None = None) -> str:
        r = self.rng
        tld = r.choice(SPAM_TLDS, p=SPAM_TLD_P) if spam else r.choice(HAM_TLDS, p=HAM_TLD_P)
        name = f"{'offer' if spam else 'site'}{i}{r.integers(100, 999)}.{tld}"
        if age_days is None:
            age_days = _lognormal(r, 150, 1.5) if spam else _lognormal(r, 1500, 1.3)
        self._put(
            KS.domain(name),
            {
                "created_at": self.now - age_days * DAY,
                "reputation": r.beta(3, 4) if spam else r.beta(5, 2),
                "posts": int(_lognormal(r, 80 if spam else 300, 1.5)),
                "reports": _reports(r, 2.5 if spam else 0.5, 0.0 if spam else BRIGADED_DOMAIN_P),
            },
            known_p=0.82 if spam else 0.9,
        )
        return name

    def _ip(self, spam: bool) -> str:
        r = self.rng
        ip = (
            f"{r.integers(5, 60)}.{r.integers(0, 255)}.{r.integers(0, 255)}.{r.integers(1, 254)}"
            if spam
            else f"{r.integers(70, 220)}.{r.integers(0, 255)}.{r.integers(0, 255)}.{r.integers(1, 254)}"
        )
        posts = int(_lognormal(r, 150 if spam else 25, 1.4)) + 1
        self._put(
            KS.ip(ip),
            {"posts": posts, "spam_posts": r.binomial(posts, r.beta(1.5, 5) if spam else r.beta(0.5, 30))},
            known_p=0.9,
        )
        return ip

    def _ban(self) -> None:
        r = self.rng
        for d in r.choice(self.spam_domains, size=max(1, len(self.spam_domains) // 25), replace=False):
            self.world.banned_domains.add(str(d))
        for ip in r.choice(self.spam_ips, size=max(1, len(self.spam_ips) // 30), replace=False):
            self.world.banned_ips.add(str(ip))
        self.world.banned_ips.add("203.0.113.0/24")  # TEST-NET-3: a banned range

    def _url(self, domain: str, spam: bool) -> str:
        r = self.rng
        depth = int(r.choice([0, 1, 2, 3], p=[0.35, 0.3, 0.2, 0.15] if spam else [0.5, 0.45, 0.04, 0.01]))
        subs = ".".join(f"s{r.integers(0, 99)}" for _ in range(depth)) if spam else ".".join(["www"] * depth)
        host = f"{subs}.{domain}" if subs else domain
        url = f"https://{host}/p/{r.integers(0, 50)}"
        self._put(
            KS.url(url),
            {"posts": int(_lognormal(r, 20 if spam else 5, 1.2)), "reports": r.poisson(2 if spam else 0.1)},
            known_p=0.6,
        )
        return url

    def _journey(self, kind: str) -> list[JourneyStep]:
        r = self.rng
        api_p = {"normal": 0.06, "new": 0.1, "bot": 0.4, "sleeper": 0.2, "compromised": 0.3}[kind]
        if r.random() < api_p:
            return []
        gap_ms = {"normal": 1200, "new": 1000, "bot": 300, "sleeper": 600, "compromised": 600}[kind]
        steps = ["open_composer", *[s for s in HUMAN_STEPS[1:-1] if r.random() < 0.5], "submit"]
        t, out = 0, []
        for name in steps:
            out.append(JourneyStep(name=name, offset_ms=t))
            t += int(_lognormal(r, gap_ms, 1.1))
        return out

    # -- posts ------------------------------------------------------------------------------
    def post(
        self,
        example: Example,
        created_at: float | None = None,
        user: tuple[str, str] | None = None,
        urls: list[str] | None = None,
    ) -> SimPost:
        """A post of ``example``'s text; ``user`` (kind, id) and ``urls`` when the caller picked them."""
        r, spam = self.rng, example.label == 1
        if user is None:
            kind = str(r.choice(KINDS, p=SPAM_KIND_P if spam else HAM_KIND_P))
            user = kind, pick(r, self.users[kind])
        kind, uid = user
        datacenter_p = {"bot": 0.6, "sleeper": 0.4, "compromised": 0.1}.get(kind, 0.04)
        ip_pool = self.spam_ips if r.random() < datacenter_p else self.ham_ips
        if urls is None:
            urls = self._links(spam)
        event = PostEvent(
            post_id=self._id("p"),
            user_id=uid,
            created_at=datetime.fromtimestamp(self.now if created_at is None else created_at, UTC),
            text=example.text[:10_000],
            urls=urls,
            ip=pick(r, ip_pool),  # pydantic parses the address
            journey=self._journey(kind),
            platform=str(r.choice(["web", "ios", "android"])),
        )
        return SimPost(event, example.label)

    def _links(self, spam: bool) -> list[str]:
        r = self.rng
        urls: list[str] = []
        if r.random() < (0.75 if spam else 0.35):
            spammy_link = (r.random() < 0.75) if spam else (r.random() < 0.08)
            if not spam and r.random() < VIRAL_LINK_P:
                urls.append(pick(r, self.viral_urls))
            else:
                pool = self.spam_domains if spammy_link else self.ham_domains
                urls.append(self._url(pick(r, pool), spammy_link))
        return urls

    def _burst(self, example: Example, size: int, start: float, users: list[tuple[str, str]]) -> list[SimPost]:
        """``size`` posts of near-copies of ``example`` by ``users``, minutes apart, with one link."""
        r, out, t = self.rng, list[SimPost](), start
        urls = self._links(example.label == 1)
        for _ in range(size):
            text = example.text if r.random() < 0.5 else f"{example.text} {r.integers(10, 9999)}"
            user = users[r.integers(len(users))]
            out.append(self.post(Example(example.id, text, example.label), min(t, self.now), user, urls))
            t += float(r.exponential(BURST_GAP_S))
        return out

    def _wave(self, kind: str, example: Example, ham: Sequence[Example], start: float) -> list[SimPost]:
        """A wave of ``kind`` (see WAVES) around ``example``, from many accounts within minutes."""
        r = self.rng
        size = int(r.integers(*WAVE_SIZE, endpoint=True))
        times = np.minimum(start + np.cumsum(r.exponential(WAVE_GAP_S, size)), self.now)
        if kind == "campaign":
            # Fresh accounts (many unknown to the platform; some bought aged ones), one domain
            # registered days ago (its profile often says so), one script.
            domain = self._domain(spam=True, i=self.seq, age_days=float(r.uniform(0, CAMPAIGN_DOMAIN_DAYS)))
            if r.random() < CAMPAIGN_BUTTON_P:  # a share button's sentence, pointing at the campaign's domain
                button = pick(r, SHARE_BUTTONS)
                variants = [f"{button.split('http')[0]}https://{domain}/{{}}"]
            else:
                template = example.text if r.random() < 0.5 else ham[r.integers(len(ham))].text
                words = template.replace("{", "{{").replace("}", "}}").split()[:40]  # literal braces in a text
                variants = [
                    " ".join(words[: len(words) - int(r.integers(0, 3))]) + f" https://{domain}/{{}}"
                    for _ in range(r.integers(1, 17))
                ]
            kind_of = "sleeper" if r.random() < CAMPAIGN_AGED_P else "bot"
            users = [(kind_of, self._user(kind_of, known_p=0.5)) for _ in range(size)]
            # One script replayed by every account, or (a careful campaign) a human pace of its own each.
            script = self._journey("bot") if r.random() > CAMPAIGN_HUMAN_PACE_P else None
            out = []
            for t, user in zip(times, users, strict=True):
                text = variants[r.integers(len(variants))].format(self._id("c"))
                sim = self.post(Example(example.id, text, 1), float(t), user, [])
                journey = self._journey("new") if script is None else script
                out.append(SimPost(sim.event.model_copy(update={"journey": journey}), 1, kind))
            return out
        if kind == "viral":  # one new URL on an established domain, each sharer in their own words
            url = self._url(pick(r, self.ham_domains), spam=False)

            def said() -> Example:
                return Example("", pick(r, REACTIONS), 0) if r.random() < REACTION_P else ham[r.integers(len(ham))]

            return [SimPost(self.post(said(), float(t), self._sharer(), [url]).event, 0, kind) for t in times]
        if kind == "share":  # one button's sentence, each sharer's own link, on a well-known host or any other
            button = pick(r, SHARE_BUTTONS) if r.random() < 0.5 else self._button()
            shares = [Example("", button.format(self._id("v")), 0) for _ in times]
            return [
                SimPost(self.post(e, float(t), self._sharer(), []).event, 0, kind)
                for e, t in zip(shares, times, strict=True)
            ]
        if kind == "release":  # a few sentences, each author's own page on a shared host
            out = []
            for t in times:
                user = self._sharer()
                note = pick(r, RELEASE_NOTES).format(v=f"{r.integers(0, 9)}.{r.integers(0, 20)}", user=user[1])
                out.append(SimPost(self.post(Example("", note, 0), float(t), user, []).event, 0, kind))
            return out
        return [  # greetings: near-copies of one text, no link
            SimPost(
                self.post(
                    Example(example.id, f"{example.text[:80]} {'!' * int(r.integers(0, 3))}", 0),
                    float(t),
                    self._sharer(),
                    [],
                ).event,
                0,
                kind,
            )
            for t in times
        ]

    def _button(self) -> str:
        """A share button of an app on a host of its own, named as apps are (no list names it): known
        to the platform for years, or (half of them) not at all."""
        r = self.rng
        app = "".join(pick(r, APP_SYLLABLES) for _ in range(int(r.integers(2, 4))))
        host = f"{app}.{pick(r, ('com', 'app', 'io', 'co', 'net'))}"
        if r.random() < 0.5:
            self.world.hashes[KS.domain(host)] = {"created_at": f"{self.now - _lognormal(r, 2000, 0.8) * DAY:.12g}"}
        noun = pick(r, ("track", "workout", "recipe", "petition", "clip", "playlist", "route"))
        sentence = pick(r, APP_BUTTONS).format(noun=noun, app=app.capitalize())
        return f"{sentence} https://{host}/{noun[0]}/{{}}"

    def _wave_kind(self, label: int) -> str:
        """The wave a draw of a text of ``label`` starts, or "" for none."""
        chances = {"campaign": CAMPAIGN_WAVE_P} if label else HAM_WAVE_P
        at, below = self.rng.random(), 0.0
        for kind, p in chances.items():
            below += p
            if at < below:
                return kind
        return ""

    def _sharer(self) -> tuple[str, str]:
        """Anyone, often an account so new that the platform knows nothing of it yet."""
        kind = str(self.rng.choice(["normal", "new"], p=[0.6, 0.4]))
        return kind, self._user(kind, known_p=0.5) if kind == "new" else pick(self.rng, self.users[kind])

    def waves(self, examples: Sequence[Example], per_kind: int, span_s: float = 2 * DAY) -> list[SimPost]:
        """``per_kind`` waves of each kind (:data:`WAVES`), each around a text of its label drawn from
        ``examples``, started at random over the ``span_s`` seconds before ``now``, in time order: enough
        crowds and campaigns to count each kind's decisions, where a stream has only a few of each."""
        r, out = self.rng, list[SimPost]()
        by_label = {label: [e for e in examples if e.label == label] or list(examples) for label in (0, 1)}
        for kind in WAVES:
            pool = by_label[int(kind == "campaign")]
            for _ in range(per_kind):
                out += self._wave(
                    kind, pool[r.integers(len(pool))], by_label[0], self.now - float(r.uniform(0, span_s))
                )
        return sorted(out, key=lambda p: p.event.created_at)

    def posts(self, examples: Sequence[Example], n: int, span_s: float = 2 * DAY) -> list[SimPost]:
        """``n`` posts drawn from ``examples`` (with replacement, each text in new contexts) over the
        ``span_s`` seconds before ``now``, in time order.

        Most spam comes in campaigns: a burst in which a few accounts post near-copies of one
        text. Ham has bursts too (a user in a conversation) and shared links (viral news), so
        volume alone does not give spam away.
        """
        r, out = self.rng, list[SimPost]()
        ham = [e for e in examples if e.label == 0] or list(examples)
        owed = {0: 0, 1: 0}  # draws a burst already stood for: skipped, so bursts keep the label mix
        for i in r.integers(0, len(examples), size=n):
            if len(out) >= n:  # bursts can fill the quota before the draws run out
                break
            ex, start = examples[i], self.now - float(r.uniform(0, span_s))
            if owed[ex.label]:
                owed[ex.label] -= 1
                continue
            size = min(n - len(out), 2 + int(r.poisson(4)))
            kind = self._wave_kind(ex.label)
            if kind:
                posts = self._wave(kind, ex, ham, start)[: n - len(out)]
                out += posts
                owed[ex.label] += len(posts) - 1
            elif ex.label == 1 and r.random() < CAMPAIGN_P:
                kind = str(r.choice(KINDS, p=SPAM_KIND_P))
                accounts = [(kind, str(u)) for u in r.choice(self.users[kind], size=2 + int(r.poisson(3)))]
                out += self._burst(ex, size, start, accounts)
                owed[1] += size - 1
            elif ex.label == 0 and r.random() < THREAD_P:
                kind = str(r.choice(KINDS, p=HAM_KIND_P))
                thread = [self.post(ex, start, (kind, pick(r, self.users[kind])))]
                out += [*thread, *self._burst(ex, size - 1, start, [(kind, thread[0].event.user_id)])]
                owed[0] += size - 1
            else:
                out.append(self.post(ex, start))
        return sorted(out, key=lambda p: p.event.created_at)
