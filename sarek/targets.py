"""The entry points that reach past the compiler core: ``simulate`` runs a kernel in the warp
simulator (``sim``), lowered first for a target of ``backends.registry`` when one is named, and
``emit`` prints a kernel for a target. ``sarek`` re-exports both and ``Launch.simulate`` runs
through ``simulate``; the recognizer, the rewrite and the IR modules do not import ``sim`` or
``backends`` themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from sarek import ir
from sarek.errors import user_facing

if TYPE_CHECKING:
    from sim.fragments import Model

# ``sim`` and ``backends`` are imported when called, not here: importing any module of theirs
# first runs ``sarek/__init__``, which imports this module while theirs is still half made.


@user_facing
def simulate(kernel: ir.Kernel, args: Any, grid: Any = (1, 1, 1), block: Any = (1, 1, 1),
             *, target: str | None = None, arith: str | None = None,
             **options: Any) -> dict[str, np.ndarray]:
    """Runs a kernel in the warp simulator; ``sim.simulate`` documents the arguments. With
    ``target`` (a name of ``backends.registry``) the kernel is first lowered for that target
    and the lowered kernel, which is what the target's printer prints, runs lane by lane under
    the target's arithmetic model unless ``arith`` names another; ``target=None`` runs the
    kernel as given (neutral fragments whole, ``sequential`` arithmetic by default)."""
    import sim
    from backends import registry

    if target is not None:
        chosen = registry.target(target)
        kernel = registry.lower(kernel, target)
        arith = arith or chosen.arith
    model = cast("Model", arith or "sequential")  # sim.simulate refuses unknown models
    return sim.simulate(kernel, args, grid, block, arith=model, **options)


@user_facing
def emit(kernel: ir.Kernel, target: str) -> str:
    """``kernel`` (original or rewritten) validated, lowered for ``target`` and printed as
    that target's source text; ``backends.registry.names()`` lists the targets."""
    from backends import registry

    return registry.emit(kernel, target)
