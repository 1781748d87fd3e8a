"""Well-formedness of a kernel: scopes, types, memory spaces and statically visible divergence.

``check(kernel)`` returns every problem found, each with the statement path where it occurs
(``body[2].then[0]``); ``ensure_valid(kernel)`` raises ``IRError`` when there is any. The rules
are those of ``specs/ir.md``.

The checker is one pass with one scope chain: every rule reads the same scopes and reports
through the same path. Its rules are layered by what they read: ``ir_check_expr`` (names,
types, expressions), ``ir_check_fragments`` (copies, moves, tiles, fragments) and, here,
statements and control flow. The structural limits (``MAX_EXPR_DEPTH``, ``MAX_NESTING``) are
checked first, without deep recursion, so that the pass itself may recurse.
"""

from __future__ import annotations

import math
import typing

from pydantic import BaseModel

from sarek import atoms, ir
from sarek.errors import IRError
from sarek.ir import ElemType, MemSpace
from sarek.ir_check_bulk import BulkRules
from sarek.ir_check_expr import (
    MAX_ARRAY_SIZE,
    MAX_EXPR_DEPTH,
    MAX_NESTING,
    PACKED_COUNTS,
    Array,
    Frag,
    Problem,
    Scalar,
    Scope,
    View,
    number_text,
)
from sarek.ir_check_fragments import FragmentRules
from sarek.ir_check_roles import RoleRules
from sarek.ir_walk import walk
from sarek.memo import ByIdentity


