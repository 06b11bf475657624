"""The packages form layers: schemas <- workers <- training <- modstream, and no import cycles."""

import pytest

from modstream.imports import PACKAGES, cycles, import_graph

GRAPH = import_graph()
# What each package may never import: everything above it.
FORBIDDEN = {
    "schemas": ("workers", "training", "modstream"),
    "workers": ("training", "modstream"),
    "training": ("modstream",),
}


def test_the_graph_sees_every_package() -> None:
    assert {name.split(".")[0] for name in GRAPH} == set(PACKAGES)
    assert "training.textdata" in GRAPH["training.corpus"]  # imports are really parsed


def test_no_import_cycles() -> None:
    assert cycles(GRAPH) == []


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}) == [["a", "b", "c"], ["e"]]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_layers_never_import_higher_ones(package: str) -> None:
    bad = {
        f"{name} -> {dep}"
        for name, deps in GRAPH.items()
        if name.split(".")[0] == package
        for dep in deps
        if dep.split(".")[0] in FORBIDDEN[package]
    }
    assert not bad
