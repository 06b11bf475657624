"""The packages form layers: schemas <- workers <- training <- modstream, each package's folders form
floors of their own, and no import runs up a floor or in a circle."""

import re
from pathlib import Path

import pytest

from modstream.import_graph import PACKAGES, cycles, import_graph

GRAPH = import_graph()
# What each package may never import: everything above it.
FORBIDDEN = {
    "schemas": ("workers", "training", "modstream"),
    "workers": ("training", "modstream"),
    "training": ("modstream",),
}
# Inside each package, its modules and folders from the ground up: one may import its own floor
# and those below, never one above. The floors are the architecture (docs/ARCHITECTURE.md).
FLOORS: dict[str, list[set[str]]] = {
    "workers": [
        {"logs", "config", "metrics", "data"},
        {"text"},
        {"records", "errors", "model_cards"},
        {"state", "clients"},
        {"kafka", "runtime"},
        {"stages"},
        {"bundle", "adapters"},
        {"moderation", "feedback", "profiles"},
        {"main", "health"},
    ],
    "training": [
        {"corpora"},
        {"calibration", "plots"},
        {"simulator"},
        {"text_model", "decision_model"},
        {"experiments"},
    ],
    "modstream": [
        {"import_graph"},
        {"serving", "ranking"},
        {"stack"},
        {"loop"},
        {"harness"},
        {"cli", "options", "render"},
    ],
}


def floor(module: str) -> tuple[str, int] | None:
    """``(package, floor)`` of a module below a package's top (None: the package itself)."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    package, room = parts[0], parts[1]
    found = [i for i, rooms in enumerate(FLOORS.get(package, [])) if room in rooms]
    return (package, found[0]) if found else (package, -1)


def test_the_graph_sees_every_package() -> None:
    assert {name.split(".")[0] for name in GRAPH} == set(PACKAGES)
    assert "training.corpora.labelled" in GRAPH["training.corpora.spamassassin"]  # imports are really parsed


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


def test_every_module_has_a_floor() -> None:
    assert not {name for name in GRAPH if (f := floor(name)) is not None and f[0] in FLOORS and f[1] < 0}


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_no_import_runs_up_a_floor(package: str) -> None:
    bad = set()
    for name, deps in GRAPH.items():
        here = floor(name)
        if here is None or here[0] != package:
            continue
        for dep in deps:
            there = floor(dep)
            if there is not None and there[0] == package and there[1] > here[1]:
                bad.add(f"{name} -> {dep}")
    assert not bad


def test_a_module_s_floor_is_its_folder_s() -> None:
    assert floor("workers.text.urls") == ("workers", 1)
    assert floor("workers.main") == ("workers", 8)
    assert floor("workers") is None


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_the_architecture_page_shows_these_floors(package: str) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith(f"| `{package}` |"))
    shown = [set(re.findall(r"`(\w+)`", cell)) for cell in row.split("|")[2].split("→")]
    assert shown == FLOORS[package]
