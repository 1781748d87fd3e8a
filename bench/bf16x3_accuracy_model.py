"""What Bf16x3's error on the wide-range inputs is made of, computed with the simulator's model
of the H200's tensor core, beside what the device recorded.

``bench/error_tables.py --seed 1`` to ``3`` (on the H200, ``--sizes 256 --sweep-k 16 256 1024``)
records Bf16x3's and cuBLAS SGEMM's normwise errors. This script draws the same inputs (the
same seeds, shapes and order) and computes, for each wide-range and random GEMM of those runs,
the normwise error against float64 of:

* ``rounded``: the exact sum rounded once to f32, the floor of any f32 result;
* ``printed``: the rewrite as CUDA prints it (``specs/matrix-pattern-rewrite.md`` 6.3). Each
  16-deep sub-step's products go through ``sim.tensor_core.mul_add``, which truncates: at depths
  above ``CHUNK`` the six products, smallest first, into a fresh accumulator, added to the
  running sum with rounding to nearest, running sums of ``CHUNK`` added into a total; at depths
  up to ``CHUNK`` hi·hi exactly (``exact_top``) and no totals. It must give the device's
  recorded error (the device's output equals the simulator's), which checks the model;
* ``six products, chunks of 768``: the kernel before hi·hi was taken exactly and the chunks
  were 128 deep;
* ``six products``: the six products at every depth, chunks of ``CHUNK``;
* ``eight products``: that with the dropped mid·lo and lo·mid first;
* ``exact hi·hi``: ``exact_top`` at every depth, chunks of ``CHUNK``;
* ``six products, compensated``: the six products with each running sum and the total carried
  as an f32 pair (TwoSum: the rounding error of every addition kept and added back at the
  end).

The device's figures are read from the recorded runs
(``bench/results/error_tables_exact_seed{1,2,3}_h200.json``). Prints a table and writes
bench/results/bf16x3_accuracy_model.json. Runs on the CPU (a few minutes); exits 1 where the
model of the printed kernel does not give the device's error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from bench.error_tables import CUBLAS, KINDS, errors, inputs
from sarek.matrix_scheme import CHUNK
from sim.tensor_core import mul_add

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BF16 = ml_dtypes.bfloat16
STEP = 16  # a sub-step's depth (fragments 16x16x16)
SMALL = (("mid", "mid"), ("lo", "hi"), ("hi", "lo"), ("mid", "hi"), ("hi", "mid"))
"""The products before hi·hi, in the printed order (A term, B term)."""
EXTRA = (("mid", "lo"), ("lo", "mid"))
SHAPES = ((256, 256, 256), (256, 256, 16), (256, 256, 256), (256, 256, 1024))
"""The shapes of ``bench.error_tables --sizes 256 --sweep-k 16 256 1024``, in its order."""
BF16X3 = "Bf16x3_operands"
Terms = dict[str, np.ndarray]


def split(x: np.ndarray) -> Terms:
    """The three bf16 terms of each f32 (each the rounding to nearest of what is left)."""
    hi = x.astype(BF16)
    rest = x - hi.astype(np.float32)
    mid = rest.astype(BF16)
    return {"hi": hi, "mid": mid, "lo": (rest - mid.astype(np.float32)).astype(BF16)}


def fragments(x: np.ndarray) -> np.ndarray:
    """An (R, C) array as its 16x16 blocks, block row major: (R/16 * C/16, 16, 16)."""
    r, c = x.shape
    return x.reshape(r // STEP, STEP, c // STEP, STEP).transpose(0, 2, 1, 3).reshape(
        -1, STEP, STEP)


class SubSteps:
    """Each sub-step's products as ``mul_add`` takes them: every (A block, B block) pair."""

    def __init__(self, a: np.ndarray, b: np.ndarray) -> None:
        self.a, self.b = split(a), split(b)
        self.rows, self.cols = a.shape[0] // STEP, b.shape[1] // STEP

    def product(self, p: str, q: str, k0: int, addend: np.ndarray) -> np.ndarray:
        fa = fragments(self.a[p][:, k0:k0 + STEP])
        fb = fragments(self.b[q][k0:k0 + STEP, :])
        return mul_add(np.repeat(fa, self.cols, axis=0), np.tile(fb, (self.rows, 1, 1)), addend)

    def chain(self, pairs: tuple[tuple[str, str], ...], k0: int, addend: np.ndarray
              ) -> np.ndarray:
        for p, q in pairs:
            addend = self.product(p, q, k0, addend)
        return addend


def _f32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32)


class Sum:
    """A running f32 sum, plain (each addition rounded) or compensated (TwoSum: each
    addition's rounding error carried in a second f32 and added back by ``value``)."""

    def __init__(self, shape: tuple[int, ...], compensated: bool) -> None:
        self.s = np.zeros(shape, np.float32)
        self.c = np.zeros(shape, np.float32)
        self.compensated = compensated

    def add(self, x: np.ndarray) -> None:
        s = _f32(self.s + x)
        if self.compensated:
            v = _f32(s - self.s)
            error = _f32(_f32(self.s - _f32(s - v)) + _f32(x - v))
            self.c = _f32(self.c + error)
        self.s = s

    def value(self) -> np.ndarray:
        return _f32(self.s + self.c) if self.compensated else self.s


Method = Callable[[SubSteps, int, np.ndarray], list[np.ndarray]]
"""A sub-step's sums (each added to the running sum in turn) from its products."""


