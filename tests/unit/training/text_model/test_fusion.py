"""The text-only fusion of the transformer's and the n-gram model's scores."""

import numpy as np

from training.text_model.fusion import Fusion


def test_fit_weights_the_informative_signal_and_beats_either_alone() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 4000)
    # Two noisy views of the label: the fusion of both separates better than either.
    a = 1 / (1 + np.exp(-(2.0 * (y * 2 - 1) + rng.normal(0, 2, y.size))))
    b = 1 / (1 + np.exp(-(2.0 * (y * 2 - 1) + rng.normal(0, 2, y.size))))
    fusion = Fusion.fit(a[:2000], b[:2000], y[:2000].tolist())
    assert fusion.transformer > 0 and fusion.ngram > 0

    def accuracy(p: np.ndarray) -> float:
        return float(((p[2000:] >= 0.5) == y[2000:]).mean())

    assert accuracy(fusion.spam_prob(a, b)) > max(accuracy(a), accuracy(b))


def test_scores_are_probabilities_even_at_the_extremes() -> None:
    fusion = Fusion(transformer=1.5, ngram=0.5, bias=-0.2)
    p = fusion.spam_prob([0.0, 1.0, 0.5], [1.0, 0.0, 0.5])
    assert np.all((p > 0) & (p < 1))
    assert fusion.spam_prob([0.9], [0.9])[0] > fusion.spam_prob([0.1], [0.9])[0]
