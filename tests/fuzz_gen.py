"""Hostile inputs for sarek's public entry points, shared by the fuzz tests
(``tests/test_fuzz_*.py``) and the long campaign (``tests/fuzz_campaign.py``).

Each ``*_case(rng)`` builds one input from a ``random.Random`` and drives it through every
stage that takes it, as a user would: IR JSON through the models, the checker, the simulator
(neutral and lowered for a target), the recognizer, the region, the rewrite and every printer;
DSL source text through ``@sarek.kernel`` and the simulator; launches and argument lists
through ``simulate``, ``region`` and ``rewrite_launch``; command lines through ``sarek.cli``;
and mutated GEMM kernels through recognize, rewrite and simulate with canaries. It returns an
``Outcome``: every stage either ran or refused with the project's own error and a reason, or
the input failed as one of

* ``crash``: an exception that is not a ``SarekError`` came out of sarek (for the IR models,
  pydantic's ``ValidationError`` is their documented refusal), or a CLI run printed a
  traceback, an internal error or more than one error line;
* ``wrong``: a rewritten kernel left a covered output with another value than the original
  kernel (compared bit for bit, C pre-filled with two canary patterns);
* ``outside``: a rewritten kernel wrote an element of C that the region does not cover.

Simulations run under ``LIMITS`` (small loop caps, so that a kernel with a loop of 10^6 trips
is refused in microseconds rather than run for a minute); the campaign adds a wall-clock
timeout per input for hangs.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import json
import linecache
import random
import shutil
import tempfile
import textwrap
import traceback
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

import sarek
from sarek import ir, ir_check, matrix_mapping, matrix_pattern
from sarek.dsl import KernelFunction
from sarek.errors import SarekError
from sarek.ir import ElemType
from sarek.launch import Launch
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule
from sim.launch import Limits

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PROJECT = tuple(str(ROOT / p) for p in ("sarek", "sim", "backends"))

LIMITS = Limits(invocations=1 << 16, memory=1 << 30, loop_trips=4096, trips=1 << 15)
"""The simulator's limits for fuzzed inputs: small enough that no input runs long."""


# --------------------------------------------------------------------------- outcomes


@dataclass
class Outcome:
    """What one input did: ``kind`` is ``ok`` (every stage ran or refused with a reason),
    ``crash``, ``wrong`` or ``outside``; ``stage`` and ``detail`` say where and what;
    ``compared`` counts the rewritten kernels compared with canaries, ``stages`` how each
    stage ended (``ran`` or ``refused``)."""

    case: str
    kind: str = "ok"
    stage: str = ""
    detail: str = ""
    compared: int = 0
    stages: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.kind != "ok"


class _Failed(Exception):
    def __init__(self, kind: str, stage: str, detail: str) -> None:
        super().__init__(detail)
        self.kind, self.stage, self.detail = kind, stage, detail


REFUSED = object()
"""What ``_Run.call`` returns when a stage refused its input with a reason."""


def where(e: BaseException) -> str:
    """The innermost frame of sarek's own packages that ``e`` passed through (file:line)."""
    found = "outside sarek"
    for frame in traceback.extract_tb(e.__traceback__):
        if frame.filename.startswith(PROJECT):
            found = f"{Path(frame.filename).relative_to(ROOT)}:{frame.lineno}"
    return found


def _in_project(e: BaseException) -> bool:
    return any(f.filename.startswith(PROJECT) for f in traceback.extract_tb(e.__traceback__))


def describe(e: BaseException) -> str:
    """``e`` in one line, with where in sarek it was raised."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]} [{where(e)}]"


class _Run:
    """The stages of one input: each call runs, or refuses with a reason, or fails it."""

    def __init__(self, case: str) -> None:
        self.outcome = Outcome(case)

    def call(self, stage: str, fn: Callable[..., Any], *args: Any,
             refusals: tuple[type[BaseException], ...] = (SarekError,),
             user_code: bool = False, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, or ``REFUSED`` when it raised one of ``refusals`` with a
        reason (``user_code``: or an exception that never passed through sarek, raised by
        the user's own Python); any other exception fails the input as a crash."""
        try:
            value = fn(*args, **kwargs)
        except refusals as e:
            reason = getattr(e, "reason", None) if isinstance(e, SarekError) else str(e)
            if not reason or not str(reason).strip():
                raise _Failed("crash", stage, f"{type(e).__name__} without a reason") from e
            self.outcome.stages[stage] = "refused"
            return REFUSED
        except Exception as e:
            if user_code and not _in_project(e):
                self.outcome.stages[stage] = "refused"
                return REFUSED
            raise _Failed("crash", stage, describe(e)) from e
        self.outcome.stages[stage] = "ran"
        return value


def run_case(case: str, body: Callable[[_Run], None]) -> Outcome:
    """Runs ``body`` as one input named ``case`` and returns its outcome."""
    r = _Run(case)
    try:
        body(r)
    except _Failed as f:
        r.outcome.kind, r.outcome.stage, r.outcome.detail = f.kind, f.stage, f.detail
    return r.outcome


# --------------------------------------------------------------------------- seeds


@dataclass(frozen=True)
class Seed:
    """A valid kernel to mutate, with a launch of it when there is one."""

    name: str
    kernel: ir.Kernel
    launch: Launch | None


def _example_launches() -> Iterator[tuple[str, KernelFunction, Launch | None]]:
    from sarek.loader import load_module

    for path in sorted(EXAMPLES.glob("*.py")):
        module = load_module(path)
        kernels = [v for v in vars(module).values() if isinstance(v, KernelFunction)]
        make: Callable[..., Launch] | None = getattr(module, "make", None)
        try:
            launch = None if make is None else make(9, 7, 5) if path.stem.startswith(
                "gemm") else make()
        except TypeError:
            launch = None
        for k in kernels:
            yield path.stem, k, launch if launch is not None and launch.kernel == k.ir else None


@cache
def seeds() -> tuple[Seed, ...]:
    """The examples as written, their rewrites (two configurations each), the CUDA lowering
    of some rewrites, and a few generated GEMMs."""
    from gemm_gen import GemmSpec, build, geometry, launch

    from backends import registry

    out: list[Seed] = []
    for name, k, run in _example_launches():
        out.append(Seed(name, k.ir, run))
        if run is None or not name.startswith("gemm"):
            continue
        for subgroup, frag in ((32, 16), (64, 8)):
            rw = rewrite_launch(run, subgroup=subgroup, frag=frag)
            out.append(Seed(f"{name}-rewritten-{subgroup}-{frag}", rw.launch.kernel, rw.launch))
            if subgroup == 32:
                lowered = registry.lower(rw.launch.kernel, "cuda")
                out.append(Seed(f"{name}-cuda", lowered, replace(rw.launch, kernel=lowered)))
        if name == "gemm_f16":  # the warp roles, mbarriers, bulk copies and wgmma CUDA prints
            cuda = registry.target("cuda")
            rw = rewrite_launch(run, staging=cuda.staging,
                                schedule=Schedule.parse("t128x256k64s3gw"))
            lowered = cuda.lower(rw.launch.kernel)
            out.append(Seed(f"{name}-cuda-roles", lowered, replace(rw.launch, kernel=lowered)))
    for i, spec in enumerate((GemmSpec(), GemmSpec(mapping="1d-row", batch=True, batches=2,
                                                   block=(8, 1, 1)),
                              GemmSpec(a_major="col", init="c_old", epilogue="alpha_beta"),
                              GemmSpec(guard="return", mapping="2d-swapped", elem="f32"))):
        grid, block = geometry(spec)
        out.append(Seed(f"generated-{i}", build(spec).ir,
                        Launch(build(spec).ir, launch(spec, seed=i), grid, block)))
    return tuple(out)


