"""Write kernels as decorated Python functions.

``@sarek.kernel`` reads the function's source with ``ast`` (it never runs it) and builds a
``sarek.ir.Kernel``. The language is a small, statically typed subset of Python; its rules are
in ``specs/ir.md`` ("The DSL"). In brief:

* parameters are annotated ``Global[T]`` / ``ReadOnly[T]`` (arrays) or ``T`` (scalars);
* integer literals are i32 and float literals f32 unless the other operand fixes a type;
* arithmetic follows C: integers narrower than 32 bits are promoted to i32, a float operand
  makes the operation float, ``//`` and ``%`` truncate toward zero like C (not like Python);
* f16 and bf16 values are widened to f32 when loaded and rounded when stored or assigned;
* a variable's type is fixed by its first assignment, later assignments convert to it.

The package's modules, one job each: ``vocabulary`` (what a user names), ``typing_rules``
(promotion, literals, folding), ``expressions`` and ``statements`` (the translation),
``kernel`` (the decorator: parse, translate, validate).
"""

from sarek.dsl.kernel import KernelFunction, kernel
from sarek.dsl.vocabulary import (
    ArrayType,
    Global,
    OutsideKernel,
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

__all__ = [
    "ArrayType", "Global", "KernelFunction", "OutsideKernel", "ReadOnly", "ScalarType",
    "barrier", "bf16", "block_dim", "block_idx", "boolean", "ceil", "cos", "exp", "f16", "f32",
    "f64", "floor", "fma", "grid_dim", "i8", "i16", "i32", "i64", "kernel", "local", "log",
    "numpy_dtype", "shared", "sin", "sqrt", "subgroup_id", "subgroup_lane", "subgroup_size",
    "tanh", "thread_idx", "u8", "u16", "u32", "u64", "view",
]
