"""The runtime library and the kernel runner are rebuilt whenever a file they are compiled from
changes, and every such file ships: in the wheel's package data and in the student edition.

Both programs are cached under a hash of their inputs. A header left out of that hash would let a
student (or CI) run a runtime built from an older launch description against a runner built from
the new one: the two would read the same shared memory with different layouts."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import tomllib

from pagedlab.cuda import compiler
from pagedlab.cuda import runner as kernel_runner

ROOT = Path(__file__).resolve().parent.parent
CUDA = compiler.HERE


def included(source: Path) -> set[Path]:
    """`source` and every file it reaches through `#include "..."`, found beside it."""
    seen, todo = set(), [source]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(), re.MULTILINE):
            todo.append((path.parent / name).resolve())
    return seen


def test_the_runtime_and_the_runner_include_one_launch_description():
    # the shared header is what keeps them in step: neither may declare its own Spec or Diag
    for program in (compiler.RUNTIME, kernel_runner.SOURCE):
        assert compiler.LAUNCH in included(program), program.name
        assert not re.search(r"^\s*struct\s+(Spec|Diag)\b", program.read_text(), re.MULTILINE), program.name


def test_every_file_a_program_includes_is_in_its_cache_key():
    assert included(compiler.RUNTIME) <= set(compiler.RUNTIME_SOURCES)
    assert included(kernel_runner.SOURCE) <= set(kernel_runner.SOURCES)


def test_every_file_the_programs_are_built_from_is_package_data():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["pagedlab"]
    for path in {*compiler.RUNTIME_SOURCES, *kernel_runner.SOURCES}:
        name = path.relative_to(CUDA.parent).as_posix()
        assert any(fnmatch.fnmatch(name, p) for p in patterns), f"{name} is not in the wheel's package data"


def test_every_header_a_kernel_may_include_is_package_data_and_in_the_build_key():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["pagedlab"]
    headers = [p for p in compiler.INCLUDE.rglob("*") if p.is_file()]
    assert any(p.suffix == ".cuh" for p in headers)  # CUB's, which "*.h" would miss
    key = compiler.header_bytes()
    for path in headers:
        name = path.relative_to(CUDA.parent).as_posix()
        assert any(fnmatch.fnmatch(name, p) for p in patterns), f"{name} is not in the wheel's package data"
        assert path.read_bytes() in key, f"{name} is not in the kernel builds' cache key"
