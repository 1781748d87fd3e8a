"""Hopper's ``wgmma`` against the ``h200`` model: is its arithmetic that of ``mma.sync``?

The lowering onto ``wgmma`` (``backends/cuda/wgmma.py``) relies on the instruction being
simulated bit for bit. Each warpgroup (one block) runs ``wgmma.mma_async.sync.aligned.m64nNk16``
with f32 accumulators on f16 or bf16 operands, N = 16 and N = 256 (the widest, which the
128x256 warpgroup schedules print), in two forms: A and B read from shared memory
through matrix descriptors (``ss``: both K-major core matrices, ``sarek.atoms.GMMA_K_INTER``),
and A from registers in ``sarek.atoms.WGMMA.a``'s layout with B transposed in shared memory
(``rs``: ``GMMA_MN_INTER``), once (K = 16) or twice in one commit group (K = 32, the
accumulator chained from the first instruction to the second). Every output is compared bit
for bit with the ``h200`` model (``sim.tensor_core.mul_add``, a 16-deep fused dot-add per
instruction).

The kernel's address arithmetic is not written by hand: where each operand element lies in
shared memory, which thread holds which accumulator and A element, the descriptor's encoding,
its strides and the transposition flags are all printed from ``sarek.atoms`` (``WGMMA``,
``GMMA_*``, ``DESCRIPTOR`` through the CUDA printer's own ``sk_wgmma_desc``), so the probe checks
the facts the lowering uses. Two oracles stay independent of them: the tests below compare the
printed tables with the PTX ISA's formulas, written out here; and on the device, with A = B = 0
the output must be C (the accumulator's layout), and with small integers every output must be
NumPy's exact product (the operands' layouts and the descriptors), the descriptor's two strides
tried in their documented roles first and swapped second.

Inputs are the adversarial distributions (``adversarial_cases``): a problem of N columns takes
4 x N/16 consecutive 16x16x16 tiles per step, a grid (i, j) of 4 rows of them, block (i, j) of
its output from tile (i, j)'s C, row block i's A from tile (i, i mod N/16) and column block j's
B from tile (j mod 4, j); so the blocks (i, i) are whole tiles and keep each distribution's
structure exactly (at N = 16: four tiles, their A and C stacked, the first tile's B). K = 32
problems take the next grid's A and B as the second step. Records ``wgmma_probe_h200``.
"""

from __future__ import annotations

import re
from string import Template
from typing import Any

import needs
import numpy as np
import pytest
from adversarial_cases import DISTRIBUTIONS, OPERAND_TYPES, SEED, agree, digest, draw
from records import record

from backends.cuda.emit import WGMMA_DESCRIPTOR
from backends.cuda.nvrtc import nvrtc_available
from sarek import atoms
from sarek.ir import ElemType
from sim import tensor_core