def pick_seed(rng: random.Random) -> Seed:
    """A seed kernel: as written (the small ones) seven times in ten, else a rewrite or a
    lowering (large: each stage takes tens of milliseconds on them)."""
    small = [s for s in seeds() if "-rewritten-" not in s.name and "-cuda" not in s.name]
    large = [s for s in seeds() if s not in small]
    return rng.choice(small if rng.random() < 0.7 or not large else large)


# --------------------------------------------------------------------------- values


INTERESTING_INTS = [0, 1, -1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 127, 128, 255, 256,
                    1023, 1024, 1025, 2**15, 2**16, 2**31 - 1, -2**31, 2**31, 2**32 - 1, 2**32,
                    2**63 - 1, -2**63, 2**63, 2**64, 10**30, -10**30, 10**400]
INTERESTING_FLOATS = [0.0, -0.0, 0.5, 1.5, -2.0, 1e-45, 1e-310, 65504.0, 65536.0, 3.4e38,
                      3.5e38, 1e308, float("inf"), float("-inf"), float("nan")]
INTERESTING_STRINGS = ["", "x", "a", "b", "c", "m", "n", "k", "p", "acc", "row", "col", "%acc",
                       "sk_tid", "i32", "f32", "f16", "u32", "bool", "global", "shared",
                       "local", "row", "col", "add", "lt", "land", "shl", "thread_idx.x",
                       "subgroup_id", "a b", "0x", "é", "\x00", "ldmatrix.sync.aligned.m8n8.x4"
                       ".shared.b16", "stmatrix.sync.aligned.m8n8.x2.trans.shared.b16"]


def interesting(rng: random.Random) -> Any:
    """A value that tends to break things: an edge integer, a special float, a confusing
    string, null, a bool, an empty or odd container."""
    pick = rng.random()
    if pick < 0.4:
        return rng.choice(INTERESTING_INTS)
    if pick < 0.55:
        return rng.choice(INTERESTING_FLOATS)
    if pick < 0.8:
        return rng.choice(INTERESTING_STRINGS)
    return rng.choice([None, True, False, [], {}, [1, 2, 3], {"kind": "const"}, [None]])


def small_int(rng: random.Random) -> int:
    """A small size, mostly; sometimes an edge."""
    return rng.choice([0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33]) if rng.random() < 0.9 else \
        rng.choice([-1, 2**31 - 1, 2**31, 10**9])


def array_for(elem: ElemType, size: int, rng: random.Random, exact: bool = True
              ) -> np.ndarray:
    """An array of ``elem`` values: small integers (exact in every lowering) or, when not
    ``exact``, sometimes special values."""
    dt = sarek.numpy_dtype(elem)
    if elem is ElemType.BOOL:
        return np.asarray([rng.random() < 0.5 for _ in range(size)], dtype=dt)
    nprng = np.random.default_rng(rng.getrandbits(32))
    if elem.is_float:
        values = nprng.integers(-8, 9, size).astype(np.float64)
        if not exact and size and rng.random() < 0.3:
            values[nprng.integers(0, size, 3)] = rng.choice(INTERESTING_FLOATS)
        return values.astype(dt)
    info = np.iinfo(dt)
    low, high = (int(info.min), int(info.max)) if rng.random() < 0.5 else (-8, 8)
    low = max(low, int(info.min))
    return nprng.integers(low, min(high, int(info.max)) + 1, size, dtype=np.int64
                          ).astype(dt) if elem.bits < 64 else nprng.integers(
        low, high, size, dtype=dt)


def arguments_for(kernel: ir.Kernel, rng: random.Random) -> dict[str, Any]:
    """Plausible arguments for any kernel: arrays of its types and a few hundred elements,
    small scalars."""
    size = rng.choice([0, 1, 7, 64, 300, 1200, 4096])
    args: dict[str, Any] = {}
    for p in kernel.params:
        if isinstance(p, ir.ArrayParam):
            args[p.name] = array_for(p.elem, size, rng, exact=False)
        elif p.elem is ElemType.BOOL:
            args[p.name] = rng.random() < 0.5
        elif p.elem.is_int:
            args[p.name] = small_int(rng) if rng.random() < 0.95 else rng.choice(
                INTERESTING_INTS)
        else:
            args[p.name] = rng.choice([0.0, 1.0, -2.5, 3.0]) if rng.random() < 0.9 else \
                rng.choice(INTERESTING_FLOATS)
    return args


def launch_for(kernel: ir.Kernel, rng: random.Random) -> tuple[Any, Any]:
    """A grid and a block for ``kernel`` (its own block when it records one)."""
    block = kernel.block or rng.choice([(1, 1, 1), (4, 1, 1), (16, 1, 1), (8, 8, 1),
                                        (32, 1, 1), (128, 1, 1), (4, 4, 2)])
    grid = rng.choice([(1, 1, 1), (2, 1, 1), (1, 2, 1), (2, 2, 1), (3, 2, 2), (0, 1, 1)])
    return grid, block


# --------------------------------------------------------------------------- stages


def targets() -> tuple[str, ...]:
    from backends import registry

    return registry.names()


def all_stages(r: _Run, kernel: ir.Kernel, rng: random.Random,
               launch: Launch | None = None) -> None:
    """Every public stage that takes a kernel: check, simulate (neutral and for a target),
    every printer, recognize, region and the rewrite (compared with canaries when it
    succeeds)."""
    r.call("check", ir_check.check, kernel)
    valid = r.call("ensure_valid", ir_check.ensure_valid, kernel) is not REFUSED
    if launch is not None and rng.random() < 0.7:
        args, grid, block = dict(launch.args), launch.grid, launch.block
    else:
        args = arguments_for(kernel, rng)
        grid, block = launch_for(kernel, rng)
    r.call("simulate", sarek.simulate, kernel, args, grid, block, limits=LIMITS)
    names = targets()
    r.call("simulate-target", sarek.simulate, kernel, args, grid, block,
           target=rng.choice(names), limits=LIMITS)
    # one or two printers per input (each validates, lowers and prints): across inputs every
    # target is exercised, and an input stays fast
    for name in rng.sample(names, min(len(names), 2 if valid else 1)):
        r.call(f"emit-{name}", sarek.emit, kernel, name)
    gemm = r.call("recognize", matrix_pattern.recognize, kernel)
    if gemm is REFUSED:
        return
    reg = r.call("region", matrix_mapping.region, gemm, grid, block, args)
    if reg is not REFUSED:
        compare_rewrite(r, Launch(kernel, args, grid, block), rng)


PATTERNS = {1: (0x5A, 0xC3), 2: (0x5A5A, 0xC3C3), 4: (0x5A5AA5A5, 0xC3C3C3C3),
            8: (0x5A5AA5A55A5AA5A5, 0xC3C3C3C3C3C3C3C3)}
"""Bit patterns C is pre-filled with (finite for every float type): an element counts as
written when it differs from the pattern."""

APPLICABLE = {ElemType.I32: (Lowering.INT32_BYTE_PLANES,),
              ElemType.I8: (Lowering.INT8_OPERANDS,), ElemType.U8: (Lowering.INT8_OPERANDS,),
              ElemType.BF16: (Lowering.BF16_OPERANDS,),
              ElemType.F16: (Lowering.F16_OPERANDS,),
              ElemType.F32: (Lowering.BF16X3_OPERANDS, Lowering.BF16_OPERANDS,
                             Lowering.F16_OPERANDS)}


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(f"u{x.dtype.itemsize}")


