"""Well-formedness of a kernel: scopes, types, memory spaces and statically visible divergence.

``check(kernel)`` returns every problem found, each with the statement path where it occurs
(``body[2].then[0]``); ``ensure_valid(kernel)`` raises ``IRError`` when there is any. The rules
are those of ``specs/ir.md``.

The checker is one pass with one scope chain: every rule reads the same scopes and reports
through the same path, so the rules stay together in this module, which is why it is longer
than the others. The structural limits (``MAX_EXPR_DEPTH``, ``MAX_NESTING``) are checked first,
without deep recursion, so that the pass itself may recurse.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field

from pydantic import BaseModel

from sarek import atoms, ir, tile
from sarek.errors import IRError
from sarek.ir import BinOp, ElemType, MathFn, MemSpace, UnOp
from sarek.ir_walk import subexpressions, walk
from sarek.memo import ByIdentity

PACKED_COUNTS = (2, 4, 8)  # elements one StorePacked may write

MAX_EXPR_DEPTH = 64
"""The deepest expression a kernel may hold (a constant or a name is 1 deep, ``a + b`` one
more than its deeper operand). Analyses, the simulator and the printers recurse over
expressions; past this, write the expression as several assignments."""

MAX_NESTING = 24
"""How deeply statements may nest (a loop or a conditional holds its body one level deeper).
With ``MAX_EXPR_DEPTH`` it keeps every well-formed kernel's JSON within the nesting that
pydantic's JSON parser reads back."""

MAX_ARRAY_SIZE = (1 << 31) - 1
"""The most elements a shared or local array may have (element indices are i32)."""


@dataclass(frozen=True)
class Problem:
    """One finding: where (a statement path) and why."""

    path: str
    reason: str
    line: int | None = None  # the statement's source line, when the DSL recorded one

    def __str__(self) -> str:
        at = f" (line {self.line})" if self.line is not None else ""
        return f"{self.path}{at}: {self.reason}"


@dataclass(frozen=True)
class _Scalar:
    type: ElemType
    writable: bool
    what: str  # "parameter", "variable", "loop variable"


@dataclass(frozen=True)
class _Array:
    elem: ElemType
    space: MemSpace
    readonly: bool
    decl: ir.ArrayDecl | ir.ArrayParam


@dataclass(frozen=True)
class _View:
    view: ir.TensorView
    storage: ir.ArrayDecl | ir.ArrayParam


@dataclass(frozen=True)
class _Frag:
    decl: ir.FragDecl


_Symbol = _Scalar | _Array | _View | _Frag


@dataclass
class _Scope:
    symbols: dict[str, _Symbol] = field(default_factory=dict)
    parent: _Scope | None = None

    def lookup(self, name: str) -> _Symbol | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.symbols:
                return scope.symbols[name]
            scope = scope.parent
        return None


_MAX_BLOCK = 1024  # the most invocations of a block (CUDA's limit; sim.launch.MAX_BLOCK)

