"""The simulated platform must be plausible but not leak the label through any one feature."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from training.corpora.labelled import Example
from training.decision_model import feature_rows, to_posts
from training.simulator import SimPost, Simulator, pick
from workers.state.features import FEATURES


@pytest.fixture(scope="module")
def sample() -> tuple[np.ndarray, np.ndarray]:
    examples = [Example(f"e{i}", f"text number {i}", int(i % 3 == 0)) for i in range(300)]
    sim = Simulator(5, now=1.8e9, scale=600)
    posts, y = to_posts(sim.posts(examples, 4000), sim.world)
    return feature_rows(posts, sim.world, [None] * len(posts)), y


def test_no_single_feature_gives_the_label_away(sample: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = sample
    for i, name in enumerate(FEATURES):
        known = ~np.isnan(x[:, i])
        if known.sum() < 50 or len(set(y[known])) < 2:
            continue
        auc = roc_auc_score(y[known], x[known, i])
        assert max(auc, 1 - auc) < 0.85, f"{name} alone separates the classes (AUC {auc:.3f})"


def test_both_classes_and_missing_entities_occur(sample: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = sample
    assert 0.2 < y.mean() < 0.5
    assert np.isnan(x[:, FEATURES.index("user_age_days")]).mean() > 0.03  # unknown users exist


def test_banned_posts_are_short_circuited_before_the_model() -> None:
    sim = Simulator(1, now=1.8e9, scale=200)
    spam = [Example("s", "cheap pills", 1)]
    sims = sim.posts(spam, 50)
    banned = next(iter(sim.world.banned_domains))
    sims.append(SimPost(sims[0].event.model_copy(update={"post_id": "banned1", "urls": [f"https://x.{banned}/"]}), 1))
    posts, _ = to_posts(sims, sim.world)
    assert posts and all(p.event.post_id != "banned1" for p in posts)


@pytest.mark.parametrize("n", [1, 2, 7, 50, 301])
def test_posts_gives_exactly_n_posts(n: int) -> None:
    examples = [Example(f"e{i}", f"text number {i}", i % 2) for i in range(40)]
    sim = Simulator(3, now=1.8e9, scale=200)
    assert [len(sim.posts(examples, n)) for _ in range(5)] == [n] * 5


@pytest.mark.parametrize("n", [1, 3, 1000])
def test_pick_draws_what_choice_draws(n: int) -> None:
    """The simulated world, and so the decision model trained on it, must not change with the faster draw."""
    items = [f"item{i}" for i in range(n)]
    fast, slow = np.random.default_rng(7), np.random.default_rng(7)
    assert [pick(fast, items) for _ in range(200)] == [str(slow.choice(items)) for _ in range(200)]
    assert fast.random() == slow.random()
