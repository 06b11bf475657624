"""The popularity prior's refresh from a ranking file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from modstream.cli import app
from modstream.ranking import RankingError, refresh


def test_a_ranking_becomes_registrable_domains_best_first_without_redirectors(tmp_path: Path) -> None:
    source = tmp_path / "ranking.csv"
    source.write_text(
        "1,www.tunewave.test\n2,https://m.tunewave.test\n3,bit.ly\n4,example.com\n5,news.co.uk\n6,alice.github.io\n"
    )
    out = tmp_path / "popular.txt"
    assert refresh(source, out, 1000, "test ranking\nCC0") == 2
    assert out.read_text() == "# test ranking\n# CC0\ntunewave.test\nnews.co.uk\n"


def test_the_command_refuses_a_file_without_domains_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(RankingError, match="no domain found"):
        refresh(tmp_path / "empty.txt", tmp_path / "out.txt", 1000, "x")
    result = CliRunner().invoke(
        app, ["ranking", "refresh", str(tmp_path / "missing.csv"), "--note", "x", "--out", str(tmp_path / "o.txt")]
    )
    assert result.exit_code == 2 and "no such file" in result.output
