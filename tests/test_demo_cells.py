"""Demo cells: a notebook cell that runs the student's code asks first for exactly the tasks whose
code it runs, and a stopped demo stops its followers with the same one line.

Which task a call reaches is read from the sources, never listed by hand: a student function or
class belongs to the tasks of the solution fences in its body and in every function of its file
it refers to (`append_kv` runs Task 2's `take_block`, so it needs Task 2 too); a kernel file to the
tasks fenced in it (`pagedlab/spec/tasks.toml` says which file each task is in). A cell runs student
code when it calls a function of a module `pagedlab.load` gave it, a method of an object made
from one of its classes, a kernel built from `kernel_source`, one of the `kernels` entry points
that launch the student's kernels, or a function defined in the notebook that does one of these.
Cells that only read what an earlier demo made (a drawing of its engine) need no require: when
that demo stopped, the name they read says why (`test_a_cell_reading_what_a_stopped_demo_made_says_why`).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import nbformat
import pytest

from pagedlab.spec import manifest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
FENCE = re.compile(r"BEGIN SOLUTION Task (\d+)\b")
# The kernels entry points that launch the student's kernels, and which file each version runs.
KERNEL_FILES = {"v1": "paged_attention.cu", "v2": "paged_attention_v2.cu"}
LAUNCHERS = {"paged_attention_decode", "decode_on_executor", "decode_v2_on_executor"}


def _tasks(text: str) -> frozenset:
    return frozenset(f"task{n}" for n in FENCE.findall(text))


@cache
def kernel_tasks(filename: str) -> frozenset:
    found = _tasks((ROOT / "solutions" / filename).read_text())
    assert found <= {row.id for row in manifest.TABLE if filename in row.files}, filename
    return found


@cache
def module_tasks(module: str) -> dict:
    """Top-level function or class of solutions/<module>.py -> the tasks its code reaches."""
    path = ROOT / "solutions" / f"{module}.py"
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    own = {name: _tasks("".join(lines[n.lineno - 1:n.end_lineno])) for name, n in defs.items()}
    refers = {name: {x.id for x in ast.walk(n) if isinstance(x, ast.Name) and x.id in defs} - {name}
              for name, n in defs.items()}
    reach = dict(own)
    changed = True
    while changed:  # the transitive closure over the file's own functions
        changed = False
        for name in defs:
            grown = reach[name].union(*(reach[r] for r in refers[name]))
            if grown != reach[name]:
                reach[name], changed = grown, True
    files = {f for row in manifest.TABLE for f in row.files}
    assert f"{module}.py" in files, module
    assert frozenset().union(*own.values()) <= {r.id for r in manifest.TABLE if f"{module}.py" in r.files}
    return {name: frozenset(t) for name, t in reach.items()}


def _dotted(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001
        return ""


class Cells:
    """Walks a notebook's code cells in order, keeping what each name is bound to."""

    def __init__(self):
        self.modules: dict[str, str] = {}  # name -> student module (pagedlab.load / ctrack.load)
        self.objects: dict[str, frozenset] = {}  # name -> tasks: student classes, their objects, kernels, notebook functions
        self.sources: set[str] = set()  # names bound to loader.source_path(...)

    # -- what an expression is
    def _module_of(self, node) -> str | None:
        if isinstance(node, ast.Name):
            return self.modules.get(node.id)
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name.endswith("load") and node.args and isinstance(node.args[0], ast.Constant):
                if name in ("pagedlab.load", "load", "loader.load"):
                    return node.args[0].value
            if name == "ctrack.load" and node.args and isinstance(node.args[0], ast.Name) \
                    and node.args[0].id in self.sources:
                return "memory_manager"  # the C track: the same functions, the same tasks
        return None

    def _value_tasks(self, node) -> frozenset | None:
        """Tasks of a value whose use runs student code (a class, an object, a kernel), else None."""
        if isinstance(node, ast.Name):
            return self.objects.get(node.id)
        if isinstance(node, ast.Attribute):
            module = self._module_of(node.value)
            if module:
                return module_tasks(module).get(node.attr, frozenset())
            return self._value_tasks(node.value)
        if isinstance(node, ast.Call):
            func = _dotted(node.func)
            if func.endswith("RawKernel"):
                texts = [t for a in ast.walk(node) if isinstance(a, ast.Call) and _dotted(a.func).endswith("kernel_source")
                         for t in [a.args[0].value] if a.args and isinstance(a.args[0], ast.Constant)]
                return frozenset().union(*(kernel_tasks(t) for t in texts)) if texts else None
            if isinstance(node.func, ast.Attribute) and self._module_of(node.func.value):
                module = self._module_of(node.func.value)
                defn = _def(module, node.func.attr)
                return module_tasks(module).get(node.func.attr) if isinstance(defn, ast.ClassDef) else None
            return self._value_tasks(node.func)
        return None

    def _call_tasks(self, call: ast.Call) -> frozenset:
        func = call.func
        name = _dotted(func)
        last = name.rsplit(".", 1)[-1]
        if last in LAUNCHERS and name.startswith("kernels."):
            if last == "decode_v2_on_executor":
                return kernel_tasks(KERNEL_FILES["v2"])
            version = next((k.value for k in call.keywords if k.arg == "version"), ast.Constant("v1"))
            if isinstance(version, ast.Constant) and version.value in KERNEL_FILES:
                return kernel_tasks(KERNEL_FILES[version.value])
            return kernel_tasks(KERNEL_FILES["v1"]) | kernel_tasks(KERNEL_FILES["v2"])
        if isinstance(func, ast.Attribute):
            module = self._module_of(func.value)
            if module:
                return module_tasks(module).get(func.attr, frozenset())
        found = frozenset()
        for part in ast.walk(func):  # space.alloc(...), getattr(space, call)(...), step(...)
            if isinstance(part, ast.Name) and part.id in self.objects:
                found |= self.objects[part.id]
        for arg in [*call.args, *(k.value for k in call.keywords)]:  # allocator=mine
            if isinstance(arg, ast.Name) and arg.id in self.objects:
                found |= self.objects[arg.id]
        return found

    def _runs(self, nodes) -> frozenset:
        """Tasks of every call in `nodes`, outside the bodies of functions they define."""
        found = frozenset()
        stack = list(nodes)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(node, ast.Call):
                found |= self._call_tasks(node)
            stack.extend(ast.iter_child_nodes(node))
        return found

    def _bind(self, target, value) -> None:
        names = [t.id for t in ast.walk(target) if isinstance(t, ast.Name)]
        module = self._module_of(value)
        tasks = self._value_tasks(value)
        for name in names:
            self.modules.pop(name, None)
            self.objects.pop(name, None)
            self.sources.discard(name)
            if module and len(names) == 1:
                self.modules[name] = module
            elif tasks:
                self.objects[name] = tasks
            elif isinstance(value, ast.Call) and _dotted(value.func).endswith("source_path"):
                self.sources.add(name)

    def cell(self, source: str) -> tuple[frozenset, list[str], bool]:
        """(tasks the cell runs, the tasks its require asks for, whether the require comes first)."""
        tree = ast.parse(source)
        for node in ast.walk(tree):  # bind first: a cell calls what it made itself (space.alloc)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = self._runs(node.body)
                self.objects.pop(node.name, None)
                if body:
                    self.objects[node.name] = body
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    self._bind(target, node.value)
            elif isinstance(node, ast.For):
                self._bind(node.target, node.iter)
        runs = self._runs(tree.body)
        requires = [call for call in ast.walk(tree) if isinstance(call, ast.Call)
                    and _dotted(call.func).endswith("graded.require")]
        asked = [a.value for call in requires for a in call.args if isinstance(a, ast.Constant)]
        first = bool(tree.body) and isinstance(tree.body[0], ast.Expr) and tree.body[0].value in requires
        return runs, asked, first


