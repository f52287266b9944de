"""The student edition from a fresh clone: its two README commands work, its CI passes.

What a class gets: `pagedlab release` into a folder, committed, pushed (here: cloned) and checked
out by a student with nothing installed. `.ci/run` there bootstraps its own `.venv` (pip's cache
makes that about a minute), runs the student tests and prints the grade of the untouched
exercises (0, with a clean note that hidden checks are not part of this edition).

Its run time is measured and printed (run with -s), not asserted: timing targets do not belong in
tests. On the 2-core development machine with pip's cache warm: about 1.5 min for pip, 40 s for
the tests and the grade; up to 3 min under heavy load.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from pagedlab import manifest, release

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
    # The clone's few processes never repay bootstrap's minute of bytecode compiling (the
    # checkout's own venv, built by the same bootstrap, shows the step).
    env["PAGEDLAB_COMPILE_BYTECODE"] = "0"
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
# test_every_tasks_checks_load_in_the_edition; their correct code runs in the edition's
# notebooks (08: Task 10, 10: Tasks 13 and 14) below.
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


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_course_open_in_the_clone_serves_the_notebooks(ci_run, clone):
    port, token = _free_port(), "student-edition-test"
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


# The notebooks whose demos load files the package ships (08's planted barrier once read
# solutions/; 10's kernels; 02c's C headers) and whose checked outputs must survive the release's
# stripping. Every notebook also runs under nbval in the instructor's checkout in the same CI run,
# no code cell of any notebook reads solutions/ (tests/test_notebook_sources.py), and each
# notebook's imports are checked in the edition below; 02 (the student's Python engine, nothing
# shipped) ran here too until its graded cells ran as students in tests/test_jupyterhub.py.
EDITION_NOTEBOOKS = ("02c_hw3_in_c", "08_cuda_kernel", "10_swap_and_v2")


def test_every_notebooks_imports_resolve_in_the_edition(ci_run, clone):
    """A pagedlab module the release leaves out (instructor-only, or an answer) that a notebook
    still imports would fail only here: import what every notebook imports, in the clone's venv."""
    script = textwrap.dedent("""
        import ast, importlib, json, pathlib, sys
        missing = []
        for path in sorted(pathlib.Path("notebooks").glob("[0-9]*.ipynb")):
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
        print("\\n".join(missing))
        sys.exit(1 if missing else 0)
    """)
    proc = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", script], cwd=clone,
                          capture_output=True, text=True, env=_student_env(clone.parent), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


@pytest.mark.task_wide
def test_every_tasks_checks_load_in_the_edition(ci_run, clone):
    """What the grader plans before any child starts: each task's public checks, from the
    edition's own files (a check module needing something the release left out fails here)."""
    script = ("from pagedlab import manifest\nfrom pagedlab.checks import framework\n"
              "for row in manifest.TABLE:\n    assert framework.checks_of(row.id), row.id\n"
              "print(len(manifest.TABLE))")
    proc = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", script], cwd=clone,
                          capture_output=True, text=True, env=_student_env(clone.parent), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [str(len(manifest.TABLE))]


def test_the_notebooks_run_in_the_student_edition_on_correct_code(ci_run, clone):
    """With a correct submission (the instructor's solutions, passed as a folder) the notebooks of
    the student edition run top to bottom: none of them needs the solutions/ folder it lacks."""
    env = {**_student_env(clone.parent), "PAGEDLAB_IMPL": str(ROOT / "solutions")}
    proc = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--nbval-lax", "--nbval-cell-timeout=300", "--nbval-sanitize-with",
                           "notebooks/nbval.cfg", *(f"notebooks/{n}.ipynb" for n in EDITION_NOTEBOOKS)],
                          cwd=clone, capture_output=True, text=True, env=env, timeout=1500)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert " passed" in out and " failed" not in out
