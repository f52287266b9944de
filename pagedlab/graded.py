"""Graded cells: a notebook asks here how the student's work does on a task.

``pagedlab.graded.run("task2")`` is a graded cell: it runs the task's public checks on the
student's files in a child process with the grader's limits (the runner in `pagedlab.sandbox`),
judges the record here (`pagedlab.checks.judge`), prints one ✓/✗ line per check and, under every
✗, the rule broken, what was expected and what the student's code did. ``require`` guards a demo
cell that runs the student's code in the notebook's own kernel; ``results`` is the same verdict
as data, for tests and tools.

It sits above both packages it uses: `pagedlab.checks` (the check registry) and
`pagedlab.sandbox` (the child process that runs the checks, which reads that registry). Neither
imports it, so the registry never reaches back up to the runner.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from .checks import CheckFailure

__all__ = ["Result", "require", "results", "run"]


@dataclass
class Result:
    task: str
    name: str
    passed: bool | None  # None: never ran (the task's time was used up before it)
    message: str = ""


def _outcome(task: str, impl=None):
    import os

    from . import loader, manifest
    from .sandbox.runner import run_task

    row = manifest.task(task)
    folder = loader.impl_dir(impl)
    impl_arg = str(impl) if impl is not None else (os.environ.get(loader.ENV_VAR) or "exercises")
    if impl_arg not in loader.NAMED_IMPLS:
        impl_arg = str(folder)
    return row, run_task(row, impl_arg, folder)


def results(task: str, impl=None) -> list[Result]:
    """Run every public check of `task` against `impl` in a child process; judge them here."""
    row, outcome = _outcome(task, impl)
    found = [Result(row.id, c.name, c.passed, c.message) for c in outcome.checks]
    if not found and outcome.problem:
        found = [Result(row.id, "the task could not run", False, outcome.problem)]
    return found


def run(task: str, impl=None, *, quiet: bool = False) -> None:
    """Notebook entry: print ✓/✗ per check, each ✗ explained, and raise a short `CheckFailure`
    if any failed. The student's code runs in a child process with the grader's limits, so an
    infinite loop or a segfault fails a check and the notebook's kernel lives on."""
    from . import manifest

    _short_tracebacks_in_ipython()
    row = manifest.task(task)
    key = _version_key(row, impl)  # the files as they were when the checks read them
    row, outcome = _outcome(task, impl)
    lines = [row.label]
    for c in outcome.checks:
        mark = "✓" if c.passed else ("-" if c.passed is None else "✗")
        note = "" if c.scored else "  (feedback only: shown, no points)"
        lines.append(f"  {mark} {c.name}{note}")
        if not c.passed and c.message:
            lines += [f"      {line}" for line in c.message.splitlines()]
    if outcome.problem and not outcome.checks:
        lines.append(f"  ✗ {outcome.problem}")
    if not quiet:
        from .untrusted import escape

        print(escape("\n".join(lines)))  # messages quote the student's code's own text
    failed = [c for c in outcome.checks if not c.passed]
    scored = [c for c in outcome.checks if c.scored]
    # A demo's require after the graded cell reads this verdict instead of running the checks
    # again: after a hang, that would be the time limit once more for every demo cell.
    if outcome.passed and not failed:
        _passed.add(key)
        _failed.pop(key, None)
    else:
        _passed.discard(key)
        _failed[key] = _needs(row)
    if failed or not outcome.checks:
        where = row.cite()
        raise CheckFailure(f"{len(failed)} of {len(outcome.checks)} checks did not pass for {row.label} "
                           f"(read {where}; each ✗ above says why)")
    if not quiet:
        extra = len(outcome.checks) - len(scored)
        print(f"All {len(outcome.checks)} checks passed"
              + (f" ({len(scored)} graded, {extra} feedback only)." if extra else "."))


_passed: set = set()
_failed: dict = {}  # (task, folder, digest of its files) -> why `require` stopped: asked again, said again
# The message of the last `require` that stopped a demo cell. The cells after it use what that
# cell would have made, so their NameError (or a stub's NotImplementedError) is this same story.
_blocking: str = ""
# Each name a stopped cell would have bound -> (task, impl, why it stopped). A later cell that reads
# one of them is told that story even if its own require passed (it may need other tasks than the
# one missing), until that task passes on the files as they are now.
_stopped_names: dict = {}


def _needs(row) -> str:
    return (f"This cell runs your code for a demo and needs {row.label} to pass first "
            f"(it does not yet: run its graded cell in notebook {row.notebook_number} "
            f"to see why). Nothing of your code ran here.")


