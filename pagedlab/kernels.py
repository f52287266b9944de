"""Host side of the CUDA paged-attention kernel: check the arguments, pick a device, launch.

A kernel trusts its arguments completely. A float64 cache, a block id past the end of the cache
or a sequence longer than its block table does not raise on a GPU: it reads the wrong memory
and returns plausible numbers. So every rule the kernel relies on is checked here, before the
launch, with a message that says what was wrong and what is allowed.

Two backends run the same ``paged_attention.cu`` text:

- ``"cupy"``: ``cupy.RawKernel`` on an NVIDIA GPU. Takes CuPy arrays, torch CUDA tensors
  (shared through DLPack, no copy) or numpy arrays (copied to the device and back);
- ``"cpu"``: pagedlab's CPU executor (`pagedlab.cuda`), numpy arrays or torch CPU tensors.

``"auto"`` means cupy when a GPU is usable, else cpu. The result has the array type of `q`.
"""

from __future__ import annotations

import hashlib
import math
import numbers

import numpy as np

from .loader import kernel_source

__all__ = [
    "paged_attention_decode",
    "decode_on_executor",
    "KERNEL_FILE",
    "KERNEL_NAME",
    "NUM_THREADS",
    "MAX_HEAD_SIZE",
    "shared_memory_bytes",
    "unwritten",
    "UNWRITTEN_BITS",
    # Part E: the v2 split-K kernel
    "decode_v2_on_executor",
    "choose_version",
    "v2_workspace",
    "V2Workspace",
    "V2_KERNEL_FILE",
    "PARTITION_SIZE",
]

