"""Facts about a staged k-loop, read off its index expressions: how the stores to shared memory
spread over the thread coordinates, the block shape for which they fill their arrays exactly
once, and which invocation staged the element a load from shared memory reads."""

from __future__ import annotations

from sarek import ir
from sarek.ir import Builtin, ElemType
from sarek.ir_format import format_expr
from sarek.matrix_pattern.normalize import raw_poly
from sarek.matrix_pattern.vocabulary import STEP_OFFSET, Refusal

_THREAD_KEYS = {f"@thread_idx.{axis}": axis for axis in "xyz"}
"""The atoms of the thread coordinates in a ``raw_poly``, and their axes."""


def thread_strides(index: ir.Expr) -> dict[str, int]:
    """The staging store's index as ``sum(stride * thread_idx.axis)``: the stride per axis."""
    out: dict[str, int] = {}
    for mono, coef in raw_poly(index).terms.items():
        if len(mono) != 1 or mono[0] not in _THREAD_KEYS or coef <= 0:
            raise Refusal(f"the staging store's index {format_expr(index)} is not a sum of "
                          "thread_idx coordinates times constants")
        out[_THREAD_KEYS[mono[0]]] = coef
    return out


def staging_block(staged: dict[str, ir.Store],
                  shared: dict[str, ir.ArrayDecl]) -> tuple[int, int, int]:
    """The block shape for which the staging stores fill their arrays exactly once."""
    if not staged:
        raise Refusal("the staged k-loop stores nothing to shared memory")
    shapes = set()
    for name, store in staged.items():
        strides = sorted(thread_strides(store.index).items(), key=lambda kv: kv[1])
        extents = {"x": 1, "y": 1, "z": 1}
        size = shared[name].size
        for i, (axis, stride) in enumerate(strides):
            next_stride = strides[i + 1][1] if i + 1 < len(strides) else size
            if (i == 0 and stride != 1) or next_stride % stride:
                raise Refusal(f"the staging store {name}[{format_expr(store.index)}] does not "
                              f"fill the {size} elements of {name!r} once per block")
            extents[axis] = next_stride // stride
        shapes.add((extents["x"], extents["y"], extents["z"]))
    if len(shapes) > 1:
        raise Refusal("the staging stores assume different block shapes")
    return shapes.pop()


def staging_thread(index: ir.Expr, strides: dict[str, int], block: tuple[int, int, int],
                   tile: int) -> dict[str, ir.Expr]:
    """For a load from a staged array at ``index``: which invocation staged the element, as an
    expression for each of its thread coordinates (the store's ``strides`` per axis)."""
    extent = dict(zip("xyz", block, strict=True))
    axis_of_stride = {stride: axis for axis, stride in strides.items()}
    out: dict[str, ir.Expr] = {}
    problem = Refusal(f"the load from shared memory at {format_expr(index)} does not read "
                      "one staged element per thread coordinate")
    for mono, coef in raw_poly(index).terms.items():
        if len(mono) != 1 or coef not in axis_of_stride:
            raise problem
        axis = axis_of_stride[coef]
        if axis in out:
            raise problem
        if mono[0] == STEP_OFFSET and tile == extent[axis]:
            out[axis] = ir.Var(name=STEP_OFFSET, type=ElemType.I32)
        elif mono[0] in _THREAD_KEYS and extent[_THREAD_KEYS[mono[0]]] == extent[axis]:
            out[axis] = ir.BuiltinValue(which=Builtin(mono[0][1:]))
        else:
            raise problem
    if set(out) != set(strides):
        raise problem
    return out