def _exact_operands(launch: Launch, gemm: matrix_pattern.Gemm) -> bool:
    """Whether every lowering promises the original's bits on this launch's operands: any
    integers, and float operands that are small integers (exact in f16, bf16 and f32)."""
    for name in {gemm.a.array, gemm.b.array}:
        v = launch.args.get(name)
        if not isinstance(v, np.ndarray):
            return False
        if v.dtype.kind == "f" or v.dtype == np.dtype(sarek.numpy_dtype(ElemType.BF16)):
            w = v.astype(np.float64)
            if not (np.all(np.isfinite(w)) and np.all(w == np.round(w))
                    and np.all(np.abs(w) <= 16)):
                return False
    return True


def _exact_sums(lowering: Lowering, gemm: matrix_pattern.Gemm) -> bool:
    """Whether the lowering promises the original's bits on small-integer operands whatever the
    initial value: ``Bf16x3_operands`` sums each sub-step's products apart before adding them
    to the running sum (``specs/matrix-pattern-rewrite.md`` 6.3), which rounds where the
    original does only when a partial sum is inexact, so it needs a small integer constant."""
    if lowering is not Lowering.BF16X3_OPERANDS:
        return True
    init = gemm.init
    while isinstance(init, ir.Cast):
        init = init.x
    return isinstance(init, ir.Const) and float(init.value).is_integer() and \
        abs(init.value) <= 2**20


def compare_rewrite(r: _Run, launch: Launch, rng: random.Random) -> None:
    """Rewrites ``launch`` under a random lowering that takes its operands and a random
    subgroup and fragment, simulates original and rewrite with C pre-filled with two
    patterns, and fails the input when a covered output differs from the original's
    (``wrong``) or an element outside the region was written (``outside``)."""
    gemm = matrix_pattern.recognize(launch.kernel)
    lowerings = APPLICABLE.get(gemm.operand_elt, ())
    choice = rng.choice([*lowerings, None]) if lowerings and rng.random() < 0.9 else \
        rng.choice(list(Lowering))
    subgroup, frag = rng.choice([(32, 16), (64, 8), (32, 8), (64, 16)])
    rw = r.call("rewrite", rewrite_launch, launch, lowering=choice, subgroup=subgroup,
                frag=frag)
    if rw is REFUSED or not _exact_operands(launch, gemm) or not _exact_sums(rw.lowering, gemm):
        return
    c_name = gemm.c.array
    c = launch.args.get(c_name)
    if not isinstance(c, np.ndarray) or c.dtype.itemsize not in PATTERNS or c.dtype == bool:
        return
    reg = rw.region
    inside = np.zeros(c.size, bool)
    cover = r.call("covered", matrix_mapping.covered, gemm, reg, dict(launch.args))
    if cover is REFUSED:
        return
    if cover.size and (cover.min() < 0 or cover.max() >= c.size):
        return  # the original would store outside C: its simulation refuses the launch
    inside[cover] = True
    written = np.zeros(c.size, bool)
    for pattern in PATTERNS[c.dtype.itemsize]:
        filled = np.full(c.size, pattern, f"u{c.dtype.itemsize}").view(c.dtype)
        original = replace(launch, args={**launch.args, c_name: filled})
        want = r.call("simulate-original", original.simulate, limits=LIMITS)
        if want is REFUSED:
            return
        run = replace(rw.launch, args={**rw.launch.args, c_name: filled})
        got = r.call("simulate-rewritten", run.simulate, subgroup=rw.subgroup, limits=LIMITS)
        if got is REFUSED:
            raise _Failed("wrong", "simulate-rewritten", f"the original ran but the rewrite "
                          f"({rw.lowering.value}, subgroup {rw.subgroup}, fragment {rw.frag}) "
                          "was refused")
        differ = _bits(got[c_name]) != _bits(want[c_name])
        config = (f"{rw.lowering.value} subgroup {rw.subgroup} fragment {rw.frag}, region "
                  f"{reg.args}, launch grid {launch.grid} block {launch.block}")
        if differ.any():
            i = int(np.flatnonzero(differ)[0])
            kind = "wrong" if inside[i] or not written[i] else "outside"
            raise _Failed(kind, "compare", f"{config}: C[{i}] is {got[c_name][i]!r}, the "
                          f"original's {want[c_name][i]!r} ({int(differ.sum())} differ)")
        written |= _bits(got[c_name]) != _bits(filled)
    if written[~inside].any():
        i = int(np.flatnonzero(written & ~inside)[0])
        raise _Failed("outside", "compare", f"{config}: C[{i}] is outside the region and "
                      "was written")
    r.outcome.compared += 1


# --------------------------------------------------------------------------- IR JSON


Node = tuple[Any, Any, Any]
"""A place in a JSON document: the container holding it, its key there, and its value (the
root: ``(None, None, doc)``). Keeping the container, not the path from the root, keeps listing
a document that nests thousands deep linear in its size."""


def _nodes(doc: Any) -> list[Node]:
    """Every node of a JSON document, containers included (without recursion: a mutated
    document may nest thousands deep)."""
    out: list[Node] = []
    stack: list[Node] = [(None, None, doc)]
    while stack:
        node = stack.pop()
        out.append(node)
        v = node[2]
        if isinstance(v, dict):
            stack += [(v, k, x) for k, x in v.items()]
        elif isinstance(v, list):
            stack += [(v, i, x) for i, x in enumerate(v)]
    return out


MAX_DOCUMENT = 20_000
"""Nodes past which a mutated document no longer grows (so that inputs stay fast)."""


def _copy(doc: Any) -> Any:
    return json.loads(json.dumps(doc))


def _set(doc: Any, node: Node, value: Any) -> Any:
    """``doc`` with ``value`` where ``node`` was."""
    container, key, _ = node
    if container is None:
        return value
    container[key] = value
    return doc


def _expressions(doc: Any) -> list[Node]:
    return [n for n in _nodes(doc) if isinstance(n[2], dict) and "type" in n[2]
            and "kind" in n[2]]


ENUM_VALUES = [*(t.value for t in ElemType), *(o.value for o in ir.BinOp),
               *(o.value for o in ir.UnOp), *(b.value for b in ir.Builtin),
               *(f.value for f in ir.MathFn), "global", "shared", "local", "row", "col", "a",
               "b", "accumulator"]
KINDS = ["const", "var", "builtin", "unary", "binary", "cast", "bitcast", "load", "select",
         "call", "let", "assign", "store", "for", "while", "if", "barrier", "return",
         "array_decl", "tensor_view", "frag_decl", "frag_fill", "frag_load", "frag_store",
         "frag_mul_add", "frag_add", "tile_apply", "ldmatrix", "mma", "array", "scalar"]


