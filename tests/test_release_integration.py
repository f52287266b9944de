"""The student edition from a fresh clone, as a student uses it: its README commands, every
notebook, the grade, on both tracks.

What a class gets: `pagedlab release` into a folder, committed, pushed (here: cloned) and checked
out by a student with nothing installed. `.ci/run` there (the README's `./course test`)
bootstraps its own `.venv` (uv, from its cache), runs the student tests and prints the grade of
the untouched exercises (0, with a clean note that hidden checks are not part of this edition).
Then, in that `.venv`, one Jupyter kernel does what a student does (STUDENT_SESSION):
(a) every notebook of the edition on the untouched stubs: each cell runs, or stops with one line
    that says which task to finish first or that a task is not implemented yet; a notebook
    without a task of its own runs clean;
(b) a C-track student (llm_memory.c finished, memory_manager.py as shipped): notebooks 02-06 run
    on that C engine, and `pagedlab grade` gives Part A full marks, naming llm_memory.c first.
What only correct code shows of notebooks 08-10 in the edition runs after (EDITION_CELLS); every
cell of every notebook runs on the solutions under nbval in the instructor's checkout.

Its run time is measured and printed (run with -s), not asserted: timing targets do not belong in
tests. About 40 CPU-s for .ci/run and EDITION_CELLS, and STUDENT_SESSION's own (printed).
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from course_lab import free_port

from pagedlab import release
from pagedlab.spec import manifest

# One worker builds the clone and its .venv once for every test here (conftest.py).
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("release-clone")]
ROOT = Path(__file__).resolve().parent.parent


def _student_env(home: Path) -> dict:
    """The environment of someone who has never set up this course (no venv, no pagedlab vars)."""
    venv_bin = str(Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PAGEDLAB_", "PYTEST_", "VIRTUAL_ENV", "PYTHONPATH", "JUPYTER_"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != Path(venv_bin).resolve())
    env["JUPYTER_RUNTIME_DIR"] = str(home / "jupyter-runtime")
    # A student's Python caches each module's bytecode as it first imports it (CI sets this var,
    # which would make every process here compile torch again; bootstrap's compile step for such
    # machines is shown by the checkout's own venv).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _git(*args, cwd):
    subprocess.run(["git", "-c", "user.name=Instructor", "-c", "user.email=instructor@example.org",
                    "-c", "init.defaultBranch=main", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    base = tmp_path_factory.mktemp("classroom")
    published = base / "published"
    release.build(published)
    _git("init", "-q", cwd=published)
    _git("add", "-A", cwd=published)
    _git("commit", "-q", "-m", "course", cwd=published)
    _git("clone", "-q", str(published), "student", cwd=base)
    return base / "student"


# The edition's .ci/run grades these (PAGEDLAB_QUICK_TASKS): each HW3 task, no torch, no kernel
# build. The others' stubs score 0 in tests/test_grading_real.py; what only the edition shows
# for them, that their checks load without solutions/ and the instructor-only modules, is
# test_every_tasks_checks_load_in_the_edition; correct code passes Task 10's graded cell and the
# HW3 tasks' (1 in C, 11-13) in the edition's notebooks (EDITION_CELLS).
CI_TASKS = [r.id for r in manifest.TABLE if set(r.files) <= {"memory_manager.py", "prefix_cache.py", "buddy.py", "swap.py"}]


@pytest.fixture(scope="module")
def ci_run(clone):
    began, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([str(clone / ".ci" / "run")], cwd=clone, capture_output=True, text=True,
                          env={**_student_env(clone.parent), "PAGEDLAB_QUICK_TASKS": ",".join(CI_TASKS)},
                          timeout=900)
    seconds = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
    print(f"student edition .ci/run: {seconds:.0f} s wall, {used:.0f} s CPU, load {os.getloadavg()[0]:.1f}")
    return proc, seconds


@pytest.mark.task_wide
def test_student_ci_passes_on_the_untouched_exercises(ci_run, record_property):
    proc, seconds = ci_run
    record_property("student_ci_seconds", round(seconds))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert " passed" in out and " failed" not in out.split("Grading")[0]
    graded = sum(r.points for r in manifest.TABLE if r.id in CI_TASKS)
    assert f"total   0/{graded:g}" in out, out[-3000:]
    assert "no hidden checks: they are instructor-only and not part of this edition" in out
    assert "autograder problem" not in out
    grade = out[out.index("Grading exercises"):].splitlines()
    assert grade[1] == ("Part A (Tasks 1–5) is graded from memory_manager.py: neither file is edited yet "
                        "(both are the shipped stubs), and the Python track is the default."), grade[:3]


def test_the_clones_cli_offers_grade_not_the_instructor_commands(ci_run, clone):
    # The grade itself (every task 0 of the total, results as Gradescope reads them) is in
    # ci_run's output above and in tests/test_grading.py: grading the stubs twice showed nothing new.
    help_text = subprocess.run([str(clone / ".venv" / "bin" / "pagedlab"), "--help"], cwd=clone,
                               capture_output=True, text=True, env=_student_env(clone.parent)).stdout
    assert "grade" in help_text and "assign" not in help_text and "release" not in help_text


def test_the_clone_has_no_solutions_and_its_venv_serves_the_clone(ci_run, clone):
    assert not (clone / "solutions").exists() and not (clone / "grading").exists()
    where = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c",
                            "import pagedlab, pagedlab.loader as l; print(l.ROOT)"],
                           cwd=clone.parent, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where) == clone



def test_course_open_in_the_clone_serves_the_notebooks(ci_run, clone):
    port, token = free_port(), "student-edition-test"
    proc = subprocess.Popen(
        [str(clone / "course"), "open", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}"],
        cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, env=_student_env(clone.parent))
    try:
        listing = opened = None
        deadline = time.time() + 90
        while time.time() < deadline and opened is None:
            time.sleep(1)
            assert proc.poll() is None, proc.stdout.read()
            try:
                base = f"http://127.0.0.1:{port}/api/contents"
                with urllib.request.urlopen(f"{base}?token={token}", timeout=5) as r:
                    listing = json.load(r)
                with urllib.request.urlopen(f"{base}/08_cuda_kernel.ipynb?token={token}", timeout=5) as r:
                    opened = json.load(r)
            except OSError:
                continue
        assert opened is not None, "JupyterLab in the student edition did not answer within 90 s"
        served = {item["name"] for item in listing["content"]}
        assert {p.name for p in (clone / "notebooks").glob("*.ipynb")} <= served
        assert opened["type"] == "notebook" and opened["content"]["cells"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


# What of a notebook only the edition can break, run in the edition (the rest of every notebook
# runs under nbval in the instructor's checkout in the same CI run): its set-up cell (imports,
# the student's files and the headers the package ships), every cell reading a file the package
# ships, and the graded cells of these tasks, on correct code. Per notebook, why:
# (02c, the C track compiling the student's llm_memory.c against the edition's pagedlab/include,
# runs whole on a finished C file in STUDENT_SESSION (b).)
# - 08: the kernel, the planted-barrier demo kernel (pagedlab/kernels_demo) and Task 10's checks
#   with the edition's CUDA headers and records; Task 14 (notebook 10) takes the same runner.
# - 09, 10: Tasks 11-13's public checks pass without the answer models the edition leaves out.
# No code cell of any notebook reads solutions/ (tests/test_notebook_sources.py), and each
# notebook's imports are checked in the edition below.
EDITION_CELLS = {"08_cuda_kernel": ("task10",),
                 "09_prefix_caching_and_utilization": ("task11", "task12"), "10_swap_and_v2": ("task13",)}
SHIPPED_FILE = 'files("pagedlab")'  # importlib.resources: a demo reading a file the package ships


def _graded_task(code: str) -> str | None:
    found = re.search(r'pagedlab\.graded\.run\("(task\d+)"', code)
    return found.group(1) if found else None


def _code_cells(notebook: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]


def _edition_cells(notebook: Path, tasks: tuple[str, ...]) -> list[str]:
    """The set-up cell, the cells reading shipped files and the graded cells of `tasks`, in order."""
    code = _code_cells(notebook)
    chosen = [c for i, c in enumerate(code) if i == 0 or SHIPPED_FILE in c or _graded_task(c) in tasks]
    assert sorted(filter(None, map(_graded_task, chosen))) == sorted(tasks), f"{notebook.name}: graded cells moved"
    # A line magic (%matplotlib inline) is Jupyter's; a plain Python runs the rest of the cell.
    return ["\n".join(x for x in c.splitlines() if not x.lstrip().startswith(("%", "!"))) for c in chosen]


# Runs in the edition's venv, in notebooks/ as Jupyter starts a kernel there, in one process (a
# Jupyter kernel per notebook would add its start-up and a torch import each; kernels from a venv
# of the same lock run every notebook under nbval in the checkout):
# 1. what every notebook imports from pagedlab: a module the release leaves out (instructor-only,
#    or an answer) that a notebook still imports fails only here;
# 2. the EDITION_CELLS, in a namespace per notebook.
NOTEBOOK_SIDE = textwrap.dedent("""
    import ast, contextlib, importlib, io, json, pathlib, sys, traceback
    missing = []
    for path in sorted(pathlib.Path(".").glob("[0-9]*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            code = "".join(cell["source"])
            lines = [x for x in code.splitlines() if not x.lstrip().startswith(("%", "!"))]
            for node in ast.walk(ast.parse("\\n".join(lines))):
                if isinstance(node, ast.Import):
                    wanted = [(a.name, None) for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    wanted = [(node.module, a.name) for a in node.names]
                else:
                    continue
                for module, name in wanted:
                    if module.split(".")[0] != "pagedlab":
                        continue  # third-party (cupy behind a guard): the environment's business
                    try:  # `from pagedlab import viz` needs the submodule, not just the package
                        found = importlib.import_module(module)
                        if name and name != "*" and not hasattr(found, name):
                            importlib.import_module(f"{module}.{name}")
                    except ImportError as exc:
                        missing.append(f"{path.name}: {module} {name or ''}: {exc}")
    cells, ran_cells = json.loads(sys.argv[1]), {}
    for notebook, sources in cells.items():
        namespace, ran = {"__name__": "__main__"}, []
        for source in sources:
            shown, error = io.StringIO(), None
            try:
                with contextlib.redirect_stdout(shown):
                    exec(compile(source, notebook, "exec"), namespace)
            except Exception as exc:
                error = "".join(traceback.format_exception(exc))[-3000:]
            ran.append({"source": source, "stdout": shown.getvalue(), "error": error})
            if error:
                break
        ran_cells[notebook] = ran
    with open(sys.argv[2], "w") as out:
        json.dump({"missing": missing, "cells": ran_cells}, out)
""")


@pytest.fixture(scope="module")
def notebook_side(ci_run, clone, tmp_path_factory):
    """With a correct submission (the instructor's solutions, passed as a folder, as a student's
    finished exercises/ would be)."""
    cells = {n: _edition_cells(clone / "notebooks" / f"{n}.ipynb", tasks) for n, tasks in EDITION_CELLS.items()}
    env = {**_student_env(clone.parent), "PAGEDLAB_IMPL": str(ROOT / "solutions"), "MPLBACKEND": "Agg"}
    report = tmp_path_factory.mktemp("notebook-side") / "report.json"
    proc = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", NOTEBOOK_SIDE, json.dumps(cells), str(report)],
                          cwd=clone / "notebooks", capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(report.read_text())


def test_every_notebooks_imports_resolve_in_the_edition(notebook_side):
    assert not notebook_side["missing"], "\n".join(notebook_side["missing"])


def test_the_notebooks_run_in_the_student_edition_on_correct_code(notebook_side, clone):
    """The edition's notebooks load the student's files and the shipped ones, and their graded
    cells pass: none of it needs the solutions/ folder, the answer models or an instructor
    module the edition lacks."""
    readers = {p.stem for p in (clone / "notebooks").glob("*.ipynb") if any(SHIPPED_FILE in c for c in _code_cells(p))}
    assert readers <= set(EDITION_CELLS), f"{readers - set(EDITION_CELLS)} read shipped files: add to EDITION_CELLS"
    for notebook, ran in notebook_side["cells"].items():
        for cell in ran:
            assert cell["error"] is None, f"{notebook}: {cell['source']}\n{cell['error']}"
            if _graded_task(cell["source"]):
                assert "✓" in cell["stdout"] and "✗" not in cell["stdout"], f"{notebook}: {cell['stdout']}"


@pytest.mark.task_wide
def test_every_tasks_checks_load_in_the_edition(ci_run, clone):
    """What the grader plans before any child starts: each task's public checks, from the
    edition's own files (a check module needing something the release left out fails here)."""
    script = ("from pagedlab.spec import manifest\nfrom pagedlab.grader import registry\n"
              "for row in manifest.TABLE:\n    assert registry.checks_of(row.id), row.id\n"
              "print(len(manifest.TABLE))")
    proc = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", script], cwd=clone,
                          capture_output=True, text=True, env=_student_env(clone.parent), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [str(len(manifest.TABLE))]


# ---------------------------------------------------------------------------------------------
# What a student does, in one Jupyter kernel of the clone's venv (a kernel per notebook would add
# its start-up and a torch import each). Each notebook's code cells run in order after a cell
# that forgets the previous notebook (its names, figures and pagedlab.graded's memory of verdicts),
# so each meets the kernel as a fresh one would; cells run on, after an error, as a student's
# "Run All" cannot, so every cell's own outcome is seen. A "student" step is code the student's
# hands would run between notebooks (here: saving the finished C file).
STUDENT_SESSION = textwrap.dedent("""
    import json, sys, nbformat
    from nbclient import NotebookClient
    plan, report = json.loads(sys.argv[1]), sys.argv[2]
    FORGET = "%reset -f\\nimport importlib, matplotlib.pyplot, pagedlab.graded\\n" \\
             "matplotlib.pyplot.close('all')\\nimportlib.reload(pagedlab.graded)"
    cells, where = [], []
    for step in plan:
        code = [step["code"]] if "code" in step else \\
            [c.source for c in nbformat.read(step["notebook"], as_version=4).cells if c.cell_type == "code"]
        cells.append(nbformat.v4.new_code_cell(FORGET if "notebook" in step else "pass"))
        where.append((step["label"], -1))
        for index, source in enumerate(code):
            cells.append(nbformat.v4.new_code_cell(source))
            where.append((step["label"], index))
    nb = nbformat.v4.new_notebook(cells=cells)
    NotebookClient(nb, timeout=600, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": "."}}).execute()
    ran = []
    for (label, index), cell in zip(where, nb.cells):
        errors = [{"ename": o.ename, "evalue": o.evalue, "lines": len(o.traceback)}
                  for o in cell.outputs if o.output_type == "error"]
        printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        images = sum("image/png" in o.get("data", {}) for o in cell.outputs)
        ran.append({"notebook": label, "cell": index, "source": cell.source, "errors": errors, "printed": printed,
                    "images": images})
    with open(report, "w") as out:
        json.dump(ran, out)
""")
C_TRACK_NOTEBOOKS = ("02_block_table", "02c_hw3_in_c", "03_intrusive_list", "04_fork_cow",
                     "05_first_fit_oom", "06_paged_kv_cache")
PART_A = tuple(r.id for r in manifest.TABLE if "memory_manager.py" in r.files)
PART_A_POINTS = sum(r.points for r in manifest.TABLE if r.id in PART_A)
C_TRACK_LINE = ("Part A (Tasks 1–5) is graded from llm_memory.c: memory_manager.py is the untouched stub "
                "the course shipped, and llm_memory.c is edited.")
NEEDS = re.compile(r"^This cell runs your code for a demo and needs Task (\d+) · .* to pass first ")
STUDENT_CODE = re.compile(r"^\s*(pagedlab\.)?graded\.(require|run)\(", re.MULTILINE)
GRADED_FAILED = re.compile(r"^\d+ of \d+ checks did not pass for Task (\d+) ")


def _cpu_of_children() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


@pytest.fixture(scope="module")
def student_session(ci_run, clone, tmp_path_factory):
    """(cells of (a), cells of (b), the C-track grade's output, its results.json): the stubs as
    released, then llm_memory.c from the solutions saved over the C stub, the Python stub kept."""
    c_file = clone / "exercises" / "llm_memory.c"
    stub = c_file.read_bytes()
    plan = [{"label": p.stem, "notebook": p.name} for p in sorted((clone / "notebooks").glob("[0-9]*.ipynb"))]
    plan.append({"label": "student", "code": f"import shutil\nshutil.copy({str(ROOT / 'solutions' / 'llm_memory.c')!r}, "
                                             f"{str(c_file)!r})  # the finished C file, saved"})
    plan += [{"label": f"c-track {name}", "notebook": f"{name}.ipynb"} for name in C_TRACK_NOTEBOOKS]
    report = tmp_path_factory.mktemp("student-session") / "cells.json"
    env = _student_env(clone.parent)
    began, cpu = time.perf_counter(), _cpu_of_children()
    try:
        proc = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", STUDENT_SESSION, json.dumps(plan),
                               str(report)], cwd=clone / "notebooks", capture_output=True, text=True, env=env,
                              timeout=1800)
        assert proc.returncode == 0, proc.stderr[-4000:]
        session = (time.perf_counter() - began, _cpu_of_children() - cpu)
        results = report.parent / "results.json"
        grade = subprocess.run([str(clone / ".venv" / "bin" / "pagedlab"), "grade", "--impl", "exercises",
                                "--tasks", ",".join(PART_A), "--json", str(results)],
                               cwd=clone, capture_output=True, text=True, env=env, timeout=600)
    finally:
        c_file.write_bytes(stub)  # the clone's other tests see the stubs as released
    print(f"student session (every notebook on the stubs, then 02-06 on the C track, one kernel): "
          f"{session[0]:.0f} s wall, {session[1]:.0f} s CPU; the C-track grade of Tasks 1-5: "
          f"{_cpu_of_children() - cpu - session[1]:.0f} s CPU")
    cells = json.loads(report.read_text())
    stubs = [c for c in cells if not c["notebook"].startswith(("c-track", "student")) and c["cell"] >= 0]
    c_track = [c for c in cells if c["notebook"].startswith("c-track") and c["cell"] >= 0]
    assert not [c for c in cells if c["cell"] < 0 and c["errors"]], "a step between notebooks failed"
    return stubs, c_track, grade, json.loads(results.read_text()) if results.is_file() else None


def _unwritten(printed: str) -> bool:
    """Every ✗ a graded cell printed is explained by "not implemented yet" (and there is one)."""
    lines = printed.splitlines()
    crosses = [i for i, line in enumerate(lines) if line.startswith("  ✗ ")]
    return bool(crosses) and all(i + 1 < len(lines) and lines[i + 1].strip().startswith("not implemented yet")
                                 for i in crosses)


def _why_it_stopped(cell: dict) -> str | None:
    """None when every error of `cell` is one line saying which task to finish first, or that its
    graded task is not implemented yet; else what is wrong, for the assertion message."""
    for error in cell["errors"]:
        where = f"{cell['notebook']} cell {cell['cell']} ({cell['source'].splitlines()[0][:70]!r})"
        if error["ename"] != "CheckFailure" or error["lines"] != 1:
            return f"{where}: {error['ename']}: {error['evalue'][:400]} ({error['lines']} traceback lines)"
        if NEEDS.match(error["evalue"]):
            continue
        quiet = "run its graded cell in notebook" in error["evalue"]  # 05's gate runs the checks quietly
        if not GRADED_FAILED.match(error["evalue"]) or not (quiet or _unwritten(cell["printed"])):
            return f"{where}: {error['evalue'][:300]}\n{cell['printed'][-1500:]}"
    return None


def test_every_notebook_of_the_edition_runs_on_the_stubs_or_says_which_task_to_finish(student_session, clone):
    stubs, _, _, _ = student_session
    notebooks = {p.stem: _code_cells(p) for p in (clone / "notebooks").glob("[0-9]*.ipynb")}
    assert {c["notebook"] for c in stubs} == set(notebooks) and len(stubs) == sum(map(len, notebooks.values()))
    wrong = [why for why in map(_why_it_stopped, stubs) if why]
    assert not wrong, "\n\n".join(wrong)
    # A notebook without a task of its own (00, 01, 03) runs clean; each graded cell fails there.
    own_task = {name for name, code in notebooks.items() if any(_graded_task(c) for c in code)}
    assert {"00_welcome", "01_kv_cache_size", "03_intrusive_list"} <= set(notebooks) - own_task
    for c in stubs:
        if c["notebook"] not in own_task:
            assert not c["errors"], f"{c['notebook']} has no task of its own and must run clean: {c}"
        elif _graded_task(c["source"]):
            assert c["errors"] and _unwritten(c["printed"]), c
    # Before the first cell that runs the student's code (a graded cell, a require, a quiet gate),
    # a notebook's explanations run clean on the stubs.
    for name in own_task:
        cells = [c for c in stubs if c["notebook"] == name]
        first = min(c["cell"] for c in cells if _graded_task(c["source"]) or STUDENT_CODE.search(c["source"]))
        early = [(c["cell"], c["errors"]) for c in cells if c["cell"] < first and c["errors"]]
        assert not early, f"{name}: the cells before the first that runs the student's code must run: {early}"


def test_a_c_track_students_grade_gives_part_a_full_marks_from_llm_memory_c(student_session):
    _, _, grade, results = student_session
    lines = grade.stdout.splitlines()
    assert grade.returncode == 0, grade.stdout[-3000:] + grade.stderr[-2000:]
    assert lines[0] == f"Grading exercises ({len(PART_A)} tasks, each in its own process)" and lines[1] == C_TRACK_LINE
    assert re.search(rf"^total\s+{PART_A_POINTS:g}/{PART_A_POINTS:g}$", grade.stdout, re.M), grade.stdout[-2000:]
    assert results["score"] == PART_A_POINTS
    assert results["output"].splitlines()[1] == C_TRACK_LINE
    assert [(t["output"].splitlines()[0], t["extra_data"]["part_a"]) for t in results["tests"]] == \
        [(C_TRACK_LINE, "llm_memory.c")] * len(PART_A)


def test_a_c_track_students_notebooks_run_on_the_c_engine(student_session, clone):
    """02-06 load llm_memory.c (their set-up cells say so, and why); Part A's graded cells pass on
    it, 02c's and 04-05's alike; only 06's own Tasks 6-7, still stubs, stop a cell."""
    _, c_track, _, _ = student_session
    by_notebook: dict[str, list] = {}
    for cell in c_track:
        by_notebook.setdefault(cell["notebook"].removeprefix("c-track "), []).append(cell)
    assert sorted(by_notebook) == sorted(C_TRACK_NOTEBOOKS)
    for name, cells in by_notebook.items():
        first = cells[0]["printed"]
        assert C_TRACK_LINE in first, f"{name}: {first}"
        if name != "02c_hw3_in_c":
            assert f"memory_manager loaded from {clone / 'exercises' / 'llm_memory.c'}" in first, f"{name}: {first}"
        for cell in cells:
            task = _graded_task(cell["source"])
            if name != "06_paged_kv_cache":
                assert not cell["errors"], f"{name} cell {cell['cell']}: {cell['errors']}\n{cell['printed'][-2000:]}"
            else:
                assert _why_it_stopped(cell) is None
                assert all(re.search(r"Task [67] ", e["evalue"]) for e in cell["errors"]), cell
            if task in PART_A:
                assert "graded from llm_memory.c" in cell["printed"] and "All " in cell["printed"], cell
    assert sum(1 for c in by_notebook["02c_hw3_in_c"] if _graded_task(c["source"])) == len(PART_A)
    drawn = [c["images"] for c in by_notebook["02c_hw3_in_c"] if "viz.draw_engine(" in c["source"]]
    assert drawn == [1], f"02c's picture of the C engine must be drawn once: {drawn}"
