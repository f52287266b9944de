# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Welcome to pagedlab
#
# A language model that answers a chat keeps, for every token it has seen, a *key* and a *value*
# vector per layer: the **KV cache**. Serving many chats at once is mostly a question of where
# those vectors live. vLLM's answer, **PagedAttention**, borrows the page table from operating
# systems: the cache is cut into small fixed-size blocks, and each sequence owns a table that maps
# its logical blocks to whichever physical blocks happened to be free.
#
# In this course you build that machinery yourself, from the bottom up:
#
# ```
# page table ──► allocator ──► fork / copy-on-write ──► paged KV tensors ──► attention ──► CUDA kernel
#  (Part A: HW3, Python over real C memory)              (Part B: torch)                 (Part C)
# ```
#
# - **Part A** is the HW3 memory manager: a two-level block table, first-fit allocation,
#   reference counts, copy-on-write and an intrusive linked list, written in Python against *C
#   memory* (`ctypes` structs on a tracked heap, raw pool bytes), so pointers, padding and leaks
#   are real.
# - **Part B** turns block tables into tensors: slot mapping, writing K/V into a paged cache,
#   gathering it back, and attention over it in torch.
# - **Part C** is the CUDA paged-attention kernel. It runs on your CPU through pagedlab's own
#   executor (no GPU needed), and unchanged on a GPU with CuPy.
# - **Part D** (notebook 09) adds prefix caching, builds the contiguous baseline's buddy allocator
#   and measures what paging buys a server.

# %% [markdown]
# ## How the course works
#
# 1. **You edit files in `exercises/`**, not the notebooks. Each task is a function with a stub
#    that raises `NotImplementedError`; everything around it (helpers, docstrings) is given.
# 2. **Notebooks load your code** with `pagedlab.load("memory_manager")`. Every call re-reads the
#    file, so after an edit just re-run the cell (no kernel restart).
# 3. **Graded cells** look like `pagedlab.graded.run("task2")`. They print one ✓/✗ line per check
#    and, on failure, which rule was broken, what was expected and what your code did.
# 4. **Grade everything** from a terminal in the course folder, exactly as the autograder does
#    (`.venv/bin/` is where the course installed it; in an activated venv `pagedlab` alone works):
#
#    ```
#    .venv/bin/pagedlab grade --impl exercises
#    ```
#
#    Your `exercises/` start as stubs; each graded cell says what its functions must do. To run
#    the notebooks on another folder of code (a classmate's pair-programming copy, a backup),
#    set `PAGEDLAB_IMPL=path/to/folder` before starting Jupyter.
# 5. **Part A in Python or in C.** Finish `memory_manager.py` (notebooks 02–05) *or*
#    `llm_memory.c` (notebook 02c). Every grade takes Part A from the file that is not the
#    untouched stub, and says which on its first line; the notebooks run that file too. Edited
#    both? Python is graded unless `exercises/track.txt` says `c` (notebook 02c explains).
#
# | notebook | topic | tasks |
# |---|---|---|
# | 00 | welcome, environment check | – |
# | 01 | how big is the KV cache, and where does memory go to waste | – |
# | 02 | the two-level block table | 1 `llm_init`, 2 `create_sequence` / `free_sequence` |
# | 02c | the C track: Part A in C (instead of, or after, 02–05) | 1–5 in `llm_memory.c` |
# | 03 | the intrusive registry and `container_of` | – |
# | 04 | fork, reference counts, copy-on-write | 3 `fork_sequence`, 4 `append_kv` |
# | 05 | first-fit, out of memory, a clean teardown | 5 `llm_destroy` (and all of Part A again) |
# | 06 | from block tables to tensors: the paged KV cache, slot mapping | 6, 7 |
# | 07 | paged attention in torch (gather, then attend) | 8, 9 |
# | 08 | the CUDA kernel (CPU executor, CuPy on a GPU) | 10 |
# | 09 | prefix caching, the buddy allocator and the utilization study | 11, 12 |
# | 10 | serving under memory pressure: swap, preemption, the v2 kernel | 13, 14 |

# %% [markdown]
# ## Is this machine ready?
#
# `pagedlab doctor` (also a terminal command: `.venv/bin/pagedlab doctor`) lists what the course
# needs and what it found. *optional* rows are fine: without a GPU, kernels run on the CPU executor.

# %%
# %matplotlib inline
import pagedlab

# Your exercises/memory_manager.py (PAGEDLAB_IMPL, or impl=, picks another folder).
mm = pagedlab.load("memory_manager")
print("memory_manager loaded from", mm.__file__)
print(pagedlab.track.describe())  # Part A: memory_manager.py, or llm_memory.c on the C track

# %%
# NBVAL_IGNORE_OUTPUT
from pagedlab import doctor

print(doctor.format_table(doctor.rows()))

# %% [markdown]
# ## Warm-up: the engine's constants
#
# Part A works with deliberately tiny numbers so that every block fits in a picture. They live in
# `pagedlab.student.hw3` (the "header file" of HW3) and your `memory_manager` imports them from there.
#
# **What your files in `exercises/` may import** (the student API, `pagedlab.student`): from
# pagedlab only `pagedlab.student.hw3` and `pagedlab.student.cmem` (also reachable as
# `pagedlab.hw3` and `pagedlab.cmem`); besides those `torch`, `numpy`, and from Python's standard
# library `math`, `ctypes` (for the structs), `typing`, `hashlib`, `operator`, `collections`,
# `dataclasses`, `functools`, `itertools`, `heapq`, `bisect` and a few more. The rest of pagedlab
# (the checks, the harness that builds engines for them, the reference models) is for the
# notebooks, not for your files: the grader refuses a file that imports it, names the line, and
# scores that task 0. The same goes for loading C libraries, starting processes and `eval`/`exec`.
#
# Before running the next cell, predict: how many KV records can one sequence hold at most?

# %%
# NBVAL_CHECK_OUTPUT
from pagedlab.student import hw3

print(f"BLOCK_SIZE         = {hw3.BLOCK_SIZE} bytes per physical block")
print(f"KV_PER_BLOCK       = {hw3.KV_PER_BLOCK} records (one int32 each: {hw3.BLOCK_SIZE} // 4)")
print(f"L1_PT_SIZE         = {hw3.L1_PT_SIZE} pointers to L2 tables")
print(f"L2_PT_SIZE         = {hw3.L2_PT_SIZE} block ids per L2 table")
print(f"MAX_LOGICAL_BLOCKS = {hw3.MAX_LOGICAL_BLOCKS} = {hw3.L1_PT_SIZE} x {hw3.L2_PT_SIZE}")
print(f"longest sequence   = {hw3.MAX_LOGICAL_BLOCKS * hw3.KV_PER_BLOCK} records")
print(f"a 4 KiB pool       = {4096 // hw3.BLOCK_SIZE} blocks")

# %% [markdown]
# In a real server a "record" is the key and value vectors of one token for every layer, and a
# block holds 16 tokens of them (vLLM's default block size is 16 too). Notebook 01 works out how
# many bytes that is. Then notebook 02 starts the homework.