_INT_RANGES = {
    t: ((-(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1) if t.is_signed else (0, (1 << t.bits) - 1))
    for t in ElemType
    if t.is_int
}


class _Checker:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.block_size: int | None = None  # invocations per block, when the kernel says
        # Names whose value may differ between invocations of one block (for barrier checks).
        self.varying: set[str] = set()
        self.line: int | None = None  # of the statement being checked

    def report(self, path: str, reason: str) -> None:
        self.problems.append(Problem(path, reason, self.line))

    # ------------------------------------------------------------------ expressions

    def expr(self, e: ir.Expr, scope: _Scope, path: str) -> None:
        """Checks ``e`` (and its subexpressions); problems are reported at ``path``."""
        match e:
            case ir.Const(value=v, type=t):
                self._const(v, t, path)
            case ir.Var(name=name, type=t):
                sym = scope.lookup(name)
                if sym is None:
                    self.report(path, f"undefined name {name!r}")
                elif not isinstance(sym, _Scalar):
                    self.report(path, f"{name!r} is an array or fragment, not a scalar value")
                elif sym.type != t:
                    self.report(path, f"{name!r} has type {sym.type}, used as {t}")
            case ir.BuiltinValue():
                pass
            case ir.Load(array=name, index=index, type=t):
                self.expr(index, scope, path)
                self._index(index, path)
                sym = scope.lookup(name)
                if sym is None:
                    self.report(path, f"undefined array {name!r}")
                elif not isinstance(sym, _Array):
                    self.report(path, f"{name!r} is not an array and cannot be indexed")
                elif sym.elem != t:
                    self.report(path, f"a load from {name!r} ({sym.elem}) is typed {t}")
            case ir.Unary(op=op, x=x, type=t):
                self.expr(x, scope, path)
                self._same(x.type, t, f"{op} result", path)
                if op is UnOp.NOT and t is not ElemType.BOOL:
                    self.report(path, f"'not' needs a bool operand, got {t}")
                elif op is UnOp.BITNOT and not t.is_int:
                    self.report(path, f"'bitnot' needs an integer operand, got {t}")
                elif op is UnOp.NEG and not t.is_arith:
                    self.report(path, f"'neg' needs an arithmetic operand, got {t}")
            case ir.Binary():
                self._binary(e, scope, path)
            case ir.Cast(x=x):
                self.expr(x, scope, path)
            case ir.Bitcast(x=x, type=t):
                self.expr(x, scope, path)
                if ElemType.BOOL in (x.type, t) or x.type.bits != t.bits:
                    self.report(path, f"a bitcast keeps the width: {x.type} "
                                f"({x.type.bits} bits) cannot be read as {t} ({t.bits} bits)")
            case ir.Select(cond=c, a=a, b=b, type=t):
                for sub in (c, a, b):
                    self.expr(sub, scope, path)
                self._same(c.type, ElemType.BOOL, "select condition", path)
                self._same(a.type, t, "select's first value", path)
                self._same(b.type, t, "select's second value", path)
            case ir.Call(fn=fn, args=args, type=t):
                for a in args:
                    self.expr(a, scope, path)
                self._call(fn, args, t, path)

    def _const(self, v: bool | int | float, t: ElemType, path: str) -> None:
        if t is ElemType.BOOL:
            if not isinstance(v, bool):
                self.report(path, f"a bool constant holds {v!r}")
        elif t.is_int:
            if isinstance(v, bool) or not isinstance(v, int):
                self.report(path, f"an {t} constant holds {v!r}, not an integer")
            else:
                lo, hi = _INT_RANGES[t]
                if not lo <= v <= hi:
                    self.report(path, f"constant {_number(v)} does not fit {t} [{lo}, {hi}]")
        elif isinstance(v, bool):
            self.report(path, f"a {t} constant holds {v!r}")
        elif isinstance(v, int) and not -_FLOAT_INT <= v <= _FLOAT_INT:
            # an integer literal past f64's range has no float value to round to
            self.report(path, f"the {t} constant {_number(v)} is beyond the range of any "
                        "float type (write inf for an infinity)")

    def _index(self, index: ir.Expr, path: str) -> None:
        if not index.type.is_int:
            self.report(path, f"an array index must be an integer, got {index.type}")

    def _same(self, got: ElemType, want: ElemType, what: str, path: str) -> None:
        if got != want:
            self.report(path, f"{what} has type {got}, expected {want}")

    def _binary(self, e: ir.Binary, scope: _Scope, path: str) -> None:
        self.expr(e.a, scope, path)
        self.expr(e.b, scope, path)
        a, b, t, op = e.a.type, e.b.type, e.type, e.op
        if op in ir.LOGICAL:
            for side in (a, b, t):
                self._same(side, ElemType.BOOL, f"'{op}' operand", path)
            return
        if op in (BinOp.SHL, BinOp.SHR):
            if not (a.is_int and b.is_int):
                self.report(path, f"'{op}' needs integer operands, got {a} and {b}")
            self._same(t, a, f"'{op}' result", path)
            return
        if a != b:
            self.report(path, f"'{op}' operands have different types {a} and {b}")
            return
        if op in ir.COMPARISONS:
            if not (a.is_arith or (a is ElemType.BOOL and op in (BinOp.EQ, BinOp.NE))):
                self.report(path, f"'{op}' cannot compare {a} values")
            self._same(t, ElemType.BOOL, f"'{op}' result", path)
            return
        self._same(t, a, f"'{op}' result", path)
        if op is BinOp.REM and not a.is_int:
            self.report(path, f"'rem' is defined on integers only, got {a}")
        elif op in ir.BITWISE:
            if not (a.is_int or a is ElemType.BOOL):
                self.report(path, f"'{op}' needs integer operands, got {a}")
        elif not a.is_arith:
            hint = (" (f16 and bf16 are storage types: cast to f32 first)"
                    if a.is_storage_only else "")
            self.report(path, f"'{op}' is not defined on {a}{hint}")

    def _call(self, fn: MathFn, args: tuple[ir.Expr, ...], t: ElemType, path: str) -> None:
        if len(args) != ir.MATH_ARITY[fn]:
            self.report(path, f"{fn} takes {ir.MATH_ARITY[fn]} arguments, got {len(args)}")
            return
        for i, a in enumerate(args):
            self._same(a.type, t, f"argument {i} of {fn}", path)
        int_ok = fn in (MathFn.ABS, MathFn.MIN, MathFn.MAX)
        if t not in (ElemType.F32, ElemType.F64) and not (int_ok and t.is_int):
            self.report(path, f"{fn} is not defined on {t}")

    # ------------------------------------------------------------------ statements

    def block(self, stmts: tuple[ir.Stmt, ...], scope: _Scope, path: str, divergent: bool) -> bool:
        """Checks a statement list; returns whether control may have diverged by its end (a
        return under divergent control makes the rest of the kernel divergent)."""
        for i, s in enumerate(stmts):
            divergent = self.stmt(s, scope, f"{path}[{i}]", divergent)
        return divergent

    def stmt(self, s: ir.Stmt, scope: _Scope, path: str, divergent: bool) -> bool:
        self.line = s.line
        match s:
            case ir.Let(name=name, type=t, value=v):
                self.expr(v, scope, path)
                self._same(v.type, t, f"the value of {name!r}", path)
                self._define(scope, name, _Scalar(t, True, "variable"), path)
                self._assigned(name, v, divergent)
            case ir.Assign(name=name, value=v):
                self.expr(v, scope, path)
                sym = scope.lookup(name)
                if sym is None:
                    self.report(path, f"assignment to undefined name {name!r}")
                elif not isinstance(sym, _Scalar):
                    self.report(path, f"{name!r} is not a scalar variable")
                elif not sym.writable:
                    self.report(path, f"{name!r} is a {sym.what} and is read-only")
                else:
                    self._same(v.type, sym.type, f"the value assigned to {name!r}", path)
                self._assigned(name, v, divergent)
            case ir.Store(array=name, index=index, value=v):
                self.expr(index, scope, path)
                self.expr(v, scope, path)
                self._index(index, path)
                sym = scope.lookup(name)
                if sym is None:
                    self.report(path, f"store to undefined array {name!r}")
                elif not isinstance(sym, _Array):
                    self.report(path, f"{name!r} is not an array")
                else:
                    if sym.readonly:
                        self.report(path, f"store to read-only array {name!r}")
                    self._same(v.type, sym.elem, f"the value stored to {name!r}", path)
            case ir.StorePacked(array=name, index=index, value=v):
                self.expr(index, scope, path)
                self.expr(v, scope, path)
                self._index(index, path)
                sym = scope.lookup(name)
                if not isinstance(sym, _Array):
                    self.report(path, f"packed store to {name!r}, which is not an array")
                elif sym.readonly:
                    self.report(path, f"store to read-only array {name!r}")
                elif not (v.type.is_int and not v.type.is_signed and sym.elem.is_int
                          and v.type.bits // sym.elem.bits in PACKED_COUNTS
                          and v.type.bits % sym.elem.bits == 0):
                    self.report(path, f"a packed store into {sym.elem} array {name!r} takes an "
                                f"unsigned integer 2, 4 or 8 times as wide, not {v.type}")
            case ir.For(var=var, start=a, stop=b, step=c, body=body):
                inner = _Scope(parent=scope)
                for what, bound in (("start", a), ("stop", b), ("step", c)):
                    self.expr(bound, scope, path)
                    self._same(bound.type, ElemType.I32, f"the loop {what}", path)
                if isinstance(c, ir.Const) and c.value == 0:
                    self.report(path, "the loop step is 0")
                varies = divergent or any(self._varies(x) for x in (a, b, c))
                if varies:
                    self.varying.add(var)
                self._define(inner, var, _Scalar(ElemType.I32, False, "loop variable"), path)
                ended = self._loop(body, inner, f"{path}.body", varies)
                divergent = divergent or (ended and self._returns(s))
            case ir.While(cond=cond, body=body):
                self.expr(cond, scope, path)
                self._same(cond.type, ElemType.BOOL, "the loop condition", path)
                ended = self._loop(body, _Scope(parent=scope), f"{path}.body", divergent, cond)
                divergent = divergent or (ended and self._returns(s))
            case ir.If(cond=cond, then=then, orelse=orelse):
                self.expr(cond, scope, path)
                self._same(cond.type, ElemType.BOOL, "the condition", path)
                branch_varies = divergent or self._varies(cond)
                d1 = self.block(then, _Scope(parent=scope), f"{path}.then", branch_varies)
                d2 = self.block(orelse, _Scope(parent=scope), f"{path}.orelse", branch_varies)
                # Invocations that returned inside a divergent branch leave the rest divergent.
                divergent = divergent or ((d1 or d2) and self._returns(s))
            case ir.Barrier():
                if divergent:
                    self.report(path, "barrier in divergent code: the invocations of a block "
                                "may not all reach it (it depends on thread_idx, subgroup "
                                "lane or id, or on a value derived from them)")
            case ir.Return():
                pass
            case ir.ArrayDecl(name=name, elem=elem, space=space, size=size, align=align):
                if size > MAX_ARRAY_SIZE:
                    self.report(path, f"array {name!r} has {_number(size)} elements, more than "
                                f"the {MAX_ARRAY_SIZE} an i32 index reaches")
                if align < 1 or align & (align - 1):
                    self.report(path, f"the alignment of {name!r} is {_number(align)} bytes; it "
                                "must be a positive power of two")
                if space is MemSpace.GLOBAL:
                    self.report(path, f"array {name!r} cannot be declared in global memory; "
                                "global arrays are parameters")
                if space is MemSpace.SHARED and path.count("[") > 1:
                    self.report(path, f"shared array {name!r} must be declared at the top "
                                "level of the kernel body")
                self._define(scope, name, _Array(elem, space, False, s), path)
            case ir.TensorView(name=name, storage=storage):
                sym = scope.lookup(storage)
                if not isinstance(sym, _Array):
                    self.report(path, f"the storage {storage!r} of view {name!r} is not an array")
                else:
                    self._define(scope, name, _View(s, sym.decl), path)
            case ir.FragDecl(name=name):
                self._define(scope, name, _Frag(s), path)
            case ir.FragFill(frag=f, value=v):
                self.expr(v, scope, path)
                if (d := self._frag(f, scope, path)) is not None:
                    self._same(v.type, d.elem, f"the fill value of {f!r}", path)
            case ir.FragLoad(frag=f, array=a, offset=o, stride=st) | \
                    ir.FragStore(frag=f, array=a, offset=o, stride=st):
                decl = self._frag(f, scope, path)
                for x in (o, st):
                    self.expr(x, scope, path)
                    self._index(x, path)
                sym = scope.lookup(a)
                if not isinstance(sym, _Array):
                    self.report(path, f"{a!r} is not an array")
                elif isinstance(s, ir.FragStore) and sym.readonly:
                    self.report(path, f"fragment store to read-only array {a!r}")
                elif decl is not None and sym.elem != decl.elem:
                    self.report(path, f"fragment {f!r} holds {decl.elem} but array {a!r} "
                                f"holds {sym.elem}")
                elif sym.space is MemSpace.LOCAL:
                    self.report(path, f"fragments move between a subgroup and shared or "
                                f"global memory, not local array {a!r}")
            case ir.FragMulAdd(d=d, a=a, b=b, c=c):
                self._mul_add(scope, path, d, a, b, c)
            case ir.FragAdd(d=d, a=a, b=b):
                self._add(scope, path, d, a, b)
            case ir.TileApply():
                self._tile_apply(s, scope, path)
            case ir.Ldmatrix() | ir.Stmatrix():
                self._row_move(s, scope, path, in_tile=False)
            case ir.LaneTile(moves=moves):
                for j, move in enumerate(moves):
                    self._row_move(move, scope, f"{path}.moves[{j}]", in_tile=True)
            case ir.StageCopy():
                self._stage_copy(s, scope, path, divergent)
            case ir.StageCommit() | ir.StageWait() | ir.WgmmaWait() | ir.AsyncProxyFence():
                pass
            case ir.Wgmma(elem=elem, n=n, d=d, a=a, b=b, b_index=index, a_index=a_index):
                if divergent:
                    self.report(path, "wgmma in divergent code: the warpgroup issues it "
                                "together")
                for operand_at in (index,) if a_index is None else (index, a_index):
                    self.expr(operand_at, scope, path)
                    self._index(operand_at, path)
                if elem not in (ElemType.F16, ElemType.BF16):
                    self.report(path, f"wgmma multiplies f16 or bf16 here, not {elem}")
                if a_index is None:
                    self._registers(scope, path, a, ElemType.U32, 4)
                self._registers(scope, path, d, ElemType.F32, n // 2)
                for use, name in (("B", b),) if a_index is None else (("A", a), ("B", b)):
                    sym = scope.lookup(name)
                    if not isinstance(sym, _Array) or sym.space is not MemSpace.SHARED or \
                            sym.elem is not elem:
                        self.report(path, f"wgmma reads {use} from a shared array of {elem}; "
                                    f"{name!r} is not one")
            case ir.CpAsync(dst=dst, dst_index=di, src=src, src_index=si):
                for x in (di, si):
                    self.expr(x, scope, path)
                    self._index(x, path)
                self._copy_arrays(scope, path, "cp.async", dst, src)
            case ir.Mma(atom=atom, d=d, a=a, b=b, c=c):
                facts = atoms.MMA[atom]
                for name, elem, start, use in (
                        (a, ElemType.U32, s.a_offset, "a"), (b, ElemType.U32, s.b_offset, "b"),
                        (c, facts.accumulator, s.c_offset, "c"),
                        (d, facts.accumulator, s.d_offset, "c")):
                    self._registers(scope, path, name, elem, start + facts.registers(use))
        return divergent

    def _stage_copy(self, s: ir.StageCopy, scope: _Scope, path: str, divergent: bool) -> None:
        if divergent:
            self.report(path, "staged copy in divergent code: every invocation of the block "
                        "issues it together, as a barrier")
        if self.block_size is None:
            self.report(path, "a staged copy needs the kernel's block shape (Kernel.block): "
                        "the block's invocations share the tile")
        for what, x in (("offset", s.dst_offset), ("source offset", s.src_offset),
                        ("source row stride", s.src_row_stride),
                        ("source column stride", s.src_col_stride),
                        ("row limit", s.row_limit), ("column limit", s.col_limit)):
            self.expr(x, scope, path)
            self._same(x.type, ElemType.I32, f"the staged copy's {what}", path)
        elem = self._copy_arrays(scope, path, "a staged copy", s.dst, s.src)
        if elem is not None:
            self._same(s.fill.type, elem, "the staged copy's fill value", path)
        if s.cols > s.dst_pitch:
            self.report(path, f"a staged tile of {s.cols} columns does not fit rows of "
                        f"{s.dst_pitch} elements")

    def _copy_arrays(self, scope: _Scope, path: str, what: str, dst: str, src: str
                     ) -> ElemType | None:
        """A copy's arrays: from a global array into a shared one of the same element type
        (the type, or None after a report)."""
        to, frm = scope.lookup(dst), scope.lookup(src)
        if not isinstance(to, _Array) or to.space is not MemSpace.SHARED:
            self.report(path, f"{what} writes a shared array; {dst!r} is not one")
        elif not isinstance(frm, _Array) or frm.space is not MemSpace.GLOBAL:
            self.report(path, f"{what} reads a global array; {src!r} is not one")
        elif to.elem != frm.elem:
            self.report(path, f"{what} moves elements unchanged; {src!r} holds {frm.elem} "
                        f"and {dst!r} holds {to.elem}")
        elif to.elem is ElemType.BOOL or to.elem.bits > 32:
            self.report(path, f"{what} moves 8-, 16- or 32-bit elements, not {to.elem}")
        else:
            return to.elem
        return None

    def _launch_shape(self, kernel: ir.Kernel) -> None:
        """The block shape and subgroup a kernel records must be launchable."""
        if kernel.block is not None:
            size = kernel.block[0] * kernel.block[1] * kernel.block[2]
            if min(kernel.block) < 1 or size > _MAX_BLOCK:
                self.report("block", f"the kernel's block {kernel.block} is not a block of 1 "
                            f"to {_MAX_BLOCK} invocations")
        if kernel.subgroup is not None and kernel.subgroup > _MAX_BLOCK:
            self.report("subgroup", f"subgroups of {_number(kernel.subgroup)} lanes are larger "
                        f"than any block ({_MAX_BLOCK} invocations)")

    def _row_move(self, s: ir.Ldmatrix | ir.Stmatrix, scope: _Scope, path: str,
                  in_tile: bool) -> None:
        """A lane-explicit ldmatrix or stmatrix: its rows given by an address each lane
        computes, or (inside a ``LaneTile`` only) by ``rows``; its registers a u32 array from
        ``offset``, or 32-bit words ``slots`` of a local array."""
        what = s.kind
        registers, shared = (s.dst, s.src) if isinstance(s, ir.Ldmatrix) else (s.src, s.dst)
        if (s.address is None) == (s.rows is None):
            self.report(path, f"{what} takes its rows from an address or from rows, not both "
                        "or neither")
        if s.rows is not None and not in_tile:
            self.report(path, f"{what} rows are given by lane in a lane tile only")
        if s.address is not None:
            self.expr(s.address, scope, path)
            self._index(s.address, path)
        if s.slots is None:
            self._registers(scope, path, registers, ElemType.U32, s.offset + s.count)
        else:
            sym = scope.lookup(registers)
            if len(s.slots) != s.count:
                self.report(path, f"{what} .x{s.count} names {len(s.slots)} register slots")
            if not isinstance(sym, _Array) or sym.space is not MemSpace.LOCAL:
                self.report(path, f"{registers!r} must be a local array holding each lane's "
                            "registers")
            elif sym.elem.bits > 32 or sym.elem is ElemType.BOOL:
                self.report(path, f"{what} registers are 32-bit words of {registers!r}, which "
                            f"holds {sym.elem}")
            elif isinstance(sym.decl, ir.ArrayDecl) and s.slots and (
                    min(s.slots) < 0 or max(s.slots) >= sym.decl.size * sym.elem.bits // 32):
                self.report(path, f"{what} register slots {s.slots} lie outside {registers!r}")
        sym = scope.lookup(shared)
        if not isinstance(sym, _Array) or sym.space is not MemSpace.SHARED:
            self.report(path, f"{what} moves rows of a shared array; {shared!r} is not one")
        elif sym.elem.bits > 32 or sym.elem is ElemType.BOOL:
            self.report(path, f"{what} moves 16-byte rows of 8-, 16- or 32-bit elements, not "
                        f"of {shared!r} ({sym.elem})")
        elif isinstance(sym.decl, ir.ArrayDecl) and sym.decl.align % 16:
            self.report(path, f"{what} rows are 16-byte aligned; {shared!r} is aligned to "
                        f"{sym.decl.align} bytes")

    def _registers(self, scope: _Scope, path: str, name: str, elem: ElemType, end: int
                   ) -> None:
        """A lane-explicit instruction's register operand: a local array of ``elem`` with at
        least ``end`` elements."""
        sym = scope.lookup(name)
        if not isinstance(sym, _Array) or sym.space is not MemSpace.LOCAL:
            self.report(path, f"{name!r} must be a local array holding each lane's registers")
        elif sym.elem is not elem:
            self.report(path, f"register array {name!r} holds {sym.elem}; the instruction "
                        f"takes {elem}")
        elif isinstance(sym.decl, ir.ArrayDecl) and sym.decl.size < end:
            self.report(path, f"register array {name!r} has {sym.decl.size} elements; the "
                        f"instruction uses {end}")

    def _loop(self, body: tuple[ir.Stmt, ...], scope: _Scope, path: str, divergent: bool,
              cond: ir.Expr | None = None) -> bool:
        # Values assigned in the body can make the loop's own condition vary on the next
        # iteration: iterate the uniformity analysis to a fixed point (problems reported once).
        while True:
            before = set(self.varying)
            varies = divergent or (cond is not None and self._varies(cond))
            saved = len(self.problems)
            result = self.block(body, _Scope(parent=scope.parent, symbols=dict(scope.symbols)),
                                path, varies)
            if self.varying == before:
                return result
            del self.problems[saved:]

    def _returns(self, s: ir.Stmt) -> bool:
        return any(isinstance(x, ir.Return) for x in walk((s,)))

    def _define(self, scope: _Scope, name: str, sym: _Symbol, path: str) -> None:
        if not name.isidentifier():
            self.report(path, f"{name[:40]!r} is not a name (names are identifiers: a letter "
                        "or '_', then letters, digits or '_')")
        if scope.lookup(name) is not None:
            self.report(path, f"{name!r} is already defined")
        scope.symbols[name] = sym

    def _assigned(self, name: str, value: ir.Expr, divergent: bool) -> None:
        if divergent or self._varies(value):
            self.varying.add(name)

    def _varies(self, e: ir.Expr) -> bool:
        """Whether ``e`` may differ between invocations of one block."""
        return any(
            (isinstance(x, ir.BuiltinValue) and x.which.varies_in_block)
            or (isinstance(x, ir.Var) and x.name in self.varying)
            for x in subexpressions(e)
        )

    def _tile_apply(self, s: ir.TileApply, scope: _Scope, path: str) -> None:
        operands = []
        for name in (s.dst, s.src):
            match scope.lookup(name):
                case _View(view=view, storage=storage):
                    tensor: ir.ArrayDecl | ir.TensorView = view
                case _Array(decl=ir.ArrayDecl() as decl):
                    tensor, storage = decl, decl
                case _:
                    self.report(path, f"{name!r} is not a tensor (an array declared with a "
                                "layout, or a view)")
                    return
            operands.append((tensor, storage))
        try:
            dst, src = (tile.operand(t, st) for t, st in operands)
            tile.check(s.op, *tile.roles(s.op, dst, src))
        except tile.ContractError as e:
            self.report(path, e.reason)

    def _frag(self, name: str, scope: _Scope, path: str) -> ir.FragDecl | None:
        sym = scope.lookup(name)
        if not isinstance(sym, _Frag):
            self.report(path, f"{name!r} is not a fragment")
            return None
        return sym.decl

    def _mul_add(self, scope: _Scope, path: str, *names: str) -> None:
        decls = [self._frag(n, scope, path) for n in names]
        d, a, b, c = decls
        if d is None or a is None or b is None or c is None:
            return
        wants = ((a, ir.FragUse.A), (b, ir.FragUse.B), (c, ir.FragUse.ACCUMULATOR),
                 (d, ir.FragUse.ACCUMULATOR))
        for frag, use in wants:
            if frag.use is not use:
                self.report(path, f"fragment {frag.name!r} is used as {use} but declared "
                            f"{frag.use}")
        frags = (d, a, b, c)
        if len({x.shape for x in frags}) > 1:
            self.report(path, "the fragments of one multiply-add are declared for different "
                        "shapes: " + ", ".join(f"{x.name!r} {x.shape.m}x{x.shape.n}x{x.shape.k}"
                                               for x in frags))
        if a.elem != b.elem:
            self.report(path, f"a and b fragments have different types {a.elem} and {b.elem}")

    def _add(self, scope: _Scope, path: str, *names: str) -> None:
        decls = [self._frag(n, scope, path) for n in names]
        frags = [x for x in decls if x is not None]
        if len(frags) < len(decls):
            return
        for frag in frags:
            if frag.use is not ir.FragUse.ACCUMULATOR:
                self.report(path, f"fragment {frag.name!r} is used as accumulator but declared "
                            f"{frag.use}: an element-wise add takes accumulators only")
        if len({(x.rows, x.cols) for x in frags}) > 1:
            self.report(path, "the fragments of one add have different shapes: " + ", ".join(
                f"{x.name!r} {x.rows}x{x.cols}" for x in frags))
        if len({x.elem for x in frags}) > 1:
            self.report(path, "the fragments of one add hold different element types: "
                        + ", ".join(f"{x.name!r} {x.elem}" for x in frags))
        elif not frags[0].elem.is_arith:
            self.report(path, f"fragments of {frags[0].elem} cannot be added: an element-wise "
                        "add is defined on integer, f32 and f64 accumulators")


def _number(v: int) -> str:
    """An integer for a message: its digits, or its magnitude when they are too many to
    read (Python refuses to format integers of more than 4300 digits at all)."""
    if abs(v) < 10**30:
        return str(v)
    return f"about {'-' if v < 0 else ''}1e{math.floor(math.log10(abs(v)))}"


_FLOAT_INT = int(1.7976931348623157e308)  # the largest finite f64, as an integer


def _node_fields(cls: type[BaseModel]) -> tuple[str, ...]:
    """The fields of an IR node class that hold IR nodes (or tuples of them), read from the
    annotations once per class, so that nodes ``sarek.ir`` gains later are walked too."""
    if cls not in _NODE_FIELDS:
        def holds_node(t: object) -> bool:
            if isinstance(t, type) and issubclass(t, BaseModel):
                return True
            return any(holds_node(a) for a in typing.get_args(t))

        _NODE_FIELDS[cls] = tuple(n for n, f in cls.model_fields.items()
                                  if holds_node(f.annotation) and n != "layout")
    return _NODE_FIELDS[cls]


_NODE_FIELDS: dict[type[BaseModel], tuple[str, ...]] = {}


def _too_deep(e: BaseModel, depth: int) -> bool:
    """Whether ``e``, at ``depth``, reaches past ``MAX_EXPR_DEPTH``; the recursion stops there,
    so it is bounded however deep ``e`` is."""
    if depth > MAX_EXPR_DEPTH:
        return True
    fields = _NODE_FIELDS.get(type(e)) or _node_fields(type(e))
    for name in fields:
        v = getattr(e, name)
        if type(v) is tuple:
            for x in v:
                if _too_deep(x, depth + 1):
                    return True
        elif v is not None and _too_deep(v, depth + 1):
            return True
    return False


_STATEMENT = tuple(typing.get_args(typing.get_args(ir.Stmt)[0]))


def _shape_problems(kernel: ir.Kernel) -> list[Problem]:
    """Expressions deeper than ``MAX_EXPR_DEPTH`` and statements nested deeper than
    ``MAX_NESTING`` (found with recursion bounded by the limits: the checker proper recurses
    as deep as the kernel goes)."""
    problems: list[Problem] = []

    def block(stmts: tuple[BaseModel, ...], path: str, level: int) -> None:
        for i, s in enumerate(stmts):
            if len(problems) >= 8:
                return
            here, line = f"{path}[{i}]", getattr(s, "line", None)
            if level > MAX_NESTING:
                problems.append(Problem(here, f"statements nest {level} deep, more than the "
                                        f"{MAX_NESTING} the IR allows", line))
                return
            for name in _node_fields(type(s)):
                v = getattr(s, name)
                if isinstance(v, tuple):
                    if v and isinstance(v[0], _STATEMENT):
                        block(v, f"{here}.{name}", level + 1)
                elif v is not None and _too_deep(v, 1):
                    problems.append(Problem(here, f"the expression in {name!r} nests more than "
                                            f"{MAX_EXPR_DEPTH} deep, the most the IR allows; "
                                            "compute it in several assignments", line))

    block(kernel.body, "body", 1)
    return problems


_ACCEPTED: ByIdentity[ir.Kernel, bool] = ByIdentity(256)
"""The kernels most recently found well-formed (``sarek.memo``): the pipeline checks the same
object at each stage that receives it, and the check costs more than a small launch."""


def check(kernel: ir.Kernel) -> list[Problem]:
    """Every problem in ``kernel``: undefined names, type mismatches, stores to read-only arrays
    or to the wrong memory space, and barriers in statically divergent code. A kernel whose
    expressions or statements nest past ``MAX_EXPR_DEPTH`` or ``MAX_NESTING`` is reported for
    that alone. The same object found well-formed before is not checked again."""
    if not isinstance(kernel, ir.Kernel):
        return [Problem("", f"expected a sarek.ir.Kernel, got {type(kernel).__name__}")]
    if _ACCEPTED.get(kernel):
        return []
    problems = _check(kernel)
    if not problems:
        _ACCEPTED.put(kernel, True)
    return problems


def _check(kernel: ir.Kernel) -> list[Problem]:
    shape = _shape_problems(kernel)
    if shape:
        return shape
    c = _Checker()
    c.block_size = math.prod(kernel.block) if kernel.block is not None else None
    if not kernel.name.isidentifier():
        c.report("name", f"the kernel name {kernel.name[:40]!r} is not an identifier")
    c._launch_shape(kernel)
    top = _Scope()
    for i, p in enumerate(kernel.params):
        path = f"params[{i}]"
        match p:
            case ir.ArrayParam(name=name, elem=elem, space=space, readonly=ro):
                if space is not MemSpace.GLOBAL:
                    c.report(path, f"array parameter {name!r} must be in global memory, "
                             f"not {space}")
                c._define(top, name, _Array(elem, space, ro, p), path)
            case ir.ScalarParam(name=name, elem=elem):
                c._define(top, name, _Scalar(elem, False, "parameter"), path)
    c.block(kernel.body, _Scope(parent=top), "body", False)
    return c.problems


def ensure_valid(kernel: ir.Kernel) -> None:
    """Raises ``IRError`` listing every problem when ``kernel`` is not well-formed."""
    problems = check(kernel)
    if problems:
        raise IRError(kernel.name, [str(p) for p in problems])
