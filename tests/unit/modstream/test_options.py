"""An option left out keeps the default of what it configures; one given replaces it, falsy or not."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from modstream.loop.gate import Gate
from modstream.options import gate_from, merged


@dataclass(frozen=True)
class Knobs:
    size: int = 8
    name: str = "default"
    on: bool = True

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError("size must be >= 0")


def test_none_keeps_the_default_and_any_other_value_replaces_it() -> None:
    assert merged(Knobs(), size=None, name=None, on=None) == Knobs()
    assert merged(Knobs(), size=0, name="", on=False) == Knobs(0, "", False)
    assert merged(Knobs(size=3), name="x") == Knobs(3, "x")


def test_the_merged_value_is_validated_as_its_defaults_are() -> None:
    with pytest.raises(ValueError, match="size"):
        merged(Knobs(), size=-1)


def test_the_gate_takes_only_the_bounds_given() -> None:
    assert gate_from(None, None, None, None) == Gate()
    assert gate_from(0.2, None, 0.9, None) == Gate(max_review_share=0.2, min_block_precision=0.9)
