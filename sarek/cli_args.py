"""The command line's argument types and parser, shared by every ``sarek`` command: each type
turns one argument into its value or refuses it with an ``argparse.ArgumentTypeError`` that
says what was expected."""

from __future__ import annotations

import argparse
from typing import NoReturn

from sarek.errors import LaunchError
from sarek.launch import dim3
from sim.launch import MAX_DIM


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def triple(text: str) -> tuple[int, int, int]:
    """``X[,Y[,Z]]``: 1 to 3 integers from 0 to ``MAX_DIM``, missing ones 1."""
    try:
        values = dim3([int(x) for x in text.split(",")])
    except (ValueError, LaunchError):
        raise argparse.ArgumentTypeError(f"expected X[,Y[,Z]] integers, got {text!r}") from None
    if min(values) < 0 or max(values) > MAX_DIM:
        raise argparse.ArgumentTypeError(f"expected integers from 0 to {MAX_DIM}, got {text!r}")
    return values

def count(text: str) -> int:
    """A positive integer, with an optional binary suffix K, M, G or T (``16G``)."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(text[-1:].upper(), 1)
    try:
        value = int(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer such as 1000 or 16G, got "
                                         f"{text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value

def scalar(text: str) -> tuple[str, int | float]:
    """``NAME=VALUE`` with an integer or float value."""
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, int(value)
    except ValueError:
        try:
            return name, float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None

def compute_capability(text: str) -> tuple[int, int]:
    """``8.0``, ``sm_80`` or ``80`` as (major, minor)."""
    digits = text.strip().lower().removeprefix("sm_")
    major, dot, minor = digits.partition(".")
    if not dot:
        major, minor = digits[:-1], digits[-1:]
    if not (major.isdigit() and minor.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a compute capability such as 8.0 or sm_80, "
                                         f"got {text!r}")
    return int(major), int(minor)

def apple_family(text: str) -> int:
    """``7`` or ``apple7``."""
    family = text.strip().lower().removeprefix("apple")
    if not family.isdigit():
        raise argparse.ArgumentTypeError(f"expected an Apple GPU family such as 7 or apple7, "
                                         f"got {text!r}")
    return int(family)
