"""The two registry entries of the SPIR-V backend.

* ``spirv``: the printer. It prints subgroups of 32 and 64 and fragments of 16 and 8 under
  every lowering (``sarek conformance --target sim-spirv`` runs them all in the simulator, the
  test suite validates every module with ``spirv-val``); it runs nothing itself.
* ``vulkan``: the same lowering and printer, run through Vulkan (``backends.spirv.run``). What
  it runs is the device gate's decision: a rewrite is refused, with the reason, unless the
  device reports the cooperative-matrix configuration it multiplies with
  (``sarek.coopmat.verdict``) and a subgroup size control range holding its subgroup. The
  support is the live device's list where a Vulkan device is here, else the list recorded on
  the H200 (``sarek.device_support.recorded_h200_vulkan``; NVIDIA runs subgroups of 32 only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from backends.spirv import lower as spirv_lower
from backends.spirv.emit import print_kernel
from backends.target import Target
from sarek import ir
from sarek.coopmat import DeviceSupport, verdict
from sarek.device_support import recorded_h200_vulkan
from sarek.errors import SarekError
from sarek.matrix_scheme import Lowering, config_of

H200_SUBGROUPS = (32, 32)
"""The subgroup sizes NVIDIA's Vulkan driver runs (minSubgroupSize, maxSubgroupSize)."""

ARITH = "h200"
"""The simulator's model of a float cooperative-matrix multiply-add on this target (the H200
probe, ``tests/device/test_vulkan_coopmat_h200.py``, found it bit-exact: ``specs/simulator.md``)."""


def _operand(lowering: Lowering) -> ir.ElemType:
    """An operand type ``lowering`` takes (the configuration depends on the lowering only)."""
    for elt in (ir.ElemType.F16, ir.ElemType.BF16, ir.ElemType.F32, ir.ElemType.I32,
                ir.ElemType.I8):
        try:
            config_of(lowering, elt)
        except SarekError:
            continue
        return elt
    raise AssertionError(f"{lowering} takes no operand type")


def gate_refusal(support: DeviceSupport, subgroups: tuple[int, int], lowering: Lowering,
                 subgroup: int, frag: int) -> str | None:
    """Why a device of ``support`` and subgroup range ``subgroups`` does not run a rewrite
    under ``lowering`` at ``subgroup`` and ``frag`` (None when it does)."""
    # the configuration first: on a device without cooperative matrices (lavapipe) that is
    # the reason, not its subgroup size
    operand = _operand(lowering)
    deep = spirv_lower.STAGING.byte_k if config_of(lowering, operand).a.bits == 8 else None
    answer = verdict(config_of(lowering, operand, frag, deep if frag == 16 else None), support)
    if not answer:
        return getattr(answer, "reason", str(answer))
    low, high = subgroups
    if not low <= subgroup <= high:
        return (f"{support.device} runs subgroups of {low}" + (f" to {high}" if high != low
                                                                else "")
                + f" lanes, not {subgroup}")
    return None


@dataclass(frozen=True)
class GatedTarget(Target):
    """A device target whose refusals include the device gate's verdict."""

    subgroup_range: Callable[[], tuple[int, int]] = lambda: H200_SUBGROUPS

    def refuses(self, lowering: Lowering, subgroup: int, frag: int) -> str | None:
        """The printer's refusal, else the gate's (see the module docstring)."""
        printed = super().refuses(lowering, subgroup, frag)
        if printed is not None:
            return printed
        return gate_refusal(self.support(), self.subgroup_range(), lowering, subgroup, frag)


def _live() -> bool:
    from backends.spirv.device import unavailable_reason

    return unavailable_reason() is None


def vulkan_support() -> DeviceSupport:
    """The live Vulkan device's cooperative-matrix list, else the recorded H200 list."""
    if _live():
        from backends.spirv.device import device

        return device().support
    return recorded_h200_vulkan()


def vulkan_subgroups() -> tuple[int, int]:
    """The live device's subgroup size range, else the H200's."""
    if _live():
        from backends.spirv.device import device

        return device().subgroup_sizes
    return H200_SUBGROUPS


def _run_refusal(kernel: ir.Kernel, block: tuple[int, int, int]) -> str | None:
    """What the live Vulkan device lacks to run ``kernel`` (None without a device: the run
    itself then says why nothing runs)."""
    if not _live():
        return None
    from backends.spirv.device import cannot_run, device

    d = device()
    try:
        lowered = spirv_lower.lower(kernel)
    except SarekError as e:  # what SPIR-V cannot express: the case would fail the same way
        return e.reason
    gaps = cannot_run(lowered, d, block)
    return f"{d.name} lacks " + ", ".join(gaps) if gaps else None


def _device_reason() -> str | None:
    from backends.spirv.device import unavailable_reason

    return unavailable_reason()


def spirv_target() -> Target:
    """The ``spirv`` registry entry: print and validate, every subgroup and fragment."""
    return Target(
        name="spirv",
        description="SPIR-V assembly for Vulkan compute: cooperative matrices "
                    "(SPV_KHR_cooperative_matrix), checked by spirv-val",
        lower=spirv_lower.lower,
        print_lowered=print_kernel,
        support=recorded_h200_vulkan,
        subgroups=spirv_lower.SUBGROUPS,
        fragments=spirv_lower.FRAGMENTS,
        lowerings=tuple(Lowering),
        arith=ARITH,
        staging=spirv_lower.STAGING,
        device_reason=lambda: "the spirv target prints SPIR-V; its device target is vulkan "
                              "(sarek conformance --target vulkan)",
    )


def vulkan_target() -> GatedTarget:
    """The ``vulkan`` registry entry: the SPIR-V run through Vulkan, gated by the device."""
    from backends.spirv.run import run

    return GatedTarget(
        name="vulkan",
        description="SPIR-V through Vulkan compute (the vulkan package): cooperative "
                    "matrices where the device reports them",
        lower=spirv_lower.lower,
        print_lowered=print_kernel,
        support=vulkan_support,
        subgroups=spirv_lower.SUBGROUPS,
        fragments=spirv_lower.FRAGMENTS,
        lowerings=tuple(Lowering),
        arith=ARITH,
        staging=spirv_lower.STAGING,
        run=run,
        device_reason=_device_reason,
        run_refusal=_run_refusal,
        subgroup_range=vulkan_subgroups,
    )
