"""``sarek --help`` and each command's ``--help``: plain text (no reStructuredText markup), a
description of the command, and every option explained."""

from __future__ import annotations

import argparse

import pytest

from sarek.cli import main, parser


def commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("command", [None, *commands()])
def test_help_is_plain_text(command: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--help"] if command is None else [command, "--help"]
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: sarek") and "``" not in out and ":class:" not in out


@pytest.mark.parametrize("command", [c for c in commands() if c != "conformance"])
def test_every_option_of_a_command_is_explained(command: str) -> None:
    p = commands()[command]
    assert p.description, f"sarek {command} has no description"
    unexplained = [a.dest for a in p._actions if not a.help]
    assert unexplained == []