def mutate_json(doc: Any, rng: random.Random) -> Any:
    """One structural or value mutation of a kernel's JSON document."""
    nodes = _nodes(doc)
    node = rng.choice(nodes)
    value = node[2]
    op = rng.random()
    grow = len(nodes) < MAX_DOCUMENT
    if op < 0.25 and not isinstance(value, dict | list):  # a leaf: another value
        if isinstance(value, str) and rng.random() < 0.6:
            names = [v for *_, v in nodes if isinstance(v, str)]
            new: Any = rng.choice(ENUM_VALUES + KINDS if rng.random() < 0.5 else names)
        elif isinstance(value, int | float) and not isinstance(value, bool) and rng.random() < 0.5:
            new = value + rng.choice([-1, 1, 2, -2, 16, value, -2 * value])
        else:
            new = interesting(rng)
        return _set(doc, node, new)
    if op < 0.35 and isinstance(value, dict) and value:  # drop or add a key
        if rng.random() < 0.6:
            del value[rng.choice(list(value))]
        else:
            value[rng.choice(["extra", "line", "kind", "type", "size", "layout"])] = \
                interesting(rng)
        return doc
    if op < 0.5 and isinstance(value, list) and value:  # reorder, drop or repeat elements
        i = rng.randrange(len(value))
        match rng.randrange(4):
            case 0:
                del value[i]
            case 1 if grow:
                value.insert(rng.randrange(len(value) + 1), _copy(value[i]))
            case 2:
                rng.shuffle(value)
            case _ if grow:  # as many copies as keep the document near MAX_DOCUMENT
                copies = rng.choice([2, 10, 200])
                room = (MAX_DOCUMENT - len(nodes)) // len(_nodes(value[i]))
                value.extend(_copy(value[i]) for _ in range(max(1, min(copies, room))))
        return doc
    exprs = [n for n in nodes if isinstance(n[2], dict) and "type" in n[2] and "kind" in n[2]]
    if op < 0.7 and len(exprs) > 1:  # transplant one expression over another
        dst, (*_, src) = rng.sample(exprs, 2)
        return _set(doc, dst, _copy(src))
    if op < 0.8 and exprs and grow:  # nest an expression deep
        dst = rng.choice(exprs)
        e = dst[2]
        wrapped: Any = e
        for _ in range(rng.choice([1, 3, 40, 70, 300])):
            wrapped = rng.choice([
                {"kind": "unary", "op": "neg", "x": wrapped, "type": e.get("type")},
                {"kind": "binary", "op": "add", "a": wrapped, "b": {
                    "kind": "const", "value": 1, "type": e.get("type")},
                 "type": e.get("type")},
                {"kind": "cast", "x": wrapped, "type": rng.choice(["i32", "f32"])}])
        return _set(doc, dst, wrapped)
    if op < 0.9:  # rename: every occurrence of one string becomes another
        strings = sorted({v for *_, v in nodes if isinstance(v, str)})
        if len(strings) > 1:
            old, new = rng.sample(strings, 2)
            for n in nodes:
                if n[2] == old:
                    doc = _set(doc, n, new)
        return doc
    if grow and isinstance(doc, dict) and isinstance(doc.get("body"), list):  # nest deep
        body: Any = doc["body"]
        for _ in range(rng.choice([2, 30, 100])):
            kind = rng.choice(["while", "if"])
            cond = {"kind": "const", "value": rng.random() < 0.5, "type": "bool"}
            body = [{"kind": kind, "cond": cond, "body" if kind == "while" else "then": body}]
        doc["body"] = body
    return doc


def mutate_text(text: str, rng: random.Random) -> str:
    """A textual mutation: truncation, a stray character, an enormous number or nesting."""
    if not text:
        return "{"
    i = rng.randrange(len(text))
    match rng.randrange(5):
        case 0:
            return text[:i]
        case 1:
            return text[:i] + rng.choice(["{", "}", "[", "]", ",", ":", '"', "\\", "\x00",
                                          "1e999", "-", "NaN", "Infinity"]) + text[i:]
        case 2:
            return text.replace(":1,", ":1" + "0" * rng.choice([20, 400, 5000]) + ",", 1)
        case 3:
            return text[:i] + "[" * 5000 + text[i:]
        case _:
            return text.replace('"body":[', '"body":[' + text + ",", 1) if len(
                text) < 100_000 else text[::-1]


def json_case(rng: random.Random) -> Outcome:
    """A seed kernel's JSON, mutated, through the models and then every stage."""
    seed = pick_seed(rng)

    def body(r: _Run) -> None:
        if rng.random() < 0.4:  # typed mutations: mostly well-formed, semantically different
            doc = mutate_kernel(seed.kernel, rng)
        else:
            doc = json.loads(seed.kernel.model_dump_json())
        text = json.dumps(doc, allow_nan=True)
        for _ in range(rng.choice([0, 1, 1, 2, 3, 6])):
            try:
                doc = mutate_json(doc, rng)
                text = json.dumps(doc, allow_nan=True)
            except RecursionError:  # nested past what Python's json module writes: keep the
                break  # last document it could (mutate_text nests the text itself)
        if rng.random() < 0.15:
            text = mutate_text(text, rng)
        kernel = r.call("parse", ir.Kernel.model_validate_json, text,
                        refusals=(SarekError, ValidationError))
        if kernel is REFUSED:
            return
        again = r.call("round-trip", lambda: ir.Kernel.model_validate_json(
            kernel.model_dump_json()), refusals=(SarekError,))
        if again is not REFUSED and not ir_check.check(kernel) and again != kernel and \
                "NaN" not in text and "nan" not in text.lower():
            raise _Failed("crash", "round-trip", "a well-formed kernel changed in its JSON "
                          "round trip")
        all_stages(r, kernel, rng, seed.launch if seed.launch is not None and
                   seed.launch.kernel.params == kernel.params else None)

    return run_case(f"json:{seed.name}", body)


# --------------------------------------------------------------------------- DSL source


EXPRS = [
    "{n} + {n}", "{n} - {n}", "{n} * 2", "{n} // 3", "{n} % 5", "{n} / 2", "{n} < {n}",
    "{n} <= {n} < {n}", "{n} and {n}", "{n} or {n}", "not {n}", "-{n}", "~{n}", "a[{n}]",
    "b[{n} % 4]", "f32({n})", "i32({n})", "u8({n})", "f16({n})", "sarek.bf16({n})",
    "min({n}, {n}, {n})", "max({n})", "sarek.sqrt({n})", "sarek.exp({n})", "abs({n})",
    "{n} if {n} > 0 else 0", "thread_idx.x", "block_idx.y", "block_dim.z", "grid_dim.x",
    "thread_idx.w", "subgroup_id", "subgroup_lane", "subgroup_size", "{n} ** 2", "[{n}]",
    "{n} << 2", "{n} >> 40", "{n} & 7", "{n} | {n}", "{n} ^ {n}", "1.5", "7", "True", "None",
    "'text'", "b'x'", "1j", "10 ** 30", "99999999999999999999999", "1e400", "-0.0",
    "undefined_name", "len(a)", "sarek.fma({n}, {n}, {n})", "sarek.fma({n})", "a", "a[1, 2]",
    "a[{n}:{n}]", "(x := {n})", "[i for i in range(3)]", "lambda: 1", "f'{{x}}'",
    "sarek.thread_idx", "sarek.shared(f32, 4)", "barrier()", "{n}.real", "x.y.z", "n(1)",
    "print({n})", "{n} @ {n}", "{n} is {n}", "{n} in a", "*a", "{n}[0]", "LIST[0]",
    "sarek.tile.apply", "math.sqrt({n})", "np.float32(1)", "CONST", "BIG",
]
STMTS = [
    "{v} = {e}", "{v} += {e}", "{v} //= {e}", "{v} **= 2", "a[{e}] = {e}", "a[{e}] += {e}",
    "b[{e}] = {e}", "x, y = 1, 2", "x = y = 1", "a[0], a[1] = 1, 2",
    "if {e}:\n    {s}", "if {e}:\n    {s}\nelif {e}:\n    {s}\nelse:\n    {s}",
    "for i in range({e}):\n    {s}", "for i in range({e}, {e}, {e}):\n    {s}",
    "for i in range(0, 8, 0):\n    {s}", "for i in range():\n    pass",
    "for i in a:\n    {s}", "for i, j in range(3):\n    pass",
    "for i in range(3):\n    {s}\nelse:\n    pass", "while {e}:\n    {s}", "barrier()",
    "sarek.barrier()", "return", "pass", "break", "continue", "{e}", "{v}: f32 = {e}",
    "{v}: Global[f32] = {e}", "{v}: int = 3", "s = sarek.shared(f32, {size})",
    "s = sarek.shared(i32, {size}, align={size})", "s = sarek.local(f32, {size})",
    "s = sarek.shared(f32)", "s = sarek.shared(int, 4)", "t = sarek.local(u32, 12)",
    "v = sarek.view(a, f32, LAYOUT)", "v = sarek.view(x, f32, LAYOUT, offset={size})",
    "sarek.tile.apply('ldmatrix.sync.aligned.m8n8.x2.shared.b16', a, b)",
    "sarek.tile.apply({e}, a, a, scope='block')", "return {e}", "del x", "assert {e}",
    "global x", "import math", "with {e}:\n    pass", "try:\n    pass\nexcept:\n    pass",
    "def inner():\n    pass", "class C:\n    pass", "raise ValueError", "yield 1", "x = {deep}",
    "x = {chain}", "if x:\n" + textwrap.indent("\n".join(f"{'    ' * i}if x:" for i in
                                                            range(30)), "    ") + "\n"
    + "    " * 31 + "pass",
]
PARAMS = ["a: Global[f32]", "b: Global[i32]", "n: i32", "m: f32", "c: ReadOnly[f16]",
          "d: Global[int]", "e: Global[f32, f32]", "f: int", "g", "h: 'f32'", "q: Global",
          "r: sarek.boolean", "s: Global[sarek.u64]", "t: nonexistent", "u: LIST",
          "*rest", "w: i32 = 3", "**kw"]
