"""Hand-written post templates: a small augmentation share of the default training set.

They cover what the registry data lacks: short social-media spam (phishing with
obfuscated links, pills and toll-free numbers, crypto and follower scams, self-promotion,
giveaways, DM-me and fake-support scams, dating bait, SEO comments, pump-and-dump) and short
everyday posts, above all the community notices that read like ads (a sofa given
away, a garage sale, a lost pet, a room to let, a job at the corner cafe) and the
congratulations that spam borrows ("Congratulations! You won..."): the
registry ham is mailing-list talk and chat, so without them a post offering
anything free or for sale looks like spam. Half the draws are each. They only ever
enter the training split (:mod:`training.corpora.posts`), so no reported figure is measured on them.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from training.corpora.labelled import HAM, SPAM, Example

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
    "item": ("bike", "couch", "desk", "guitar", "stroller", "lamp", "bookshelf", "mini fridge", "crib", "TV stand"),
    "items": ("kids' books", "moving boxes", "plant pots", "winter coats", "board games", "kitchen stuff"),
    "price": ("20", "35", "50", "80", "120", "$15", "$60", "$5"),
    "who": ("mom", "dad", "grandma", "my sister", "buddy", "coach", "everyone", "neighbors"),
    "event": ("the game", "band practice", "book club", "the picnic", "dinner", "yoga", "trivia night", "the fair"),
    "day": ("tomorrow", "on Friday", "this weekend", "tonight", "next week", "Saturday morning", "Sunday 9-1"),
    "place": ("Elm St", "the community center", "Lincoln park", "the old library", "our driveway", "the church hall"),
    "pet": ("cat", "dog", "parrot", "bunny", "kitten", "husky"),
    "color": ("black", "orange", "grey", "white and brown", "spotted"),
    "gig": ("dishwasher", "cashier", "babysitter", "dog walker", "line cook", "lifeguard"),
    "pro": ("plumber", "dentist", "mechanic", "vet", "tutor", "electrician"),
    "cause": ("the food bank", "the animal shelter", "the school trip", "the library", "new uniforms"),
    "milestone": (
        "the new job",
        "graduating",
        "the engagement",
        "the promotion",
        "your first marathon",
        "the new baby",
    ),
    "team": ("our team", "the girls' team", "my son's team", "the Tigers", "our office league team"),
    "win": ("won the finals", "won the championship", "won 3-1 tonight", "won the science fair", "took first place"),
    "content": ("gaming videos", "makeup tutorials", "beats", "cover songs", "crypto tips", "fitness vlogs"),
    "social": ("Instagram", "TikTok", "Telegram", "WhatsApp", "Snapchat", "Discord"),
    "handle": ("@cash_queen_22", "@forexmentor.anna", "@real_deals_4u", "@lucky.drop", "@growfast_official"),
    "coin": ("BTC", "ETH", "USDT", "SOL", "DOGE"),
    "amount": ("0.1", "0.5", "1", "500", "2,000"),
    "wallet": ("wallet", "MetaMask", "Trust Wallet", "Coinbase account", "exchange account"),
    "service": ("plumbing", "SEO services", "cheap essays", "car rentals", "web design", "replica watches"),
    "city": ("Dubai", "London", "Toronto", "Sydney", "Austin"),
    "ticker": ("$XQZ", "$MOON", "$PLTX", "$NOVA", "$GEMX"),
    "topic": ("the chain rule", "sourdough starters", "the new update", "how to fix the leak", "the history part"),
    "show": ("the finale", "the new episode", "last night's game", "the concert", "the trailer"),
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
    # Social spam: self-promotion, giveaways and crypto doubling, DM-me scams, fake support,
    # adult and dating bait, SEO comments, pump-and-dump.
    "check out my channel!! I post {content} every week, {cta}",
    "subscribe to my channel for more {content} {link}",
    "follow me on {social} for daily {content} {handle}",
    "{coin} GIVEAWAY: send {amount} {coin} to my {wallet} and get double back instantly",
    "giving away {amount} {coin} to everyone who follows and DMs me today",
    "hey dear, I saw your profile. {cta}, I have a business offer for you",
    "I earned {money} with {handle}, she is the best {scheme} mentor, message her on {social}",
    "anyone looking for an online job? earn {money} from your phone, {cta}",
    "problems with your {wallet}? contact {brand} support on {social} {phone}",
    "hot singles in your area want to meet you tonight {link}",
    "bored tonight? see my private pics here {link}",
    "Great post! For the best {service} in {city} visit {link}",
    "Very informative article, thanks for sharing. Check our {service} at {link}",
    "{ticker} is about to explode, buy now before it's too late, 100x guaranteed",
    "insider tip: {ticker} announcement tomorrow, load up now and {cta}",
)
HAM_TEMPLATES = (
    "Selling my {item}, {price} bucks, pickup only",
    "happy birthday {who}! have a great day",
    "anyone going to {event} {day}?",
    "see you at {event} {day}",
    "thanks {who}, that was so much fun",
    "Lost my keys near {event} {day}, let me know if you find them",
    "free {item}, you pick up, it's on the curb at {place}",
    "giving away {items}, first come first served. {place}",
    "yard sale {day} at {place}: {items}, a {item}, everything cheap",
    "{item} for sale, {price}, barely used. message me if interested",
    "moving next month, {item} needs a new home, {price} or best offer",
    "lost {pet} near {place}, {color}, very friendly. please call if you see it",
    "found a {color} {pet} by {place} {day}, no collar. is it yours?",
    "room for rent near {place} from {day}, quiet house. DM me for details",
    "we're hiring a {gig}! stop by {place} or message me",
    "can anyone recommend a good {pro}? ours moved away",
    "reminder: {event} {day} at {place}, free entry, bring a friend",
    "bake sale {day} at {place}, all proceeds go to {cause}. thanks {who}!",
    "please vote for our {pet} in the cutest pet contest, link in bio",
    "{event} raised {price}00 for {cause}, thank you {who}",
    "congratulations {who} on {milestone}! so happy for you",
    "{team} {win}!! congrats everyone, so proud",
    # Comments, replies, questions and reviews.
    "great video, thanks for explaining {topic} so clearly",
    "does anyone know when {show} starts?",
    "who else is here after {show}?",
    "bought this {item} last month and it still works great",
    "congrats on 10k followers {who}, well deserved!",
    "does the {item} come with a warranty or not?",
    "my {pet} loves this, thanks for the recommendation",
    "just watched {show}, I can't stop thinking about it",
    "I follow you on {social} too, your {content} got me through the week",
    "not worth {price}, the {item} broke after two weeks",
)


def _fill(template: str, rng: random.Random) -> str:
    values = {name: rng.choice(options) for name, options in _FILL.items() if "{" + name + "}" in template}
    if "link" in values:  # link templates have their own slots: a brand split across labels
        name = rng.choice(_FILL["brand"]).lower().replace(" ", "")
        cut = rng.randint(2, max(2, len(name) - 2))
        values["link"] = values["link"].format(a=name[:cut], b=name[cut:])
    return template.format(**values)


def template_posts(n: int, seed: int) -> Iterator[Example]:
    """``n`` filled templates, half spam, with ids ``template/<i>``."""
    rng = random.Random(seed)
    seen: set[str] = set()
    for i in range(n * 20):  # enough draws for n distinct texts
        if len(seen) >= n:
            return
        spam = rng.random() < 0.5
        text = _fill(rng.choice(SPAM_TEMPLATES if spam else HAM_TEMPLATES), rng)
        if text not in seen:
            seen.add(text)
            yield Example(f"template/{i}", text, SPAM if spam else HAM)