def _bound_names(source: str) -> set:
    """The names a cell binds at its top level (assignments, loops, imports, defs)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set = set()

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            return  # what a def binds inside is its own
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _cell_source(frame) -> str | None:
    """The text of the notebook cell a frame runs in, as IPython registered it; None outside a
    cell (a script, a test)."""
    import linecache

    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    entry = linecache.cache.get(frame.f_code.co_filename) if frame is not None else None
    if entry is None or entry[1] is not None:  # IPython caches a cell with no mtime: no file
        return None
    return "".join(entry[2])


def _stop(why: tuple, source: str | None) -> None:
    """A demo cell stops here (`why`: task, impl, message): later reads of what it would have made
    say the message."""
    global _blocking
    _blocking = why[2]
    for name in _bound_names(source or ""):
        _stopped_names[name] = why


def _still_missing(name) -> str | None:
    """Why `name` does not exist, if a stopped demo would have made it and its task still fails."""
    from . import manifest

    why = _stopped_names.get(name)
    if why is None or _version_key(manifest.task(why[0]), why[1]) in _passed:
        return None  # fixed since: the NameError is the student's own story now
    return why[2]


def _version_key(row, impl) -> tuple:
    """(task, folder, digest of the task's files): one version of the student's work."""
    import hashlib

    from . import loader

    folder = loader.impl_dir(impl)
    digest = hashlib.sha256()
    for name in row.files:
        path = folder / name
        if not path.is_file():  # the C track: llm_memory.c stands in for memory_manager.py
            from .ctrack import ALTERNATE_FILES

            path = next((folder / alt for alt in ALTERNATE_FILES.get(name, ()) if (folder / alt).is_file()), path)
        digest.update(path.read_bytes() if path.is_file() else b"")
    return (row.id, str(folder), digest.hexdigest())


def require(*tasks: str, impl=None) -> None:
    """Guard for demo cells that drive the student's code in the notebook's own kernel.

    A segfault there would take the kernel down, so first the tasks' checks run in a child
    process (once per version of the student's files); if any fails, the cell stops with a
    message pointing at the graded cell instead of running the demo on broken code."""
    global _blocking
    import sys

    from . import manifest

    _short_tracebacks_in_ipython()
    source = _cell_source(sys._getframe(1))
    for task in tasks:
        row = manifest.task(task)
        key = _version_key(row, impl)
        if key in _passed:
            continue
        if key not in _failed:  # a verdict (a hang's included) is asked for once per version
            _, outcome = _outcome(task, impl)
            if outcome.passed:
                _passed.add(key)
                continue
            _failed[key] = _needs(row)
        _stop((task, impl, _failed[key]), source)
        raise CheckFailure(_failed[key])
    _blocking = ""


_installed = False


def _short_tracebacks_in_ipython() -> None:
    """Show a CheckFailure in Jupyter as its message only; nbval still sees the error."""
    global _installed
    if _installed:
        return
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return

    def handler(self, etype, value, tb, tb_offset=None):
        name = getattr(value, "name", None)
        if issubclass(etype, NameError):  # a name a stopped demo cell would have made?
            why = _still_missing(name)
        else:  # a stub the stopped cell would have passed
            why = _blocking if issubclass(etype, NotImplementedError) else None
        if issubclass(etype, CheckFailure) or why:
            _close_figures_of_this_cell()  # empty axes under "finish Task N first" say nothing
        if issubclass(etype, CheckFailure):
            self._showtraceback(etype, value, [f"{etype.__name__}: {value}"])
        elif why:
            if name in _stopped_names:  # this cell stopped for the same reason: so did its names
                _stop(_stopped_names[name], _cell_source(_innermost_cell_frame(tb)))
            self._showtraceback(CheckFailure, CheckFailure(why), [f"CheckFailure: {why}"])
        else:
            self.showtraceback((etype, value, tb), tb_offset=tb_offset)

    shell.set_custom_exc((CheckFailure, NameError, NotImplementedError), handler)
    shell.events.register("pre_run_cell", _note_open_figures)
    _installed = True


_figures_before: set = set()  # matplotlib figures open when the current cell started


def _note_open_figures(*_):
    global _figures_before
    plt = sys.modules.get("matplotlib.pyplot")  # never imported here: a cell that plots did
    _figures_before = set(plt.get_fignums()) if plt is not None else set()


def _close_figures_of_this_cell() -> None:
    """Close the figures the stopped cell opened before it stopped: the inline backend would show
    them, axes with nothing drawn on them, under the message that says the task is not done."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for number in set(plt.get_fignums()) - _figures_before:
        plt.close(number)


def _innermost_cell_frame(tb):
    """The frame of the cell itself in a traceback from IPython (its first ``<module>`` frame)."""
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "<module>":
            return tb.tb_frame
        tb = tb.tb_next
    return None
