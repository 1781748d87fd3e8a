"""Random GEMM kernels for property tests: a ``GemmSpec`` describes one kernel (mapping, guard
style, operand layouts, strides, offsets, initial value, update form, epilogue) and one launch;
``source(spec)`` writes it as DSL text, ``build(spec)`` parses it into a kernel, ``launch(spec,
seed)`` makes the arguments, and ``gemm_specs()`` is the hypothesis strategy.

Every generated kernel is a GEMM the recognizer must accept, over int32 by default, so that
results compare bit for bit. The launch may cover less or more than the guard allows (ragged
sizes, a 1-D launch that stops part-way through the output), and sizes may be zero.
"""

from __future__ import annotations

import hashlib
import linecache
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from hypothesis import strategies as st

import sarek
from sarek.dsl import KernelFunction
from sarek.launch import Launch

MAPPINGS = ("2d", "2d-swapped", "1d-row", "1d-col")
GUARDS = ("and", "nested", "return")
INITS = ("zero", "const", "c_old", "bias")
UPDATES = ("aug", "acc_first", "prod_first")
EPILOGUES = ("plain", "alpha_beta", "relu", "bias", "clamp")
GID_STYLES = 3


@dataclass(frozen=True)
class GemmSpec:
    """One generated kernel and its launch."""

    mapping: str = "2d"
    batch: bool = False
    gid_style: int = 0
    guard: str = "and"
    a_major: str = "row"
    b_major: str = "row"
    c_major: str = "row"
    pads: tuple[int, int, int] = (0, 0, 0)  # extra leading-dimension of A, B, C
    offsets: tuple[int, int, int] = (0, 0, 0)
    reverse_terms: bool = False
    swap_product: bool = False
    update: str = "aug"
    init: str = "zero"
    epilogue: str = "plain"
    k_start: int = 0
    m: int = 5
    n: int = 4
    k: int = 3
    batches: int = 1
    block: tuple[int, int, int] = (4, 4, 1)
    grid_delta: tuple[int, int, int] = (0, 0, 0)  # added to the grid that fits the guard
    elem: str = "i32"


# --------------------------------------------------------------------------- source text


def _gid(axis: str, style: int) -> str:
    b, t, d = f"block_idx.{axis}", f"thread_idx.{axis}", f"block_dim.{axis}"
    return (f"{b} * {d} + {t}", f"{t} + {b} * {d}", f"{d} * {b} + {t}")[style % GID_STYLES]


def _ld(major: str, spec: GemmSpec, pad: int, rows: str, cols: str) -> str:
    """The leading dimension of a matrix with ``rows`` x ``cols`` elements."""
    base = cols if major == "row" else rows
    return f"({base} + {pad})" if pad else base


def _index(spec: GemmSpec, terms: list[str]) -> str:
    terms = [t for t in terms if t]
    if spec.reverse_terms:
        terms.reverse()
    return " + ".join(terms) or "0"


def _matrix_terms(major: str, r: str, c: str, ld: str, off: int, batch_stride: str,
                  spec: GemmSpec) -> list[str]:
    inner, outer = (c, r) if major == "row" else (r, c)
    return [str(off) if off else "", f"{outer} * {ld}", inner,
            f"z * {batch_stride}" if spec.batch else ""]


def _strides(spec: GemmSpec) -> dict[str, str]:
    pa, pb, pc = spec.pads
    lda = _ld(spec.a_major, spec, pa, "m", "k")
    ldb = _ld(spec.b_major, spec, pb, "k", "n")
    ldc = _ld(spec.c_major, spec, pc, "m", "n")
    return {
        "lda": lda, "ldb": ldb, "ldc": ldc,
        "sa": f"({'m' if spec.a_major == 'row' else 'k'} * {lda})",
        "sb": f"({'k' if spec.b_major == 'row' else 'n'} * {ldb})",
        "sc": f"({'m' if spec.c_major == 'row' else 'n'} * {ldc})",
    }


