"""``schedule="autotune"``: the fastest schedule for a launch, measured on the caller's shapes.

For a recognized GEMM, ``choose`` compiles the launch under every schedule the target offers
for its lowering (the seed's, and the staging policy's ``large``, ``offered`` and ``small``
ones the rewrite accepts), runs each on copies of the caller's arrays, checks that every one
gives the same bits (every schedule must: a difference is reported, never chosen around), and
keeps the fastest. The choice is recorded on disk (``sarek.cache``, kind ``autotune``) per
kernel, lowering, shape bucket (the region's rows, columns and depth, each rounded up to a
power of two) and device, like Triton's ``@autotune`` with a key, so that the next launch of a
shape in the bucket, in this process or another, takes it without measuring.

On ``cuda`` each candidate is timed with CUDA events (median of 5 launches after a warm-up);
on ``sim`` and ``sim-T`` by the simulator's wall time, which picks the schedule the simulator
runs fastest (what that target can measure).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from backends import registry
from backends.pipeline import Compiled, compile_launch
from backends.target import Target
from sarek.cache import Cache, key
from sarek.errors import LaunchError, SarekError
from sarek.launch import Launch
from sarek.matrix_scheme import Lowering
from sarek.schedule import SEED, Schedule

TUNED = Cache("autotune")
"""Schedule names by ``choose``'s key."""


def candidates(target: Target, lowering: Lowering) -> list[Schedule]:
    """The seed's schedule and every schedule ``target``'s policy names for ``lowering``."""
    policy = target.staging
    named = [s for name, s in policy.declared + policy.small if name == lowering.value]
    return list(dict.fromkeys([SEED, *named]))


def bucket(done: Compiled) -> tuple[int, int, int]:
    """The shape bucket of a rewritten launch: its region's rows, columns and depth, each
    rounded up to a power of two."""
    assert done.rewritten is not None
    reg = done.rewritten.region

    def up(x: int) -> int:
        return 1 << max(0, int(x) - 1).bit_length()

    return up(reg.me), up(reg.ne), up(reg.d)


def choose(target: str, launch: Launch, values: list[Any], fingerprint: str,
           **options: Any) -> Schedule | None:
    """The schedule to launch ``launch`` with on ``target`` (``cuda``, ``sim`` or ``sim-T``),
    ``values`` being the caller's arguments in parameter order; None when the kernel is not
    rewritten (nothing to choose)."""
    if target != "cuda" and not target.startswith("sim"):
        raise LaunchError(f"schedule='autotune' measures on cuda and in the simulator (sim, "
                          f"sim-T), not on {target}: choose a schedule for it (t64k16, ...)")
    base = "cuda" if target == "sim" else target.removeprefix("sim-")
    chosen_target = registry.target(base)
    first = compile_launch(chosen_target, launch, **{**options, "schedule": SEED})
    if first.rewritten is None:
        return None
    lowering = first.rewritten.lowering
    device = _device_label(target)
    k = key("autotune", fingerprint, launch.kernel.model_dump_json(), lowering.value,
            repr(bucket(first)), device)
    recorded = TUNED.get(k)
    if recorded is not None:
        return Schedule.parse(recorded.decode())
    measured: list[tuple[float, Schedule, dict[str, np.ndarray]]] = []
    for schedule in candidates(chosen_target, lowering):
        try:
            done = first if schedule == SEED else compile_launch(
                chosen_target, launch, **{**options, "lowering": lowering, "schedule": schedule})
        except SarekError:
            continue  # a schedule the rewrite does not take for these operands
        seconds, outputs = _measure(target, done, values)
        measured.append((seconds, schedule, outputs))
    reference = measured[0][2]
    for _, schedule, outputs in measured[1:]:
        for name, want in reference.items():
            if not np.array_equal(outputs[name].view(np.uint8), want.view(np.uint8)):
                raise SarekError(f"autotune: {name} under {schedule.name} differs from the "
                                 f"seed schedule's on {device}; every schedule must give the "
                                 "same bits (please report this)")
    best = min(measured, key=lambda m: m[0])[1]
    TUNED.put(k, best.name.encode())
    return best


def _device_label(target: str) -> str:
    if target == "cuda":
        from backends.cuda.run import device_arch, device_name

        return f"{device_name()} {device_arch()}"
    return f"simulator ({target})"


def _measure(target: str, done: Compiled, values: list[Any]
             ) -> tuple[float, dict[str, np.ndarray]]:
    """Seconds of one launch of ``done`` on ``values`` and the arrays it leaves, run on copies
    (the caller's arrays are not written)."""
    if target == "cuda":
        from backends.cuda.launch import measure

        return measure(done, values)
    base = "cuda" if target == "sim" else target.removeprefix("sim-")
    names = [p.name for p in done.launch.kernel.params[:len(values)]]
    start = time.perf_counter()
    out = done.steps.with_args(dict(zip(names, values, strict=True))).simulate(target=base)
    return time.perf_counter() - start, out
