"""Root's trusted builds (pagedlab.sandbox.trusted_builds): pagedlab's own runtime, runner and
precompiled prelude, built once, which a sandboxed grading child reads instead of building them
again in its private cache. Root trusts the folder only where no one else can write in or above
it (spec §9). The sandboxed grade itself: tests/test_redteam.py."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from pagedlab import cuda
from pagedlab.cuda import compiler
from pagedlab.sandbox import trusted_builds

KERNEL = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n'


def test_the_child_and_the_compilers_name_the_same_variable():
    from pagedlab.engine import ctrack

    assert trusted_builds.CHILD_ENV == compiler.TRUSTED_ENV == ctrack.TRUSTED_ENV


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership by root and by others needs root to set up")
def test_only_a_folder_nobody_else_can_write_in_or_above_is_trusted():
    base = Path(tempfile.mkdtemp(prefix="pagedlab-sbx-trusted-"))  # in /tmp: sticky, others may write
    try:
        base.chmod(0o755)
        builds = base / "builds"
        builds.mkdir(mode=0o755)
        assert trusted_builds.safe(builds)
        builds.chmod(0o775)  # the group may write
        assert not trusted_builds.safe(builds)
        builds.chmod(0o755)
        base.chmod(0o777)  # a folder above that anyone may write, without the sticky bit
        assert not trusted_builds.safe(builds)
        base.chmod(0o1777)  # sticky, as /tmp: no one else may move root's entry
        assert trusted_builds.safe(builds)
        base.chmod(0o755)
        os.chown(builds, 65534, 65534)  # nobody's
        assert not trusted_builds.safe(builds)
        os.chown(builds, 0, 0)
        builds.chmod(0o700)  # safe, but the sandbox user could not read it
        assert not trusted_builds.safe(builds)
        builds.chmod(0o755)
        (base / "link").symlink_to(builds)  # judged by where it leads
        assert trusted_builds.safe(base / "link")
    finally:
        shutil.rmtree(base)


def test_a_kernel_built_in_a_fresh_cache_runs_on_the_trusted_runtime(tmp_path, monkeypatch):
    """What a sandboxed child does: the runtime, runner and prelude from the trusted folder, only
    the kernel itself compiled into its own (empty) cache."""
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    made = trusted_builds._fill(trusted)  # copied from this suite's cache, or built
    assert {p.parent for p in made} == {trusted}
    monkeypatch.setenv(compiler.TRUSTED_ENV, str(trusted))
    monkeypatch.setenv("PAGEDLAB_CACHE", str(tmp_path / "cache"))
    x = np.arange(32, dtype=np.float32)
    cuda.RawKernel(f"// {tmp_path}\n" + KERNEL, "twice")((1,), (32,), (x,))
    assert np.array_equal(x, 2 * np.arange(32, dtype=np.float32))
    built = sorted(p.name for p in compiler.cache_dir().iterdir())
    assert len(built) == 1 and built[0].startswith("k_"), built


def test_the_c_runner_comes_from_the_trusted_folder_whatever_the_cache_holds(tmp_path, monkeypatch):
    """A C-only submission's child runs root's build of pl_runner.c, never a file of the same name
    in its job's cache (the sandbox user's to write: tests/test_redteam_os.py plants one there)."""
    from pagedlab.engine import ctrack

    trusted = tmp_path / "trusted"
    trusted.mkdir()
    made = trusted_builds._fill_c(trusted)
    assert [p.name for p in made] == [ctrack.runner_name()] and os.access(made[0], os.X_OK)
    monkeypatch.setenv("PAGEDLAB_CACHE", str(tmp_path / "cache"))
    planted = ctrack.cache_dir() / ctrack.runner_name()
    planted.write_text("#!/bin/sh\nexit 3\n")
    planted.chmod(0o755)
    assert ctrack.runner_program() == planted  # no trusted folder: the cache's, as before
    monkeypatch.setenv(trusted_builds.CHILD_ENV, str(trusted))
    assert ctrack.runner_program() == made[0]
    assert trusted_builds.needed([__import__("pagedlab.spec.manifest", fromlist=["task"]).task("task3")])
