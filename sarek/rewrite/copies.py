"""How the rewritten body stages A's and B's tiles from global into shared memory: converted to
the lowering's terms or byte planes element by element, packed four k at a time, prefetched
into registers, or copied raw ``stages - 1`` steps ahead and converted at the step that
multiplies them."""

from __future__ import annotations

from sarek import ir, packed_store
from sarek.ir import BinOp, FragLayout
from sarek.ir_build import add, binary, const, mul, var
from sarek.matrix_pattern import Access
from sarek.rewrite.layout import Layout
from sarek.rewrite.parts import (
    I32,
    PACK,
    U32,
    cast,
    conjunction,
    pad,
)
from sarek.stage_copy import part


class Copies(Layout):
    """The staging of the operand tiles, on the body's geometry."""

    def convert(self, x: ir.Expr) -> list[tuple[str, ir.Expr]]:
        """The staged terms of one operand value ``x``: (term, value) pairs, each the part of
        ``x`` a staged copy would land (``sarek.stage_copy.part``: the value itself in the
        lowering's type, its byte planes, or the bf16 terms hi, mid and lo)."""
        s = self.scheme
        return [(term, part(x, index, s.operand)) for index, term in enumerate(s.terms)]

    def operands(self) -> list[tuple[str, Access, int, int]]:
        """(name, access, rows, columns) of the A and B tiles one step stages."""
        g, step = self.gemm, self.step
        return [("a", g.a, self.tile, step), ("b", g.b, step, self.tile_n)]

    def fetch(self, name: str, access: Access, cols: int, k0: ir.Expr) -> list[ir.Stmt]:
        """``sk_x``: element ``sk_e`` of the A or B tile of the step starting at ``k0``, read
        from global memory inside the region and zero outside."""
        if name == "a":
            row = add(var("sk_row0"), binary(BinOp.DIV, var("sk_e"), const(cols)))
            kk = binary(BinOp.REM, var("sk_e"), const(cols))
            inside = conjunction(binary(BinOp.LT, var("sk_x1"), var("sk_me")),
                                 binary(BinOp.LT, var("sk_k"), var("sk_d")))
            addr = self.address(access, var("sk_x1"), const(0), var("sk_k"))
        else:
            kk = binary(BinOp.DIV, var("sk_e"), const(cols))
            row = add(var("sk_col0"), binary(BinOp.REM, var("sk_e"), const(cols)))
            inside = conjunction(binary(BinOp.LT, var("sk_x1"), var("sk_ne")),
                                 binary(BinOp.LT, var("sk_k"), var("sk_d")))
            addr = self.address(access, const(0), var("sk_x1"), var("sk_k"))
        load = ir.Load(array=access.array, index=addr, type=access.elem)
        outside = pad(name, access.elem)
        return [
            ir.Let(name="sk_x1", type=I32, value=row),  # the output row (A) or column (B)
            ir.Let(name="sk_k", type=I32, value=add(k0, kk)),  # relative to k_start
            ir.Let(name="sk_x", type=access.elem,
                   value=ir.Select(cond=inside, a=load, b=outside, type=access.elem)),
        ]

    def store(self, name: str, access: Access, cols: int, base: ir.Expr | None = None
              ) -> list[ir.Stmt]:
        """``sk_x``, element ``sk_e`` of the A or B tile, converted into its staged terms (of
        the buffer starting at ``base``, when the step's tiles are one of several)."""
        stride = self.a_stride if name == "a" else self.b_stride
        major = binary(BinOp.DIV, var("sk_e"), const(cols))
        minor = binary(BinOp.REM, var("sk_e"), const(cols))
        if name == "b" and self.b_layout is FragLayout.COL:
            major, minor = minor, major  # column c of B: its k are consecutive
        at = add(mul(major, const(stride)), minor)
        if base is not None:
            at = add(base, at)
        return [ir.Store(array=self.staged(name, term), index=at, value=staged)
                for term, staged in self.convert(var("sk_x", access.elem))]

    def group(self, name: str) -> list[ir.Stmt]:
        """``sk_g``, ``sk_gk``: where group ``sk_e`` of four consecutive k lies in the A or B
        tile: its row (A) or column (B) in the tile and its first k in the step. A's groups go
        along k, then rows; B's take 8 columns, then k, then the next 8 columns, so that a
        warp's loads of one k cover whole 32-byte sectors and its packed stores consecutive
        words."""
        e, quads = var("sk_e"), const(self.step // PACK)
        within: ir.Expr
        if name == "a":
            within, quad = binary(BinOp.DIV, e, quads), binary(BinOp.REM, e, quads)
        else:
            eight = const(8)
            within = add(mul(binary(BinOp.DIV, e, mul(eight, quads)), eight),
                         binary(BinOp.REM, e, eight))
            quad = binary(BinOp.REM, binary(BinOp.DIV, e, eight), quads)
        return [ir.Let(name="sk_g", type=I32, value=within),
                ir.Let(name="sk_gk", type=I32, value=mul(quad, const(PACK)))]

    def fetch_group(self, name: str, access: Access, k0: ir.Expr) -> list[ir.Stmt]:
        """``sk_v0`` .. ``sk_v3``: the four elements of group (``sk_g``, ``sk_gk``) of the A or
        B tile of the step starting at ``k0``, read inside the region and zero outside."""
        origin, extent = ("sk_row0", "sk_me") if name == "a" else ("sk_col0", "sk_ne")
        out: list[ir.Stmt] = [
            ir.Let(name="sk_x1", type=I32, value=add(var(origin), var("sk_g"))),
            ir.Let(name="sk_k", type=I32, value=add(k0, var("sk_gk")))]
        for j in range(PACK):
            k = add(var("sk_k"), const(j))
            inside = conjunction(binary(BinOp.LT, var("sk_x1"), var(extent)),
                                 binary(BinOp.LT, k, var("sk_d")))
            row, col = (var("sk_x1"), const(0)) if name == "a" else (const(0), var("sk_x1"))
            load = ir.Load(array=access.array, index=self.address(access, row, col, k),
                           type=access.elem)
            out.append(ir.Let(name=f"sk_v{j}", type=access.elem, value=ir.Select(
                cond=inside, a=load, b=pad(name, access.elem), type=access.elem)))
        return out

    def store_group(self, name: str, access: Access) -> list[ir.Stmt]:
        """The byte planes of ``sk_v0`` .. ``sk_v3``, each plane's four bytes (k order, least
        significant first) as one packed store at group (``sk_g``, ``sk_gk``)."""
        stride = self.a_stride if name == "a" else self.b_stride
        at = add(mul(var("sk_g"), const(stride)), var("sk_gk"))
        out: list[ir.Stmt] = []
        for p, term in enumerate(self.scheme.terms):
            bytes_ = []
            for j in range(PACK):
                u = cast(var(f"sk_v{j}", access.elem), U32)
                bytes_.append(binary(BinOp.AND, binary(BinOp.SHR, u, const(8 * p, U32))
                                     if p else u, const(255, U32)))
            out.append(ir.StorePacked(array=self.staged(name, term), index=at,
                                      value=packed_store.word(bytes_, 8)))
        return out

    def stage(self) -> list[ir.Stmt]:
        """The A and B tiles of this step into shared memory, zero outside the region."""
        if self.packed:
            return [self.per_thread(rows * cols // PACK, [
                *self.group(name), *self.fetch_group(name, access, var("sk_k0")),
                *self.store_group(name, access)])
                for name, access, rows, cols in self.operands()]
        return [self.per_thread(rows * cols, [*self.fetch(name, access, cols, var("sk_k0")),
                                              *self.store(name, access, cols)])
                for name, access, rows, cols in self.operands()]

    def copy(self, name: str, access: Access, rows: int, cols: int, k0: ir.Expr,
             base: ir.Expr, term: int = 0) -> ir.StageCopy:
        """The staged copy of the A or B tile of the step starting at ``k0``: into the buffer
        at ``base`` of the staged array when the elements are staged as they are (of term
        ``term`` where the pre-pass split them, ``access`` that term's), else into the raw
        array ``sk_r{name}`` (rows of ``cols`` elements)."""
        def left(extent: str, start: ir.Expr) -> ir.Expr:  # rows or columns left in the region
            return binary(BinOp.SUB, var(extent), start)

        k = k0 if self.k_base is None else add(self.k_base, k0)
        if name == "a":
            origin = self.address(access, var("sk_row0"), const(0), k)
            strides = (access.row_stride, access.red_stride)
            limits = (left("sk_me", var("sk_row0")), left(self.k_stop, k0))
        elif self.b_layout is FragLayout.COL and not self.raw(name):
            # as it is, column-major: a tile row per column of B
            origin = self.address(access, const(0), var("sk_col0"), k)
            strides = (access.col_stride, access.red_stride)
            limits = (left("sk_ne", var("sk_col0")), left(self.k_stop, k0))
            rows, cols = cols, rows
        else:
            origin = self.address(access, const(0), var("sk_col0"), k)
            strides = (access.red_stride, access.col_stride)
            limits = (left(self.k_stop, k0), left("sk_ne", var("sk_col0")))
        fill = pad(name, access.elem, term)
        pitch = cols if self.raw(name) else self.a_stride if name == "a" else self.b_stride
        dst = f"sk_r{name}" if self.raw(name) else self.staged(name, self.scheme.terms[term])
        return ir.StageCopy(dst=dst,
                            dst_offset=base, dst_pitch=pitch,
                            src=access.array, src_offset=origin, src_row_stride=strides[0],
                            src_col_stride=strides[1], rows=rows, cols=cols,
                            row_limit=limits[0], col_limit=limits[1], fill=fill,
                            bulk=self.bulk)

    def stage_into(self, k0: ir.Expr, slot: ir.Expr) -> list[ir.Stmt]:
        """The A and B tiles of the step starting at ``k0`` into buffer ``slot`` (of the
        staged arrays, or of the raw ones), each by one staged copy (each term's by one of its
        own where the pre-pass split them); then the group of copies is closed."""
        out: list[ir.Stmt] = []
        split = self.gemm.split_terms
        for name, access, rows, cols in self.operands():
            size = rows * cols if self.raw(name) else self.buffer(name)
            sources = (access,) if split is None else split.a if name == "a" else split.b
            out += [self.copy(name, source, rows, cols, k0, mul(slot, const(size)), term)
                    for term, source in enumerate(sources)]
        return [*out, ir.StageCommit()]

    def convert_raw(self, slot: ir.Expr) -> list[ir.Stmt]:
        """The raw tiles of buffer ``slot`` converted into the staged terms (empty when no
        operand is staged raw)."""
        out: list[ir.Stmt] = []
        for name, access, rows, cols in self.operands():
            if self.raw(name):
                at = add(mul(slot, const(rows * cols)), var("sk_e"))
                out.append(self.per_thread(rows * cols, [
                    ir.Let(name="sk_x", type=access.elem,
                           value=ir.Load(array=f"sk_r{name}", index=at, type=access.elem)),
                    *self.store(name, access, cols)]))
        return out

    def prefetch(self, k0: ir.Expr) -> list[ir.Stmt]:
        """The A and B tiles of the step starting at ``k0`` into each invocation's registers
        (``sk_pa``, ``sk_pb``): issued before the current step's products, so that the loads
        overlap them."""
        if self.packed:
            return [self.per_thread(rows * cols // PACK, [
                *self.group(name), *self.fetch_group(name, access, k0),
                *(ir.Store(array=f"sk_p{name}", index=self.register(j),
                           value=var(f"sk_v{j}", access.elem)) for j in range(PACK))])
                for name, access, rows, cols in self.operands()]
        return [self.per_thread(rows * cols, [
            *self.fetch(name, access, cols, k0),
            ir.Store(array=f"sk_p{name}", index=var("sk_q"), value=var("sk_x", access.elem))])
            for name, access, rows, cols in self.operands()]

    def register(self, j: int) -> ir.Expr:
        """Where element ``j`` of this trip's group lies in the prefetch registers."""
        return add(mul(var("sk_q"), const(PACK)), const(j))

    def stage_prefetched(self) -> list[ir.Stmt]:
        """The prefetched registers into shared memory."""
        if self.packed:
            return [self.per_thread(rows * cols // PACK, [
                *self.group(name),
                *(ir.Let(name=f"sk_v{j}", type=access.elem, value=ir.Load(
                    array=f"sk_p{name}", index=self.register(j), type=access.elem))
                  for j in range(PACK)),
                *self.store_group(name, access)])
                for name, access, rows, cols in self.operands()]
        return [self.per_thread(rows * cols, [
            ir.Let(name="sk_x", type=access.elem,
                   value=ir.Load(array=f"sk_p{name}", index=var("sk_q"), type=access.elem)),
            *self.store(name, access, cols)])
            for name, access, rows, cols in self.operands()]