class _Checker(FragmentRules, BulkRules, RoleRules):
    """The whole pass: statements and control flow on the layered rules."""

    def block(self, stmts: tuple[ir.Stmt, ...], scope: Scope, path: str, divergent: bool) -> bool:
        """Checks a statement list; returns whether control may have diverged by its end (a
        return under divergent control makes the rest of the kernel divergent)."""
        for i, s in enumerate(stmts):
            divergent = self.stmt(s, scope, f"{path}[{i}]", divergent)
        return divergent

    def stmt(self, s: ir.Stmt, scope: Scope, path: str, divergent: bool) -> bool:
        self.line = s.line
        self._outside_roles(s, path)
        match s:
            case ir.Let(name=name, type=t, value=v):
                self.expr(v, scope, path)
                self._same(v.type, t, f"the value of {name!r}", path)
                self._define(scope, name, Scalar(t, True, "variable"), path)
                self._assigned(name, v, divergent)
            case ir.Assign(name=name, value=v):
                self.expr(v, scope, path)
                sym = scope.lookup(name)
                if sym is None:
                    self.report(path, f"assignment to undefined name {name!r}")
                elif not isinstance(sym, Scalar):
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
                elif not isinstance(sym, Array):
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
                if not isinstance(sym, Array):
                    self.report(path, f"packed store to {name!r}, which is not an array")
                elif sym.readonly:
                    self.report(path, f"store to read-only array {name!r}")
                elif not (v.type.is_int and not v.type.is_signed
                          and (sym.elem.is_int or sym.elem.is_float)
                          and v.type.bits // sym.elem.bits in PACKED_COUNTS
                          and v.type.bits % sym.elem.bits == 0):
                    self.report(path, f"a packed store into {sym.elem} array {name!r} takes an "
                                f"unsigned integer 2, 4 or 8 times as wide, not {v.type}")
            case ir.For(var=var, start=a, stop=b, step=c, body=body):
                inner = Scope(parent=scope)
                for what, bound in (("start", a), ("stop", b), ("step", c)):
                    self.expr(bound, scope, path)
                    self._same(bound.type, ElemType.I32, f"the loop {what}", path)
                if isinstance(c, ir.Const) and c.value == 0:
                    self.report(path, "the loop step is 0")
                varies = divergent or any(self._varies(x) for x in (a, b, c))
                if varies:
                    self.varying.add(var)
                self._define(inner, var, Scalar(ElemType.I32, False, "loop variable"), path)
                ended = self._loop(body, inner, f"{path}.body", varies)
                divergent = divergent or (ended and self._returns(s))
            case ir.While(cond=cond, body=body):
                self.expr(cond, scope, path)
                self._same(cond.type, ElemType.BOOL, "the loop condition", path)
                ended = self._loop(body, Scope(parent=scope), f"{path}.body", divergent, cond)
                divergent = divergent or (ended and self._returns(s))
            case ir.If(cond=cond, then=then, orelse=orelse):
                self.expr(cond, scope, path)
                self._same(cond.type, ElemType.BOOL, "the condition", path)
                branch_varies = divergent or self._varies(cond)
                d1 = self.block(then, Scope(parent=scope), f"{path}.then", branch_varies)
                d2 = self.block(orelse, Scope(parent=scope), f"{path}.orelse", branch_varies)
                # Invocations that returned inside a divergent branch leave the rest divergent.
                divergent = divergent or ((d1 or d2) and self._returns(s))
            case ir.Barrier():
                if divergent:
                    self.report(path, "barrier in divergent code: the invocations of a block "
                                "may not all reach it (it depends on thread_idx, subgroup "
                                "lane or id, or on a value derived from them)")
            case ir.Return():
                pass
            case ir.WarpRoles():
                self._warp_roles(s, scope, path, divergent)
            case ir.SetMaxNReg():
                self._set_max_nreg(s, path, divergent)
            case ir.NamedBarrier():
                self._named_barrier(s, path, divergent)
            case ir.ArrayDecl(name=name, elem=elem, space=space, size=size, align=align):
                if size > MAX_ARRAY_SIZE:
                    self.report(path, f"array {name!r} has {number_text(size)} elements, more than "
                                f"the {MAX_ARRAY_SIZE} an i32 index reaches")
                if align < 1 or align & (align - 1):
                    self.report(path, f"the alignment of {name!r} is {number_text(align)} "
                                "bytes; it must be a positive power of two")
                if space is MemSpace.GLOBAL:
                    self.report(path, f"array {name!r} cannot be declared in global memory; "
                                "global arrays are parameters")
                if space is MemSpace.SHARED and path.count("[") > 1:
                    self.report(path, f"shared array {name!r} must be declared at the top "
                                "level of the kernel body")
                if s.shares is not None:
                    self._shares(s, scope, path)
                self._define(scope, name, Array(elem, space, False, s), path)
            case ir.TensorView(name=name, storage=storage):
                sym = scope.lookup(storage)
                if not isinstance(sym, Array):
                    self.report(path, f"the storage {storage!r} of view {name!r} is not an array")
                else:
                    self._define(scope, name, View(s, sym.decl), path)
            case ir.FragDecl(name=name):
                self._define(scope, name, Frag(s), path)
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
                if not isinstance(sym, Array):
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
                byte = elem in (ElemType.U8, ElemType.I8)
                if elem not in (ElemType.F16, ElemType.BF16) and not byte:
                    self.report(path, f"wgmma multiplies f16, bf16, u8 or i8 here, not {elem}")
                if a_index is None:
                    self._registers(scope, path, a, ElemType.U32, 4)
                self._registers(scope, path, d, ElemType.I32 if byte else ElemType.F32,
                                n // 2)
                for use, name in (("B", b),) if a_index is None else (("A", a), ("B", b)):
                    sym = scope.lookup(name)
                    if not isinstance(sym, Array) or sym.space is not MemSpace.SHARED or \
                            sym.elem is not elem:
                        self.report(path, f"wgmma reads {use} from a shared array of {elem}; "
                                    f"{name!r} is not one")
            case ir.MbarrierInit() | ir.MbarrierArrive() | ir.MbarrierWait() | \
                    ir.BulkTensorCopy():
                self._bulk(s, scope, path)
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

    def _shares(self, s: ir.ArrayDecl, scope: Scope, path: str) -> None:
        """An array that reuses another's storage: a shared one, in the storage of a shared
        array declared before it that shares none itself, fitting as ``ir.ArrayDecl`` says."""
        name, host = s.name, s.shares
        sym = scope.lookup(host) if host is not None else None
        if s.space is not MemSpace.SHARED:
            self.report(path, f"{s.space} array {name!r} cannot share storage; only shared "
                        "arrays share another's")
        elif not (isinstance(sym, Array) and isinstance(sym.decl, ir.ArrayDecl)
                  and sym.space is MemSpace.SHARED):
            self.report(path, f"array {name!r} shares the storage of {host!r}, which is not a "
                        "shared array declared before it")
        elif sym.decl.shares is not None:
            self.report(path, f"array {name!r} shares the storage of {host!r}, which shares "
                        f"that of {sym.decl.shares!r}: name {sym.decl.shares!r} instead")
        else:
            own, theirs = _bytes(s), _bytes(sym.decl)
            item = max(s.elem.bits // 8, 1)
            if own > theirs:
                self.report(path, f"array {name!r} ({number_text(own)} bytes) does not fit in "
                            f"the {number_text(theirs)} bytes of {host!r}, whose storage it "
                            "shares")
            elif theirs % item:
                self.report(path, f"the {number_text(theirs)} bytes of {host!r} are not a "
                            f"whole number of the {item}-byte elements of {name!r}, which "
                            "shares them")
            elif s.align > sym.decl.align:
                self.report(path, f"array {name!r} is aligned to {s.align} bytes but shares "
                            f"the storage of {host!r}, aligned to {sym.decl.align}")
        if s.layout is not None or s.dynamic_offset is not None:
            self.report(path, f"array {name!r} shares another's storage: it has no layout or "
                        "dynamic offset of its own")

    def _loop(self, body: tuple[ir.Stmt, ...], scope: Scope, path: str, divergent: bool,
              cond: ir.Expr | None = None) -> bool:
        # Values assigned in the body can make the loop's own condition vary on the next
        # iteration: iterate the uniformity analysis to a fixed point (problems reported once).
        while True:
            before = set(self.varying)
            varies = divergent or (cond is not None and self._varies(cond))
            saved = len(self.problems)
            result = self.block(body, Scope(parent=scope.parent, symbols=dict(scope.symbols)),
                                path, varies)
            if self.varying == before:
                return result
            del self.problems[saved:]

    def _returns(self, s: ir.Stmt) -> bool:
        return any(isinstance(x, ir.Return) for x in walk((s,)))


def _bytes(d: ir.ArrayDecl) -> int:
    """The bytes of array ``d`` (bool elements take one each)."""
    return d.size * max(d.elem.bits // 8, 1)


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
                    for j, role in enumerate(v if v and isinstance(v[0], ir.WarpRole) else ()):
                        block(role.body, f"{here}.{name}[{j}].body", level + 1)
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
    top = Scope()
    for i, p in enumerate(kernel.params):
        path = f"params[{i}]"
        match p:
            case ir.ArrayParam(name=name, elem=elem, space=space, readonly=ro):
                if space is not MemSpace.GLOBAL:
                    c.report(path, f"array parameter {name!r} must be in global memory, "
                             f"not {space}")
                c._define(top, name, Array(elem, space, ro, p), path)
            case ir.ScalarParam(name=name, elem=elem):
                c._define(top, name, Scalar(elem, False, "parameter"), path)
    c.block(kernel.body, Scope(parent=top), "body", False)
    return c.problems


def ensure_valid(kernel: ir.Kernel) -> None:
    """Raises ``IRError`` listing every problem when ``kernel`` is not well-formed."""
    problems = check(kernel)
    if problems:
        raise IRError(kernel.name, [str(p) for p in problems])


__all__ = ["MAX_ARRAY_SIZE", "MAX_EXPR_DEPTH", "MAX_NESTING", "PACKED_COUNTS", "Problem", "check",
           "ensure_valid"]
