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
# # 02c · HW3 in C: the same checks, pictures and explorer on `llm_memory.c`
#
# The HW3 handout is C. Everything notebooks 02–05 do with `memory_manager.py` works on a C file
# too: `exercises/llm_memory.c` has the same five tasks, fenced the same way, against the header
# `hw3.h` that ships with pagedlab (the structs have exactly the layout of `pagedlab.hw3`).
#
# pagedlab compiles the file with your system C compiler (`-std=c11 -Wall -Wextra -g`, warnings
# shown), loads it with ctypes, and hands the graded checks an object with the Python call shape.
# Two things make C bugs readable instead of fatal:
#
# - your `malloc` / `calloc` / `free` go through pagedlab's **tracked heap**, with the C file and
#   line: a leak, a double free or a free of a pointer read out of freed memory is reported at
#   the line, as Valgrind would;
# - a **crash** (segfault, `abort()`, an endless loop) stops only the call: you get an exception
#   naming the signal and the C line, and the kernel lives on.
#
# This appendix is for courses that teach HW3 in C. The graded cells run Tasks 1–5 on the C file.
#
# **Which file is graded.** Your course folder has both `memory_manager.py` and `llm_memory.c`;
# you finish one of them. Every grade (`pagedlab grade`, Gradescope, your instructor's class
# grading) takes Part A from the file that is **not** the untouched stub: finish `llm_memory.c`,
# leave `memory_manager.py` as it came, and you are on the C track, graded from C, and notebooks
# 02–06 run your C engine too. Whitespace and comments do not count as edits. If you edited both
# files, Python is graded unless you choose: write `c` in `exercises/track.txt` (and upload it with
# your files on Gradescope), or run `pagedlab grade --track c`. The first line of every grade says
# which file it graded and why; the cell below says it too.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt

import pagedlab
from pagedlab import cmem, hw3, loader, viz
from pagedlab.engine import ctrack
from pagedlab.engine.pool import Pool

# Your exercises/llm_memory.c (PAGEDLAB_IMPL, or impl=, picks another folder).
source = loader.source_path("llm_memory.c")
mm = ctrack.load(source)
print("compiled", source.name, "in", "cache" if not mm.build.seconds else f"{mm.build.seconds:.2f} s")
print("compiler warnings:", mm.warnings or "none")
print("header:", ctrack.INCLUDE / "hw3.h")
print(pagedlab.track.describe())  # which file your grade takes Part A from, and why

# %% [markdown]
# ## One layout, two languages
#
# The checks read a C engine through the same ctypes views as a Python one, so the structs must
# agree byte for byte. The compiled library reports C's `sizeof` and `offsetof`:

# %%
c_layout = [mm._lib.pl_layout(i) for i in range(4)]
print("sizeof(Sequence) =", c_layout[0], " offsetof(Sequence, node) =", c_layout[1])
print("sizeof(LLMEngine) =", c_layout[2], " offsetof(LLMEngine, active_seqs) =", c_layout[3])
assert c_layout == [hw3.ctypes.sizeof(hw3.Sequence), hw3.Sequence.node.offset,
                    hw3.ctypes.sizeof(hw3.LLMEngine), hw3.LLMEngine.active_seqs.offset], "hw3.h drifted"

# %% [markdown]
# ## What a C bug looks like here
#
# A deliberately broken engine (not HW3: four lines per function, written to fail) shows the
# three kinds of report. Each call raises a Python exception whose message names the C line; the
# tracked heap keeps the leak report.

# %%
import tempfile
from pathlib import Path

