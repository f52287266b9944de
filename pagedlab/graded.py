"""Graded cells: a notebook asks here how the student's work does on a task.

``pagedlab.graded.run("task2")`` is a graded cell: it runs the task's public checks on the
student's files in a child process with the grader's limits (the runner in `pagedlab.sandbox`),
judges the record here (`pagedlab.grader.judge`), prints one ✓/✗ line per check and, under every
✗, the rule broken, what was expected and what the student's code did. ``require`` guards a demo
cell that runs the student's code in the notebook's own kernel; ``results`` is the same verdict
as data, for tests and tools.

In a grader's notebook run (`pagedlab grade --notebooks`, PAGEDLAB_VERDICTS set) this kernel runs
as the sandbox user and may read no expected value, so it judges nothing: root graded the tasks
before the notebooks started, and each graded cell and `require` reads root's verdict for the
very files it names (`pagedlab.verdicts`). A ✗ there shows its rule and what went wrong; the
values are in the task's report.

It sits above both packages it uses: `pagedlab.checks` (the check registry) and
`pagedlab.sandbox` (the child process that runs the checks, which reads that registry). Neither
imports it, so the registry never reaches back up to the runner.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from .spec.catalog import CheckFailure

__all__ = ["Result", "require", "results", "run"]


@dataclass
class Result:
    task: str
    name: str
    passed: bool | None  # None: never ran (the task's time was used up before it)
    message: str = ""


def _outcome(task: str, impl=None, track=None):
    import os

    from . import loader, verdicts
    from .spec import manifest

    row = manifest.task(task)
    folder = loader.impl_dir(impl)
    if verdicts.active():  # a grader's notebook run: root judged, this kernel may not
        return row, _judged_by_the_grader(row, folder, track)
    # Here this kernel is its own grader (a laptop, a hub): in a grader's run the grader's folder
    # is root-only and never imported from here.
    from .grader.pipeline import run_task

    impl_arg = str(impl) if impl is not None else (os.environ.get(loader.ENV_VAR) or "exercises")
    if impl_arg not in loader.NAMED_IMPLS:
        impl_arg = str(folder)
    return row, run_task(row, impl_arg, folder, track_choice=track)


def _judged_by_the_grader(row, folder, track=None):
    """The outcome root wrote for these files (`pagedlab.verdicts`): checks with their marks and,
    under a ✗, the rule and what went wrong; the values are in the task's report, root's."""
    from . import verdicts
    from .verdicts import CheckOutcome, TaskOutcome

    outcome = TaskOutcome(row, started=True, finished=True)
    found = verdicts.lookup(row, folder, track)
    if found is None:
        outcome.grader_error = True
        names = ", ".join(p.name for p in verdicts.task_files(row, folder)) or "no file"
        outcome.problem = (f"autograder problem, not your code (tell your instructor): the grader judged "
                           f"no {row.label} for these files ({names} in {folder})")
        return outcome
    for c in found.get("checks", []):
        why = "\n".join(line for line in (c.get("gist") and f"what went wrong: {c['gist']}",
                                           c.get("rule") and f"rule: {c['rule']}") if line)
        outcome.checks.append(CheckOutcome(str(c.get("name")), c.get("passed"), why or "failed",
                                           scored=bool(c.get("scored")), rule=c.get("rule") or "",
                                           gist=c.get("gist") or ""))
    outcome.problem = found.get("problem") or ""
    outcome.grader_error = bool(found.get("grader_error"))
    if not outcome.passed:
        outcome.note = (f"(judged by the grader outside this notebook: the expected and actual values "
                        f"of each ✗ are in {row.label}'s report)")
    return outcome


def results(task: str, impl=None, *, track=None) -> list[Result]:
    """Run every public check of `task` against `impl` in a child process; judge them here."""
    row, outcome = _outcome(task, impl, track)
    found = [Result(row.id, c.name, c.passed, c.message) for c in outcome.checks]
    if not found and outcome.problem:
        found = [Result(row.id, "the task could not run", False, outcome.problem)]
    return found


def run(task: str, impl=None, *, quiet: bool = False, track: str | None = None) -> None:
    """Notebook entry: print ✓/✗ per check, each ✗ explained, and raise a short `CheckFailure`
    if any failed. The student's code runs in a child process with the grader's limits, so an
    infinite loop or a segfault fails a check and the notebook's kernel lives on. `track`: "c" or
    "python" grades a Part A task from that file (notebook 02c passes "c"); None: the track rule."""
    from .spec import manifest

    _short_tracebacks_in_ipython()
    row = manifest.task(task)
    key = _version_key(row, impl, track)  # the files as they were when the checks read them
    row, outcome = _outcome(task, impl, track)
    lines = [row.label]
    if outcome.part_a is not None:  # which file, and why (track="c" in notebook 02c: said so)
        why = f'track="{track}"' if track else outcome.part_a.why
        lines.append(f"  graded from {outcome.part_a.file}: {why}")
    for c in outcome.checks:
        mark = "✓" if c.passed else ("-" if c.passed is None else "✗")
        note = "" if c.scored else "  (feedback only: shown, no points)"
        lines.append(f"  {mark} {c.name}{note}")
        if not c.passed and c.message:
            lines += [f"      {line}" for line in c.message.splitlines()]
    if outcome.problem and not outcome.checks:
        lines.append(f"  ✗ {outcome.problem}")
    if outcome.note:
        lines.append(f"  {outcome.note}")
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
        _failed[key] = _needs(row, key)
    if failed or not outcome.checks:
        where = row.cite()
        # quiet: no ✗ printed here; the task's graded cell (02c's on the C track) shows them
        notebook = "02c" if outcome.part_a is not None and outcome.part_a.name == "c" else row.notebook_number
        shown = "each ✗ above says why" if not quiet else f"run its graded cell in notebook {notebook} to see why"
        raise CheckFailure(f"{len(failed)} of {len(outcome.checks)} checks did not pass for {row.label} "
                           f"(read {where}; {shown})")
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


def _needs(row, key: tuple) -> str:
    # On the C track, Tasks 1-5's graded cells for llm_memory.c are notebook 02c's.
    notebook = "02c" if key[3] == "c" else row.notebook_number
    return (f"This cell runs your code for a demo and needs {row.label} to pass first "
            f"(it does not yet: run its graded cell in notebook {notebook} "
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
    """A demo cell stops here (`why`: task, impl, message, track): later reads of what it would
    have made say the message."""
    global _blocking
    _blocking = why[2]
    for name in _bound_names(source or ""):
        _stopped_names[name] = why


def _still_missing(name) -> str | None:
    """Why `name` does not exist, if a stopped demo would have made it and its task still fails."""
    from .spec import manifest

    why = _stopped_names.get(name)
    if why is None or _version_key(manifest.task(why[0]), why[1], why[3]) in _passed:
        return None  # fixed since: the NameError is the student's own story now
    return why[2]


def _version_key(row, impl, track=None) -> tuple:
    """(task, folder, digest of the task's files, Part A's track): one version of the student's
    work."""
    import hashlib

    from . import loader
    from . import track as tracks

    folder = loader.impl_dir(impl)
    part_a = tracks.decide(folder, track).name if tracks.PYTHON_FILE in row.files else ""
    digest = hashlib.sha256()
    for name in row.files:
        path = folder / (tracks.FILES[part_a] if part_a and name == tracks.PYTHON_FILE else name)
        digest.update(path.read_bytes() if path.is_file() else b"")
    return (row.id, str(folder), digest.hexdigest(), part_a)


def require(*tasks: str, impl=None, track: str | None = None) -> None:
    """Guard for demo cells that drive the student's code in the notebook's own kernel.

    A segfault there would take the kernel down, so first the tasks' checks run in a child
    process (once per version of the student's files); if any fails, the cell stops with a
    message pointing at the graded cell instead of running the demo on broken code. `track` as
    for `run`."""
    global _blocking
    import sys

    from .spec import manifest

    _short_tracebacks_in_ipython()
    source = _cell_source(sys._getframe(1))
    for task in tasks:
        row = manifest.task(task)
        key = _version_key(row, impl, track)
        if key in _passed:
            continue
        if key not in _failed:  # a verdict (a hang's included) is asked for once per version
            _, outcome = _outcome(task, impl, track)
            if outcome.passed:
                _passed.add(key)
                continue
            _failed[key] = _needs(row, key)
        _stop((task, impl, _failed[key], track), source)
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
