"""The kernel checker's rules for staged copies, the launch shape a kernel declares, ldmatrix and
stmatrix moves, tile patterns and fragment operations."""

from __future__ import annotations

from sarek import ir, tile
from sarek.ir import ElemType, MemSpace
from sarek.ir_check_expr import MAX_BLOCK, Array, ExpressionRules, Frag, Scope, View, number_text
from sarek.stage_copy import SPLITS


class FragmentRules(ExpressionRules):
    """Rules for the statements that move tiles and fragments."""

    def _stage_copy(self, s: ir.StageCopy, scope: Scope, path: str, divergent: bool) -> None:
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
        elem = self._copy_arrays(scope, path, "a staged copy", s.dst, s.src, s.part)
        if elem is not None:
            self._same(s.fill.type, elem, "the staged copy's fill value", path)
        if s.cols > s.dst_pitch:
            self.report(path, f"a staged tile of {s.cols} columns does not fit rows of "
                        f"{s.dst_pitch} elements")

    def _copy_arrays(self, scope: Scope, path: str, what: str, dst: str, src: str,
                     part: ir.CopyPart | None = None) -> ElemType | None:
        """A copy's arrays: from a global array into a shared one of the same element type,
        or where the copy lands a part of each element, of that part's type (the source's
        type, or None after a report)."""
        to, frm = scope.lookup(dst), scope.lookup(src)
        if not isinstance(to, Array) or to.space is not MemSpace.SHARED:
            self.report(path, f"{what} writes a shared array; {dst!r} is not one")
        elif not isinstance(frm, Array) or frm.space is not MemSpace.GLOBAL:
            self.report(path, f"{what} reads a global array; {src!r} is not one")
        elif frm.elem is ElemType.BOOL or frm.elem.bits > 32:
            self.report(path, f"{what} moves 8-, 16- or 32-bit elements, not {frm.elem}")
        elif part is None and to.elem != frm.elem:
            self.report(path, f"{what} moves elements unchanged; {src!r} holds {frm.elem} "
                        f"and {dst!r} holds {to.elem}")
        elif part is not None and self._part_refused(part, frm.elem, to.elem, dst, path):
            pass
        else:
            return frm.elem
        return None

    def _part_refused(self, part: ir.CopyPart, frm: ElemType, to: ElemType, dst: str,
                      path: str) -> bool:
        """Reports (and says) why a staged copy cannot land ``part`` of ``frm`` elements
        in an array of ``to``."""
        parts = SPLITS.get((frm, part.into))
        if part.into != to:
            self.report(path, f"a staged copy lands parts of type {part.into} in {dst!r}, "
                        f"which holds {to}")
        elif parts is None:
            self.report(path, "a staged copy splits " + ", ".join(
                f"{a} into {b}" for a, b in SPLITS) + f"; not {frm} into {part.into}")
        elif part.index >= parts:
            self.report(path, f"{frm} splits into {parts} part{'s' if parts > 1 else ''} of "
                        f"{part.into}; there is no part {part.index}")
        else:
            return False
        return True

    def _launch_shape(self, kernel: ir.Kernel) -> None:
        """The block shape and subgroup a kernel records must be launchable."""
        if kernel.block is not None:
            size = kernel.block[0] * kernel.block[1] * kernel.block[2]
            if min(kernel.block) < 1 or size > MAX_BLOCK:
                self.report("block", f"the kernel's block {kernel.block} is not a block of 1 "
                            f"to {MAX_BLOCK} invocations")
        if kernel.subgroup is not None and kernel.subgroup > MAX_BLOCK:
            self.report("subgroup", f"subgroups of {number_text(kernel.subgroup)} lanes are larger "
                        f"than any block ({MAX_BLOCK} invocations)")

    def _row_move(self, s: ir.Ldmatrix | ir.Stmatrix, scope: Scope, path: str,
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
            if not isinstance(sym, Array) or sym.space is not MemSpace.LOCAL:
                self.report(path, f"{registers!r} must be a local array holding each lane's "
                            "registers")
            elif sym.elem.bits > 32 or sym.elem is ElemType.BOOL:
                self.report(path, f"{what} registers are 32-bit words of {registers!r}, which "
                            f"holds {sym.elem}")
            elif isinstance(sym.decl, ir.ArrayDecl) and s.slots and (
                    min(s.slots) < 0 or max(s.slots) >= sym.decl.size * sym.elem.bits // 32):
                self.report(path, f"{what} register slots {s.slots} lie outside {registers!r}")
        sym = scope.lookup(shared)
        if not isinstance(sym, Array) or sym.space is not MemSpace.SHARED:
            self.report(path, f"{what} moves rows of a shared array; {shared!r} is not one")
        elif sym.elem.bits > 32 or sym.elem is ElemType.BOOL:
            self.report(path, f"{what} moves 16-byte rows of 8-, 16- or 32-bit elements, not "
                        f"of {shared!r} ({sym.elem})")
        elif isinstance(sym.decl, ir.ArrayDecl) and sym.decl.align % 16:
            self.report(path, f"{what} rows are 16-byte aligned; {shared!r} is aligned to "
                        f"{sym.decl.align} bytes")

    def _registers(self, scope: Scope, path: str, name: str, elem: ElemType, end: int
                   ) -> None:
        """A lane-explicit instruction's register operand: a local array of ``elem`` with at
        least ``end`` elements."""
        sym = scope.lookup(name)
        if not isinstance(sym, Array) or sym.space is not MemSpace.LOCAL:
            self.report(path, f"{name!r} must be a local array holding each lane's registers")
        elif sym.elem is not elem:
            self.report(path, f"register array {name!r} holds {sym.elem}; the instruction "
                        f"takes {elem}")
        elif isinstance(sym.decl, ir.ArrayDecl) and sym.decl.size < end:
            self.report(path, f"register array {name!r} has {sym.decl.size} elements; the "
                        f"instruction uses {end}")

    def _tile_apply(self, s: ir.TileApply, scope: Scope, path: str) -> None:
        operands = []
        for name in (s.dst, s.src):
            match scope.lookup(name):
                case View(view=view, storage=storage):
                    tensor: ir.ArrayDecl | ir.TensorView = view
                case Array(decl=ir.ArrayDecl() as decl):
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

    def _frag(self, name: str, scope: Scope, path: str) -> ir.FragDecl | None:
        sym = scope.lookup(name)
        if not isinstance(sym, Frag):
            self.report(path, f"{name!r} is not a fragment")
            return None
        return sym.decl

    def _mul_add(self, scope: Scope, path: str, *names: str) -> None:
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

    def _add(self, scope: Scope, path: str, *names: str) -> None:
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