@cache
def _def(module: str, name: str):
    tree = ast.parse((ROOT / "solutions" / f"{module}.py").read_text())
    return next((n for n in tree.body if getattr(n, "name", None) == name), None)


def demo_cells(path: Path) -> list[tuple[int, str, frozenset, list[str], bool]]:
    """(code cell index, first line, tasks it runs, tasks it requires, require first) per code cell."""
    nb = nbformat.read(path, as_version=4)
    walker = Cells()
    rows = []
    for index, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        source = "\n".join("#" + line if line.lstrip().startswith(("%", "!")) else line for line in cell.source.splitlines())
        runs, asked, first = walker.cell(source)
        if re.search(r"^\s*(pagedlab\.)?graded\.run\(", source, re.M):
            continue  # a graded cell runs the checks in a child process: nothing runs here
        rows.append((index, source.strip().splitlines()[0] if source.strip() else "", runs, asked, first))
    return rows


@pytest.mark.task_wide
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_cell_requires_exactly_the_tasks_whose_code_it_runs(path):
    wrong = []
    for index, first_line, runs, asked, first in demo_cells(path):
        if set(asked) != set(runs) or len(asked) != len(set(asked)):
            wrong.append(f"cell {index} ({first_line[:60]!r}) runs {sorted(runs, key=_number)}, "
                         f"requires {asked}")
        elif asked and not first:
            wrong.append(f"cell {index} ({first_line[:60]!r}): its require must come first")
        elif asked != sorted(asked, key=_number):
            wrong.append(f"cell {index}: list the tasks in order: {asked}")
    assert not wrong, "\n".join(wrong)


