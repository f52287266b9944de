"""The prelude's precompiled header: built once per cache, used by every kernel build.

It failed silently for two days (a header under include/ names "pl_abi.h", which the PCH
compile could not find), so every build re-tried it and then parsed the whole prelude: about
three times the compile time per kernel, and a stray pch_tmp_ folder per build.
"""

from __future__ import annotations

import pytest

from pagedlab.cuda import compiler

pytestmark = pytest.mark.skipif(not compiler._is_gcc(compiler.find_compiler()),
                                reason="precompiled headers are used with GCC only (clang reads the prelude)")

FLAGS = compiler.BASE_FLAGS + compiler.KERNEL_FLAGS


def test_the_prelude_is_precompiled_and_a_broken_leftover_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGEDLAB_CACHE", str(tmp_path))
    cxx = compiler.find_compiler()
    folder = compiler.precompiled_prelude(cxx, FLAGS)
    assert folder != compiler.HERE and (folder / "prelude.h.gch").is_file()
    (folder / "prelude.h.gch").unlink()  # e.g. a build killed between rename and write
    again = compiler.precompiled_prelude(cxx, FLAGS)
    assert again == folder and (folder / "prelude.h.gch").is_file()
    assert not list(compiler.cache_dir().glob("pch_tmp_*")), "a build left its scratch folder behind"


def test_a_kernel_build_reads_the_precompiled_prelude(tmp_path, monkeypatch):
    seen = []  # the suite's own cache (its runtime is built already); a text never built before
    real_run = compiler._run

    def run(cmd, *args, **kwargs):
        seen.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(compiler, "_run", run)
    compiler.build(f'// {tmp_path}\nextern "C" __global__ void k(float* out) {{ out[threadIdx.x] = 1.0f; }}\n',
                   "pch.cu")
    kernel = [cmd for cmd in seen if "-include" in cmd][-1]
    prelude = kernel[kernel.index("-include") + 1]
    assert prelude.endswith("prelude.h") and compiler.Path(prelude + ".gch").is_file(), kernel