KERNEL_FILE = "paged_attention.cu"
# How far a float32 kernel output may be from dense attention (the CPU and the GPU checks alike).
OUTPUT_TOL = 2e-5
KERNEL_NAME = "paged_attention_v1"
NUM_THREADS = 128  # must match NUM_THREADS in the kernel
MAX_HEAD_SIZE = 256  # size of the kernel's static q buffer
STATIC_SHARED_BYTES = (MAX_HEAD_SIZE + NUM_THREADS // 32) * 4  # q_shared + partial[]
# `out` is filled with this NaN before every launch: an element that still holds exactly these
# bits was never written by the kernel (a NaN the kernel computed has other bits).
UNWRITTEN_BITS = 0x7FC0DEAD
MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y: at most this many sequences per launch
BACKENDS = ("auto", "cpu", "cupy")


def paged_attention_decode(q, k_cache, v_cache, block_tables, seq_lens, *, scale=None,
                           impl=None, backend="auto", version="v1", partition_size=None,
                           workspace=None):
    """One decode step of paged attention with the CUDA kernel of `impl`.

    ``q [num_seqs, num_heads, head_size]`` float32; ``k_cache``, ``v_cache [num_blocks,
    block_size, num_kv_heads, head_size]`` float32; ``block_tables [num_seqs,
    max_blocks_per_seq]`` int32 (``-1`` padding); ``seq_lens [num_seqs]`` int32. Returns
    ``out`` shaped like `q`, of the same array type. `scale` defaults to ``1/sqrt(head_size)``;
    `impl` chooses whose ``paged_attention.cu`` runs (exercises, solutions or a folder).

    `version` picks the kernel: ``"v1"`` (``paged_attention.cu``, one block per head and
    sequence), ``"v2"`` (``paged_attention_v2.cu``, one block per head, sequence and partition
    of `partition_size` tokens, default `PARTITION_SIZE`, then a reduce kernel) or ``"auto"``
    (`choose_version`, vLLM's heuristic). `workspace` optionally supplies v2's temporaries
    (`v2_workspace`); they are validated like every other argument.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        backend = "cupy" if _cupy_usable() else "cpu"
    version = _resolve_version(version, q, seq_lens, partition_size, workspace)
    if version == "v2":
        if backend == "cupy":
            return _decode_cupy_v2(q, k_cache, v_cache, block_tables, seq_lens, scale=scale, impl=impl,
                                   partition_size=partition_size, workspace=workspace)
        return decode_v2_on_executor(q, k_cache, v_cache, block_tables, seq_lens, scale=scale, impl=impl,
                                     partition_size=partition_size, workspace=workspace)[0]
    if backend == "cupy":
        return _decode_cupy(q, k_cache, v_cache, block_tables, seq_lens, scale=scale, impl=impl)
    return decode_on_executor(q, k_cache, v_cache, block_tables, seq_lens, scale=scale, impl=impl)


def decode_on_executor(q, k_cache, v_cache, block_tables, seq_lens, *, scale=None, impl=None,
                       schedule="round_robin", timeout=None, version="v1", partition_size=None,
                       workspace=None):
    """`paged_attention_decode` on the CPU executor, with its extra knobs.

    `schedule` is one of ``pagedlab.cuda.SCHEDULES`` (the order in which simulated threads
    run; a missing barrier often shows under one schedule only), `timeout` a watchdog in
    seconds. The output is filled with NaN (`UNWRITTEN_BITS`) before the launch, so anything the
    kernel does not write shows up, and `unwritten(out)` tells which elements those are.
    `version`, `partition_size` and `workspace` as in `paged_attention_decode`.
    """
    from . import cuda

    version = _resolve_version(version, q, seq_lens, partition_size, workspace)
    if version == "v2":
        return decode_v2_on_executor(q, k_cache, v_cache, block_tables, seq_lens, scale=scale, impl=impl,
                                     partition_size=partition_size, workspace=workspace,
                                     schedule=schedule, timeout=timeout)[0]

    as_torch = _is_torch(q)
    arrays = [_host_array(x, name) for x, name in
              zip((q, k_cache, v_cache, block_tables, seq_lens), _ARG_NAMES, strict=True)]
    launch = validate(*arrays, scale=scale, max_dynamic_shared=cuda.MAX_DYNAMIC_SHARED_MEMORY)
    q_np = arrays[0]
    out = np.full(q_np.shape, UNWRITTEN_BITS, dtype=np.uint32).view(np.float32)
    if out.size:
        kernel = _kernel("cpu", kernel_source(KERNEL_FILE, impl))
        kernel(launch.grid, (NUM_THREADS,), (out, *arrays, *launch.scalars),
               shared_mem=launch.shared_mem, schedule=schedule, timeout=timeout)
    if as_torch:
        import torch

        return torch.from_numpy(out)
    return out


def unwritten(out) -> np.ndarray:
    """Boolean mask of the elements of a launch's `out` that the kernel never wrote."""
    if _is_torch(out):
        host = out.detach().cpu().numpy()
    elif not isinstance(out, np.ndarray) and hasattr(out, "get"):  # a CuPy array
        host = out.get()
    else:
        host = np.asarray(out)
    return np.ascontiguousarray(host, dtype=np.float32).view(np.uint32) == UNWRITTEN_BITS


def shared_memory_bytes(max_seq_len: int) -> int:
    """Dynamic shared memory one launch needs: one fp32 logit per token of the longest sequence."""
    return 4 * int(max_seq_len)


# --- validation -------------------------------------------------------------------------------

_ARG_NAMES = ("q", "k_cache", "v_cache", "block_tables", "seq_lens")
_SHAPES = {
    "q": "[num_seqs, num_heads, head_size]",
    "k_cache": "[num_blocks, block_size, num_kv_heads, head_size]",
    "v_cache": "[num_blocks, block_size, num_kv_heads, head_size]",
    "block_tables": "[num_seqs, max_blocks_per_seq]",
    "seq_lens": "[num_seqs]",
}
_DTYPES = {"q": "float32", "k_cache": "float32", "v_cache": "float32",
           "block_tables": "int32", "seq_lens": "int32"}


class Launch:
    """What `validate` derived: grid, dynamic shared memory and the typed scalar arguments."""

    def __init__(self, grid, shared_mem, scalars):
        self.grid, self.shared_mem, self.scalars = grid, shared_mem, scalars


def validate(q, k_cache, v_cache, block_tables, seq_lens, *, scale=None,
             max_dynamic_shared=None, to_host=np.asarray) -> Launch:
    """Check every argument the kernel trusts; raise TypeError/ValueError on the first problem.

    The arrays may be numpy or CuPy (anything with ``dtype``, ``shape``, ``ndim`` and
    ``flags``); `to_host` brings `block_tables` and `seq_lens` to numpy for the value checks.
    """
    arrays = dict(zip(_ARG_NAMES, (q, k_cache, v_cache, block_tables, seq_lens), strict=True))
    for name, a in arrays.items():
        if np.dtype(a.dtype) != np.dtype(_DTYPES[name]):
            raise TypeError(f"{name} must be {_DTYPES[name]}, got {np.dtype(a.dtype)} "
                            f"(convert with .astype(np.{_DTYPES[name]}))")
        expected_ndim = _SHAPES[name].count(",") + 1
        if a.ndim != expected_ndim:
            raise ValueError(f"{name} must be {expected_ndim}-D {_SHAPES[name]}, got shape {tuple(a.shape)}")
    for name, a in arrays.items():
        if not a.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous (the kernel indexes it as row-major); "
                             "pass a contiguous copy (np.ascontiguousarray / .contiguous())")

    num_seqs, num_heads, head_size = q.shape
    num_blocks, block_size, num_kv_heads, cache_head_size = k_cache.shape
    if tuple(v_cache.shape) != tuple(k_cache.shape):
        raise ValueError(f"v_cache must have the shape of k_cache {tuple(k_cache.shape)}, "
                         f"got {tuple(v_cache.shape)}")
    if cache_head_size != head_size:
        raise ValueError(f"head_size differs: q has {head_size}, k_cache/v_cache have {cache_head_size}")
    if block_tables.shape[0] != num_seqs or seq_lens.shape[0] != num_seqs:
        raise ValueError(f"q has {num_seqs} sequences but block_tables has {block_tables.shape[0]} "
                         f"rows and seq_lens {seq_lens.shape[0]} entries; they must agree")
    max_blocks_per_seq = block_tables.shape[1]
    for what, value in (("num_heads", num_heads), ("head_size", head_size),
                        ("num_blocks", num_blocks), ("block_size", block_size),
                        ("num_kv_heads", num_kv_heads), ("max_blocks_per_seq", max_blocks_per_seq)):
        if value < 1:
            raise ValueError(f"{what} must be at least 1, got {value}")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads "
                         f"({num_kv_heads}): each kv head serves num_heads // num_kv_heads query heads")
    if head_size > MAX_HEAD_SIZE:
        raise ValueError(f"head_size must be at most {MAX_HEAD_SIZE} (the kernel's shared q buffer), "
                         f"got {head_size}")
    if num_seqs > MAX_GRID_Y:
        raise ValueError(f"at most {MAX_GRID_Y} sequences per launch (gridDim.y), got {num_seqs}")

    lens = np.asarray(to_host(seq_lens), dtype=np.int64)
    table = np.asarray(to_host(block_tables), dtype=np.int64)
    capacity = max_blocks_per_seq * block_size
    for s, n in enumerate(lens):
        if not 1 <= n <= capacity:
            raise ValueError(f"seq_lens[{s}] = {n}, but every sequence needs 1 <= seq_len <= "
                             f"max_blocks_per_seq * block_size = {max_blocks_per_seq} * {block_size} "
                             f"= {capacity}")
    used = np.arange(max_blocks_per_seq)[None, :] < -(-lens[:, None] // block_size)
    bad = used & ((table < 0) | (table >= num_blocks))
    if bad.any():
        s, i = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(f"block_tables[{s}, {i}] = {table[s, i]}: sequence {s} has {lens[s]} tokens, "
                         f"so its first {-(-lens[s] // block_size)} entries must be block ids in "
                         f"[0, num_blocks = {num_blocks})")

    shared_mem = shared_memory_bytes(lens.max()) if num_seqs else 0
    if max_dynamic_shared is not None and shared_mem > max_dynamic_shared:
        raise ValueError(f"the longest sequence ({lens.max()} tokens) needs {shared_mem} bytes of "
                         f"dynamic shared memory for its logits; this device allows "
                         f"{max_dynamic_shared} (at most {max_dynamic_shared // 4} tokens)")

    if scale is None:
        scale = 1.0 / math.sqrt(head_size)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {type(scale).__name__}")
    if not math.isfinite(float(scale)):
        raise ValueError(f"scale must be finite, got {scale}")
    # Explicit C types: a bare Python float would be passed as a double.
    scalars = (np.float32(scale), np.int32(num_kv_heads), np.int32(head_size),
               np.int32(block_size), np.int32(max_blocks_per_seq))
    return Launch((num_heads, num_seqs), shared_mem, scalars)


# --- backends ---------------------------------------------------------------------------------

_KERNELS: dict = {}


def _kernel(backend: str, code: str, name: str = KERNEL_NAME, filename: str = KERNEL_FILE):
    """One compiled kernel per (backend, name, source text): a student's edit is picked up next call."""
    key = (backend, name, hashlib.sha256(code.encode()).hexdigest())
    if key not in _KERNELS:
        if backend == "cpu":
            from . import cuda

            _KERNELS[key] = cuda.RawKernel(code, name, backend="cpu", filename=filename)
        else:
            import cupy

            _KERNELS[key] = cupy.RawKernel(code, name, options=("--std=c++17",))
    return _KERNELS[key]


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "is_cuda")