def _number(task: str) -> int:
    return int(task.removeprefix("task"))


def test_the_walk_finds_what_the_notebooks_run():
    """The test above cannot pass by finding nothing: the calls it must see are seen."""
    found = {p.stem: frozenset().union(*(r for _, _, r, _, _ in demo_cells(p))) for p in NOTEBOOKS}
    assert found["02c_hw3_in_c"] >= {"task1", "task5"}  # the C engine, through ctrack.load
    assert found["06_paged_kv_cache"] >= {"task1", "task2", "task3", "task4", "task5", "task6", "task7"}
    assert found["07_paged_attention_torch"] >= {"task8", "task9"}
    assert found["08_cuda_kernel"] >= {"task5", "task10"}
    assert found["09_prefix_caching_and_utilization"] >= {"task11", "task12"}
    assert found["10_swap_and_v2"] >= {"task10", "task13", "task14"}
    assert module_tasks("memory_manager")["append_kv"] == {"task2", "task4"}  # take_block is Task 2's
    assert module_tasks("memory_manager")["list_for_each"] == set()
    assert module_tasks("prefix_cache")["hash_block_tokens"] == set()  # given: 09 uses it before Task 11


@pytest.fixture
def fresh_verdicts(monkeypatch):
    from pagedlab import graded

    for name, value in (("_passed", set()), ("_failed", {}), ("_stopped_names", {}), ("_blocking", "")):
        monkeypatch.setattr(graded, name, value)
    calls = []
    real = graded._outcome
    monkeypatch.setattr(graded, "_outcome", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    return calls


def test_a_require_after_a_failed_graded_cell_does_not_run_the_checks_again(fresh_verdicts):
    """After a graded cell found a hang, each demo's require would wait for the hang again."""
    from pagedlab import graded
    from pagedlab.spec.catalog import CheckFailure

    with pytest.raises(CheckFailure):
        graded.run("task1", impl="exercises", quiet=True)
    for _ in range(2):
        with pytest.raises(CheckFailure, match="needs Task 1 .* to pass first"):
            graded.require("task1", impl="exercises")
    assert fresh_verdicts == ["task1"]


def test_a_cell_reading_what_a_stopped_demo_made_says_why(fresh_verdicts, capsys, tmp_path):
    """In IPython: a demo stops at Task 1; the next cell's own require (Task 12) passes but it reads
    the stopped cell's `engine`: one line, the first cell's reason, and so for a cell reading what
    that one made. A name nobody was to make keeps its NameError, and so does `engine` once Task 1
    passes (the demo was not re-run: the reason is no longer the task)."""
    import shutil

    from IPython.core.interactiveshell import InteractiveShell

    from pagedlab import graded

    shutil.copy(ROOT / "exercises" / "memory_manager.py", tmp_path)
    folder = repr(str(tmp_path))
    cells = [f'import pagedlab\npagedlab.graded.require("task1", impl={folder})\nengine = object()\n',
             'pagedlab.graded.require("task12", impl="solutions")\nmade = [engine]\n',
             'print(made)\n',
             'print(a_typo)\n',
             f'import shutil\nshutil.copy({str(ROOT / "solutions" / "memory_manager.py")!r}, {folder})\n'
             f'pagedlab.graded.require("task1", impl={folder})\n',
             'print(engine)\n']
    shell = InteractiveShell.instance()
    installed = graded._installed
    shown = []
    try:
        graded._installed = False
        for cell in cells:
            capsys.readouterr()
            shell.run_cell(cell)
            shown.append([line for line in capsys.readouterr().out.splitlines() if line.strip()])
    finally:
        shell.set_custom_exc((), None)
        graded._installed = installed
        InteractiveShell.clear_instance()
    needs = [line for lines in shown[:3] for line in lines if "needs Task 1 " in line]
    assert [len(lines) for lines in shown[:3]] == [1, 1, 1] and len(needs) == 3, shown
    assert any("NameError" in line and "a_typo" in line for line in shown[3]), shown[3]
    assert shown[4] == [], shown[4]
    assert any("NameError" in line and "engine" in line for line in shown[5]), shown[5]


def test_a_c_track_verdict_is_remembered_per_version_of_llm_memory_c(tmp_path):
    """The C folder has no memory_manager.py: an edit of llm_memory.c must make a new version, or
    a require would repeat the verdict on the file before the fix."""
    from pagedlab import graded

    (tmp_path / "llm_memory.c").write_text("/* stub */\n")
    before = graded._version_key(manifest.task("task3"), tmp_path)
    (tmp_path / "llm_memory.c").write_text("/* fixed */\n")
    assert graded._version_key(manifest.task("task3"), tmp_path) != before