def six_products(s: SubSteps, k0: int, zero: np.ndarray) -> list[np.ndarray]:
    return [s.chain((*SMALL, ("hi", "hi")), k0, zero)]


def eight_products(s: SubSteps, k0: int, zero: np.ndarray) -> list[np.ndarray]:
    return [s.chain((*EXTRA, *SMALL, ("hi", "hi")), k0, zero)]


def exact_top(s: SubSteps, k0: int, zero: np.ndarray) -> list[np.ndarray]:
    """hi·hi from zero (``top``), then onto ``-top``: exactly what the first truncated (the
    aligned sum less a value it holds); the five smaller products onto that, and the two
    sums added with rounding to nearest (``sarek.rewrite.multiply``'s ``fresh_sum``)."""
    top = s.product("hi", "hi", k0, zero)
    rest = s.chain(SMALL, k0, s.product("hi", "hi", k0, -top))
    return [_f32(top + rest)]


Choice = tuple[Method, bool, int | None]
"""A sub-step's method, whether the sums are compensated, the chunk (None: one chunk)."""


def as_printed(k: int) -> Choice:
    """What the rewrite prints for a reduction of depth ``k`` (``sarek.matrix_scheme``)."""
    return (exact_top, False, None) if k <= CHUNK else (six_products, False, CHUNK)


METHODS: dict[str, Callable[[int], Choice]] = {
    "printed": as_printed,
    "six products, chunks of 768": lambda k: (six_products, False, 768),
    "six products": lambda k: (six_products, False, CHUNK),
    "eight products": lambda k: (eight_products, False, CHUNK),
    "exact hi·hi": lambda k: (exact_top, False, CHUNK),
    "six products, compensated": lambda k: (six_products, True, CHUNK)}


def model(a: np.ndarray, b: np.ndarray, method: Method, compensated: bool,
          chunk: int | None = CHUNK) -> np.ndarray:
    """``c = a @ b`` as ``method`` sums each sub-step, in running sums of ``chunk`` (None: the
    whole depth) added into a total."""
    chunk = chunk or a.shape[1]
    s = SubSteps(a, b)
    shape = (s.rows * s.cols, STEP, STEP)
    zero = np.zeros(shape, np.float32)
    total = Sum(shape, compensated)
    for c0 in range(0, a.shape[1], chunk):
        running = Sum(shape, compensated)
        for k0 in range(c0, min(c0 + chunk, a.shape[1]), STEP):
            for part in method(s, k0, zero):
                running.add(part)
        total.add(running.value())
    out = total.value().reshape(s.rows, s.cols, STEP, STEP).transpose(0, 2, 1, 3)
    return out.reshape(s.rows * STEP, s.cols * STEP)


def recorded(seed: int) -> dict[tuple[int, int, int, str, str, int], float]:
    """The device's normwise errors of ``error_tables_seed{seed}_h200.json``, by shape, input
    class, method and the index of the shape among equal ones (256³ is drawn twice: the
    table's cube, then the sweep's)."""
    rows = json.loads((RESULTS / f"error_tables_exact_seed{seed}_h200.json").read_text())["rows"]
    out: dict[tuple[int, int, int, str, str, int], float] = {}
    counts: dict[tuple[int, int, int, str, str], int] = {}
    for r in rows:
        key = (r["m"], r["n"], r["k"], r["inputs"], r["method"])
        index = counts[key] = counts.get(key, -1) + 1
        out[(*key, index)] = r["normwise"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--out", default="bf16x3_accuracy_model.json")
    opts = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    header = ("seed", "shape", "inputs", "rounded", "cuBLAS", "device", *METHODS)
    print("  ".join(f"{h:>12}" for h in header))
    for seed in opts.seeds:
        device = recorded(seed)
        rng = np.random.default_rng(seed)
        seen: dict[tuple[int, int, int, str], int] = {}
        for m, n, k in SHAPES:
            for kind in KINDS:
                a, b = inputs(kind, m, n, k, rng)
                index = seen[(m, n, k, kind)] = seen.get((m, n, k, kind), -1) + 1
                if kind == "cancelling":
                    continue
                c64 = a.astype(np.float64) @ b.astype(np.float64)
                row: dict[str, Any] = {
                    "seed": seed, "m": m, "n": n, "k": k, "inputs": kind,
                    "rounded": errors(_f32(c64), a, b, c64)["normwise"],
                    "cublas": device[(m, n, k, kind, CUBLAS, index)],
                    "device": device[(m, n, k, kind, BF16X3, index)]}
                for name, choice in METHODS.items():
                    row[name] = errors(model(a, b, *choice(k)), a, b, c64)["normwise"]
                row["model_equals_device"] = bool(f"{row['printed']:.6e}" ==
                                                  f"{row['device']:.6e}")
                rows.append(row)
                print("  ".join(f"{v:>12}" for v in (seed, f"{m}x{n}x{k}", kind)) + "  "
                      + "  ".join(f"{row[h]:12.3e}" for h in ("rounded", "cublas", "device",
                                                               *METHODS)), flush=True)
    (RESULTS / opts.out).write_text(json.dumps(
        {"model": "sim.tensor_core (H200)", "chunk": CHUNK, "rows": rows}, indent=2) + "\n")
    print(f"wrote bench/results/{opts.out}")
    return 0 if all(r["model_equals_device"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
