"""The conformance report: the device's name, the JSON report, the summary table and the line
naming each failure."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.table import Table

from backends.conformance.checks import Outcome
from backends.target import Target
from sarek.schedule import Schedule


def _cuda_device() -> str:
    from backends.cuda.run import device_arch, device_name

    return f"{device_name()} ({device_arch()})"


def _opencl_device(platform: str | None) -> Callable[[], str]:
    def name() -> str:
        from backends.opencl.run import device_label

        return device_label(platform)

    return name


def _vulkan_device() -> str:
    from backends.spirv.device import device

    d = device()
    low, high = d.subgroup_sizes
    return f"{d.name} (Vulkan, subgroups {low}" + (f" to {high})" if high != low else ")")


DEVICE_NAMES: dict[str, Callable[[], str]] = {
    "cuda": _cuda_device, "opencl": _opencl_device(None), "opencl-nv": _opencl_device("NVIDIA"),
    "vulkan": _vulkan_device,
}


def device_name(target: Target, device: bool) -> str:
    """The device the cases ran on, as a person reads it."""
    if not device:
        return f"simulator ({target.arith} arithmetic model)"
    named = DEVICE_NAMES.get(target.name)
    return named() if named is not None else target.description


def report(name: str, device: str, arith: str, quick: bool, outcomes: list[Outcome],
           schedules: tuple[Schedule, ...] = (), skipped: Sequence[dict[str, Any]] = ()
           ) -> dict[str, Any]:
    """The JSON report: the device, the schedules ``--schedule`` added and the rewrites each
    was left out of with the reason (``left_out``), every case with its verdicts and canary
    violations, and the totals."""
    totals = {"cases": len(outcomes), "passed": sum(o.ok for o in outcomes),
              "mismatches": sum(o.mismatches for o in outcomes),
              "canary_violations": sum(o.canary_violations for o in outcomes),
              "errors": sum(o.error is not None for o in outcomes)}
    cases = [{"example": o.case.example.stem, "kernel": o.kernel,
              "lowering": o.case.lowering.value if o.case.lowering else None,
              "subgroup": o.case.subgroup, "frag": o.case.frag,
              "schedule": o.case.schedule.name if o.case.schedule else None,
              "size": [o.case.size.m, o.case.size.n, o.case.size.k],
              "grid": list(o.case.size.grid) if o.case.size.grid else None,
              "purpose": o.case.size.purpose,
              "compared": o.compared, "arrays": dict(o.arrays),
              "canary_violations": [{"side": v.side, "array": v.array, "count": v.count,
                                     "first": list(v.first)} for v in o.violations],
              "error": o.error, "ok": o.ok, "seconds": round(o.seconds, 4)}
             for o in outcomes]
    return {"target": name, "device": device, "arith": arith, "quick": quick,
            "schedules": [s.name for s in schedules], "left_out": list(skipped),
            "all_bit_exact": totals["passed"] == totals["cases"], "totals": totals,
            "cases": cases}


def summary(outcomes: list[Outcome]) -> Table:
    """One row per example and kernel (original, or lowering, subgroup and fragment), its
    sizes added up."""
    groups: dict[tuple[str, str, str, str, str], list[Outcome]] = {}
    for o in outcomes:
        c = o.case
        key = (c.example.stem, c.lowering.value if c.lowering else "original",
               str(c.subgroup or ""), str(c.frag or ""), c.schedule.name if c.schedule else "")
        groups.setdefault(key, []).append(o)
    table = Table()
    for column in ("example", "kernel", "sg", "frag", "schedule"):
        table.add_column(column)
    for column in ("cases", "passed", "mismatches", "canaries", "errors"):
        table.add_column(column, justify="right")
    for key, rows in groups.items():
        passed = sum(o.ok for o in rows)
        table.add_row(*key, str(len(rows)), str(passed), str(sum(o.mismatches for o in rows)),
                      str(sum(o.canary_violations for o in rows)),
                      str(sum(o.error is not None for o in rows)),
                      style=None if passed == len(rows) else "bold red")
    return table


def failure(o: Outcome) -> str:
    what = f"{o.case.example.stem} {o.case.variant} {o.case.size.label}:"
    if o.error is not None:
        return f"{what} {o.error}"
    parts = [f"{name} {v}" for name, v in o.arrays.items() if v != "bit-identical"]
    parts += [f"{v.side} wrote {v.count} element(s) of {v.array} it must not (first "
              f"{list(v.first)})" for v in o.violations]
    return f"{what} {'; '.join(parts)}"
