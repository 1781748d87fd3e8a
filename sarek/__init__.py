"""sarek: recognize GEMM nests in GPU kernels, rewrite them onto matrix units, simulate them.

Everything a user needs is here: the DSL (``kernel``, the element types, ``Global``,
``thread_idx`` ...), the IR (``sarek.ir``), the simulator (``simulate``) and the errors.
"""

from sarek import ir, layout, tile
from sarek import coopmat, matrix_mapping, matrix_pattern, matrix_scheme  # noqa: F401
from sarek.matrix_pattern import NotAGemm  # noqa: F401
from sarek.dsl import (
    ArrayType, Global, KernelFunction, ReadOnly, ScalarType, barrier, bf16, block_dim,
    block_idx, boolean, ceil, cos, exp, f16, f32, f64, floor, fma, grid_dim, i8, i16, i32, i64,
    kernel, local, log, numpy_dtype, shared, sin, sqrt, subgroup_id, subgroup_lane,
    subgroup_size, tanh, thread_idx, u8, u16, u32, u64, view,
)
from sarek.layout import S, TileLayout, laneid, warpid
from sarek.errors import (
    BarrierDivergence, DslError, IRError, LaunchError, OutOfBounds, SarekError, SharedRace,
    SimError,
)

__all__ = [
    "ArrayType", "BarrierDivergence", "DslError", "Global", "IRError", "KernelFunction",
    "LaunchError", "OutOfBounds", "ReadOnly", "SarekError", "ScalarType", "SharedRace",
    "SimError", "barrier", "bf16", "block_dim", "block_idx", "boolean", "ceil", "cos", "exp",
    "f16", "f32", "f64", "floor", "fma", "grid_dim", "i8", "i16", "i32", "i64", "ir", "kernel",
    "local", "log", "numpy_dtype", "shared", "simulate", "sin", "sqrt", "subgroup_id",
    "subgroup_lane", "subgroup_size", "tanh", "thread_idx", "u8", "u16", "u32", "u64",
    "view", "S", "TileLayout", "laneid", "warpid", "layout", "tile",
]


def simulate(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Runs a kernel in the warp simulator; see ``sim.simulate``."""
    from sim import simulate as run

    return run(*args, **kwargs)
