"""Links shared by the default mix's training ham: a link alone must not read as spam."""

from training.corpora.labelled import HAM, SPAM, Example
from training.corpora.posts import LINKED_HAM_SHARE, shared_links
from workers.text.urls import POPULAR, extract_links


def test_a_share_of_the_ham_and_none_of_the_spam_shares_a_popular_site() -> None:
    examples = [Example(f"x/{i}", f"what a day at the lake number {i}", HAM if i % 3 else SPAM) for i in range(3000)]
    out = shared_links(examples, seed=13)
    assert [(e.id, e.label) for e in out] == [(e.id, e.label) for e in examples]
    linked = [e for e in out if extract_links(e.text)]
    assert all(e.label == HAM for e in linked)
    assert abs(len(linked) / 2000 - LINKED_HAM_SHARE) < 0.03
    assert all(link.domain in POPULAR for e in linked for link in extract_links(e.text))
    assert len({e.text for e in linked}) == len(linked)  # each its own path
    assert all(e.text.replace(extract_links(e.text)[0].url, "").strip() for e in linked)  # the text is kept
    assert shared_links(examples, seed=13) == out  # the same training set on every machine