def source(spec: GemmSpec, name: str = "gemm") -> str:
    """The kernel as DSL source text."""
    s = _strides(spec)
    oa, ob, oc = spec.offsets
    t = spec.elem
    a_idx = _index(spec, _matrix_terms(spec.a_major, "row", "p", s["lda"], oa, s["sa"], spec))
    b_idx = _index(spec, _matrix_terms(spec.b_major, "p", "col", s["ldb"], ob, s["sb"], spec))
    c_idx = _index(spec, _matrix_terms(spec.c_major, "row", "col", s["ldc"], oc, s["sc"], spec))
    bias = "bias[z * n + col]" if spec.batch else "bias[col]"
    prod = f"b[{b_idx}] * a[{a_idx}]" if spec.swap_product else f"a[{a_idx}] * b[{b_idx}]"
    update = {"aug": f"acc += {prod}", "acc_first": f"acc = acc + {prod}",
              "prod_first": f"acc = {prod} + acc"}[spec.update]
    literal = (lambda v: f"{t}({v})") if t != "i32" else str  # an f32 accumulator needs f32(0)
    init = {"zero": literal(0), "const": literal(7), "c_old": f"c[{c_idx}]",
            "bias": bias}[spec.init]
    epilogue = {"plain": "acc", "alpha_beta": f"alpha * acc + beta * c[{c_idx}]",
                "relu": "max(acc, 0)", "bias": f"acc + {bias}",
                "clamp": "min(max(acc, -1000000), 1000000)"}[spec.epilogue]
    params = (f"a: Global[{t}], b: Global[{t}], c: Global[{t}], bias: Global[{t}], m: i32, "
              f"n: i32, k: i32, alpha: {t}, beta: {t}, batches: i32")
    lines = [f"def {name}({params}):"]
    body: list[str] = []
    if spec.batch:
        body.append("z = block_idx.z")
    conds: list[str] = []
    after: list[str] = []
    if spec.mapping.startswith("2d"):
        ry, cx = ("y", "x") if spec.mapping == "2d" else ("x", "y")
        body += [f"row = {_gid(ry, spec.gid_style)}", f"col = {_gid(cx, spec.gid_style)}"]
        conds += ["row < m", "col < n"]
    else:
        body.append(f"tid = {_gid('x', spec.gid_style)}")
        conds.append("tid < m * n")
        after = (["row = tid // n", "col = tid % n"] if spec.mapping == "1d-row"
                 else ["col = tid // m", "row = tid % m"])
    if spec.batch:
        conds.append("z < batches")
    nest = [*after, f"acc = {init}", f"for p in range({spec.k_start}, k):", f"    {update}",
            f"c[{c_idx}] = {epilogue}"]
    if spec.guard == "return":
        negated = {"<": ">="}
        parts = [c.replace(" < ", f" {negated['<']} ") for c in conds]
        body += [f"if {' or '.join(parts)}:", "    return", *nest]
    elif spec.guard == "nested":
        depth = 0
        for c in conds:
            body.append("    " * depth + f"if {c}:")
            depth += 1
        body += ["    " * depth + x for x in nest]
    else:
        body += [f"if {' and '.join(conds)}:", *("    " + x for x in nest)]
    lines += ["    " + x for x in body]
    return "\n".join(lines) + "\n"


_NAMESPACE = {name: getattr(sarek, name) for name in (
    "Global", "i8", "u8", "i16", "i32", "f16", "bf16", "f32", "block_idx", "block_dim",
    "thread_idx")}


def build_source(text: str, name: str = "gemm") -> KernelFunction:
    """Parses DSL source text (a single ``def``) into a kernel, as if it were in a file."""
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    filename = f"<gemm_gen {digest}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace: dict[str, Any] = dict(_NAMESPACE)
    exec(compile(text, filename, "exec"), namespace)
    return sarek.kernel(namespace[name])


def build(spec: GemmSpec) -> KernelFunction:
    """The generated kernel."""
    return build_source(source(spec))


