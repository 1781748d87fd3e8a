"""The warp simulator: runs a ``sarek.ir.Kernel`` over every invocation of a launch at once,
bit-exactly, and reports out-of-bounds accesses, shared-memory races and divergent barriers
(``specs/simulator.md``)."""

from sim.simulate import simulate

__all__ = ["simulate"]
