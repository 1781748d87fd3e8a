"""The kernel checker's rules for bulk tensor copies and the mbarriers that complete them
(``ir.BulkStmt``)."""

from __future__ import annotations

from sarek import atoms, ir
from sarek.ir import ElemType, MemSpace
from sarek.ir_check_expr import Array, ExpressionRules, Scalar, Scope
from sarek.ir_walk import subexpressions


class BulkRules(ExpressionRules):
    """Rules for ``MbarrierInit``, ``MbarrierArrive``, ``MbarrierWait`` and ``BulkTensorCopy``."""

    def _bulk(self, s: ir.MbarrierInit | ir.MbarrierArrive | ir.MbarrierWait
              | ir.BulkTensorCopy, scope: Scope, path: str) -> None:
        values: list[tuple[str, ir.Expr]] = [("mbarrier index", s.index)]
        match s:
            case ir.MbarrierArrive(tx_bytes=tx):
                values.append(("expected bytes", tx))
            case ir.MbarrierWait(parity=parity):
                values.append(("phase parity", parity))
            case ir.BulkTensorCopy():
                values += [("destination offset", s.dst_offset), ("box row", s.row),
                           ("box column", s.col)]
                self._tensor(s, scope, path)
        for what, x in values:
            self.expr(x, scope, path)
            self._same(x.type, ElemType.I32, f"the {what}", path)
        sym = scope.lookup(s.barriers)
        if not isinstance(sym, Array) or sym.space is not MemSpace.SHARED or \
                sym.elem is not ElemType.U64:
            self.report(path, f"mbarriers live in a shared array of u64; {s.barriers!r} is not "
                        "one")

    def _tensor(self, s: ir.BulkTensorCopy, scope: Scope, path: str) -> None:
        """The copy's arrays, its tensor's expressions (of scalar parameters alone, which the
        launch evaluates) and its box (what a tensor map can describe)."""
        to, frm = scope.lookup(s.dst), scope.lookup(s.src)
        if not isinstance(to, Array) or to.space is not MemSpace.SHARED:
            self.report(path, f"a bulk tensor copy writes a shared array; {s.dst!r} is not one")
        elif not isinstance(frm, Array) or frm.space is not MemSpace.GLOBAL or \
                not isinstance(frm.decl, ir.ArrayParam):
            self.report(path, f"a bulk tensor copy reads an array parameter; {s.src!r} is not "
                        "one")
        elif to.elem is not frm.elem or frm.elem is ElemType.BOOL:
            self.report(path, f"a bulk tensor copy moves elements unchanged; {s.src!r} holds "
                        f"{frm.elem} and {s.dst!r} holds {to.elem}")
        else:
            size = frm.elem.bits // 8
            inner = s.cols * size
            if inner % atoms.TMA_ALIGN:
                self.report(path, f"a bulk tensor copy's box rows are whole multiples of "
                            f"{atoms.TMA_ALIGN} bytes, not {inner}")
            elif s.swizzle and inner != s.swizzle:
                self.report(path, f"a box under the {s.swizzle}-byte swizzle is {s.swizzle} "
                            f"bytes wide, not {inner}")
        for what, x in (("origin", s.origin), ("row stride", s.row_stride),
                        ("row extent", s.extent_rows), ("column extent", s.extent_cols)):
            self.expr(x, scope, path)
            self._same(x.type, ElemType.I32, f"the tensor's {what}", path)
            for e in subexpressions(x):
                if isinstance(e, ir.Var):
                    named = scope.lookup(e.name)
                    if not (isinstance(named, Scalar) and named.what == "parameter"):
                        self.report(path, f"the tensor's {what} is built at launch from scalar "
                                    f"parameters and constants; {e.name!r} is not a parameter")
                elif not isinstance(e, ir.Const | ir.Binary):
                    self.report(path, f"the tensor's {what} is built at launch from scalar "
                                f"parameters and constants, not a {e.kind}")
