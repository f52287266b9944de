"""Inline PTX runs on the CPU executor (pagedlab/cuda/ptx.py): the kernels of
tests/cuda_kernels/inline_ptx.cu, written here in the idioms public kernels use (vLLM's
dtype_float16.cuh packs and conversions, cached vector loads, lop3/prmt, special registers,
shfl.sync), each compared bit for bit with numpy, with the checks off and on. A PTX load is a
checked access like any other; an instruction outside the run set is refused by name."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from pagedlab.cuda import CompileError, OutOfBoundsError, RawModule

SOURCE = (Path(__file__).parent / "cuda_kernels" / "inline_ptx.cu").read_text()
CHECKS = (None, "all")


@functools.cache
def ptx() -> RawModule:
    return RawModule(code=SOURCE, backend="cpu", filename="inline_ptx.cu").compile()


def run(name, grid, block, args, check):
    ptx().get_function(name)(grid, block, args, check=check)


def half_bits(x) -> np.ndarray:
    return np.asarray(x, np.float16).view(np.uint16)


# ---- references: numpy's float16 is round-to-nearest; the directed modes step from it ----------
def half_directed(x: np.ndarray, mode: str) -> np.ndarray:
    h = x.astype(np.float16)
    back = h.astype(np.float32)
    if mode == "rz":
        step = np.abs(back) > np.abs(x)
        h = np.where(step, np.nextafter(h, np.float16(0)), h)
    elif mode == "rm":
        h = np.where(back > x, np.nextafter(h, np.float16(-np.inf)), h)
    elif mode == "rp":
        h = np.where(back < x, np.nextafter(h, np.float16(np.inf)), h)
    return h.view(np.uint16)


def bf16_directed(x: np.ndarray, mode: str) -> np.ndarray:
    u = x.view(np.uint32).astype(np.uint64)
    rn = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    back = (rn.astype(np.uint32) << 16).view(np.float32)
    mag_up = np.where(rn & 0x8000, rn - 1, rn + 1).astype(np.uint16)    # toward +inf
    mag_down = np.where(rn & 0x8000, rn + 1, rn - 1).astype(np.uint16)  # toward -inf
    if mode == "rn":
        return rn
    if mode == "rp":
        return np.where(back < x, mag_up, rn)
    if mode == "rm":
        return np.where(back > x, mag_down, rn)
    toward_zero = np.where(rn & 0x8000, mag_up, mag_down)
    return np.where(np.abs(back) > np.abs(x), toward_zero, rn)


def awkward_floats(n=96, seed=0) -> np.ndarray:
    """Random values plus the cases rounding modes disagree on: halfway points of the half
    grid, overflow past 65504, subnormals, signed zero, exact values."""
    rng = np.random.default_rng(seed)
    grid = np.float16(rng.standard_normal(16)).astype(np.float32)
    halfway = grid + np.spacing(np.float16(grid)).astype(np.float32) / 2
    special = np.array([0.0, -0.0, 1.0, -1.5, 65504, 65519.9, 65520, 70000, -70000, 1e-7,
                        -3e-8, 6.1e-5, 2 ** -24, -2 ** -25, 3.0e38, -1e-40], np.float32)
    rand = (rng.standard_normal(n - 32) * 10.0 ** rng.integers(-6, 5, n - 32)).astype(np.float32)
    return np.concatenate([halfway, special, rand])[:n].astype(np.float32)


# ---- tests ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("check", CHECKS)
def test_mov_packs_and_unpacks_halves(check):
    w = np.random.default_rng(1).integers(0, 2 ** 32, 100, dtype=np.uint32)
    out, splats = np.zeros(100, np.uint32), np.zeros(100, np.uint32)
    run("swap_halves", (4,), (32,), (out, splats, w, np.int32(100)), check)
    np.testing.assert_array_equal(out, (w >> 16) | (w << 16))
    np.testing.assert_array_equal(splats, (w & 0xFFFF) * 0x10001)


@pytest.mark.parametrize("check", CHECKS)
def test_cvt_to_half_and_bf16_in_every_rounding_mode(check):
    x = awkward_floats()
    h, b = np.zeros(4 * x.size, np.uint16), np.zeros(4 * x.size, np.uint16)
    run("to_half_modes", (3,), (32,), (h, b, x, np.int32(x.size)), check)
    for m, mode in enumerate(("rn", "rz", "rm", "rp")):
        np.testing.assert_array_equal(h[m::4], half_directed(x, mode), err_msg=f"half {mode}")
        np.testing.assert_array_equal(b[m::4], bf16_directed(x, mode), err_msg=f"bf16 {mode}")


@pytest.mark.parametrize("check", CHECKS)
def test_cvt_back_to_float_saturate_pack_and_round_to_int(check):
    x = awkward_floats(64, seed=2)
    x = x[np.abs(x) < 1e6]
    n = x.size
    h = half_bits(np.random.default_rng(3).standard_normal(n))
    f, sat = np.full(n, np.nan, np.float32), np.zeros(n, np.uint16)
    pairs, ints = np.zeros(n, np.uint32), np.zeros(n, np.int32)
    run("from_half_and_back", (2,), (32,), (f, sat, pairs, ints, h, x, np.int32(n)), check)
    np.testing.assert_array_equal(f, h.view(np.float16).astype(np.float32))
    np.testing.assert_array_equal(sat, half_bits(np.clip(x, 0, 1)))
    hi, lo = half_bits(x).astype(np.uint32), half_bits(-x).astype(np.uint32)
    np.testing.assert_array_equal(pairs, hi << 16 | lo)  # the first source is the high half
    want = np.clip(np.rint((x * np.float32(1000)).astype(np.float64)), -2 ** 31, 2 ** 31 - 1)
    np.testing.assert_array_equal(ints, want.astype(np.int64))


@pytest.mark.parametrize("check", CHECKS)
def test_half2_fma_rounds_once(check):
    rng = np.random.default_rng(4)
    n = 64
    a, b, c = (rng.standard_normal(2 * n).astype(np.float16) for _ in range(3))
    # products of halves are exact in float64; the sum then rounds once to float64 and once
    # to half: a case where that double rounding errs would show as a mismatch to investigate
    want = (a.astype(np.float64) * b + c).astype(np.float16)
    x = rng.standard_normal(n).astype(np.float32)
    d, f = np.zeros(n, np.uint32), np.zeros(n, np.float32)
    run("fma_half2", (2,), (32,), (d, f, a.view(np.uint32), b.view(np.uint32), c.view(np.uint32),
                                   x, np.int32(n)), check)
    np.testing.assert_array_equal(d.view(np.float16), want)
    np.testing.assert_array_equal(f, (x.astype(np.float64) ** 2 - 1).astype(np.float32))


@pytest.mark.parametrize("check", CHECKS)
def test_cached_vector_loads(check):
    x = np.random.default_rng(5).standard_normal(4 * 40).astype(np.float32)
    out = np.full_like(x, np.nan)
    run("load_nc_vec4", (2,), (32,), (out, x, np.int32(40)), check)
    q = x.reshape(-1, 4)
    want = np.stack([q[:, 3], q[:, 2], q[:, 1], q[:, 0] + q[:, 1]], axis=1).ravel()
    np.testing.assert_array_equal(out, want)


def test_a_ptx_load_past_the_array_is_an_out_of_bounds_read():
    x = np.ones(32, np.float32)
    with pytest.raises(OutOfBoundsError, match=r"read .*past the end.*argument `in`") as err:
        run("load_nc_past_end", (1,), (32,), (np.zeros(32, np.float32), x, np.int32(32)), "all")
    line = next(i for i, ln in enumerate(SOURCE.splitlines(), 1) if "[%1];\" : \"=f\"(v)" in ln)
    assert err.value.lines == (line,)


@pytest.mark.parametrize("check", CHECKS)
def test_lop3_prmt_special_registers_and_shfl(check):
    rng = np.random.default_rng(6)
    a, b, c = (rng.integers(0, 2 ** 32, 64, dtype=np.uint32) for _ in range(3))
    out = np.zeros(5 * 64, np.uint32)
    run("bits_and_lanes", (2,), (32,), (out, a, b, c), check)
    o = out.reshape(64, 5)
    np.testing.assert_array_equal(o[:, 0], (a & b) | ~c)
    np.testing.assert_array_equal(o[:, 1], a.byteswap())
    lanes = np.arange(64) % 32
    np.testing.assert_array_equal(o[:, 2], lanes)
    np.testing.assert_array_equal(o[:, 3], (1 << lanes) - 1)
    np.testing.assert_array_equal(o[:, 4], a[np.arange(64) ^ 3])


def test_an_instruction_outside_the_run_set_is_refused_by_name_only_when_called():
    helper = ('inline __device__ void async_copy(float* s, const float* g) {\n'
              '  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "l"(s), "l"(g));\n}\n')
    unused = helper + "__global__ void k(float* o) { o[threadIdx.x] = 1.f; }\n"
    RawModule(code=unused, backend="cpu").get_function("k")((1,), (4,), (np.zeros(4, np.float32),))
    used = helper + "__global__ void k(float* o) { async_copy(o, o + 1); }\n"
    with pytest.raises(CompileError, match=r"copy.cu:2: inline PTX `cp\.async\.ca\.shared\.global "
                                           r"\[%0\], \[%1\], 4` is not supported.*then __syncthreads"):
        RawModule(code=used, backend="cpu", filename="copy.cu").get_function("k")(
            (1,), (1,), (np.zeros(4, np.float32),))


MACROS = r'''
#define LDG_F32(dst, ptr) \
  asm volatile("ld.global.nc.f32 %0, [%1];" \
               : "=f"(dst) : "l"(ptr))
#define LANE_ID(id) asm("mov.u32 %0, %%laneid;" : "=r"(id))
__global__ void lanes_plus(float* out, const float* in, int n) {
  float v;
  LDG_F32(v, in + threadIdx.x);
  unsigned lane;
  LANE_ID(lane);
  out[threadIdx.x] = v + lane;
  if (n < 0) __trap();
}
'''


@pytest.mark.parametrize("check", CHECKS)
def test_ptx_inside_multi_line_macros_keeps_the_file_lines(check):
    from pagedlab.cuda import KernelCrash, RawKernel
    x = np.random.default_rng(7).standard_normal(64).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    k = RawKernel(MACROS, "lanes_plus", backend="cpu", filename="macros.cu")
    k((1,), (64,), (out, x, np.int32(1)), check=check)
    np.testing.assert_array_equal(out, x + (np.arange(64) % 32).astype(np.float32))
    with pytest.raises(KernelCrash, match=r"__trap\(\) at macros.cu:12 "):  # lines unchanged
        k((1,), (32,), (out, x, np.int32(-1)), check=check)


@pytest.mark.parametrize("check", CHECKS)
def test_operand_constraints_as_nvcc_reads_them(check):
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal(40), rng.standard_normal(40).astype(np.float32)
    acc = rng.integers(0, 2 ** 40, 40, dtype=np.uint64)
    d, f = np.full(40, np.nan), np.full(40, np.nan, np.float32)
    want_acc = acc << np.uint64(3)
    run("constraints", (2,), (32,), (d, f, acc, x, y, np.int32(40)), check)
    from fractions import Fraction  # fma rounds once: the exact x*x - 2, correctly rounded
    np.testing.assert_array_equal(d, [float(Fraction(v) * Fraction(v) - 2) for v in x])
    np.testing.assert_array_equal(f, y)
    np.testing.assert_array_equal(acc, want_acc)
