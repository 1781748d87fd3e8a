"""``sarek conformance --target T``: every bundled GEMM example, original and rewritten onto
matrix fragments, run for target ``T`` and compared bit for bit.

For a registered target (``cuda``) each case runs on the device (``Target.run``) and is compared
with the simulator running the same kernel lowered for that target under its arithmetic model.
For ``sim-T`` the simulator alone is checked: each rewrite lowered for ``T`` against the neutral
rewrite (both under ``T``'s arithmetic model), each original lowered for ``T`` against the
example's NumPy ``reference()``.

Every case also carries canaries: the output array gets guard elements past its end, and the
outputs the launch does not cover are filled with the same pattern; on every side that ran the
kernel, each element the kernel must not write has to come back unchanged, bit for bit.

``--schedule NAME`` adds that schedule to the matrix wherever an example's rewrite takes it
(``matrix``); a target's ``Staging.offered`` schedules are in it without asking.

Exit status: 0 when every case matches and no canary changed, 1 otherwise, 2 for a bad request
(an unknown target, a report directory that does not exist, a schedule name that does not
parse or that no example's rewrite takes), 3 when the target has no device here (the line
printed says why).
"""

from backends.conformance.cases import (
    ALIGNED_TILES,
    EXTRA_SIZES,
    LARGE_TILES,
    RAGGED,
    SCHEDULE_SIZES,
    SIZES,
    Case,
    Refusals,
    Rewrite,
    Size,
    configurations,
    left_out,
    matrix,
    refusal,
    rewritten,
    unaccepted,
)
from backends.conformance.checks import CANARY, GUARD, Outcome, Violation, canary, check, simulated
from backends.conformance.cli import (
    EXIT_FAILED,
    EXIT_NO_DEVICE,
    EXIT_OK,
    EXIT_USAGE,
    SIM_PREFIX,
    add_arguments,
    main,
)
from backends.conformance.report import DEVICE_NAMES, device_name, failure, report, summary

__all__ = [
    "ALIGNED_TILES", "CANARY", "DEVICE_NAMES", "EXIT_FAILED", "EXIT_NO_DEVICE", "EXIT_OK",
    "EXIT_USAGE", "EXTRA_SIZES", "GUARD", "LARGE_TILES", "RAGGED", "SCHEDULE_SIZES", "SIM_PREFIX",
    "SIZES", "Case", "Outcome", "Refusals", "Rewrite", "Size", "Violation", "add_arguments",
    "canary", "check", "configurations", "device_name", "failure", "left_out", "main", "matrix",
    "refusal", "report", "rewritten", "simulated", "summary", "unaccepted",
]