PRELUDE = ["x = n", "y = m", "acc = f32(0.0)"]


VALID_EXPRS = [e for e in EXPRS if e in {
    "{n} + {n}", "{n} - {n}", "{n} * 2", "{n} // 3", "{n} % 5", "{n} < {n}",
    "{n} <= {n} < {n}", "{n} and {n}", "{n} or {n}", "not {n}", "-{n}", "a[{n}]",
    "b[{n} % 4]", "f32({n})", "i32({n})", "min({n}, {n}, {n})", "sarek.sqrt({n})", "abs({n})",
    "{n} if {n} > 0 else 0", "thread_idx.x", "block_idx.y", "block_dim.z", "grid_dim.x",
    "subgroup_lane", "{n} << 2", "{n} & 7", "1.5", "7", "True", "sarek.fma({n}, {n}, {n})",
    "CONST"}]
"""The expressions the DSL takes (given operands of fitting types)."""
VALID_STMTS = [s for s in STMTS if s in {
    "{v} = {e}", "{v} += {e}", "a[{e}] = {e}", "a[{e}] += {e}", "b[{e}] = {e}",
    "if {e}:\n    {s}", "if {e}:\n    {s}\nelif {e}:\n    {s}\nelse:\n    {s}",
    "for i in range({e}):\n    {s}", "for i in range({e}, {e}, {e}):\n    {s}",
    "while {e}:\n    {s}", "barrier()", "return", "pass", "{v}: f32 = {e}",
    "s = sarek.shared(f32, {size})", "s = sarek.local(f32, {size})"}]
"""The statements the DSL takes."""


def _expression(rng: random.Random, depth: int = 0, hostile: float = 0.3) -> str:
    pool = EXPRS if rng.random() < hostile else VALID_EXPRS
    template = rng.choice(pool if depth < 3 else ["{n}"])
    while "{n}" in template:
        leaf = _expression(rng, depth + 1, hostile) if depth < 3 and rng.random() < 0.5 \
            else rng.choice(["x", "y", "acc", "n", "m", "i", "1", "2.0", "0"])
        template = template.replace("{n}", f"({leaf})", 1)
    return template


def _statement(rng: random.Random, depth: int = 0, hostile: float = 0.3) -> str:
    pool = STMTS if rng.random() < hostile else VALID_STMTS
    template = rng.choice(pool if depth < 2 else STMTS[:7])
    while "{s}" in template:
        inner = _statement(rng, depth + 1, hostile)
        template = template.replace("{s}", textwrap.indent(inner, "    ").lstrip(), 1)
    replacements: dict[str, Callable[[], str]] = {
        "{e}": lambda: _expression(rng, 0, hostile),
        "{v}": lambda: rng.choice(["x", "y", "acc", "n", "a", "i", "z", "thread_idx"]),
        "{size}": lambda: str(rng.choice([0, 1, 4, 16, 100, -1, 2**31, 2**40, "n", "4.5",
                                          "LAYOUT", "16 * 4"])),
        "{deep}": lambda: " + ".join(["x"] * rng.choice([10, 60, 70, 600, 2000])),
        "{chain}": lambda: "(" * rng.choice([10, 60, 90]) + "x" + ")" * rng.choice([10, 60, 90])
        if rng.random() < 0.5 else "-" * rng.choice([10, 70, 500]) + "x",
    }
    for key, make in replacements.items():
        while key in template:
            template = template.replace(key, make(), 1)
    return template


def dsl_source(rng: random.Random) -> str:
    """A module defining one kernel ``k``: valid-looking parameters and prelude, then random
    statements, some of them constructs the DSL does not support."""
    params = ", ".join(rng.sample(PARAMS[:4], 4) if rng.random() < 0.8 else
                       rng.sample(PARAMS, rng.randrange(1, 6)))
    hostile = rng.choice([0.0, 0.05, 0.2, 0.5])
    body = PRELUDE + [_statement(rng, 0, hostile) for _ in range(rng.randrange(1, 6))]
    header = "from __future__ import annotations\n" if rng.random() < 0.3 else ""
    return (header + "import math\nimport numpy as np\nimport sarek\nfrom sarek import *\n"
            "LAYOUT = sarek.TileLayout(sarek.S[(8, 4) : (4, 1)])\nLIST = [1, 2]\nCONST = 3\n"
            f"BIG = 10 ** 40\n\n@sarek.kernel\ndef k({params}):\n"
            + textwrap.indent("\n".join(body), "    ") + "\n")


_SOURCES = 0


def dsl_case(rng: random.Random) -> Outcome:
    """A random DSL module through ``@sarek.kernel``, then the simulator and the printers."""

    def body(r: _Run) -> None:
        global _SOURCES
        src = dsl_source(rng)
        _SOURCES += 1
        filename = f"<fuzz-dsl-{_SOURCES}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        try:
            try:
                code = compile(src, filename, "exec")
            except (SyntaxError, RecursionError, MemoryError, ValueError):
                r.outcome.stages["compile"] = "refused"  # not Python: nothing for sarek
                return
            namespace: dict[str, Any] = {"__name__": "fuzz_dsl"}
            r.call("kernel", exec, code, namespace, user_code=True)
            k = namespace.get("k")
        finally:
            del linecache.cache[filename]
        if not isinstance(k, KernelFunction):
            return
        kern = k.ir
        if ir_check.check(kern):
            raise _Failed("crash", "kernel", f"the DSL built an ill-formed kernel: "
                          f"{ir_check.check(kern)[0]}")
        args = arguments_for(kern, rng)
        grid, block = launch_for(kern, rng)
        r.call("simulate", sarek.simulate, kern, args, grid, block, limits=LIMITS)
        for name in rng.sample(targets(), min(2, len(targets()))):
            r.call(f"emit-{name}", sarek.emit, kern, name)

    return run_case("dsl", body)


# --------------------------------------------------------------------------- launches


class _Weird:
    """An object that is nothing sarek expects."""

    def __repr__(self) -> str:
        return "<weird>"


def _weird_dim(rng: random.Random) -> Any:
    return rng.choice([
        -1, 0, 1, 2**31, 10**9, 2**63, 1.0, 2.5, True, "4", None, (1, 2, 3, 4), (), [4, 4],
        (4, -1), (np.int64(4), 1), np.int32(3), np.array([2, 2]), ((1, 2),), (2**31 - 1,),
        (65535, 65535, 65535), (1024, 1024, 1), (33,), (1, 1, 0), _Weird(), float("nan")])


