"""The exceptions a user of sarek can meet.

Every error carries a ``reason``: one sentence a person can act on, written where the
information exists. Subclasses add the structured facts (a statement path, a source line,
invocation ids) so that tools can report them without parsing the message.
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

OWN_PACKAGES = ("sarek", "sim", "backends")
"""The top-level packages whose frames a user-facing error leaves out of its traceback."""


class SarekError(Exception):
    """Base of every error sarek raises on bad input."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class IRError(SarekError):
    """A kernel's IR is ill-formed (see ``sarek.ir.check``); ``problems`` lists each finding."""

    def __init__(self, kernel: str, problems: list[str]) -> None:
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"kernel {kernel!r} is not well-formed:\n{lines}")
        self.kernel = kernel
        self.problems = problems


class DslError(SarekError):
    """A Python function cannot be read as a kernel; names the file, line and construct."""

    def __init__(self, reason: str, file: str = "<unknown>", line: int = 0) -> None:
        super().__init__(f"{file}:{line}: {reason}")
        self.file = file
        self.line = line
        self.construct = reason


class SimError(SarekError):
    """A simulated launch did something a GPU would not define.

    ``statement`` is the IR path of the statement (``body[2].then[0]``), ``line`` its source line
    when the DSL recorded one, and ``invocations`` up to eight offending ``(block, thread)`` pairs,
    each an ``(x, y, z)`` triple.
    """

    def __init__(
        self,
        reason: str,
        statement: str = "",
        line: int | None = None,
        invocations: tuple[tuple[tuple[int, int, int], tuple[int, int, int]], ...] = (),
    ) -> None:
        where = f" at {statement}" if statement else ""
        if line is not None:
            where += f" (line {line})"
        shown = ", ".join(f"block {b} thread {t}" for b, t in invocations)
        super().__init__(f"{reason}{where}" + (f"; invocations: {shown}" if shown else ""))
        self.statement = statement
        self.line = line
        self.invocations = invocations
        self.detail = reason


class OutOfBounds(SimError):
    """A load or store outside its array."""


class SharedRace(SimError):
    """Two invocations of a block touched one shared element between barriers, one writing."""


class RegisterRace(SimError):
    """An instruction touched registers that an asynchronous instruction still in flight (a
    ``wgmma`` whose group no wait has retired) reads or writes."""


class BarrierDivergence(SimError):
    """A barrier that some, but not all, invocations of a block reached."""


class MbarrierMisuse(SimError):
    """An mbarrier used against its rules: before it is initialized, past its index, with more
    arrivals than a phase expects, or waited on with a phase parity that names a phase nothing
    will complete or not the one the invocation waits for next."""


class LaunchError(SimError):
    """The launch itself is wrong: arguments, geometry, or an undefined operation (such as a
    division by 0)."""


class LimitError(LaunchError):
    """A launch needs more than one of the simulator's documented limits allows (invocations,
    memory, loop trips: ``sim.launch.Limits``, ``specs/simulator.md``); ``limit`` names the limit
    and the reason says how to raise it."""

    def __init__(self, reason: str, limit: str, statement: str = "",
                 line: int | None = None,
                 invocations: tuple[tuple[tuple[int, int, int], tuple[int, int, int]], ...] = (),
                 ) -> None:
        super().__init__(reason, statement, line, invocations)
        self.limit = limit


class SubgroupDivergence(SimError):
    """A subgroup operation (on fragments) that only some lanes of a subgroup reached, or whose
    operands differ between the lanes."""


def _is_own(tb: types.TracebackType) -> bool:
    name = tb.tb_frame.f_globals.get("__name__")
    return isinstance(name, str) and name.split(".")[0] in OWN_PACKAGES


def outside_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without the frames of sarek's own packages: what is left is the caller's code
    (and any of the user's functions sarek called back, a module's ``make``, say)."""
    kept: list[types.TracebackType] = []
    while tb is not None:
        if not _is_own(tb):
            kept.append(tb)
        tb = tb.tb_next
    out: types.TracebackType | None = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def user_facing(fn: Callable[P, R]) -> Callable[P, R]:
    """Marks a public entry point: a ``SarekError`` leaving it carries a traceback without
    sarek's own frames (as numba and Triton report errors), so that the user's line is the
    last before the message, which names the problem and what to write instead. With
    ``SAREK_TRACEBACK=1`` in the environment the whole traceback is kept."""

    @functools.wraps(fn)
    def entry(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except SarekError as error:
            if os.environ.get("SAREK_TRACEBACK"):
                raise
            hidden = outside_frames(error.__traceback__)
            raise error.with_traceback(hidden) from error.__cause__  # SAREK_TRACEBACK=1: all

    return entry
