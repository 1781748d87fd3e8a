"""Random kernel sources, valid and not: the DSL either builds a well-formed kernel or raises
DslError naming a line of the source, and the simulator runs what was built or raises one of
sarek's errors with a reason; neither fails any other way."""

from __future__ import annotations

import textwrap
import unittest.mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sarek
import sim
from sarek import ir, ir_check
from sarek.dsl import KernelFunction
from sarek.errors import DslError, SarekError

NAMES = ["x", "y", "acc", "n", "m", "a", "b", "i"]
EXPRS = [
    "{n} + {n}", "{n} * 2", "{n} // 3", "{n} % 5", "{n} / 2", "{n} < {n}", "{n} and {n}",
    "not {n}", "-{n}", "a[{n}]", "b[{n} % 4]", "f32({n})", "i32({n})", "min({n}, {n})",
    "sarek.sqrt({n})", "{n} if {n} > 0 else 0", "thread_idx.x", "block_idx.y", "{n} ** 2",
    "[{n}]", "{n} << 2", "{n} & 7", "1.5", "7", "True", "undefined_name", "len(a)",
    "sarek.fma({n}, {n}, {n})", "abs({n})",
]
STMTS = [
    "{v} = {e}", "{v} += {e}", "a[{e}] = {e}", "if {e}:\n    {s}",
    "if {e}:\n    {s}\nelse:\n    {s}",
    "for i in range({e}):\n    {s}", "while {e}:\n    {s}", "barrier()", "return", "pass",
    "break", "{e}", "{v}: f32 = {e}", "s = sarek.shared(f32, 16)", "return {e}",
]


@st.composite
def expressions(draw: st.DrawFn, depth: int = 0) -> str:
    template = draw(st.sampled_from(EXPRS if depth < 2 else ["{n}"]))
    out = template
    while "{n}" in out:
        leaf = draw(expressions(depth + 1)) if depth < 2 and draw(st.booleans()) else draw(
            st.sampled_from([*NAMES, "1", "2.0"]))
        out = out.replace("{n}", f"({leaf})", 1)
    return out


@st.composite
def statements(draw: st.DrawFn, depth: int = 0) -> str:
    template = draw(st.sampled_from(STMTS if depth < 2 else STMTS[:3]))
    out = template
    while "{s}" in out:
        out = out.replace("{s}", textwrap.indent(draw(statements(depth + 1)), "    ").lstrip(),
                          1)
    while "{e}" in out:
        out = out.replace("{e}", draw(expressions()), 1)
    while "{v}" in out:
        out = out.replace("{v}", draw(st.sampled_from(NAMES)), 1)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(statements(), min_size=1, max_size=5))
def test_random_sources_build_or_raise_dsl_error(body: list[str]) -> None:
    preamble = ["x = n", "y = m", "acc = f32(0.0)"]  # so that most names are defined
    src = "def k(a: Global[f32], b: Global[i32], n: i32, m: f32):\n" + textwrap.indent(
        "\n".join(preamble + body), "    ")
    namespace = {name: getattr(sarek, name) for name in sarek.__all__}
    namespace["sarek"] = sarek
    try:
        code = compile(src, "<fuzz>", "exec")
    except SyntaxError:
        return  # not Python at all: nothing for the DSL to say
    exec(code, namespace)  # defines k without running its body
    try:
        kern = _parse_source(namespace["k"], src)
    except DslError as e:
        assert e.line >= 1 and e.reason
        return
    assert ir_check.check(kern) == []
    args = {"a": np.linspace(-2, 2, 8, dtype=np.float32), "b": np.arange(8, dtype=np.int32),
            "n": 3, "m": 0.5}
    with unittest.mock.patch("sim.exec_control.MAX_WHILE_TRIPS", 10_000):  # `while True: pass`
        try:
            sim.simulate(kern, args, grid=2, block=4)
        except SarekError as e:
            assert e.reason


def _parse_source(fn: object, src: str) -> ir.Kernel:
    """``@sarek.kernel`` applied to a function whose source lives only in ``src``."""
    import linecache

    linecache.cache["<fuzz>"] = (len(src), None, src.splitlines(True), "<fuzz>")
    try:
        return KernelFunction(fn).ir  # type: ignore[arg-type]
    finally:
        del linecache.cache["<fuzz>"]


def test_fuzz_harness_accepts_a_valid_kernel() -> None:
    src = "def k(a: Global[f32], n: i32):\n    a[0] = f32(n)\n"
    namespace = {name: getattr(sarek, name) for name in sarek.__all__}
    exec(compile(src, "<fuzz>", "exec"), namespace)
    assert isinstance(_parse_source(namespace["k"], src), ir.Kernel)


def test_fuzz_harness_reports_a_bad_kernel() -> None:
    src = "def k(a: Global[f32], n: i32):\n    a[0] = n ** 2\n"
    namespace = {name: getattr(sarek, name) for name in sarek.__all__}
    exec(compile(src, "<fuzz>", "exec"), namespace)
    with pytest.raises(DslError, match="Pow"):
        _parse_source(namespace["k"], src)
