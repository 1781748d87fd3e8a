"""The long fuzz campaign: hostile inputs through every public entry point of sarek.

Runs the input kinds of the fuzz tests' generator (``fuzz_gen``, beside this file: mutated IR
JSON, random DSL sources, random launches and argument lists, hostile command lines, mutated
GEMM kernels rewritten and compared with canaries, tile layouts and their transformations) in
worker processes until ``--inputs`` inputs have run or ``--budget`` seconds have passed,
whichever comes first, and records the counts in ``bench/results/fuzz_campaign.json``:
inputs, crashes (an exception that is not the project's own), hangs (an input still running
after ``--timeout`` seconds: its worker is killed and replaced), wrong results and
out-of-region writes, and how many rewritten kernels were compared
bit for bit. Every input is reproducible from its kind and seed::

    .venv/bin/python tests/fuzz_campaign.py --budget 2400 --workers 2
    .venv/bin/python tests/fuzz_campaign.py --replay gemm 7000123

It is a check, not a test pytest collects: the long run of ``tests/test_fuzz.py``, which runs a
few inputs of each kind.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import platform
import random
import resource
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import fuzz_gen  # beside this file, on the path of a script run from it
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

MIX = {"json": 28, "dsl": 22, "launch": 20, "cli": 10, "gemm": 15, "layout": 5}
"""The share of each input kind (percent)."""

WORKER_MEMORY = 10 << 30
"""Address space a worker may use: an input that tries to allocate more gets a MemoryError
(a crash) instead of taking the machine down."""


def _worker(conn: Connection) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
    with fuzz_gen.quiet():
        while True:
            task = conn.recv()
            if task is None:
                return
            kind, seed = task
            try:
                outcome = fuzz_gen.CASES[kind](random.Random(seed))
                result = asdict(outcome)
            except BaseException as e:  # the harness itself failed: report it as a crash
                result = {"case": kind, "kind": "crash", "stage": "harness",
                          "detail": fuzz_gen.describe(e), "compared": 0, "stages": {}}
            conn.send(result)


class _Worker:
    def __init__(self) -> None:
        self.conn, child = mp.Pipe()
        self.process = mp.Process(target=_worker, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.task: tuple[str, int] | None = None
        self.started = 0.0

    def give(self, task: tuple[str, int]) -> None:
        self.task, self.started = task, time.monotonic()
        self.conn.send(task)

    def kill(self) -> None:
        self.process.kill()
        self.process.join()


def campaign(inputs: int, budget: float, workers: int, timeout: float, seed: int
             ) -> dict[str, Any]:
    """Runs the campaign and returns its record."""
    fuzz_gen.seeds()  # built once, before the workers fork
    fuzz_gen.cli_files()
    kinds = [k for k, share in MIX.items() for _ in range(share)]
    plan = random.Random(seed)
    start = time.monotonic()
    pool = [_Worker() for _ in range(workers)]
    stats: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    failures: dict[tuple[str, str, str], dict[str, Any]] = {}
    issued = done = 0
    last_report = start

    def record(kind: str, task_seed: int, result: dict[str, Any], seconds: float) -> None:
        nonlocal done
        done += 1
        s = stats[kind]
        s["inputs"] += 1
        s["compared"] += result["compared"]
        s[result["kind"]] += 1
        s["seconds_x1000"] += int(seconds * 1000)
        for stage, how in result["stages"].items():
            s[f"stage {stage} {how}"] += 1
        if result["kind"] != "ok":
            key = (result["kind"], result["stage"], result["detail"].split(" [")[-1][:100]
                   if result["kind"] == "crash" else result["detail"][:80])
            entry = failures.setdefault(key, {"kind": result["kind"], "case": result["case"],
                                              "seed": task_seed, "stage": result["stage"],
                                              "detail": result["detail"][:600], "count": 0})
            entry["count"] += 1

    while True:
        now = time.monotonic()
        running = [w for w in pool if w.task is not None]
        if not running and (issued >= inputs or now - start > budget):
            break
        for w in pool:
            if w.task is None and issued < inputs and now - start <= budget:
                kind = plan.choice(kinds)
                w.give((kind, seed * 10_000_000 + issued))
                issued += 1
        for i, w in enumerate(pool):
            if w.task is None:
                continue
            kind, task_seed = w.task
            if w.conn.poll(0.002):
                try:
                    result = w.conn.recv()
                except EOFError:  # the worker died (a signal, the kernel's OOM killer)
                    result = {"case": kind, "kind": "crash", "stage": "worker",
                              "detail": f"the worker died (exit {w.process.exitcode})",
                              "compared": 0, "stages": {}}
                    w.kill()
                    pool[i] = _Worker()
                record(kind, task_seed, result, time.monotonic() - w.started)
                w.task = None
            elif time.monotonic() - w.started > timeout:
                record(kind, task_seed, {"case": kind, "kind": "hang", "stage": "timeout",
                                         "detail": f"still running after {timeout:g} s",
                                         "compared": 0, "stages": {}}, timeout)
                w.kill()
                pool[i] = _Worker()
        if time.monotonic() - last_report > 60:
            last_report = time.monotonic()
            bad = sum(s[k] for s in stats.values() for k in ("crash", "hang", "wrong",
                                                              "outside"))
            print(f"  {done} inputs in {last_report - start:.0f} s, {bad} failed", flush=True)
    for w in pool:
        if w.process.is_alive():
            w.conn.send(None)
            w.process.join(5)
            w.kill()
    elapsed = time.monotonic() - start
    totals = collections.Counter[str]()
    for s in stats.values():
        totals.update(s)
    limits = fuzz_gen.LIMITS
    return {
        "benchmark": "fuzz_campaign",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python "
                   f"{platform.python_version()}",
        "command": " ".join(sys.argv),
        "seed": seed, "workers": workers, "budget_s": budget, "timeout_s": timeout,
        "elapsed_s": round(elapsed, 1), "target_inputs": inputs,
        "complete": done >= inputs,
        "simulator_limits": {"invocations": limits.invocations, "memory": limits.memory,
                             "loop_trips": limits.loop_trips, "trips": limits.trips},
        "inputs": totals["inputs"], "crashes": totals["crash"], "hangs": totals["hang"],
        "wrong_results": totals["wrong"], "out_of_region_writes": totals["outside"],
        "rewritten_kernels_compared": totals["compared"],
        "by_kind": {k: {"inputs": s["inputs"], "crashes": s["crash"], "hangs": s["hang"],
                        "wrong_results": s["wrong"], "out_of_region_writes": s["outside"],
                        "rewritten_kernels_compared": s["compared"],
                        "mean_ms": round(s["seconds_x1000"] / max(1, s["inputs"]), 1),
                        "stages": {k2[6:]: v for k2, v in sorted(s.items())
                                   if k2.startswith("stage ")}}
                    for k, s in sorted(stats.items())},
        "failures": sorted(failures.values(), key=lambda f: -f["count"])[:60],
    }


def by_kind(record: dict[str, Any]) -> list[tuple[object, ...]]:
    """The table's rows: one per input kind, then the totals."""
    rows: list[tuple[object, ...]] = [
        (k, v["inputs"], v["crashes"], v["hangs"], v["wrong_results"],
         v["out_of_region_writes"], v["rewritten_kernels_compared"], f"{v['mean_ms']:.1f}")
        for k, v in record["by_kind"].items()]
    rows.append(("all", record["inputs"], record["crashes"], record["hangs"],
                 record["wrong_results"], record["out_of_region_writes"],
                 record["rewritten_kernels_compared"], None))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inputs", type=int, default=150_000, help="stop after this many inputs")
    p.add_argument("--budget", type=float, default=2400.0, help="stop after this many seconds")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before an input hangs")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=RESULTS / "fuzz_campaign.json")
    p.add_argument("--replay", nargs=2, metavar=("KIND", "SEED"),
                   help="run one input again and print its outcome")
    args = p.parse_args()
    if args.replay:
        kind, seed = args.replay[0], int(args.replay[1])
        with fuzz_gen.quiet():
            print(fuzz_gen.CASES[kind](random.Random(seed)))
        return 0
    mp.set_start_method("fork")
    record = campaign(args.inputs, args.budget, args.workers, args.timeout, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    console = Console(width=max(Console().width, 120))
    table = Table()
    for i, column in enumerate(("kind", "inputs", "crashes", "hangs", "wrong", "outside",
                                "compared", "mean ms")):
        table.add_column(column, justify="left" if i == 0 else "right")
    for row in by_kind(record):
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    console.print(table)
    for f in record["failures"][:20]:
        console.print(f"{f['count']:6d} {f['kind']} {f['case']} seed {f['seed']} {f['stage']}: "
                      f"{f['detail'][:300]}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"wrote {args.out}", markup=False, highlight=False)
    bad = record["crashes"] + record["hangs"] + record["wrong_results"] + \
        record["out_of_region_writes"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