def _host_array(x, name):
    if isinstance(x, np.ndarray):
        return x
    if _is_torch(x):
        if x.is_cuda:
            raise TypeError(f"{name} is a CUDA tensor but backend='cpu' runs on host memory; "
                            "use backend='cupy' (or 'auto' on a GPU machine), or move it with .cpu()")
        return x.detach().numpy()
    raise TypeError(f"{name} must be a numpy array or a torch CPU tensor for the CPU executor, "
                    f"got {type(x).__module__}.{type(x).__name__}")


def _cupy_usable() -> bool:
    try:
        from .cuda import cupy_available
    except ImportError:  # the executor package is missing: no GPU path either
        return False
    return cupy_available()


def _cupy_inputs(q, k_cache, v_cache, block_tables, seq_lens):
    """(cupy, the kind of array the caller passed, the five inputs on the device) for a GPU launch."""
    if not _cupy_usable():
        raise RuntimeError("backend='cupy' needs CuPy and a CUDA GPU (pip install 'pagedlab[gpu]'); "
                           "this machine has neither, use backend='cpu' or 'auto'")
    import cupy

    kind = "torch" if _is_torch(q) else "numpy" if isinstance(q, np.ndarray) else "cupy"
    arrays = [_device_array(cupy, x, name) for x, name in
              zip((q, k_cache, v_cache, block_tables, seq_lens), _ARG_NAMES, strict=True)]
    return cupy, kind, arrays


