"""The shadow's label queue: the unlabelled posts champion and challenger decide differently,
those the challenger alone blocks first."""

from __future__ import annotations

from modstream.loop.replay import label_queue
from schemas import Decision, Verdict
from tests.unit.fakes import logged_verdict


def decided(pairs: dict[str, tuple[Decision, float]]) -> dict[str, Verdict]:
    return {pid: logged_verdict(pid, 1, decision=d).model_copy(update={"score": s}) for pid, (d, s) in pairs.items()}


def test_the_queue_holds_unlabelled_flips_the_challenger_s_blocks_first_surest_first() -> None:
    champion = decided({"a": ("allow", 0.1), "b": ("block", 0.9), "c": ("allow", 0.2), "d": ("review", 0.5),
                        "e": ("allow", 0.1), "f": ("allow", 0.1)})  # fmt: skip
    challenger = decided({"a": ("block", 0.91), "b": ("allow", 0.1), "c": ("block", 0.97), "d": ("review", 0.6),
                          "e": ("block", 0.99), "f": ("review", 0.4)})  # fmt: skip
    queue = label_queue(champion, challenger, labels={"e": 1})  # e is labelled: it no longer needs one
    assert [(q.post_id, q.champion, q.challenger) for q in queue] == [
        ("c", "allow", "block"),
        ("a", "allow", "block"),
        ("f", "allow", "review"),
        ("b", "block", "allow"),
    ]
    assert queue[0].champion_score == 0.2 and queue[0].challenger_score == 0.97


def test_posts_only_one_side_decided_are_not_queued() -> None:
    champion = decided({"a": ("allow", 0.1)})
    assert label_queue(champion, decided({"b": ("block", 0.9)}), {}) == []
