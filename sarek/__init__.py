"""sarek: recognize GEMM nests in GPU kernels, rewrite them onto matrix units, simulate them.

Everything a user needs is here: the DSL (``kernel``, the element types, ``Global``,
``thread_idx`` ...), the IR (``sarek.ir``), the simulator (``simulate``), the rewrite
(``matrix_pattern``, ``matrix_mapping``, ``matrix_scheme``, ``matrix_rewrite``,
``rewrite_launch``), tile layouts and patterns (``layout``, ``tile``) and the errors.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from sarek import ir, layout, tile
from sarek.dsl import (
    ArrayType,
    Global,
    KernelFunction,
    ReadOnly,
    ScalarType,
    barrier,
    bf16,
    block_dim,
    block_idx,
    boolean,
    ceil,
    cos,
    exp,
    f16,
    f32,
    f64,
    floor,
    fma,
    grid_dim,
    i8,
    i16,
    i32,
    i64,
    kernel,
    local,
    log,
    numpy_dtype,
    shared,
    sin,
    sqrt,
    subgroup_id,
    subgroup_lane,
    subgroup_size,
    tanh,
    thread_idx,
    u8,
    u16,
    u32,
    u64,
    view,
)
from sarek.errors import (
    BarrierDivergence,
    DslError,
    IRError,
    LaunchError,
    LimitError,
    MbarrierMisuse,
    OutOfBounds,
    RegisterRace,
    SarekError,
    SharedRace,
    SimError,
    SubgroupDivergence,
)
from sarek.launch import Launch
from sarek.layout import S, TileLayout, laneid, warpid
from sarek.targets import emit, simulate

if TYPE_CHECKING:
    from sarek import coopmat, matrix_mapping, matrix_pattern, matrix_rewrite, matrix_scheme
    from sarek.gemm import NotAGemm
    from sarek.matrix_rewrite import RewriteError, rewrite_launch

# The recognizer, the rewrite and the device gate load on first use: a program that launches a
# kernel whose compiled launch is cached (``sarek.dispatch``) never needs them, and they are a
# third of the package's import.
_LAZY_MODULES = frozenset({"coopmat", "matrix_mapping", "matrix_pattern", "matrix_rewrite",
                           "matrix_scheme"})
_LAZY_NAMES = {"NotAGemm": "sarek.gemm", "RewriteError": "sarek.matrix_rewrite",
               "rewrite_launch": "sarek.matrix_rewrite"}


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        return import_module(f"sarek.{name}")
    if name in _LAZY_NAMES:
        return getattr(import_module(_LAZY_NAMES[name]), name)
    raise AttributeError(f"module 'sarek' has no attribute {name!r}")


__all__ = [
    "ArrayType", "BarrierDivergence", "DslError", "Global", "IRError", "KernelFunction", "Launch",
    "LaunchError", "LimitError", "MbarrierMisuse", "NotAGemm", "OutOfBounds", "ReadOnly",
    "RegisterRace", "RewriteError", "S",
    "SarekError", "ScalarType", "SharedRace", "SimError", "SubgroupDivergence", "TileLayout",
    "barrier", "bf16", "block_dim", "block_idx", "boolean", "ceil", "coopmat", "cos", "emit",
    "exp", "f16", "f32", "f64", "floor", "fma", "grid_dim", "i8", "i16", "i32", "i64", "ir",
    "kernel", "laneid", "layout", "local", "log", "matrix_mapping", "matrix_pattern",
    "matrix_rewrite", "matrix_scheme", "numpy_dtype", "rewrite_launch", "shared", "simulate",
    "sin", "sqrt", "subgroup_id", "subgroup_lane", "subgroup_size", "tanh", "thread_idx", "tile",
    "u8", "u16", "u32", "u64", "view", "warpid",
]