def _decode_cupy(q, k_cache, v_cache, block_tables, seq_lens, *, scale=None, impl=None):
    cupy, kind, arrays = _cupy_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    device = cupy.cuda.Device()
    limit = device.attributes["MaxSharedMemoryPerBlockOptin"] - STATIC_SHARED_BYTES
    launch = validate(*arrays, scale=scale, max_dynamic_shared=limit, to_host=cupy.asnumpy)
    out = cupy.full(arrays[0].shape, UNWRITTEN_BITS, dtype=cupy.uint32).view(cupy.float32)
    if out.size:
        kernel = _kernel("cupy", kernel_source(KERNEL_FILE, impl))
        # Above 48 KiB a kernel must opt in to more dynamic shared memory.
        if launch.shared_mem > 48 * 1024:
            kernel.max_dynamic_shared_size_bytes = launch.shared_mem
        kernel(launch.grid, (NUM_THREADS,), (out, *arrays, *launch.scalars),
               shared_mem=launch.shared_mem)
    if kind == "torch":
        import torch

        return torch.from_dlpack(out)
    return cupy.asnumpy(out) if kind == "numpy" else out


def _device_array(cupy, x, name):
    if isinstance(x, cupy.ndarray):
        return x
    if isinstance(x, np.ndarray):
        return cupy.asarray(x)
    if _is_torch(x):
        if not x.is_cuda:
            raise TypeError(f"{name} is a torch CPU tensor; the cupy backend needs CUDA tensors "
                            "(.cuda()) or backend='cpu'")
        return cupy.from_dlpack(x.detach())
    raise TypeError(f"{name} must be a CuPy array, a torch CUDA tensor or a numpy array, "
                    f"got {type(x).__name__}")


# --- Part E: the v2 split-K kernel (paged_attention_v2.cu) -------------------------------------
#
# v2 splits each context into partitions of PARTITION_SIZE tokens, one thread block each, and a
# second kernel merges the partitions. Its temporaries (per sequence, head and partition: the max
# logit, the exp-sum and an unnormalised output row) live in global memory the host allocates;
# like every other argument they are checked before the launch, because a kernel writing past a
# temporary that is too small corrupts whatever lies behind it.

