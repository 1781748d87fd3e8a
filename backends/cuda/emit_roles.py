"""The CUDA printer's rules for warp roles (``ir.RoleStmt``): one branch per role on the
warpgroup's index, ``setmaxnreg`` and ``bar.sync`` as inline PTX, and the register cap at
entry that ``setmaxnreg`` needs (``__launch_bounds__(threads, 1)``)."""

from __future__ import annotations

import math

from backends.cstyle import Printer
from sarek import ir
from sarek.ir_walk import walk

LINEAR = "((int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)))"
WARPGROUP = 128


def launch_bounds(kernel: ir.Kernel) -> str:
    """``__launch_bounds__(threads, 1)`` for a kernel with warp roles (its block's threads),
    else nothing: ptxas applies setmaxnreg only under a register cap at entry."""
    if kernel.block is None or not any(isinstance(s, ir.WarpRoles) for s in walk(kernel.body)):
        return ""
    return f"__launch_bounds__({math.prod(kernel.block)}, 1) "


def roles(p: Printer, s: ir.RoleStmt) -> list[str]:
    """One statement of the ``roles`` family as CUDA (a ``WarpRoles`` printed through ``p``)."""
    match s:
        case ir.WarpRoles(roles=parts):
            p.emit("{")
            p.depth += 1
            p.emit(f"const int sk_warpgroup = {LINEAR} / {WARPGROUP};")
            for j, role in enumerate(parts):
                cond = f"sk_warpgroup >= {role.first} && sk_warpgroup < {role.first + role.count}"
                p.nested(f"{'if' if j == 0 else 'else if'} ({cond})", role.body)
            p.depth -= 1
            p.emit("}")
            return []
        case ir.SetMaxNReg(registers=registers, increase=increase):
            way = "inc" if increase else "dec"
            return [f'asm volatile("setmaxnreg.{way}.sync.aligned.u32 {registers};\\n" ::: '
                    '"memory");']
        case ir.NamedBarrier(id=barrier, threads=threads):
            return [f'asm volatile("bar.sync {barrier}, {threads};" ::: "memory");']
    raise AssertionError(s)