def _weird_value(rng: random.Random, want: ir.Param | None) -> Any:
    elem = want.elem if want is not None else rng.choice(list(ElemType))
    return rng.choice([
        None, "1", b"1", 1.5, float("nan"), float("inf"), 2**64, -2**63 - 1, 10**400, True,
        np.float16(1), np.int8(1), np.uint64(2**64 - 1), np.complex64(1), np.str_("x"),
        np.zeros(3, np.float64), np.zeros((2, 2), sarek.numpy_dtype(elem)),
        np.zeros(0, sarek.numpy_dtype(elem)), np.zeros(3, object), [1, 2, 3],
        np.array(5, sarek.numpy_dtype(elem)), _Weird(), np.ones(5, np.bool_),
        np.datetime64("2020-01-01"),
    ])


def launch_case(rng: random.Random) -> Outcome:
    """A valid kernel with a random, often wrong, launch and argument list through simulate,
    region, rewrite_launch and Launch.simulate."""
    seed = pick_seed(rng)

    def body(r: _Run) -> None:
        kernel = seed.kernel
        base = dict(seed.launch.args) if seed.launch is not None else arguments_for(
            kernel, rng)
        grid, block = (seed.launch.grid, seed.launch.block) if seed.launch is not None \
            else launch_for(kernel, rng)
        args: Any = dict(base)
        for _ in range(rng.randrange(0, 4)):
            match rng.randrange(9):
                case 0:
                    grid = _weird_dim(rng)
                case 1:
                    block = _weird_dim(rng)
                case 2 if kernel.params and isinstance(args, dict):
                    p = rng.choice(kernel.params)
                    args[p.name] = _weird_value(rng, p)
                case 3 if kernel.params and isinstance(args, dict):
                    args.pop(rng.choice(kernel.params).name, None)
                case 4 if isinstance(args, dict):
                    args[rng.choice(["zz", 3, None, (1, 2), b"a", ""])] = 1
                case 5 if isinstance(args, dict):
                    args = [args.get(p.name) for p in kernel.params]
                    if rng.random() < 0.5:
                        args = args[:-1] if rng.random() < 0.5 else [*args, 1]
                case 6:
                    args = rng.choice([None, 5, "args", (), b"", _Weird()])
                case 7:
                    grid = rng.choice([(2**16, 2**16, 1), (10**6, 1, 1), (2**31 - 1, 1, 1)])
                case _:
                    scalar = rng.choice(kernel.params) if kernel.params else None
                    if isinstance(scalar, ir.ScalarParam) and isinstance(args, dict):
                        args[scalar.name] = rng.choice(INTERESTING_INTS + INTERESTING_FLOATS)
        options: dict[str, Any] = {"limits": LIMITS}
        if rng.random() < 0.3:
            options["subgroup"] = rng.choice([0, -1, 1, 7, 16, 32, 64, 2**31, "32", 32.0,
                                              True, None])
        if rng.random() < 0.3:
            options["arith"] = rng.choice(["exact", "h200", "sequential", "nope", "", None, 3])
        if rng.random() < 0.2:
            options["target"] = rng.choice([*targets(), "nope", "", None, 3])
        if rng.random() < 0.15:
            options["limits"] = rng.choice([LIMITS, None, 5, "x"])
        if rng.random() < 0.1:
            field_values: dict[str, Any] = {rng.choice(
                ["invocations", "memory", "loop_trips", "trips"]): rng.choice(
                [0, -1, 1, 2**70, 1.5, "x", None, True])}
            options["limits"] = r.call("limits", lambda: Limits(**field_values))
            if options["limits"] is REFUSED:
                options["limits"] = LIMITS
        r.call("simulate", sarek.simulate, kernel, args, grid, block, **options)
        gemm = r.call("recognize", matrix_pattern.recognize, kernel)
        if gemm is REFUSED:
            return
        r.call("region", matrix_mapping.region, gemm, grid, block, args)
        launch = r.call("launch", Launch, kernel, args if isinstance(args, dict) else {}, grid,
                        block)
        if launch is REFUSED:
            return
        r.call("rewrite", rewrite_launch, launch,
               lowering=rng.choice([*Lowering, None]),
               subgroup=rng.choice([32, 64, 48, 0, -32]), frag=rng.choice([16, 8, 4, 32, 0]),
               precision=rng.choice(["accurate", "fast"]))

    return run_case(f"launch:{seed.name}", body)


# --------------------------------------------------------------------------- CLI