BROKEN = r"""
#include <stdlib.h>
#include "hw3.h"

LLMEngine *llm_init(void *pool_addr, size_t pool_size) {
    LLMEngine *e = malloc(sizeof *e);
    e->pool_base_ptr = pool_addr;
    e->ref_count = calloc(pool_size / BLOCK_SIZE, sizeof(int));   /* never freed: a leak */
    return e;
}
int free_sequence(LLMEngine *e, int seq_id) {
    int *scratch = malloc(4 * sizeof *scratch);
    (void)e; (void)seq_id;
    free(scratch);
    free(scratch);                                                /* double free */
    return 0;
}
int append_kv(LLMEngine *e, int seq_id, int kv_data) {
    Sequence *seq = NULL;                                         /* "found" nothing */
    (void)e;
    seq->kv_count = seq_id + kv_data;                             /* NULL dereference */
    return 0;
}
int llm_destroy(LLMEngine *e) { free(e); return 0; }
"""
demo_dir = Path(tempfile.mkdtemp(prefix="pagedlab-c-demo-"))
(demo_dir / "llm_memory.c").write_text(BROKEN)
broken = ctrack.load(demo_dir / "llm_memory.c")
pool = Pool(64 * 8)
heap = cmem.snapshot()
engine = broken.llm_init(pool.addr, pool.size)
for call in (lambda: broken.free_sequence(engine, 1), lambda: broken.append_kv(engine, 1, 2)):
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - shown, not hidden
        print(f"{type(exc).__name__}: {exc}\n")
broken.llm_destroy(engine)
print(cmem.leak_report(heap))
print("missing functions are 'not implemented':", end=" ")
try:
    broken.create_sequence(engine, 1, 1)
except NotImplementedError as exc:
    print(exc)

# %% [markdown]
# The tracked heap is a ledger of the real allocator's traffic, not a guess: when Valgrind is
# installed (`pagedlab doctor` says), the same session on plain libc `malloc` gives the same
# counts and the same leaked blocks at the same lines.

# %%
from pagedlab.engine import cnative

if cnative.valgrind():
    session = [("init", 8, 0), ("destroy", 0, 0)]
    ours, theirs = cnative.run_tracked(demo_dir / "llm_memory.c", session), cnative.run_valgrind(demo_dir / "llm_memory.c", session)
    for report in (ours, theirs):
        print(f"{report.tool:9} {report.allocs} allocs, {report.frees} frees, {report.bytes_allocated} bytes; "
              f"lost: {report.leaks}")
else:
    print("valgrind is not installed: skipping the cross-check (apt-get install valgrind)")

# %% [markdown]
# ## Graded: Tasks 1–5 from `llm_memory.c`
#
# The very checks of notebooks 02–05, on your C file: `track="c"` grades `llm_memory.c` whatever
# the rule above would pick (notebooks 02–05's graded cells follow the rule). Each ✗ names the
# broken rule; heap errors, leaks and crashes also name your C line.

# %%
pagedlab.graded.run("task1", track="c")

# %%
pagedlab.graded.run("task2", track="c")

# %%
pagedlab.graded.run("task3", track="c")

# %%
pagedlab.graded.run("task4", track="c")

# %%
pagedlab.graded.run("task5", track="c")

# %% [markdown]
# ## Pictures and the explorer on the C engine
#
# `viz` and the `Explorer` take any module with the HW3 call shape, so they draw your C engine
# as they draw a Python one: the pool with its owners and ref counts, and a block table.

# %%
pagedlab.graded.require("task1", "task2", "task3", "task4", track="c")  # a crash here would end the kernel
pool = Pool(64 * 32)
engine = mm.llm_init(pool.addr, pool.size)
mm.create_sequence(engine, 1, 40)
mm.fork_sequence(engine, 1, 2)
mm.append_kv(engine, 2, 7)          # copy-on-write of the shared last block
mm.create_sequence(engine, 3, 300)
viz.draw_engine(engine, title="a C engine: seq 2 forked from 1, then copy-on-write")
plt.show()

# %%
pagedlab.graded.require("task2", "task5", track="c")
mm.llm_destroy(engine)

from pagedlab.explorer import Explorer

ex = Explorer(mm=mm, pool_blocks=16)
ex.create(1, 20)
ex.fork(1, 2)
ex.append(2, 99)
ex.free(1)
print(ex.history_text())
ex.close()
