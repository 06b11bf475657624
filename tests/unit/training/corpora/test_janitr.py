"""The labelled X posts of the default mix: as the data card says, people's posts only, clear labels only."""

import json

from training.corpora.janitr import SAMPLE, _label, janitr_posts
from training.corpora.labelled import HAM, SPAM
from training.corpora.platforms import instagram_comments


def test_the_posts_are_as_the_card_says() -> None:
    posts = list(janitr_posts())
    assert (len(posts), sum(p.label for p in posts)) == (3885, 666)
    assert len({p.text for p in posts}) == len(posts)
    assert all(p.id.startswith("janitr/") for p in posts)


def test_labels_collapse_as_the_source_trains_and_a_bare_promo_is_left_out() -> None:
    assert _label({"clean", "topic_news"}) == HAM
    assert _label({"topic_crypto"}) == HAM  # crypto talk is not spam
    assert _label(set()) == HAM
    assert _label({"scam", "spam", "topic_crypto"}) == SPAM
    assert _label({"affiliate", "promo", "topic_crypto"}) == SPAM
    assert _label({"promo", "topic_ai"}) is None


def test_the_posts_the_source_wrote_itself_are_left_out() -> None:
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    written = ("clean_batch_", "scam_batch_")
    synthetic = {f"janitr/{r['id']}" for r in rows if (r.get("source_id") or "").startswith(written)}
    assert len(synthetic) == 64
    assert not synthetic & {p.id for p in janitr_posts()}


def test_none_is_a_post_of_the_loops_new_platform() -> None:
    comments = {c.text.lower() for c in instagram_comments() if len(c.text) >= 12}
    assert not comments & {p.text.lower() for p in janitr_posts()}