M, K = atoms.WGMMA.m, atoms.WGMMA.k
WIDTHS = (16, atoms.WGMMA.n_max)  # the N probed
THREADS = atoms.WGMMA.threads
TILES = 384  # 16x16x16 tiles drawn per distribution
ELEMENTS = {"f16": ElemType.F16, "bf16": ElemType.BF16}
CORE = atoms.GMMA_K_INTER  # 8 rows of 16 bytes; the MN-major one has the same shape
CORE_K = CORE.bytes  # bytes between core matrices adjacent along K
CORE_MN = CORE.bytes * (K // CORE.shape[1])  # along M or N: the K columns' core matrices
MODES = {"ss": "A and B from shared memory, both K-major",
         "rs": "A from registers (mma.sync's A layout), B from shared memory transposed"}
B_ATOM = {"ss": atoms.GMMA_K_INTER, "rs": atoms.GMMA_MN_INTER}
A_ATOM = atoms.GMMA_K_INTER  # for ss
DOCUMENTED = {mode: atom.descriptor_strides(along_mn=CORE_MN, along_k=CORE_K)
              for mode, atom in B_ATOM.items()}  # (leading, stride) byte offsets


def shared_offsets(atom: atoms.GmmaAtom, mn: int, k: int) -> np.ndarray:
    """``[mn, k]``: the byte offset of each element of an ``mn x k`` operand laid out in
    ``atom``s, ``CORE_MN`` bytes apart along M or N and ``CORE_K`` bytes apart along K."""
    r, c = np.arange(mn)[:, None], np.arange(k)[None, :]
    rows, cols = atom.shape
    inside = np.asarray(atom.offset(r % rows, c % cols)) * atom.element_bytes
    out: np.ndarray = (r // rows) * CORE_MN + (c // cols) * CORE_K + inside
    return out


def tables(mode: str, n: int) -> dict[str, np.ndarray]:
    """The probe's index tables: ``A_AT[m * K + k]`` and ``B_AT[k * n + col]``, the byte
    offsets of the shared operands' elements; ``C_ROW``, ``C_COL`` and ``A_ROW``, ``A_COL`` at
    ``thread * values + value``, where each thread's accumulator values and register A values
    lie."""
    c, a = atoms.WGMMA.c(n).coordinates, atoms.WGMMA.a.coordinates
    return {"A_AT": shared_offsets(A_ATOM, M, K).ravel(),
            "B_AT": shared_offsets(B_ATOM[mode], n, K).T.ravel(),
            "C_ROW": c[..., 0].ravel(), "C_COL": c[..., 1].ravel(),
            "A_ROW": a[..., 0].ravel(), "A_COL": a[..., 1].ravel()}


_KERNEL = Template(r"""
$descriptor
$tables
extern "C" __global__ void __launch_bounds__($threads) probe(
        const unsigned short* a, const unsigned short* b, const float* c, float* d,
        int steps, int lbo, int sbo) {
    // a: [problem][$m][$k * steps], b: [problem][$k * steps][$n], c, d: [problem][$m][$n]
    __shared__ __align__(128) unsigned char sa[2][$m * $k * 2];
    __shared__ __align__(128) unsigned char sb[2][$k * $n * 2];
    const int p = blockIdx.x, tid = threadIdx.x, kk = $k * steps;
    for (int s = 0; s < steps; ++s) {
        for (int e = tid; e < $m * $k; e += $threads)
            *(unsigned short*)(sa[s] + A_AT[e]) = a[(p * $m + e / $k) * kk + $k * s + e % $k];
        for (int e = tid; e < $k * $n; e += $threads)
            *(unsigned short*)(sb[s] + B_AT[e]) = b[(p * kk + $k * s + e / $n) * $n + e % $n];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    float acc[$values];
    #pragma unroll
    for (int i = 0; i < $values; ++i) {
        const int at = tid * $values + i;
        acc[i] = c[(p * $m + C_ROW[at]) * $n + C_COL[at]];
    }
    unsigned ra[2][$registers];
    for (int s = 0; s < steps; ++s)
        for (int r = 0; r < $registers; ++r) {  // two 16-bit values a register, the first low
            const int lo = tid * $a_values + 2 * r, hi = lo + 1;
            ra[s][r] = (unsigned)a[(p * $m + A_ROW[lo]) * kk + $k * s + A_COL[lo]]
                       | ((unsigned)a[(p * $m + A_ROW[hi]) * kk + $k * s + A_COL[hi]] << 16);
        }
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int s = 0; s < steps; ++s) {
        const unsigned long long da = sk_wgmma_desc(sa[s], lbo, sbo, ${a_mode}ull);
        const unsigned long long db = sk_wgmma_desc(sb[s], lbo, sbo, ${b_mode}ull);
        (void)da; (void)ra;
        $wgmma
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    #pragma unroll
    for (int i = 0; i < $values; ++i) {
        const int at = tid * $values + i;
        d[(p * $m + C_ROW[at]) * $n + C_COL[at]] = acc[i];
    }
}
""")


def _wgmma(operand: str, mode: str, n: int, values: int, registers: int) -> str:
    """The one ``wgmma.mma_async`` of a step: A through its descriptor or from ``ra``, each
    transposition flag set where the operand's atom is MN-major."""
    def trans(atom: atoms.GmmaAtom) -> int:
        return int(atom.major == "mn")

    opcode = atoms.WGMMA.ptx(n, ELEMENTS[operand])
    d = ", ".join(f"%{i}" for i in range(values))
    outs = ", ".join(f'"+f"(acc[{i}])' for i in range(values))
    if mode == "ss":
        operands = f"%{values}, %{values + 1}, q, 1, 1, {trans(A_ATOM)}, {trans(B_ATOM[mode])}"
        ins = '"l"(da), "l"(db)'
    else:
        regs = ", ".join(f"%{values + r}" for r in range(registers))
        operands = f"{{{regs}}}, %{values + registers}, q, 1, 1, {trans(B_ATOM[mode])}"
        ins = ", ".join(f'"r"(ra[s][{r}])' for r in range(registers)) + ', "l"(db)'
    return (rf'asm volatile("{{\n.reg .pred q;\nsetp.ne.b32 q, 1, 0;\n{opcode} {{{d}}}, '
            rf'{operands};\n}}\n" : {outs} : {ins} : "memory");')


def source(operand: str, mode: str, n: int = 16) -> str:
    """The probe's CUDA for ``operand`` ("f16" or "bf16") in ``mode`` ("ss" or "rs") with
    ``n`` columns (its tables in global memory: at n = 256 they outgrow the 64 KiB of
    constant memory)."""
    values = atoms.WGMMA.c(n).values
    a_values = atoms.WGMMA.a.values
    registers = a_values * ELEMENTS[operand].bits // 32
    arrays = "\n".join(
        f"__device__ const unsigned short {name}[{len(table)}] = "
        f"{{{', '.join(str(int(x)) for x in table)}}};"
        for name, table in tables(mode, n).items())
    return _KERNEL.substitute(
        descriptor=WGMMA_DESCRIPTOR, tables=arrays, threads=THREADS, m=M, n=n, k=K,
        values=values, a_values=a_values, registers=registers, a_mode=A_ATOM.mode,
        b_mode=B_ATOM[mode].mode, wgmma=_wgmma(operand, mode, n, values, registers))


class Device:
    """The probe compiled for sm_90a and launched on device 0."""

    def __init__(self) -> None:
        from backends.cuda.nvrtc import compile_cubin

        self.cubins = {(operand, mode, n): compile_cubin(source(operand, mode, n), "sm_90a",
                                                         f"wgmma_{operand}_{mode}_n{n}.cu")
                       for operand in OPERAND_TYPES for mode in MODES for n in WIDTHS}

    def run(self, operand: str, mode: str, a: np.ndarray, b: np.ndarray, c: np.ndarray,
            strides: tuple[int, int]) -> np.ndarray:
        """``d`` for problems ``a[p, 64, K]``, ``b[p, K, n]``, ``c[p, 64, n]`` (K = 16 or 32,
        n one of ``WIDTHS``) with the descriptor's leading and stride byte offsets
        ``strides``."""
        from backends.cuda.run import launch_cubin

        problems, steps, n = a.shape[0], a.shape[2] // K, c.shape[2]
        params: list[np.ndarray | np.generic] = [
            np.ascontiguousarray(a).view(np.uint16), np.ascontiguousarray(b).view(np.uint16),
            np.ascontiguousarray(c, np.float32), np.zeros(c.shape, np.float32),
            np.int32(steps), np.int32(strides[0]), np.int32(strides[1])]
        out = launch_cubin(self.cubins[operand, mode, n], "probe", params, (problems, 1, 1),
                           (THREADS, 1, 1))
        d = out[3]
        assert d is not None
        return d.reshape(c.shape)


def model(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The ``h200`` model of the probe: one 16-deep fused dot-add per instruction, chained."""
    d = c.astype(np.float32)
    for s in range(a.shape[2] // K):
        ks = slice(K * s, K * (s + 1))
        d = tensor_core.mul_add(np.ascontiguousarray(a[:, :, ks]),
                                np.ascontiguousarray(b[:, ks, :]), d)
    return d


def problems(a: np.ndarray, b: np.ndarray, c: np.ndarray, steps: int, n: int = 16
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Problems of ``steps`` instructions of ``n`` columns from 16x16x16 tiles (see the
    module's docstring)."""
    cols, rows = n // 16, M // 16
    per = rows * cols * steps
    count = a.shape[0] // per

    def grid(x: np.ndarray) -> np.ndarray:  # [problem, step, row block, column block, 16, 16]
        return x[:count * per].reshape(count, steps, rows, cols, 16, 16)

    i, j = np.arange(rows), np.arange(cols)
    pa = grid(a)[:, :, i, i % cols].transpose(0, 2, 3, 1, 4).reshape(count, M, K * steps)
    pb = grid(b)[:, :, j % rows, j].transpose(0, 1, 3, 2, 4).reshape(count, K * steps, n)
    pc = grid(c)[:, 0].transpose(0, 1, 3, 2, 4).reshape(count, M, n)
    return pa, pb, pc


def whole_tiles(n: int) -> np.ndarray:
    """``[M, n]``: the outputs in blocks (i, i), which ``problems`` takes from one tile."""
    block = np.arange(M)[:, None] // 16 == np.arange(n)[None, :] // 16
    return block


def layout_checks(dev: Device, operand: str, mode: str, n: int) -> dict[str, Any]:
    """The accumulator's layout (A = B = 0: d must be c) and the descriptors' (small exact
    integers), each stride assignment tried; which held."""
    dt = OPERAND_TYPES[operand]
    rng = np.random.default_rng(SEED)
    c = (np.arange(2 * M * n, dtype=np.float32) + 1).reshape(2, M, n)
    zero_a: np.ndarray = np.zeros((2, M, K), dt)
    zero_b: np.ndarray = np.zeros((2, K, n), dt)
    documented = DOCUMENTED[mode]
    accumulator = bool((dev.run(operand, mode, zero_a, zero_b, c, documented) == c).all())
    a: np.ndarray = rng.integers(-4, 5, (2, M, 2 * K)).astype(dt)
    b: np.ndarray = rng.integers(-4, 5, (2, 2 * K, n)).astype(dt)
    c = rng.integers(-64, 65, (2, M, n)).astype(np.float32)
    exact = np.einsum("pmk,pkn->pmn", a.astype(np.float64), b.astype(np.float64)) + c
    held = None
    for strides in (documented, documented[::-1]):
        if (dev.run(operand, mode, a, b, c, strides) == exact).all():
            held = strides
            break
    return {"accumulator_layout_holds": accumulator,
            "descriptor_strides": None if held is None else
            {"leading_byte_offset": held[0], "stride_byte_offset": held[1]},
            "documented_roles": held == documented}


def compare(dev: Device, operand: str, mode: str, n: int, tiles: int,
            strides: tuple[int, int]) -> list[dict[str, Any]]:
    rows = []
    whole = whole_tiles(n)
    for name in DISTRIBUTIONS:
        a, b, c = draw(SEED, operand, name, tiles)
        for steps in (1, 2):
            pa, pb, pc = problems(a, b, c, steps, n)
            got = dev.run(operand, mode, pa, pb, pc, strides)
            with np.errstate(all="ignore"):
                want = model(pa, pb, pc)
            same = agree(got, want)
            rows.append({"operand": operand, "mode": mode, "n": n, "distribution": name,
                         "k": K * steps,
                         "outputs": int(same.size), "mismatches": int((~same).sum()),
                         "whole_tile_outputs": int(whole.sum()) * len(same),
                         "whole_tile_mismatches": int((~same[:, whole]).sum()),
                         "inputs_sha256": digest(pa, pb, pc),
                         "device_sha256": digest(got)})
    return rows


@pytest.fixture(scope="module")
def measured() -> dict[str, Any]:
    from backends.cuda.run import device_name

    dev = Device()
    report: dict[str, Any] = {
        "device": device_name(), "seed": SEED, "tiles": TILES,
        "instructions": [f"wgmma.mma_async.sync.aligned.m{M}n{n}k{K}.f32" for n in WIDTHS],
        "layouts": {}, "rows": []}
    for n in WIDTHS:
        for operand in OPERAND_TYPES:
            for mode, what in MODES.items():
                checks = layout_checks(dev, operand, mode, n)
                report["layouts"][f"{operand} {mode} n{n}"] = {"what": what, **checks}
                strides = checks["descriptor_strides"]
                if checks["accumulator_layout_holds"] and strides is not None:
                    report["rows"] += compare(dev, operand, mode, n, TILES,
                                              (strides["leading_byte_offset"],
                                               strides["stride_byte_offset"]))
    report["outputs_by_n"] = {str(n): sum(r["outputs"] for r in report["rows"] if r["n"] == n)
                              for n in WIDTHS}
    record("wgmma_probe_h200", report)
    return report


# ---- the printed tables against the PTX ISA's formulas ("Register Fragments and Shared
# Memory Matrix Layouts"), written out here

THREAD = np.arange(THREADS)[:, None]
WARP, G, T = THREAD // 32, (THREAD % 32) // 4, THREAD % 4


@pytest.mark.parametrize("width", WIDTHS)
def test_the_shared_operands_lie_in_core_matrices_of_8_rows_of_16_bytes(width: int) -> None:
    m, k = np.arange(M)[:, None], np.arange(K)[None, :]
    k_major = (m // 8) * CORE_MN + (k // 8) * CORE_K + (m % 8) * 16 + (k % 8) * 2
    assert np.array_equal(tables("ss", width)["A_AT"], k_major.ravel())
    k, n = np.arange(K)[:, None], np.arange(width)[None, :]
    assert np.array_equal(tables("ss", width)["B_AT"],
                          ((n // 8) * CORE_MN + (k // 8) * CORE_K + (n % 8) * 16
                           + (k % 8) * 2).ravel())
    assert np.array_equal(tables("rs", width)["B_AT"],  # transposed: rows of 16 bytes along n
                          ((n // 8) * CORE_MN + (k // 8) * CORE_K + (k % 8) * 16
                           + (n % 8) * 2).ravel())


@pytest.mark.parametrize("width", WIDTHS)
def test_each_thread_holds_the_accumulator_and_a_values_the_ptx_isa_gives(width: int) -> None:
    values = width // 2
    i = np.arange(values)[None, :]
    row = 16 * WARP + G + 8 * ((i >> 1) & 1)  # D: values 2j, 2j + 1 side by side
    got = tables("ss", width)
    assert np.array_equal(got["C_ROW"], np.broadcast_to(row, (THREADS, values)).ravel())
    assert np.array_equal(got["C_COL"], np.broadcast_to(8 * (i >> 2) + 2 * T + (i & 1),
                                                        (THREADS, values)).ravel())
    i = i[:, :8]
    row = row[:, :8]
    assert np.array_equal(got["A_ROW"], np.broadcast_to(row, (THREADS, 8)).ravel())
    assert np.array_equal(got["A_COL"],
                          np.broadcast_to(2 * T + (i & 1) + 8 * (i >> 2), (THREADS, 8)).ravel())


def test_the_descriptor_strides_are_between_core_matrices_along_k_then_m_or_n() -> None:
    # leading: 128 bytes to the next core matrix along k; stride: 256 to the next along m or n
    assert DOCUMENTED == {"ss": (128, 256), "rs": (128, 256)}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("mode", MODES)
def test_the_source_holds_the_tables_and_the_ptx_form(mode: str, width: int) -> None:
    text = source("bf16", mode, width)
    for name, table in tables(mode, width).items():
        printed = re.search(rf"{name}\[\d+\] = \{{([^}}]*)\}}", text)
        assert printed is not None, name
        assert [int(x) for x in printed.group(1).split(",")] == table.tolist(), name
    assert f"wgmma.mma_async.sync.aligned.m64n{width}k16.f32.bf16.bf16" in text
    v = width // 2  # the accumulator's registers come first
    assert (f"{{%{v}, %{v + 1}, %{v + 2}, %{v + 3}}}, %{v + 4}, q, 1, 1, 1;" if mode == "rs"
            else f"%{v}, %{v + 1}, q, 1, 1, 0, 0;") in text  # B transposed under rs only


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("mode", MODES)
def test_the_probe_compiles_for_sm_90a(mode: str, width: int) -> None:
    from backends.cuda.nvrtc import compile_cubin

    assert compile_cubin(source("f16", mode, width), "sm_90a", f"wgmma_f16_{mode}.cu")


def test_the_probe_stacks_four_tiles_a_problem_and_takes_the_fifths_b_second() -> None:
    a, b, c = draw(SEED, "f16", "plain random", 8)
    pa, pb, pc = problems(a, b, c, 2)
    assert (pa.shape, pb.shape, pc.shape) == ((1, 64, 32), (1, 32, 16), (1, 64, 16))
    assert np.array_equal(pa[0, 16:32, :16], a[1]) and np.array_equal(pa[0, :16, 16:], a[4])
    assert np.array_equal(pb[0, :16], b[0]) and np.array_equal(pb[0, 16:], b[4])
    assert np.array_equal(pc[0, 48:], c[3])


def test_a_256_wide_problem_keeps_four_whole_tiles_on_its_diagonal() -> None:
    a, b, c = draw(SEED, "f16", "exact cancellation", 128)
    pa, pb, pc = problems(a, b, c, 2, 256)
    assert (pa.shape, pb.shape, pc.shape) == ((1, 64, 32), (1, 32, 256), (1, 64, 256))
    for i in range(4):  # block (i, i) is tile 17i: its A, B and C
        rows, cols = slice(16 * i, 16 * i + 16), slice(16 * i, 16 * i + 16)
        assert np.array_equal(pa[0, rows, :16], a[17 * i])
        assert np.array_equal(pb[0, :16, cols], b[17 * i])
        assert np.array_equal(pc[0, rows, cols], c[17 * i])
        assert np.array_equal(pa[0, rows, 16:], a[64 + 17 * i])  # the second step's grid
    assert np.array_equal(pb[0, :16, 80:96], b[16 + 5])  # column block 5: tile (1, 5)
    assert whole_tiles(256).sum() == 4 * 16 * 16


def test_the_model_is_the_exact_product_on_small_integers() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(-4, 5, (2, 64, 32)).astype(np.float16)
    b = rng.integers(-4, 5, (2, 32, 16)).astype(np.float16)
    c = rng.integers(-64, 65, (2, 64, 16)).astype(np.float32)
    exact = np.einsum("pmk,pkn->pmn", a.astype(np.float64), b.astype(np.float64)) + c
    assert np.array_equal(model(a, b, c), exact)


# ---- on the device


@pytest.mark.device
@needs.hopper
def test_a_zero_product_leaves_each_accumulator_value_where_the_layout_says(
        measured: dict[str, Any]) -> None:
    failed = [k for k, v in measured["layouts"].items() if not v["accumulator_layout_holds"]]
    assert not failed


@pytest.mark.device
@needs.hopper
def test_small_integer_products_are_exact_under_one_assignment_of_the_strides(
        measured: dict[str, Any]) -> None:
    failed = [k for k, v in measured["layouts"].items() if v["descriptor_strides"] is None]
    assert not failed


@pytest.mark.device
@needs.hopper
def test_the_descriptor_strides_hold_in_the_roles_the_lowering_gives_them(
        measured: dict[str, Any]) -> None:
    swapped = [k for k, v in measured["layouts"].items() if not v["documented_roles"]]
    assert not swapped


@pytest.mark.device
@needs.hopper
def test_every_wgmma_output_is_the_h200_models(measured: dict[str, Any]) -> None:
    differ = [(r["operand"], r["mode"], r["distribution"], r["k"], r["mismatches"])
              for r in measured["rows"] if r["mismatches"]]
    assert measured["rows"] and not differ, f"outputs that differ: {differ}"