# --------------------------------------------------------------------------- launches


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def geometry(spec: GemmSpec) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block): the grid that fits the guard, changed by ``grid_delta``."""
    bx, by, _ = spec.block
    dx, dy, dz = spec.grid_delta
    zb = max(0, spec.batches + dz) if spec.batch else 1
    if spec.mapping.startswith("1d"):
        return (max(0, _ceil(spec.m * spec.n, bx) + dx), 1, zb), (bx, 1, 1)
    rows, cols = (spec.m, spec.n) if spec.mapping == "2d" else (spec.n, spec.m)
    return (max(0, _ceil(cols, bx) + dx), max(0, _ceil(rows, by) + dy), zb), (bx, by, 1)


def _size(major: str, rows: int, cols: int, pad: int, off: int, batches: int) -> int:
    ld = (cols if major == "row" else rows) + pad
    per = (rows if major == "row" else cols) * ld
    return off + per * max(batches, 1) + 1


def launch(spec: GemmSpec, seed: int = 0) -> dict[str, Any]:
    """Arguments by name: random full-range values (int32) so that sums wrap."""
    rng = np.random.default_rng(seed)
    dt = np.int32 if spec.elem == "i32" else np.float32
    nb = spec.batches if spec.batch else 1
    pa, pb, pc = spec.pads
    oa, ob, oc = spec.offsets

    def values(size: int) -> np.ndarray:
        if dt is np.int32:
            return rng.integers(-2**31, 2**31, size, dtype=np.int64).astype(np.int32)
        return rng.integers(-8, 9, size).astype(np.float32)

    m, n, k = spec.m, spec.n, spec.k
    return {
        "a": values(_size(spec.a_major, m, k, pa, oa, nb)),
        "b": values(_size(spec.b_major, k, n, pb, ob, nb)),
        "c": values(_size(spec.c_major, m, n, pc, oc, nb)),
        "bias": values(nb * max(n, 1) + 1),
        "m": m, "n": n, "k": k,
        "alpha": dt(int(rng.integers(-5, 6))), "beta": dt(int(rng.integers(-5, 6))),
        "batches": spec.batches,
    }


# --------------------------------------------------------------------------- the strategy


@st.composite
def gemm_specs(draw: st.DrawFn, elem: str = "i32") -> GemmSpec:
    """Random GEMM kernels with small, possibly ragged or zero, sizes and launches."""
    mapping = draw(st.sampled_from(MAPPINGS))
    batch = draw(st.booleans())
    small = st.integers(0, 3)
    spec = GemmSpec(
        mapping=mapping, batch=batch, gid_style=draw(st.integers(0, GID_STYLES - 1)),
        guard=draw(st.sampled_from(GUARDS)),
        a_major=draw(st.sampled_from(("row", "col"))),
        b_major=draw(st.sampled_from(("row", "col"))),
        c_major=draw(st.sampled_from(("row", "col"))),
        pads=(draw(small), draw(small), draw(small)),
        offsets=(draw(small), draw(small), draw(small)),
        reverse_terms=draw(st.booleans()), swap_product=draw(st.booleans()),
        update=draw(st.sampled_from(UPDATES)), init=draw(st.sampled_from(INITS)),
        epilogue=draw(st.sampled_from(EPILOGUES)), k_start=draw(st.integers(0, 1)),
        m=draw(st.integers(0, 7)), n=draw(st.integers(0, 7)), k=draw(st.integers(0, 5)),
        batches=draw(st.integers(1, 3)) if batch else 1,
        block=(draw(st.integers(1, 5)), draw(st.integers(1, 4)), 1),
        grid_delta=(draw(st.integers(-2, 1)), draw(st.integers(-1, 1)),
                    draw(st.integers(-1, 1)) if batch else 0),
        elem=elem,
    )
    if mapping.startswith("1d") and batch:
        spec = replace(spec, grid_delta=(max(0, spec.grid_delta[0]), 0, spec.grid_delta[2]))
    return spec


VARYING_INIT = """
def bias(a: Global[f16], b: Global[f16], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = c[row * n + col]
        for p in range(k):
            acc += f32(a[row * k + p]) * f32(b[p * n + col])
        c[row * n + col] = acc
"""
"""An f16 GEMM whose initial value is C's own f32 (a rewrite takes it in through the exchange
array)."""


def varying_init_launch(m: int, n: int, k: int, seed: int = 3) -> Launch:
    """``VARYING_INIT`` over m x n outputs and k deep, 16 x 16 blocks, normal operands."""
    rng = np.random.default_rng(seed)
    args = {"a": rng.standard_normal(m * k).astype(np.float16),
            "b": rng.standard_normal(k * n).astype(np.float16),
            "c": rng.standard_normal(m * n).astype(np.float32), "m": m, "n": n, "k": k}
    return Launch(build_source(VARYING_INIT, "bias").ir, args, (_ceil(n, 16), _ceil(m, 16), 1),
                  (16, 16, 1))
