"""Hand-written post templates: a small augmentation share of the default training set.

They cover what the registry data lacks: short social-media spam (phishing with
obfuscated links, pills and toll-free numbers, crypto and follower scams) and short
everyday posts. They only ever enter the training split (:mod:`training.posts`), so
no reported figure is measured on them.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from training.textdata import HAM, SPAM, Example

_FILL: dict[str, tuple[str, ...]] = {
    "brand": ("Microsoft", "PayPal", "Apple", "Amazon", "Netflix", "Google", "Facebook", "Instagram", "your bank"),
    "thing": ("account", "password", "payment method", "billing details", "mailbox", "profile"),
    "bad": ("compromised", "suspended", "locked", "limited", "flagged for unusual activity", "deactivated"),
    "act": ("Click here to update", "Verify now", "Confirm your identity here", "Log in to restore access"),
    "link": (
        "http:\\\\www.{a}.{b}r.com\\update",
        "hxxp://{a}{b}-secure[.]com/login",
        "www.{a}-{b}.support/verify",
        "https://{a}{b}.account-check.net",
        "bit.ly/{a}{b}",
    ),
    "drug": ("drugs", "pills", "viagra", "cialis", "meds", "painkillers", "weight loss pills"),
    "cheap": ("cheap", "discount", "no prescription", "cheapest", "70% off"),
    "phone": ("123-800-1TOLL=FREE", "1-800-555-0199", "call 0800 FREE NOW", "text WIN to 80082"),
    "money": ("$500/day", "$3,000 a week", "10x your money", "guaranteed 300% returns", "$1000 gift card"),
    "scheme": ("crypto", "bitcoin", "forex", "NFT", "trading bot", "work from home"),
    "cta": ("DM me", "click the link in bio", "message me now", "limited spots left", "act now"),
    "prize": ("iPhone 16", "free vacation", "$1000 Walmart gift card", "cash prize", "PS5"),
    "item": ("bike", "couch", "desk", "guitar", "stroller", "lamp", "bookshelf"),
    "price": ("20", "35", "50", "80", "120"),
    "who": ("mom", "dad", "grandma", "my sister", "buddy", "coach"),
    "event": ("the game", "band practice", "book club", "the picnic", "dinner", "yoga"),
    "day": ("tomorrow", "on Friday", "this weekend", "tonight", "next week"),
}

SPAM_TEMPLATES = (
    "Your {brand} {thing} has been {bad}. {act}. {link}",
    "{brand} alert: your {thing} was {bad}! {act}: {link}",
    "buy {cheap} {drug} {phone}",
    "{cheap} {drug} shipped overnight, {cta} {phone}",
    "Make {money} with {scheme}! {cta}",
    "I made {money} from home with {scheme}, {cta} to learn how",
    "Congratulations! You won a {prize}. Claim it here {link}",
    "You have been selected for a {prize}! {cta} {phone}",
    "Get 10k followers in 24h, {cta} {link}",
    "URGENT: {brand} {thing} {bad}, reply with your password to keep it",
)
HAM_TEMPLATES = (
    "Selling my {item}, {price} bucks, pickup only",
    "happy birthday {who}! have a great day",
    "anyone going to {event} {day}?",
    "see you at {event} {day}",
    "thanks {who}, that was so much fun",
    "Lost my keys near {event} {day}, let me know if you find them",
)


def _fill(template: str, rng: random.Random) -> str:
    values = {name: rng.choice(options) for name, options in _FILL.items() if "{" + name + "}" in template}
    if "link" in values:  # link templates have their own slots: a brand split across labels
        name = rng.choice(_FILL["brand"]).lower().replace(" ", "")
        cut = rng.randint(2, max(2, len(name) - 2))
        values["link"] = values["link"].format(a=name[:cut], b=name[cut:])
    return template.format(**values)


def template_posts(n: int, seed: int) -> Iterator[Example]:
    """``n`` filled templates, about four in five spam, with ids ``template/<i>``."""
    rng = random.Random(seed)
    seen: set[str] = set()
    for i in range(n * 20):  # enough draws for n distinct texts
        if len(seen) >= n:
            return
        spam = rng.random() < 0.8
        text = _fill(rng.choice(SPAM_TEMPLATES if spam else HAM_TEMPLATES), rng)
        if text not in seen:
            seen.add(text)
            yield Example(f"template/{i}", text, SPAM if spam else HAM)
