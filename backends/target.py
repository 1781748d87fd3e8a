"""What a backend gives the rest of the project: the ``Target`` plug-in interface.

Each target module builds its ``Target``; ``backends.registry`` lists them by name and loads
each on first use. Target modules import this module, never the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sarek import ir, ir_check
from sarek.coopmat import DeviceSupport
from sarek.matrix_scheme import Lowering
from sarek.staging import Staging

Runner = Callable[[ir.Kernel, Sequence[Any] | Mapping[str, Any], tuple[int, int, int],
                   tuple[int, int, int]], dict[str, np.ndarray]]



@dataclass(frozen=True)
class Target:
    """One backend, as the rest of the project sees it."""

    name: str
    description: str
    lower: Callable[[ir.Kernel], ir.Kernel]
    print_lowered: Callable[[ir.Kernel], str]
    support: Callable[[], DeviceSupport]
    subgroups: tuple[int, ...]
    fragments: tuple[int, ...]
    lowerings: tuple[Lowering, ...]
    arith: str  # the simulator's default arithmetic model for float fragment products
    staging: Staging
    run: Runner | None = None
    device_reason: Callable[[], str | None] = lambda: "no device runner for this target"
    run_refusal: Callable[[ir.Kernel, tuple[int, int, int]], str | None] = (
        lambda kernel, block: None)
    """Why the device would refuse to run ``kernel`` over blocks of ``block`` (None: no reason
    known): what the gate cannot see before a rewrite is built, such as a schedule's shared
    memory past the device's limit."""
    unselected: Mapping[Lowering, str] = field(default_factory=dict)
    """Lowerings the target prints but does not pick on its own, each with why: where
    ``select`` chooses one of them, the kernel runs as written unless the lowering is asked
    for by name (``lowering=``)."""

    def emit(self, kernel: ir.Kernel) -> str:
        """``kernel`` validated, lowered for this target and printed."""
        ir_check.ensure_valid(kernel)
        return self.print_lowered(self.lower(kernel))

    def refuses(self, lowering: Lowering, subgroup: int, frag: int) -> str | None:
        """Why this target does not print a rewrite under ``lowering`` at ``subgroup`` and
        ``frag``, or None when it does."""
        if subgroup not in self.subgroups:
            return (f"{self.name} runs subgroups of {', '.join(map(str, self.subgroups))} "
                    f"lanes, not {subgroup}")
        if frag not in self.fragments:
            return (f"{self.name} multiplies fragments of "
                    f"{', '.join(map(str, self.fragments))}, not {frag}")
        if lowering not in self.lowerings:
            return f"{self.name} does not print the {lowering} lowering"
        return None