V2_KERNEL_FILE = "paged_attention_v2.cu"
V2_KERNEL_NAME = "paged_attention_v2"
V2_REDUCE_NAME = "paged_attention_v2_reduce"
# vLLM's paged_attention_v2_launcher uses PARTITION_SIZE = 512 tokens (seed 002).
PARTITION_SIZE = 512
# vLLM's v1/v2 choice (vllm/attention/ops/paged_attn.py, forward_decode in the v0 engine): v1
# when the longest context is at most 8192 tokens AND either it fits in one partition (nothing
# to split) or num_seqs * num_heads > 512 (already enough blocks to fill the GPU).
V1_MAX_SEQ_LEN = 8192
V1_MIN_BLOCKS = 512
VERSIONS = ("v1", "v2", "auto")


def choose_version(num_seqs: int, num_heads: int, max_seq_len: int,
                   partition_size: int = PARTITION_SIZE) -> str:
    """``"v1"`` or ``"v2"`` by vLLM's heuristic (see `V1_MAX_SEQ_LEN`, `V1_MIN_BLOCKS`).

    The reasons: v2 costs a second launch and a pass over the temporaries, which only pays off
    when v1 would leave SMs idle (few ``num_seqs * num_heads`` blocks, each walking a long
    context) or when v1's per-block work and shared memory grow too large (very long contexts).
    """
    max_num_partitions = -(-int(max_seq_len) // int(partition_size))
    use_v1 = max_seq_len <= V1_MAX_SEQ_LEN and (max_num_partitions == 1 or num_seqs * num_heads > V1_MIN_BLOCKS)
    return "v1" if use_v1 else "v2"


class V2Workspace:
    """v2's temporaries: ``exp_sums``, ``max_logits`` ``[num_seqs, num_heads, P]`` and ``tmp_out``
    ``[num_seqs, num_heads, P, head_size]``, float32, P = max_num_partitions."""

    def __init__(self, exp_sums, max_logits, tmp_out):
        self.exp_sums, self.max_logits, self.tmp_out = exp_sums, max_logits, tmp_out

    @property
    def max_num_partitions(self) -> int:
        return int(self.exp_sums.shape[-1])

    def arrays(self) -> tuple:
        return self.exp_sums, self.max_logits, self.tmp_out


def v2_workspace(num_seqs: int, num_heads: int, head_size: int, max_seq_len: int,
                 partition_size: int = PARTITION_SIZE, xp=np) -> V2Workspace:
    """Fresh temporaries for contexts up to `max_seq_len`, filled with the unwritten-NaN pattern
    (`UNWRITTEN_BITS`) so a read of a slot no block wrote shows up as NaN. `xp`: numpy or cupy."""
    parts = max(1, -(-int(max_seq_len) // int(partition_size)))

    def poisoned(shape):
        return xp.full(shape, UNWRITTEN_BITS, dtype=xp.uint32).view(xp.float32)

    return V2Workspace(poisoned((num_seqs, num_heads, parts)), poisoned((num_seqs, num_heads, parts)),
                       poisoned((num_seqs, num_heads, parts, head_size)))


class V2Plan:
    """What `validate_v2` derived on top of `validate`: the two grids, shared memory, workspace."""

    def __init__(self, grid, reduce_grid, partition_size, shared_mem, reduce_shared_mem, workspace):
        self.grid, self.reduce_grid, self.partition_size = grid, reduce_grid, partition_size
        self.shared_mem, self.reduce_shared_mem, self.workspace = shared_mem, reduce_shared_mem, workspace


def _resolve_version(version, q, seq_lens, partition_size, workspace) -> str:
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}, got {version!r}")
    if version == "v1" and (partition_size is not None or workspace is not None):
        raise ValueError("partition_size and workspace belong to the v2 kernel; pass version='v2' "
                         "(or 'auto') or leave them out")
    if version != "auto":
        return version
    shape = getattr(q, "shape", None)
    if shape is None or len(shape) != 3 or getattr(seq_lens, "shape", (0,))[0] == 0:
        return "v1"  # let validation report the real problem
    max_len = int(seq_lens.max())
    return choose_version(int(shape[0]), int(shape[1]), max_len,
                          PARTITION_SIZE if partition_size is None else partition_size)


def validate_v2(q, k_cache, v_cache, block_tables, seq_lens, *, scale=None, partition_size=None,
                workspace=None, max_dynamic_shared=None, to_host=np.asarray, xp=np):
    """`validate` for v2 (without v1's whole-context shared-memory limit), plus the partition size
    and the temporaries. Returns ``(Launch, V2Plan)``; a missing `workspace` is allocated."""
    launch = validate(q, k_cache, v_cache, block_tables, seq_lens, scale=scale, max_dynamic_shared=None,
                      to_host=to_host)
    num_seqs, num_heads, head_size = q.shape
    block_size = k_cache.shape[1]
    if partition_size is None:
        partition_size = PARTITION_SIZE
    if isinstance(partition_size, bool) or not isinstance(partition_size, numbers.Integral):
        raise TypeError(f"partition_size must be an int number of tokens, got {type(partition_size).__name__}")
    partition_size = int(partition_size)
    if partition_size < block_size or partition_size % block_size:
        raise ValueError(f"partition_size ({partition_size}) must be a positive multiple of block_size "
                         f"({block_size}): a partition starts at a block boundary")
    max_len = int(np.asarray(to_host(seq_lens)).max()) if num_seqs else 1
    needed = max(1, -(-max_len // partition_size))
    shared_mem = 4 * partition_size
    if max_dynamic_shared is not None and shared_mem > max_dynamic_shared:
        raise ValueError(f"partition_size {partition_size} needs {shared_mem} bytes of dynamic shared "
                         f"memory for its logits; this device allows {max_dynamic_shared}")
    if workspace is None:
        workspace = v2_workspace(num_seqs, num_heads, head_size, max_len, partition_size, xp=xp)
    workspace = _check_workspace(workspace, num_seqs, num_heads, head_size, needed, partition_size,
                                 (q, k_cache, v_cache))
    parts = workspace.max_num_partitions
    reduce_shared = 4 * parts
    if max_dynamic_shared is not None and reduce_shared > max_dynamic_shared:
        raise ValueError(f"{parts} partitions need {reduce_shared} bytes of dynamic shared memory in the "
                         f"reduce kernel; this device allows {max_dynamic_shared}: use a larger partition_size")
    plan = V2Plan((num_heads, num_seqs, parts), (num_heads, num_seqs), partition_size, shared_mem,
                  reduce_shared, workspace)
    return launch, plan


_WS_NAMES = ("exp_sums", "max_logits", "tmp_out")


def _check_workspace(workspace, num_seqs, num_heads, head_size, needed, partition_size, inputs) -> V2Workspace:
    if isinstance(workspace, (tuple, list)) and len(workspace) == 3:
        workspace = V2Workspace(*workspace)
    if not isinstance(workspace, V2Workspace):
        raise TypeError("workspace must be a V2Workspace (see v2_workspace) or a tuple "
                        f"(exp_sums, max_logits, tmp_out), got {type(workspace).__name__}")
    arrays = dict(zip(_WS_NAMES, workspace.arrays(), strict=True))
    parts = getattr(arrays["exp_sums"], "shape", (0,))[-1]
    for name, a in arrays.items():
        if not hasattr(a, "dtype") or np.dtype(a.dtype) != np.float32:
            raise TypeError(f"workspace.{name} must be a float32 array, got "
                            f"{getattr(a, 'dtype', type(a).__name__)}")
        want = (num_seqs, num_heads, parts) + ((head_size,) if name == "tmp_out" else ())
        if tuple(a.shape) != want:
            raise ValueError(f"workspace.{name} must have shape {want} "
                             f"([num_seqs, num_heads, max_num_partitions{', head_size' if name == 'tmp_out' else ''}]), "
                             f"got {tuple(a.shape)}")
        if not a.flags.c_contiguous:
            raise ValueError(f"workspace.{name} must be C-contiguous")
    if parts < needed:
        raise ValueError(f"the workspace has room for {parts} partitions per sequence, but the longest "
                         f"sequence needs {needed} partitions of {partition_size} tokens")
    host = [a for a in (*arrays.values(), *inputs) if isinstance(a, np.ndarray)]
    names = [*_WS_NAMES, "q", "k_cache", "v_cache"][:len(host)]
    for i in range(len(host)):
        for j in range(i + 1, len(host)):
            if np.may_share_memory(host[i], host[j]):
                raise ValueError(f"workspace.{names[i]} overlaps {names[j] if j >= 3 else 'workspace.' + names[j]}: "
                                 "every temporary needs its own memory")
    return workspace


def _named_kernel(backend: str, code: str, name: str):
    return _kernel(backend, code, name, V2_KERNEL_FILE)


def decode_v2_on_executor(q, k_cache, v_cache, block_tables, seq_lens, *, scale=None, impl=None,
                          partition_size=None, workspace=None, schedule="round_robin", timeout=None):
    """The v2 kernel and its reduce on the CPU executor: ``(out, workspace)``.

    The workspace comes back so a notebook can look at each partition's max, exp-sum and
    partial output; slots of partitions past a sequence's end keep the unwritten NaN.
    """
    from . import cuda

    as_torch = _is_torch(q)
    arrays = [_host_array(x, name) for x, name in
              zip((q, k_cache, v_cache, block_tables, seq_lens), _ARG_NAMES, strict=True)]
    launch, plan = validate_v2(*arrays, scale=scale, partition_size=partition_size, workspace=workspace,
                               max_dynamic_shared=cuda.MAX_DYNAMIC_SHARED_MEMORY)
    q_np = arrays[0]
    out = np.full(q_np.shape, UNWRITTEN_BITS, dtype=np.uint32).view(np.float32)
    ws = plan.workspace
    if out.size:
        source = kernel_source(V2_KERNEL_FILE, impl)
        main, reduce = _named_kernel("cpu", source, V2_KERNEL_NAME), _named_kernel("cpu", source, V2_REDUCE_NAME)
        main(plan.grid, (NUM_THREADS,), (*ws.arrays(), *arrays, *launch.scalars, np.int32(plan.partition_size)),
             shared_mem=plan.shared_mem, schedule=schedule, timeout=timeout)
        reduce(plan.reduce_grid, (NUM_THREADS,),
               (out, *ws.arrays(), arrays[4], np.int32(q_np.shape[2]), np.int32(plan.partition_size),
                np.int32(ws.max_num_partitions)),
               shared_mem=plan.reduce_shared_mem, schedule=schedule, timeout=timeout)
    if as_torch:
        import torch

        return torch.from_numpy(out), ws
    return out, ws


def _decode_cupy_v2(q, k_cache, v_cache, block_tables, seq_lens, *, scale=None, impl=None,
                    partition_size=None, workspace=None):
    cupy, kind, arrays = _cupy_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    limit = cupy.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"] - STATIC_SHARED_BYTES
    launch, plan = validate_v2(*arrays, scale=scale, partition_size=partition_size, workspace=workspace,
                               max_dynamic_shared=limit, to_host=cupy.asnumpy, xp=cupy)
    out = cupy.full(arrays[0].shape, UNWRITTEN_BITS, dtype=cupy.uint32).view(cupy.float32)
    ws = plan.workspace
    if out.size:
        source = kernel_source(V2_KERNEL_FILE, impl)
        main, reduce = _named_kernel("cupy", source, V2_KERNEL_NAME), _named_kernel("cupy", source, V2_REDUCE_NAME)
        for kernel, smem in ((main, plan.shared_mem), (reduce, plan.reduce_shared_mem)):
            if smem > 48 * 1024:
                kernel.max_dynamic_shared_size_bytes = smem
        main(plan.grid, (NUM_THREADS,), (*ws.arrays(), *arrays, *launch.scalars, np.int32(plan.partition_size)),
             shared_mem=plan.shared_mem)
        reduce(plan.reduce_grid, (NUM_THREADS,),
               (out, *ws.arrays(), arrays[4], np.int32(arrays[0].shape[2]), np.int32(plan.partition_size),
                np.int32(ws.max_num_partitions)), shared_mem=plan.reduce_shared_mem)
    if kind == "torch":
        import torch

        return torch.from_dlpack(out)
    return cupy.asnumpy(out) if kind == "numpy" else out
