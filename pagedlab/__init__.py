"""pagedlab: a course on how vLLM's PagedAttention manages KV-cache memory.

`pagedlab.load(name, impl)` returns a student's (or the reference) module; the submodules
(`checks`, `hw3`, `cmem`, `pool`, `cuda`, `kernels`, `reference`, `viz`, ...) import lazily so that
`import pagedlab` stays fast and torch is loaded only by the parts that need it.
"""

from __future__ import annotations

import importlib

from .loader import kernel_source, load

__version__ = "0.1.0"
__all__ = ["load", "kernel_source", "__version__"]


def _in_a_notebook() -> bool:
    import sys

    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return shell is not None


if _in_a_notebook():  # tracebacks that pair each line number with its own text (tracebacks.py)
    from . import tracebacks as _tracebacks

    _tracebacks.install()


def __getattr__(name: str):
    # `pagedlab.graded.run(...)` works after a bare `import pagedlab`.
    if name.startswith("_"):
        raise AttributeError(name)
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"{__name__}.{name}":
            raise AttributeError(f"module 'pagedlab' has no attribute {name!r}") from None
        raise
    globals()[name] = module
    return module
