"""Find a student's (or the reference) implementation of a course module.

Which folder is meant is `impl`'s job (`impl_dir`, `source_path`, re-exported here); this module
executes the file found there, or hands `memory_manager` to the C track when `track.decide` says
Part A is graded from `llm_memory.c` (the rule every grade uses, so a notebook runs what is graded).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from types import ModuleType

from . import track
from .impl import ENV_VAR, NAMED_IMPLS, ROOT, impl_dir, kernel_source, source_path  # noqa: F401 - loader's names


def load(name: str, impl: str | os.PathLike | None = None) -> ModuleType:
    """Import module `name` (e.g. 'memory_manager') from exercises/, solutions/ or a folder.

    Every call re-executes the file, so a student who edits it and re-runs a cell gets the
    new code without restarting the kernel. The module is registered under a name that says
    whose it is (``pagedlab_impl.solutions.memory_manager``) so tracebacks read well.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"module name must be a Python identifier like 'memory_manager', got {name!r}")
    folder = impl_dir(impl)
    path = folder / f"{name}.py"
    chosen = track.decide(folder) if path.name == track.PYTHON_FILE else None
    if chosen is not None and chosen.name == "c":
        if not chosen.present:
            raise ModuleNotFoundError(chosen.line())
        from .engine import ctrack  # the C track: llm_memory.c stands in for memory_manager.py

        return ctrack.load(folder / track.C_FILE)
    if not path.is_file():
        searched = folder if impl is not None or os.environ.get(ENV_VAR) else f"{folder} (default: exercises; set {ENV_VAR} or impl=)"
        raise ModuleNotFoundError(
            f"no module {name!r}: {path.name} not found in {searched}"
        )
    named = os.fspath(impl if impl is not None else os.environ.get(ENV_VAR) or "exercises") in NAMED_IMPLS
    tag = folder.name if named else f"path_{abs(hash(str(folder))):x}"
    qualname = f"pagedlab_impl.{tag}.{name}"
    spec = importlib.util.spec_from_file_location(qualname, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualname] = module
    try:
        # exec_module's own steps (compile, exec), with the compile cached by the file's bytes.
        exec(_compiled(str(path), path.read_bytes()), module.__dict__)
    except BaseException:
        sys.modules.pop(qualname, None)
        raise
    return module


@functools.lru_cache(maxsize=16)
def _compiled(path: str, source: bytes):
    """The code of a student file. A check process loads the file again for every check (a fresh
    module each time) and no bytecode cache may be written beside it: the text compiles once."""
    return compile(source, path, "exec", dont_inherit=True)
