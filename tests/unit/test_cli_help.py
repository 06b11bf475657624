"""Every command's --help shows every option's whole name at 80 columns."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from modstream.cli import app


def commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command under ``group`` (typer's own click), subcommands included, with its path."""
    for name, command in group.commands.items():
        yield (*path, name), command
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))


def test_every_option_name_is_whole_at_80_columns() -> None:
    root = typer.main.get_command(app)
    runner = CliRunner()
    for path, command in commands(root):
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
        assert result.exit_code == 0, (path, result.output)
        assert max(len(line) for line in result.output.splitlines()) <= 80, path
        words = set(result.output.replace("/", " ").split())
        for param in command.params:
            for name in (*param.opts, *param.secondary_opts):
                if name.startswith("--"):
                    assert name in words, (path, name)


def test_the_retrain_help_shows_the_text_defaults_it_uses() -> None:
    from modstream.loop.retrain import TEXT_EPOCHS, TEXT_FOLDS

    root = typer.main.get_command(app)
    shown = {param.name: param.show_default for param in root.commands["retrain"].params}
    assert shown["epochs"] == str(TEXT_EPOCHS) and shown["text_folds"] == str(TEXT_FOLDS)
