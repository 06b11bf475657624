"""The bench's cascade phase: its mixes and its judgement of the same labelled posts."""

from modstream.harness.bench_cascade import Judgement, decided_in_full, mix_texts
from tests.unit.workers.stages.test_cascade import KNOWN, LONG, MIDDLE, SHORT, cascade_model, posts_of
from training.corpora.labelled import Example
from workers.stages.decide import Unavailable, audit, decide, first_stage


def corpus() -> list[Example]:
    return [Example(f"e{i}", f"text {i}", int(i % 3 == 0)) for i in range(300)]


def test_a_mix_holds_its_share_of_spam_each_text_once_and_names_the_held_out_ones() -> None:
    texts = corpus()
    mixed, held = mix_texts(texts, 30, 0.1, 150)
    assert len(mixed) == 150 and sum(e.label for e in mixed) == 15
    assert len({e.id for e in mixed}) == 150
    assert held == {e.id for e in mixed if int(e.id[1:]) < 30}
    # Too few spam texts for the size asked: fewer posts at the same share.
    heavy, _ = mix_texts(texts, 30, 0.5, 1000)
    assert len(heavy) == 200 and sum(e.label for e in heavy) == 100


def test_the_judgement_counts_blocks_ham_blocked_spam_allowed_and_review() -> None:
    j = Judgement.of([1, 1, 0, 0, 1], ["block", "allow", "block", "review", "review"])
    assert (j.posts, j.spam, j.ham_blocked, j.spam_allowed, j.review_share) == (5, 3, 1, 1, 0.4)
    assert j.block_f1 == round(2 * 1 / (2 + 3), 4)


def test_the_full_models_decision_on_the_same_rows_puts_the_audited_score_back() -> None:
    model = cascade_model()
    posts = posts_of(SHORT, MIDDLE, LONG)
    first = first_stage(posts, [KNOWN] * 3, model.first, {}, Unavailable(), audit_share=1.0)
    scores = [0.99] * 3  # the transformer calls every text spam
    full, _ = decide(posts, [KNOWN] * 3, scores, model, {}, Unavailable())
    published = audit(first.outcomes, full) + [o for o in full if o.msg.offset in first.later]
    verdicts = {o.verdict.post_id: o.verdict for o in published}
    again = decided_in_full(verdicts, model)
    # The full model decides every post on its row with the transformer's score: as the full pipeline would.
    assert again == {o.verdict.post_id: o.verdict.decision for o in full}
    assert verdicts["p0"].decision == "allow" != again["p0"]  # the first stage's own, decided otherwise in full