@cache
def cli_files() -> dict[str, str]:
    """Files a hostile command line names: kernels that are broken in various ways, .npz
    files that are not what --inputs needs, a directory, names that do not exist."""
    root = Path(tempfile.mkdtemp(prefix="sarek-fuzz-cli-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    files = {
        "syntax.py": "import sarek\ndef k(:\n",
        "imports.py": "import no_such_module_anywhere\n",
        "raises.py": "raise RuntimeError('at import')\n",
        "exits.py": "import sys\n",
        "two.py": "import sarek\nfrom sarek import *\n@sarek.kernel\ndef k1(a: Global[f32]):\n"
                  "    a[0] = 1.0\n@sarek.kernel\ndef k2(a: Global[f32]):\n    a[0] = 2.0\n",
        "badmake.py": "import sarek\nfrom sarek import *\n@sarek.kernel\n"
                      "def k(a: Global[f32]):\n    a[0] = 1.0\n"
                      "def make(m, n, k):\n    return [1, 2]\n",
        "raisingmake.py": "import sarek\nfrom sarek import *\n@sarek.kernel\n"
                          "def k(a: Global[f32]):\n    a[0] = 1.0\n"
                          "def make(m, n, k):\n    return {}['missing']\n",
        "dslerror.py": "import sarek\nfrom sarek import *\n@sarek.kernel\n"
                       "def k(a: Global[f32]):\n    a[0] = 1 ** 2\n",
        "deep.py": "import sarek\nfrom sarek import *\n@sarek.kernel\n"
                   "def k(a: Global[f32]):\n    a[0] = " + " + ".join(["a[0]"] * 900) + "\n",
        "notpython.txt": "hello\n",
        "binary.py": "\x00\x01\x02",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    (root / "dir.py").mkdir()
    np.savez(root / "inputs.npz", a=np.zeros(64, np.float32), b=np.zeros(64, np.float32),
             c=np.zeros(64, np.float32), m=np.int32(8), n=np.int32(8), k=np.int32(8))
    np.savez(root / "partial.npz", a=np.zeros(4, np.float32))
    np.savez(root / "objects.npz", a=np.array([object()], dtype=object))
    np.save(root / "plain.npy", np.zeros(3))
    with zipfile.ZipFile(root / "zip.npz", "w") as z:
        z.writestr("a.npy", "not an array")
        z.writestr("notes.txt", "hello")
    out = {name: str(root / name) for name in [*files, "dir.py", "inputs.npz", "partial.npz",
                                               "objects.npz", "plain.npy", "zip.npz"]}
    out["missing"] = str(root / "no_such_file.py")
    out["dir"] = str(root)
    return out


def _cli_kernel(rng: random.Random) -> str:
    files = cli_files()
    pick = rng.random()
    if pick < 0.55:
        path = rng.choice(sorted(EXAMPLES.glob("*.py")))
        name = rng.choice(["", ":matmul", ":nope", ":", "::x"]) if rng.random() < 0.4 else ""
        return f"{path}{name}"
    if pick < 0.95:
        return rng.choice(list(files.values())) + rng.choice(["", "", ":k", ":k1", ":zz"])
    return rng.choice(["", "-", ":", "x" * 5000, "\x00", "/", "~/nothing.py"])


def _cli_value(rng: random.Random, option: str) -> list[str]:
    files = cli_files()
    triples = ["0", "1", "3,2", "5,4,3", "9,7,5", "17,33,9", "1,1,1", "-1,2,3", "-5", "1,2,3,4",
               "a,b", "", ",", "2147483648", "1000000,1000000,1000000", "100000,1,1",
               "1,1,2147483647", "4.5", " 3", "0,0,0"]
    values: dict[str, list[str]] = {
        "--size": triples, "--grid": triples, "--block": triples,
        "--inputs": [files["inputs.npz"], files["partial.npz"], files["objects.npz"],
                     files["plain.npy"], files["zip.npz"], files["notpython.txt"],
                     files["missing"], files["dir"], ""],
        "--out": [str(Path(files["dir"]) / "out.npz"), "/no/such/dir/out.npz", files["dir"],
                  ""],
        "-o": [str(Path(files["dir"]) / "out.cu"), "/no/such/dir/x.cu", files["dir"]],
        "--lowering": [x.value for x in Lowering] + ["nope"],
        "--precision": ["accurate", "fast", "slow"],
        "--subgroup": ["32", "64", "48", "0", "-32", "x"],
        "--frag": ["16", "8", "32", "0", "-8", "x"],
        "--target": [*targets(), "nope", "", "sim-nope", "vulkan-h200", "metal:apple7",
                     "cuda:8.0", "unprobed:x", "opencl"],
        "--max-memory": ["1", "1K", "16G", "0", "-1", "x", "1T"],
        "--max-invocations": ["1", "100", "0", "x"],
        "--max-loop-trips": ["1", "10", "0", "x"],
        "--max-trips": ["1", "100", "0", "x"],
        "--args": ["m=4", "n=4", "k=4", "m=x", "=3", "m", "m=1e400", "zz=1"],
        "--examples": [files["dir"], files["missing"], str(EXAMPLES)],
        "--report": [str(Path(files["dir"]) / "r.json"), "/no/such/dir/r.json"],
    }
    if option in values:
        return [option, rng.choice(values[option])]
    return [option]


COMMANDS = {
    "simulate": ["--size", "--inputs", "--grid", "--block", "--out", "--max-memory",
                 "--max-invocations", "--max-loop-trips", "--max-trips", "--bogus", "-h"],
    "rewrite": ["--size", "--inputs", "--grid", "--block", "--lowering", "--precision",
                "--subgroup", "--frag", "--check", "--json", "--max-memory", "--max-trips"],
    "emit": ["--size", "--target", "--lowering", "--subgroup", "--frag", "--original", "-o",
             "--grid", "--block", "--inputs"],
    "analyze": ["--size", "--grid", "--block", "--args", "--precision", "--frag", "--target"],
    "ir": [],
    "ir-schema": ["--bogus"],
    "conformance": ["--target", "--bogus", "--report"],
    "demo": ["--size", "--examples"],
}


def cli_argv(rng: random.Random) -> list[str]:
    """A command line: a command, maybe a kernel, some options with values good and bad."""
    if rng.random() < 0.03:
        return rng.choice([[], ["--help"], ["nope"], ["-x"], ["simulate", "--size"]])
    command = rng.choice(list(COMMANDS))
    argv = [command]
    if command in ("simulate", "rewrite", "emit", "analyze", "ir") and rng.random() < 0.95:
        argv.append(_cli_kernel(rng))
    for _ in range(rng.randrange(0, 4)):
        argv += _cli_value(rng, rng.choice(COMMANDS[command] or ["--bogus"]))
    if command == "demo":  # the demo proper runs for minutes: only refusals of it
        argv += ["--examples", rng.choice([cli_files()["missing"], cli_files()["syntax.py"]])]
    if command == "conformance" and "--target" not in argv:
        argv += ["--target", rng.choice(["nope", "sim-nope", ""])]
    if command == "conformance":
        argv = [a if (a not in targets() and not a.startswith("sim-")) or a == "sim-nope"
                else "nope" for a in argv]  # a real conformance run takes minutes
    if command in ("simulate", "rewrite"):
        argv += ["--max-loop-trips", "4096", "--max-trips", "32768", "--max-invocations",
                 "65536"]
    return argv


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``sarek.cli.main(argv)``: the exit status, stdout and stderr."""
    from sarek import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as e:  # argparse: --help, or a usage error
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def cli_case(rng: random.Random) -> Outcome:
    """A hostile command line through ``sarek.cli.main``: it exits 0, 1 or 2, and a failure
    is one line on stderr, never a traceback or an internal error."""
    argv = cli_argv(rng)

    def body(r: _Run) -> None:
        code, _, err = r.call("main", run_cli, argv, refusals=())
        lines = [x for x in err.splitlines() if x.strip() and "Warning" not in x]
        shown = " ".join(repr(a)[:60] for a in argv)
        if "Traceback" in err or code == 3 or code not in (0, 1, 2, 130):
            raise _Failed("crash", "main", f"sarek {shown}: exit {code}: {err.strip()[-400:]}")
        if code == 2 and len(lines) != 1:  # 1 is a verdict (analyze, a failed check)
            raise _Failed("crash", "main", f"sarek {shown}: exit {code} with {len(lines)} "
                          f"error lines: {err.strip()[:400]}")

    return run_case(f"cli:{argv[0] if argv else ''}", body)


# --------------------------------------------------------------------------- mutated GEMMs


def random_spec(rng: random.Random) -> Any:
    """A random ``gemm_gen.GemmSpec`` (as ``gemm_gen.gemm_specs`` draws them)."""
    from gemm_gen import EPILOGUES, GID_STYLES, GUARDS, INITS, MAPPINGS, UPDATES, GemmSpec

    mapping, batch = rng.choice(MAPPINGS), rng.random() < 0.4
    spec = GemmSpec(
        mapping=mapping, batch=batch, gid_style=rng.randrange(GID_STYLES),
        guard=rng.choice(GUARDS), a_major=rng.choice(["row", "col"]),
        b_major=rng.choice(["row", "col"]), c_major=rng.choice(["row", "col"]),
        pads=(rng.randrange(3), rng.randrange(3), rng.randrange(3)),
        offsets=(rng.randrange(3), rng.randrange(3), rng.randrange(3)),
        reverse_terms=rng.random() < 0.5, swap_product=rng.random() < 0.5,
        update=rng.choice(UPDATES), init=rng.choice(INITS), epilogue=rng.choice(EPILOGUES),
        k_start=rng.randrange(2), m=rng.randrange(0, 40), n=rng.randrange(0, 40),
        k=rng.randrange(0, 40), batches=rng.randrange(1, 3) if batch else 1,
        block=(rng.choice([1, 4, 8, 16]), rng.choice([1, 2, 4, 8]), 1),
        grid_delta=(rng.randrange(-2, 2), rng.randrange(-1, 2),
                    rng.randrange(-1, 2) if batch else 0),
        elem=rng.choice(["i32", "i32", "f32"]))
    if mapping.startswith("1d") and batch:
        spec = replace(spec, grid_delta=(max(0, spec.grid_delta[0]), 0, spec.grid_delta[2]))
    return spec


@cache
def _built(spec: Any) -> ir.Kernel:
    from gemm_gen import build

    return build(spec).ir


def gemm_launch(rng: random.Random) -> Launch:
    """A launch of a generated GEMM or of a GEMM example, operands small integers."""
    from gemm_gen import geometry, launch

    if rng.random() < 0.7:
        spec = random_spec(rng)
        grid, block = geometry(spec)
        return Launch(_built(spec), launch(spec, seed=rng.randrange(1000)), grid, block)
    name = rng.choice([s.name for s in seeds() if s.launch is not None
                       and s.name.startswith("gemm") and "-" not in s.name])
    from sarek.loader import load_module

    module = load_module(EXAMPLES / f"{name}.py")
    run: Launch = module.make(rng.randrange(0, 70), rng.randrange(0, 70), rng.randrange(0, 40),
                              seed=rng.randrange(1000))
    gemm = matrix_pattern.recognize(run.kernel)
    args = dict(run.args)
    for a in {gemm.a.array, gemm.b.array}:
        args[a] = array_for(gemm.operand_elt, args[a].size, rng)
    return replace(run, args=args)


def mutate_kernel(kernel: ir.Kernel, rng: random.Random) -> Any:
    """A typed mutation of a kernel's IR (as a Python document): another constant, operator,
    name, builtin, array or statement order; most mutants are still well-formed."""
    doc = kernel.model_dump(mode="json")
    nodes = _nodes(doc)
    arrays = [p["name"] for p in doc["params"] if p["kind"] == "array"]
    scalars = [p["name"] for p in doc["params"] if p["kind"] == "scalar"]
    for _ in range(rng.choice([1, 1, 2, 3])):
        value = rng.choice([v for *_, v in nodes if isinstance(v, dict) and "kind" in v])
        kind = value.get("kind")
        if kind == "const" and isinstance(value.get("value"), int | float) and not isinstance(
                value["value"], bool):
            value["value"] = type(value["value"])(rng.choice([0, 1, -1, 2, 3, 16, 64]))
        elif kind == "binary" and value["op"] in ("add", "sub", "mul"):
            value["op"] = rng.choice(["add", "sub", "mul"])
        elif kind == "binary" and value["op"] in ("lt", "le", "gt", "ge", "ne", "eq"):
            value["op"] = rng.choice(["lt", "le", "gt", "ge", "ne", "eq"])
        elif kind == "binary" and rng.random() < 0.5:
            value["a"], value["b"] = value["b"], value["a"]
        elif kind == "var" and value["name"] in scalars:
            value["name"] = rng.choice(scalars)
        elif kind == "builtin":
            value["which"] = rng.choice([b.value for b in ir.Builtin])
        elif kind in ("load", "store") and arrays:
            value["array"] = rng.choice(arrays)
        elif kind == "for":
            field_name = rng.choice(["start", "stop"])
            value[field_name] = rng.choice([
                {"kind": "const", "value": rng.choice([0, 1, 2, 5]), "type": "i32"},
                {"kind": "var", "name": rng.choice(scalars), "type": "i32"}
                if scalars else value[field_name]])
        elif isinstance(value.get("body"), list) and value["body"] and rng.random() < 0.5:
            rng.shuffle(value["body"])
        else:
            exprs = _expressions(doc)
            if len(exprs) > 1:
                dst, (*_, src) = rng.sample(exprs, 2)
                doc = _set(doc, dst, _copy(src))
                nodes = _nodes(doc)
    return doc


def gemm_case(rng: random.Random) -> Outcome:
    """A GEMM launch, its kernel mutated (or not), through recognize, region and the rewrite,
    simulated against the original with canaries."""

    def body(r: _Run) -> None:
        run = r.call("make", gemm_launch, rng)
        if run is REFUSED:
            return
        kernel = run.kernel
        if rng.random() < 0.75:
            doc = mutate_kernel(kernel, rng)
            kernel = r.call("model", ir.Kernel.model_validate, doc,
                            refusals=(SarekError, ValidationError))
            if kernel is REFUSED:
                return
        run = replace(run, kernel=kernel)
        gemm = r.call("recognize", matrix_pattern.recognize, kernel)
        if gemm is REFUSED:
            return
        reg = r.call("region", matrix_mapping.region, gemm, run.grid, run.block,
                     dict(run.args))
        if reg is REFUSED:
            return
        compare_rewrite(r, run, rng)

    return run_case("gemm", body)


# --------------------------------------------------------------------------- layouts


PATTERNS_TEXT = ["(r m) w k -> k m r w", "a b -> b a", "a -> (a)", "(a b) -> a b",
                 "a b c -> (a b c)", "a b -> a", "->", "a b -> b a a", "(a (b c)) -> a",
                 "a) -> a", "a -> b", "", "a b -> (b a)", "1 -> 1", "a b c -> c (b a)",
                 "(a b c) d -> d c b a", "a b c d -> (a b) (c d)"]


def _layout(r: _Run, rng: random.Random) -> Any:
    from sarek.layout import S, laneid, warpid

    rank = rng.choice([1, 2, 3, 4])
    shape = tuple(rng.choice([1, 2, 3, 4, 8, 16, 0, -1, 2**20, 2.0, "4"]) if rng.random()
                  < 0.15 else rng.choice([1, 2, 4, 8]) for _ in range(rank))
    def stride() -> Any:
        value = rng.choice([0, 1, 2, 4, 8, 16, 128, -1, 3, 2**31])
        if rng.random() < 0.1:
            return rng.choice([None, "1", 1.5, (1, 2)])
        return value @ rng.choice([laneid, warpid]) if rng.random() < 0.3 else value

    strides = tuple(stride() for _ in range(rank if rng.random() < 0.9 else rank + 1))
    return r.call("layout", lambda: S[shape:strides])


def layout_case(rng: random.Random) -> Outcome:
    """Tile layouts built from random shapes and strides, then rearranged, recast, composed,
    evaluated and round-tripped through JSON; tile opcodes parsed."""
    from sarek import tile
    from sarek.layout import Axis, TileLayout

    def body(r: _Run) -> None:
        layout = _layout(r, rng)
        if layout is REFUSED:
            return
        for _ in range(rng.randrange(1, 5)):
            match rng.randrange(6):
                case 0:
                    names = rng.sample("rmabcdwk", rng.randrange(0, 4))
                    sizes = {n: rng.choice([0, 1, 2, 3, 4, 8, -2, 2**40]) for n in names}
                    text = rng.choice(PATTERNS_TEXT)
                    out = r.call("rearrange", functools.partial(layout.rearrange, text, **sizes))
                case 1:
                    out = r.call("recast", layout.recast, rng.choice([8, 16, 32, 64, 0, 3]),
                                 rng.choice([8, 16, 32, 64, 0, 3, -8]))
                case 2:
                    other = _layout(r, rng)
                    out = REFUSED if other is REFUSED else r.call("compose", layout.compose,
                                                                  other)
                case 3:
                    coord = [rng.choice([0, 1, -1, 5, 100]) for _ in range(rng.choice(
                        [layout.rank, layout.rank, layout.rank + 1, 0]))]
                    r.call("evaluate", layout, *coord, axis=rng.choice(list(Axis)))
                    r.call("cosize", layout.cosize, rng.choice(list(Axis)))
                    out = REFUSED
                case 4:
                    back = r.call("json", TileLayout.model_validate_json,
                                  layout.model_dump_json(), refusals=(SarekError,))
                    if back is not REFUSED and back != layout:
                        raise _Failed("crash", "json", f"{layout!r} came back as {back!r}")
                    out = REFUSED
                case _:
                    op = rng.choice(["ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                                     "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
                                     "stmatrix.sync.aligned.m8n8.x1.shared.b16", "ldmatrix",
                                     "ldmatrix.sync.aligned.m8n8.x3.shared.b16", "", "x" * 300,
                                     "stmatrix.sync.aligned.m16n8.x4.shared.b16"])
                    r.call("parse_op", tile.parse_op, op)
                    out = REFUSED
            if out is not REFUSED and isinstance(out, TileLayout):
                layout = out

    return run_case("layout", body)


CASES: dict[str, Callable[[random.Random], Outcome]] = {
    "json": json_case, "dsl": dsl_case, "launch": launch_case, "cli": cli_case,
    "gemm": gemm_case, "layout": layout_case}
"""Every kind of input, by name."""


def quiet() -> contextlib.AbstractContextManager[None]:
    """Silences the warnings NumPy prints for the odd values the inputs hold."""
    import warnings

    @contextlib.contextmanager
    def scope() -> Iterator[None]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            old = np.seterr(all="ignore")
            try:
                yield
            finally:
                np.seterr(**old)

    return scope()

