"""One-warp probe kernels for a tile pattern: they expose what ``ldmatrix``/``stmatrix`` moved,
so that the simulator and a device can be compared bit for bit (the conformance check of
``specs/tile-patterns.md``)."""

from __future__ import annotations

from sarek import ir, ir_check, tile
from sarek.ir import BinOp, Builtin, ElemType, MemSpace
from sarek.ir_build import binary, const, var
from sarek.layout import TileLayout

SENTINEL = 4294966519  # the bit pattern of int32(-777): register slots no pattern writes

U32, I32 = ElemType.U32, ElemType.I32


def _load(array: str, index: ir.Expr) -> ir.Load:
    return ir.Load(array=array, index=index, type=U32)


def _copy(dst: str, src: str, words: int, step: ir.Expr | None = None,
          dst_base: ir.Expr | None = None, src_base: ir.Expr | None = None) -> ir.For:
    """``for i in range(lane, words, 32): dst[i] = src[i]`` (cooperative), or with a base and a
    step of 1 per invocation when ``step`` is 1."""
    i = var("i")
    d = i if dst_base is None else binary(BinOp.ADD, dst_base, i)
    s = i if src_base is None else binary(BinOp.ADD, src_base, i)
    start = var("lane") if step is None else const(0)
    return ir.For(var="i", start=start, stop=const(words), step=step or const(32),
                  body=(ir.Store(array=dst, index=d, value=_load(src, s)),))


def probe_kernel(opcode: str, shared: TileLayout, shared_words: int, registers: TileLayout,
                 register_words: int) -> ir.Kernel:
    """A kernel for one warp (block 32) that runs ``opcode`` between a shared tensor
    ``shared`` over ``shared_words`` words and a register tensor ``registers`` over
    ``register_words`` words per lane.

    ldmatrix: parameters ``(src, out)``: shared memory is filled from ``src``, registers start
    at ``SENTINEL``, and ``out[lane * register_words + slot]`` receives every lane's registers.
    stmatrix: parameters ``(regs, init, out)``: registers come from ``regs`` (same layout as
    ``out`` above), shared memory starts as ``init`` and ends in ``out``.
    """
    op = tile.parse_op(opcode)
    lane_base = binary(BinOp.MUL, var("lane"), const(register_words))
    body: list[ir.Stmt] = [
        ir.Let(name="lane", type=I32, value=ir.BuiltinValue(which=Builtin.THREAD_IDX_X)),
        ir.ArrayDecl(name="sm", elem=U32, size=shared_words, space=MemSpace.SHARED, align=16),
        ir.ArrayDecl(name="raw", elem=U32, size=register_words, space=MemSpace.LOCAL),
        ir.TensorView(name="rows", storage="sm", elem=U32, layout=shared),
        ir.TensorView(name="regs", storage="raw", elem=U32, layout=registers),
    ]
    if op.kind == "ldmatrix":
        params: tuple[ir.Param, ...] = (ir.ArrayParam(name="src", elem=U32, readonly=True),
                                        ir.ArrayParam(name="out", elem=U32))
        body += [
            _copy("sm", "src", shared_words),
            ir.Barrier(),
            ir.For(var="i", start=const(0), stop=const(register_words), step=const(1), body=(
                ir.Store(array="raw", index=var("i"),
                         value=ir.Const(value=SENTINEL, type=U32)),)),
            ir.TileApply(op=op, dst="regs", src="rows"),
            _copy("out", "raw", register_words, step=const(1), dst_base=lane_base),
        ]
    else:
        params = (ir.ArrayParam(name="regs_in", elem=U32, readonly=True),
                  ir.ArrayParam(name="init", elem=U32, readonly=True),
                  ir.ArrayParam(name="out", elem=U32))
        body += [
            _copy("sm", "init", shared_words),
            _copy("raw", "regs_in", register_words, step=const(1), src_base=lane_base),
            ir.Barrier(),
            ir.TileApply(op=op, dst="rows", src="regs"),
            ir.Barrier(),
            _copy("out", "sm", shared_words),
        ]
    name = f"probe_{op.kind}_x{op.count}{'_trans' if op.trans else ''}"
    kernel = ir.Kernel(name=name, params=params, body=tuple(body))
    ir_check.ensure_valid(kernel)
    return kernel
