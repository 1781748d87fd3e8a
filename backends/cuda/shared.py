"""Where a CUDA kernel's shared arrays live.

Up to ``STATIC_BYTES`` (48 KiB, the most a kernel may declare statically) each shared array is
a ``__shared__`` declaration. Beyond, every shared array is carved, in declaration order and at
its own alignment, out of one dynamic allocation (``extern __shared__``), which the launch
asks for by size after raising the kernel's limit (``cuFuncSetAttribute``), up to
``MAX_BYTES``, the most an sm_90 block may opt in to. An array in another's storage
(``ir.ArrayDecl.shares``, which CUDA's policy asks for only past ``MAX_BYTES``) takes no bytes
of its own: the printer points it at its storage's. CUDA's lowering records the placement
(``place``: each shared array's ``dynamic_offset``), which the printer prints.
"""

from __future__ import annotations

from backends.cstyle import EmitError
from sarek import dtypes, ir
from sarek.ir_walk import replace_statements, shared_arrays

STATIC_BYTES = 48 * 1024
MAX_BYTES = 227 * 1024
DYNAMIC = "sk_dynamic"  # the name of the one dynamic allocation


def offsets(kernel: ir.Kernel) -> dict[str, int] | None:
    """The byte offset of each shared array in the dynamic allocation, or None when the
    kernel's shared arrays fit in static declarations; ``EmitError`` past ``MAX_BYTES``."""
    out: dict[str, int] = {}
    end = 0
    for decl in shared_arrays(kernel):
        if decl.shares is not None:  # in its storage's bytes: placed with it
            continue
        align = max(decl.align, 16)
        start = -(-end // align) * align
        out[decl.name] = start
        end = start + decl.size * dtypes.numpy_dtype(decl.elem).itemsize
    if end > MAX_BYTES:
        raise EmitError(f"kernel {kernel.name!r} needs {end} bytes of shared memory; a CUDA "
                        f"block has at most {MAX_BYTES}: choose a schedule with smaller tiles, "
                        "a shallower step or fewer stages (left out, the target's policy "
                        "chooses one that fits)")
    return out if end > STATIC_BYTES else None


def place(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` with every shared array's ``dynamic_offset`` recorded where ``offsets``
    places them (the kernel unchanged when its shared arrays fit in static declarations);
    ``EmitError`` past ``MAX_BYTES``."""
    layout = offsets(kernel)
    if layout is None:
        return kernel

    def replace(s: ir.Stmt) -> list[ir.Stmt] | None:
        if isinstance(s, ir.ArrayDecl) and s.space is ir.MemSpace.SHARED and \
                s.shares is None:
            return [s.model_copy(update={"dynamic_offset": layout[s.name]})]
        return None

    return kernel.model_copy(update={"body": replace_statements(kernel.body, replace)})


def dynamic_bytes(kernel: ir.Kernel) -> int:
    """Bytes of dynamic shared memory a launch of ``kernel`` asks for (0: none): where the
    lowering placed its shared arrays (``place``), or, for a kernel not lowered, where it
    would."""
    decls = [d for d in shared_arrays(kernel) if d.shares is None]
    placed = {d.name: d.dynamic_offset for d in decls if d.dynamic_offset is not None}
    layout = placed or offsets(kernel)
    if not layout:
        return 0
    last = max(decls, key=lambda d: layout[d.name])
    return layout[last.name] + last.size * dtypes.numpy_dtype(last.elem).itemsize
