"""pagedlab.cuda — run an unchanged CUDA C kernel (CuPy RawKernel source) on a CPU, exactly.

Students, CI and most graders have no GPU. This package gives CuPy's call shape,
``RawKernel(code, name)(grid, block, args, shared_mem=...)``, on top of either CuPy (a GPU is
present) or a small CPU executor that enforces CUDA's rules instead of hiding them.

Design:

* Build. The source is compiled unchanged by the system C++ compiler (C++20; g++ >= 12 or
  clang) with a force-included ``prelude.h`` that maps CUDA keywords, built-in variables,
  intrinsics, atomics (``std::atomic_ref``), warp operations and all vector types. CUDA's
  headers are on the include path (``include/``): ``cooperative_groups.h`` (+ ``/reduce.h``),
  ``cuda_runtime.h``, ``cuda.h``, ``device_launch_parameters.h``, ``cuComplex.h``,
  ``cuda_fp16.h``, ``cuda_bf16.h``, ``math_constants.h``, ``vector_types.h``. The prelude pulls
  in only std-namespaced C++ headers, so a kernel may define its own ``lerp`` or ``clamp``. Builds are cached in
  ``$PAGEDLAB_CACHE/cuda`` or ``~/.cache/pagedlab/cuda`` under a hash of source, prelude, flags
  and compiler; builds are written to a temporary file and renamed, so concurrent processes
  are safe. Compiled with -O2, no fast-math, no FMA contraction (results match a careful float
  reference; the GPU's ``__expf`` etc. are computed exactly here).
* Execution. Each CUDA thread is a fiber (hand-written context switch on x86-64 and AArch64,
  ``ucontext`` elsewhere). One OS worker runs all fibers of a block, so ``__shared__`` is simply
  ``thread_local``: valid for ``__shared__ float x[8];`` and ``extern __shared__ float buf[];``.
  Several workers (one per core; ``PAGEDLAB_CUDA_WORKERS``) take blocks from a queue.
* Collapsed kernels (``collapse.py``, COX's hierarchical collapsing). An unchecked launch in the
  default ``round_robin`` schedule, with whole warps (a multiple of 32 threads, at most 1024),
  of a kernel in the collapsible class runs without fibers: the kernel's body is cut at its
  barriers and warp operations, and each piece runs for every thread of the block as a loop
  over thread ids: thread 0's piece, then thread 1's, the order round_robin gives (except that
  a statement holding a warp operation finishes for every thread before the next piece starts),
  so results are bit-identical with the fibers', and a missing barrier shows as it does under
  round_robin (the notebook's demo kernel gives the same wrong bits). Variables live across a
  cut become per-thread arrays;
  ``__device__`` functions with warp operations are inlined, shuffles and votes read
  per-thread buffers. One exception to that order, picked by a cost heuristic for a loop over a
  thread's elements (``for (d = tid; d < n; d += blockDim.x)``) whose piece touches no other
  memory: all threads' iteration k runs before anyone's k + 1 when its inner loop reads with a
  stride (the decode kernel's V loop), groups of 8 threads are interleaved when the inner loop
  is a chain of dependent adds (its K loop). Race-free kernels give the same bits either way;
  a race inside such a loop may come out differently (``check="race"`` reports it). The class,
  detected conservatively (every other kernel runs on fibers, unchanged): no atomics, printf,
  assert/__trap, volatile, asm, clock, __syncwarp, cooperative groups, goto, #include beyond
  the math/fp16 headers; barriers and warp operations (full mask) only under conditions built
  from parameters, elements of ``const T*`` parameters, blockIdx/blockDim/gridDim, literals
  and variables computed from those alone (so no barrier can be divergent), never inside a
  condition; ``__device__`` functions with barriers or warp operations (or reading threadIdx)
  take their parameters by value, return once at their end and are inlined; ``return`` only
  after the last barrier, or ``if (such a condition) return;`` at the kernel's top level (the
  whole block leaves); ``__shared__`` declared at the kernel's top level; parameters never
  assigned. Both decode kernels (``paged_attention.cu``, ``paged_attention_v2.cu``) are in it.
  ``kernel.collapsible`` is ``""`` or the reason, ``kernel.last_mode`` says which ran.
  Checked launches (``check=``, ``profile``, ``interleaved``) and the other schedules always run
  on fibers, so every sanitizer report, ``BarrierError`` and ``WarpSyncError`` is the fibers'.
  Dynamic shared memory canaries are checked after each thread's piece and at each barrier, as
  at the fibers' switches; a crash in a collapsed kernel names its block but no thread.
  The collapsed version is compiled into the kernel itself (behind a flag of the launch), so
  both use the same ``__shared__`` variables. ``PAGEDLAB_CUDA_COLLAPSE=0``: fibers always;
  ``with cuda.fibers_only():`` the same for a block of code (the graded checks of Tasks 10 and
  14 launch inside one, so a grade never depends on the collapsing pass).
* Rules. ``__syncthreads()`` opens only when every thread of the block waits at the same call;
  a thread that returned early never arrives (``BarrierError``, listing who waits where). A warp
  operation completes only when every lane in its mask calls the same operation with the same
  mask (``WarpSyncError``); lanes beyond a partial last warp are ignored in masks, but a
  shuffle that reads such a lane (a full mask in a 48-thread block) is a ``WarpSyncError``.
  Shuffles from a lane outside the mask return poison (all bits set).
* Shared memory is poisoned at block start (bytes 0xff: NaN floats, -1 ints), static and
  dynamic alike (Linux; on macOS only dynamic shared memory is poisoned). Bytes past the
  launch's ``shared_mem`` hold a NaN canary: the first 16 KiB after the end are checked at
  every barrier, the whole rest at block end. A *write* past the end is a
  ``SharedMemoryError`` naming the byte offset, the element and the barrier after which it was
  seen (which thread wrote it is not known); a *read* past the end yields NaN. Overruns of
  static ``__shared__`` arrays are detected only with checks on (an index past a dimension).
* Isolation. A launch runs in the kernel runner (``runner.cpp``), a separate program with no
  Python interpreter in it; arguments and results go through one shared region
  (``PAGEDLAB_CUDA_ISOLATE=0`` runs in-process, except in a grading child); it is
  spawned before the argument arrays are copied into the region and waits for them on a pipe,
  so its start and the copy overlap. A launch reuses the runner of the last clean launch of
  the same kernel and build (a *served* runner: it keeps its region and its mapping of the
  arguments, and runs a launch per byte on a pipe), which makes a decode launch ~40% faster;
  every global is rewritten before each launch and the sanitizer's shadow memory is made anew,
  so a kernel sees what a fresh runner would, and any crash, timeout, error or sanitizer report
  retires the runner. Every launch in a grading child gets a fresh runner;
  ``PAGEDLAB_CUDA_SERVE=0`` does that for all. A runner dies with the thread that spawned it
  (``PR_SET_PDEATHSIG``), so a notebook kernel killed during a launch that never ends leaves no
  runner spinning. The runner
  cannot exec or fork, and Python never loads a kernel library (parameters and globals are
  asked of the runner), so kernel code cannot reach Python's C API.
  Chosen over in-process sigaltstack/siglongjmp recovery: a spinning kernel cannot be stopped
  in-process, and a kernel that scribbled over the heap would leave the notebook corrupted.
  segfaults become ``KernelCrash`` (with file:line from the library's line tables when the
  fault is in kernel code, and "null pointer"/"stack overflow" when recognisable); a launch
  past ``timeout`` seconds (default 30, ``PAGEDLAB_CUDA_TIMEOUT``; 4x that for a checked launch) is killed: ``KernelTimeout``
  says which block/thread was running and how many blocks had finished (a slow but progressing
  launch is told to raise ``timeout=``, with an estimate). Output arrays (non-const pointers) travel through
  MAP_SHARED pages that end at a guard page, so writing just past an output array faults;
  arrays behind ``const T*`` are read in place (a write through a cast-away const is lost).
  Whatever the kernel wrote before an error is copied back, as it would stay on a GPU.
  Kernel ``printf`` output is printed to Python's ``sys.stdout`` after the launch (so it shows
  in the notebook cell); a failed ``assert`` or ``__trap()`` is a ``KernelCrash`` naming the
  condition, line and thread.
* Schedules decide which runnable fiber goes next at every rendezvous (a collapsed kernel's
  order is round_robin's): ``round_robin``
  (ascending thread index), ``warp0_first`` (warp 0 whenever it can run, then the last warp
  down), ``reversed`` and ``random:<seed>``. A missing barrier can hide under one order, so
  tests and graders iterate over ``SCHEDULES``.
* Launch cost: a cached build is found by hash in about a millisecond; a launch in a served
  runner costs ~0.25 ms, one that spawns a runner ~2 ms; the course's paged-attention kernel (64 blocks x 128 threads) runs in well under
  0.3 s on 2 cores (``benchmarks/bench_cuda_cpu.py``).
* Arguments are checked against the kernel's parameter list before launch. The types come from
  the compiler (each build exports what every parameter is after typedefs, macros, ``-D`` and
  templates), not from the text: numpy arrays of the exact dtype, contiguous (C or Fortran
  order: the kernel sees raw memory), for ``T*`` (``float4*`` takes float32, ``__half*``
  float16, ``__nv_bfloat16*`` uint16 bits, ``Struct*`` any array whose size in bytes is a
  whole number of structs, as CuPy passes it, e.g. float32 for ``const Matrix<float>*``); numpy scalars of the exact type for scalars (a bare Python int/float is refused:
  CuPy would send 64 bits); structs and vector types by value as a structured numpy scalar,
  an array of the right bytes (a float3 as three float32) or ``bytes``. Violations raise
  ``TypeError``. A view with an offset (``a[3:]``) maps its whole underlying array, so
  ``p[-1]`` reads and writes the real neighbour, as on a GPU.
* ``RawModule(code=..., options=..., name_expressions=[...])`` as in CuPy: ``get_function``
  takes a kernel name or a template instance (``"scale<float>"``, ``static`` template kernels
  too); ``get_global(name)`` returns a writable numpy array of a file-scope (or ``extern "C"
  {}``-block) ``__constant__``/``__device__`` variable, every declarator of ``__constant__
  float a, b;`` included. The module keeps that array as the variable's one copy and writes it
  into whichever build runs a launch (``executor.launch(..., globals=)``), so checked and
  unchecked launches read the same values.
* ``extern __shared__`` may be declared at file scope, in a kernel, in a device function, a
  function template or a member of a class template (the samples' ``SharedMemory<T>``).
* Cooperative groups: ``this_thread_block()``, ``tiled_partition<N>``/``tiled_partition(g, n)``
  (tiles of 1-32 threads), ``thread_block_tile`` shuffles and votes, ``cg::reduce`` with
  ``plus``/``less``/``greater``/``bit_*``, ``coalesced_threads()`` (the lanes of a warp waiting
  at the same call once nothing else can run), all through the exact warp rendezvous.
  ``this_grid().sync()`` stops the launch with an explanation (it cannot be exact here).
* ``compile_ptx`` compile-checks the source for the GPU with NVRTC from a pip wheel.

* Sanitizer (``pagedlab.cuda.sanitizer``): ``check="race,memcheck,init"`` (or
  ``True``/``"all"``) on ``RawKernel`` or on one launch, ``with cuda.checking(): ...`` for a
  scope, or ``PAGEDLAB_CUDA_CHECK``. A second build instrumented with ``-fsanitize=thread``
  (without the TSan runtime: the executor implements the ``__tsan_*`` calls) reports
  shared-memory races (``RaceError``), accesses outside the argument arrays or past
  ``shared_mem`` (``OutOfBoundsError``) and reads of unwritten shared memory
  (``UninitializedReadError``), the same report under every schedule. A second write of the
value a location already holds is not reported (compute-sanitizer's INFO severity: "no impact
on program execution"), so all lanes storing one ``cg::reduce`` result is clean. An atomic and a plain
  access by another thread to one shared element with no barrier between are a race (two
  atomics are not). Global-memory races too: two blocks (never ordered within a launch), or
  threads of one block with no barrier between, touching one word of an argument array, at
  least one writing, not both atomic (a write followed by ``__threadfence()`` is published to
  other blocks, as in the last-block reduction); the report names both threads, blocks and
  lines. Checked builds are also built with ``-fsanitize=bounds``: an index past a fixed-size
  array (a thread's ``float acc[4]`` written at ``acc[4]``, a static ``__shared__`` array's
  dimension) is an ``OutOfBoundsError``. ``schedule="interleaved"`` runs the instrumented build
  with a thread switch before each access to an argument array, so an unsynchronised
  ``out[0] += v`` loses updates with checks off, as on a GPU. Checks-on CPU time is at most about 10x checks-off on the corpus
  benchmark, tiled shared-memory matmuls included (one shadow cell per 4-byte word of shared
  memory until a word is accessed in parts); ``benchmarks/bench_cuda_corpus.py`` measures it. ``kernel.profile(...)`` returns per-line sectors per warp request and
  bank-conflict ways (``pagedlab.cuda.profile``). Linux only; the CuPy backend ignores ``check=``.

* Watchdog: before killing a launch past ``timeout=``, the executor asks each worker where its
  running thread is, and the ``KernelTimeout`` names that line (the spinning loop, not the
  last barrier passed) and what the block's other threads were doing.

Real kernels' idioms: the inline PTX kernels use runs (``pagedlab.cuda.ptx`` rewrites each
``asm`` statement into C++ on its own line: moves and packs, special registers, ``cvt`` in every
rounding mode, f16/bf16/f32 arithmetic, integer and bit operations such as ``lop3``/``prmt``,
``ld``/``st`` as checked accesses, ``atom``/``red``, ``shfl.sync``, ``vote``); CUB's block and
warp primitives (``<cub/cub.cuh>``; TempStorage reused without a barrier is a race the sanitizer
reports); WMMA fragments (``<mma.h>``, emulated with a lane layout of pagedlab's own, as CUDA
leaves it unspecified); FP8 (``<cuda_fp8.h>``) and ``cuda_fp16.h``/``cuda_bf16.h`` rounding as
the GPU does, bit for bit; ``cg::labeled_partition``, ``__match_any_sync``.

Refused by name (``pagedlab.cuda.unsupported``, a ``CompileError`` naming the feature and line
and what to write instead): dynamic parallelism (a launch inside a kernel), legacy texture
references (``texture<...>``), texture and surface objects (``cudaTextureObject_t``; created on
the host from CUDA arrays the executor does not have), libcu++'s ``cuda::barrier`` /
``cuda::memcpy_async`` (``<cuda/barrier>``; the ``__syncthreads()`` rewrite is named) and a PTX
instruction outside the run set that a kernel calls (tensor-core ``mma``, ``cp.async``,
branches: the message names the CUDA C to write instead; decided by the compiler, so PTX helpers
no kernel calls compile). Decided on the preprocessed source (the executor's own macros and
``-D`` options), so a launch inside a ``#define`` that device code never expands, or
``#include <cuda/barrier>`` under an ``#if`` not taken, compiles.
``backend="cupy"`` runs them on a GPU.

``__CUDA_ARCH__`` is 800 (Ampere: bf16 paths guarded by ``>= 800`` are taken, with the bf16x2
intrinsics) unless the options say ``-arch=sm_XX`` / ``--gpu-architecture=compute_XX``.
``extern __shared__`` may also be declared inside a namespace (vLLM's ``namespace vllm``), and
``void __global__ k(...)`` is a kernel. Tables of device pointers (vLLM's ``copy_blocks``
takes an int64 array of cache addresses): ``cuda.device_ptr(a)`` is the address of numpy array
``a`` as CuPy's ``a.data.ptr`` is; a launch whose int64/uint64 argument holds it maps ``a`` too,
and the table's entries point at ``a``'s bytes inside the launch (the caller's table is left
as it was).

CPU-only keywords of a launch: ``schedule=``, ``timeout=`` (seconds), ``workers=``; the CuPy
backend ignores them. ``RawKernel(..., filename="paged_attention.cu")`` names the source in
reports (default ``<kernel name>.cu``).

Limits: Thrust, asynchronous copies (``memcpy_async``, ``cp.async``), grid-wide sync, tiles larger than a warp; a kernel's writes to a
``__device__`` variable are not copied back from an isolated launch (host writes through
``get_global`` are seen); NVRTC options other than -D are ignored on the CPU; several
``extern __shared__`` arrays do not alias each other as they do on a GPU (use one array and
cast); ``__shared__`` variables are 64-byte aligned (larger ``alignas`` is capped at 64); a
misaligned vector access is reported only when the compiler emitted an aligned vector
instruction for it; mask-less pre-CUDA-9 warp intrinsics (``__shfl_down``) run on the
non-returned lanes, with a FutureWarning; at most 1024 threads per block; Linux and macOS only
(fork, mmap). Each CUDA thread has a 256 KiB stack (``PAGEDLAB_CUDA_STACK_KB``).
"""

from .errors import (
    BarrierError,
    CompileError,
    KernelCrash,
    KernelError,
    KernelTimeout,
    OutOfBoundsError,
    RaceError,
    SanitizerError,
    SharedMemoryError,
    UninitializedReadError,
    WarpSyncError,
)
from .executor import device_ptr, fibers_only
from .kernel import MAX_DYNAMIC_SHARED_MEMORY, SCHEDULES, RawKernel, RawModule, cupy_available
from .nvrtc import compile_ptx
from .sanitizer import checking

__all__ = [
    "RawKernel", "RawModule", "SCHEDULES", "device_ptr", "MAX_DYNAMIC_SHARED_MEMORY", "compile_ptx", "cupy_available",
    "KernelError", "CompileError", "BarrierError", "WarpSyncError", "SharedMemoryError",
    "KernelCrash", "KernelTimeout",
    "SanitizerError", "RaceError", "OutOfBoundsError", "UninitializedReadError", "checking", "fibers_only",
]
