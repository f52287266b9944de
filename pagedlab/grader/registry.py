"""Which checks a task has: the grader loads the task's driver module, the instructor's hidden
planners and a test's stand-in checks into the catalog (`pagedlab.spec.catalog`), and names each
public check's driver for the plan it sends the check child, which consults no registry of its own.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from ..drivers.record import PLUGIN_MODULE, load_file
from ..spec import catalog, manifest
from ..spec.catalog import CHECKS_PACKAGE, Check

_loaded: set[str] = set()


# A public check's driver as the grader names it in the plan it sends the child: the child builds
# each check from that name and the data beside it, and consults no registry of its own (a
# registry that depends on the machine, like Task 10's GPU check, could differ between the two).
def public_driver(c: Check) -> dict:
    """``{"function": "module:name"[, "file": path]}`` for `c`'s driver: a module-level function
    of an importable pagedlab module, or of a module the grader loaded from a file (a test's
    stand-in checks). Raises ValueError for a driver the child could not find by that name."""
    fn = c.driver
    module_name, name = getattr(fn, "__module__", ""), getattr(fn, "__qualname__", "")
    module = sys.modules.get(module_name)
    if module is None or not name.isidentifier() or getattr(module, name, None) is not fn:
        raise ValueError(f"the driver of {c.key!r} ({module_name}.{name}) is not a module-level function: "
                         "the check child finds drivers by name (give it a name, with `cases=` for shared data)")
    ref = {"function": f"{module_name}:{name}"}
    if not module_name.startswith("pagedlab."):
        ref["file"] = str(getattr(module, "__file__", "") or "")
    return ref


def engine_totals(c: Check, scenario=None) -> list[int]:
    """The block counts of the empty engines `c`'s driver builds its scenes from (`scenes`): the
    grader writes each one's bytes (`pagedlab.grader.trusted.engines`) and sends them with the check,
    so that the child holds no code that makes an engine. A checks module whose drivers build
    engines says which with `engine_totals(task, scenario)`; no other check gets any (Task 1's
    never do: an empty engine is its answer)."""
    module = sys.modules.get(getattr(c.driver, "__module__", ""))
    totals = getattr(module, "engine_totals", None)
    return sorted({int(t) for t in totals(c.task, scenario)}) if callable(totals) else []


HIDDEN_DIR_ENV = "PAGEDLAB_HIDDEN_CHECKS"


def hidden_dir() -> Path | None:
    """The instructor's hidden checks (grading/hidden/ in the instructor edition), or None."""
    import os

    from ..loader import ROOT

    configured = os.environ.get(HIDDEN_DIR_ENV)
    path = Path(configured) if configured else ROOT / "grading" / "hidden"
    return path if path.is_dir() else None


def _import_module(name: str) -> None:
    if name in _loaded:
        return
    if name.startswith("hidden:"):
        path = Path(name.removeprefix("hidden:"))
        load_file(f"pagedlab_hidden_checks.{path.stem}", path)
    else:
        importlib.import_module(f"{CHECKS_PACKAGE}.{name}")
    _loaded.add(name)


PLUGIN_ENV = "PAGEDLAB_GRADING_PLUGIN"  # tests: a file of stand-in checks, imported by both sides


def plugin_path() -> str:
    """The stand-in checks' file of this run (tests), which the plan names for the check child."""
    import os

    return os.environ.get(PLUGIN_ENV, "")


def load_plugin() -> None:
    import os

    plugin = os.environ.get(PLUGIN_ENV)
    if plugin and f"plugin:{plugin}" not in _loaded:
        _loaded.add(f"plugin:{plugin}")
        load_file(PLUGIN_MODULE, plugin)


def checks_of(task: str, *, hidden: bool | None = False, hidden_from: Path | None = None) -> list[Check]:
    """The checks of `task`: public ones (hidden=False), hidden ones (True) or both (None)."""
    load_plugin()
    if _checks_of_override is not None:
        return _checks_of_override(task, hidden=hidden, hidden_from=hidden_from)
    return _checks_of(task, hidden=hidden, hidden_from=hidden_from)


_checks_of_override = None  # a plugin's stand-in (tests simulate broken check modules with it)


def _checks_of(task: str, *, hidden: bool | None = False, hidden_from: Path | None = None) -> list[Check]:
    row = manifest.task(task)
    _import_module(row.checks)
    module = sys.modules.get(f"{CHECKS_PACKAGE}.{row.checks}")
    if hasattr(module, "refresh"):
        module.refresh()  # checks that depend on the machine (a GPU) are decided now
    if hidden is not False:
        folder = hidden_from or hidden_dir()
        if folder is not None and (folder / f"{row.checks}.py").is_file():
            _import_module(f"hidden:{folder / f'{row.checks}.py'}")
    found = catalog.registered(task)
    if hidden is None:
        return list(found)
    return [c for c in found if c.hidden == hidden]


def find(task: str, key: str) -> Check:
    for c in checks_of(task, hidden=None):
        if c.key == key:
            return c
    raise KeyError(f"no check {key!r} in {task}")
