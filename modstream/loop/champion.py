"""Loading the serving bundle a retrained one is compared with (the loop itself: modstream/loop/)."""

from __future__ import annotations

from pathlib import Path

from modstream.loop.join import DatasetError
from workers.model_cards import TextModelCard
from workers.stages.decide import DecisionModel


def load_serving(bundle: Path) -> tuple[DecisionModel, str]:
    """The bundle's decision model and text model version; a one-line DatasetError when it cannot compare."""
    try:
        model = DecisionModel.load(bundle / "decision")
        text_version = TextModelCard.load(bundle / "text").version
    except Exception as exc:  # a card, a contract or a model file: none of it can be compared against
        raise DatasetError(f"cannot load the serving bundle {bundle}: {str(exc).splitlines()[0]}") from None
    return model, text_version
