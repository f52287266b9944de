"""How fast is the paged-attention decode kernel, next to the torch baselines?

CPU (default): the CUDA kernel on pagedlab's CPU executor, the torch gather-based paged
attention (solutions/paged_attention.py) and torch SDPA on the same tokens stored densely.
Ratios are against SDPA measured in the same run. The executor simulates every CUDA thread, so
the point is not speed but that the numbers stay in a usable range for the course.

GPU (``--gpu``, needs CuPy and an NVIDIA GPU): CuPy kernel time, achieved bandwidth of the K/V
bytes it must read against the device's peak, and torch SDPA on the dense equivalent (if torch
has CUDA).

    .venv/bin/python benchmarks/bench_attention.py [--gpu] [--repeat N] [--impl solutions]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pagedlab.kernels import decode_on_executor, paged_attention_decode  # noqa: E402
from pagedlab.loader import load  # noqa: E402
from pagedlab.reference import make_paged_batch, max_relative_error  # noqa: E402

# (num_seqs, seq_len, num_heads, num_kv_heads, head_size, block_size)
CPU_CASES = [
    (8, 256, 8, 8, 128, 16),
    (8, 256, 8, 2, 128, 16),
    (4, 1024, 8, 2, 128, 16),
    (2, 2048, 16, 2, 64, 32),
]
GPU_CASES = [
    (64, 1024, 32, 8, 128, 16),
    (128, 2048, 32, 8, 128, 16),
    (32, 4096, 32, 8, 128, 16),
    (256, 512, 32, 32, 128, 16),
]


def best_of(fn, repeat: int) -> float:
    fn()  # warm-up: lazy initialisation and caches stay out of the timing
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def dense_batch(batch):
    """The same tokens as one padded dense tensor per sequence: what SDPA gets."""
    # the judge's own reading through the tables: the batches keep no tokens in order
    from pagedlab.grader.trusted.attention import _sequence_tokens

    q = batch.q.unsqueeze(2)  # [S, H, 1, D]
    tokens = [[torch.from_numpy(t) for t in _sequence_tokens(batch, s)] for s in range(len(batch.seq_lens))]
    k = torch.nn.utils.rnn.pad_sequence([kv[0] for kv in tokens], batch_first=True)  # [S, L, KH, D]
    v = torch.nn.utils.rnn.pad_sequence([kv[1] for kv in tokens], batch_first=True)
    lens = batch.seq_lens.long()
    mask = torch.arange(k.shape[1])[None, :] < lens[:, None]  # [S, L]
    return q, k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous(), mask[:, None, None, :]


def sdpa(q, k, v, mask, gqa):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


def bench_cpu(args) -> None:
    torch.set_num_threads(args.threads)
    pa = load("paged_attention", args.impl)
    print(f"CPU: executor kernel vs torch gather reference vs dense SDPA (best of {args.repeat}; "
          f"torch threads {torch.get_num_threads()})")
    print(f"{'seqs x len  heads/kv  head bs':<32}{'SDPA ms':>10}{'gather ms':>11}{'kernel ms':>11}"
          f"{'gather/SDPA':>13}{'kernel/SDPA':>13}{'kernel err':>12}")
    for case in CPU_CASES:
        cpu_case(pa, args, *case)
    tiny = make_paged_batch([1], num_heads=1, head_size=32, block_size=16, seed=1).numpy()
    fixed = best_of(lambda: decode_on_executor(*tiny, impl=args.impl), args.repeat)
    print(f"executor launch overhead (1 sequence, 1 head, 1 token): {fixed * 1e3:.1f} ms")


def cpu_case(pa, args, num_seqs, seq_len, heads, kv_heads, head_size, bs) -> None:
    batch = make_paged_batch([seq_len] * num_seqs, num_heads=heads, num_kv_heads=kv_heads,
                             head_size=head_size, block_size=bs, seed=1)
    arrays = batch.numpy()
    q, k, v, mask = dense_batch(batch)
    gqa = heads != kv_heads
    out = decode_on_executor(*arrays, impl=args.impl)  # compiles once, outside the timing
    err = max_relative_error(out, batch.expected())
    t_sdpa = best_of(lambda: sdpa(q, k, v, mask, gqa), args.repeat)
    t_gather = best_of(lambda: pa.paged_attention(batch.q, batch.k_cache, batch.v_cache,
                                                  batch.block_tables, batch.seq_lens), args.repeat)
    t_kernel = best_of(lambda: decode_on_executor(*arrays, impl=args.impl), args.repeat)
    label = f"{num_seqs} x {seq_len}  {heads}/{kv_heads}  {head_size} {bs}"
    print(f"{label:<32}{t_sdpa * 1e3:>10.2f}{t_gather * 1e3:>11.2f}{t_kernel * 1e3:>11.1f}"
          f"{t_gather / t_sdpa:>13.1f}{t_kernel / t_sdpa:>13.0f}{err:>12.1e}")


def peak_bandwidth(cupy) -> float | None:
    """Theoretical DRAM bandwidth in bytes/s from the device attributes, if reported."""
    try:
        attrs = cupy.cuda.Device().attributes
        clock_khz, bus_bits = attrs["MemoryClockRate"], attrs["GlobalMemoryBusWidth"]
    except Exception:  # noqa: BLE001 - some drivers no longer report the memory clock
        return None
    return 2 * clock_khz * 1e3 * bus_bits / 8  # double data rate


def bench_gpu(args) -> None:
    try:
        import cupy
    except ImportError:
        sys.exit("--gpu needs CuPy: pip install 'pagedlab[gpu]' on a machine with an NVIDIA GPU")
    if not cupy.is_available():
        sys.exit("--gpu: CuPy is installed but sees no usable GPU")
    peak = peak_bandwidth(cupy)
    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()
    print(f"GPU: {name}, peak DRAM bandwidth "
          f"{peak / 1e9:.0f} GB/s" if peak else f"GPU: {name}, peak bandwidth not reported")
    has_torch_cuda = torch.cuda.is_available()
    print(f"{'seqs x len  heads/kv  head bs':<32}{'kernel us':>11}{'K/V GB/s':>10}{'% peak':>8}"
          f"{'SDPA us':>10}{'kernel/SDPA':>13}{'err':>10}")
    for num_seqs, seq_len, heads, kv_heads, head_size, bs in GPU_CASES:
        batch = make_paged_batch([seq_len] * num_seqs, num_heads=heads, num_kv_heads=kv_heads,
                                 head_size=head_size, block_size=bs, spare_blocks=0, seed=2)
        dev = [cupy.asarray(a) for a in batch.numpy()]
        out = paged_attention_decode(*dev, impl=args.impl, backend="cupy")
        err = max_relative_error(cupy.asnumpy(out), batch.expected())
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        times = []
        for _ in range(args.repeat):
            start.record()
            paged_attention_decode(*dev, impl=args.impl, backend="cupy")
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e-3)
        t_kernel = statistics.median(times)
        kv_bytes = 2 * num_seqs * seq_len * kv_heads * head_size * 4  # every K and V row once
        gbs = kv_bytes / t_kernel / 1e9
        share = f"{100 * kv_bytes / t_kernel / peak:.0f}%" if peak else "?"
        t_sdpa = float("nan")
        if has_torch_cuda:
            q, k, v, mask = (t.cuda() for t in dense_batch(batch))
            sdpa(q, k, v, mask, heads != kv_heads)
            torch.cuda.synchronize()
            runs = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                sdpa(q, k, v, mask, heads != kv_heads)
                torch.cuda.synchronize()
                runs.append(time.perf_counter() - t0)
            t_sdpa = statistics.median(runs)
        label = f"{num_seqs} x {seq_len}  {heads}/{kv_heads}  {head_size} {bs}"
        print(f"{label:<32}{t_kernel * 1e6:>11.0f}{gbs:>10.0f}{share:>8}{t_sdpa * 1e6:>10.0f}"
              f"{t_kernel / t_sdpa:>13.2f}{err:>10.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", action="store_true", help="benchmark the CuPy kernel on a GPU")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case (best/median)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1 keeps numbers stable on a shared machine)")
    parser.add_argument("--impl", default="solutions", help="exercises, solutions or a folder")
    args = parser.parse_args()
    if args.gpu:
        bench_gpu(args)
    else:
        bench_cpu(args)


if __name__ == "__main__":
    main()
