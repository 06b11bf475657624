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


def shown_defaults(*path: str) -> dict[str, object]:
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return {param.name: param.show_default for param in command.params}


def test_the_gate_s_help_shows_the_defaults_it_uses() -> None:
    from modstream.loop.gate import REVIEW_FLOOR, Gate
    from modstream.loop.retrain_decision import HOLDOUT

    gate = Gate()
    for command in ("retrain", "train-decision"):
        shown = shown_defaults(command)
        assert shown["holdout"] == str(HOLDOUT), command
        assert shown["max_ham_blocked"] == str(gate.max_ham_blocked), command
        assert shown["min_block_precision"] == str(gate.min_block_precision), command
        assert shown["confidence"] == str(gate.confidence), command
        assert f"or {REVIEW_FLOOR:g}," in str(shown["max_review_share"]), command


def test_the_simulator_s_help_shows_the_defaults_of_the_training_it_runs() -> None:
    import inspect

    from training.decision_model import train_decision

    trained = inspect.signature(train_decision).parameters
    shown = shown_defaults("train-decision")
    assert shown["posts"] == str(trained["n_posts"].default) and shown["seed"] == str(trained["seed"].default)
