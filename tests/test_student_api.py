"""The student API is a list, enforced: a student file that calls pagedlab's harness or models
(or loads C libraries, starts processes, reads pagedlab's source) scores 0 with a message naming
the rule and the line, and the honest solutions still score full marks."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pagedlab import student
from pagedlab.grader import submission
from pagedlab.grader.cli import grade
from pagedlab.guard import static

sys.path.insert(0, str(Path(__file__).parent / "submissions"))
import broken  # noqa: E402  (copies solutions/)
import student_api_attacks as attacks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _task_result(results: dict, task: str) -> dict:
    number = task.removeprefix("task")
    return next(t for t in results["tests"] if t["number"] == number)


@pytest.mark.parametrize("name", sorted(attacks.ATTACKS))
def test_an_answer_taken_from_pagedlab_scores_nothing_and_says_why(name, tmp_path):
    filename, _extra, task = attacks.ATTACKS[name]
    results = grade(str(attacks.make(name, tmp_path / "sub")), tasks=[task.removeprefix("task")],
                    echo=lambda *a: None, hidden=False)
    row = _task_result(results, task)
    assert row["score"] == 0, row
    assert "refused by the student API" in row["output"], row["output"]
    assert f"{filename}:" in row["output"], row["output"]  # names the file and line


def test_the_honest_solutions_still_score_full_marks_on_the_guarded_tasks(tmp_path):
    folder = broken.copy_solutions(tmp_path / "sub")
    results = grade(str(folder), tasks=["1", "9", "12", "13"], echo=lambda *a: None, hidden=False)
    assert results["score"] == sum(t["max_score"] for t in results["tests"]), \
        {t["number"]: (t["score"], t["output"][-400:]) for t in results["tests"] if t["score"] != t["max_score"]}


def test_solutions_and_exercises_are_inside_the_student_api():
    assert static.check_folder(ROOT / "solutions") == []
    assert static.check_folder(ROOT / "exercises") == []


def test_intake_names_the_file_and_line_outside_the_api(tmp_path):
    folder = attacks.make("model_buddy", tmp_path / "sub")
    _, report = submission.prepare(folder, tmp_path / "work")
    line = next(n for n, text in enumerate((folder / "buddy.py").read_text().splitlines(), 1)
                if "pagedlab.grader.answers" in text)
    assert f"buddy.py:{line}: imports pagedlab.grader.answers.buddy.Buddy" in report, report


# A student file run in a course tree, with no guard installed: which model imports succeed.
_MODEL_PROBE = textwrap.dedent('''
    import json, runpy, sys
    from pathlib import Path
    tree, files = Path(sys.argv[1]), json.loads(sys.argv[2])
    sys.path.insert(0, str(tree))
    import pagedlab.drivers.prefix_cache, pagedlab.drivers.swap, pagedlab.simulator  # they load there
    out = {"pagedlab": pagedlab.__file__}
    for name, path in files.items():
        try:
            runpy.run_path(path, run_name="student")
            out[name] = "imported"
        except ImportError as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))
''')


def _student_files_importing_the_models(tree: Path, folder: Path) -> dict:
    """Each attack of attacks.MODEL_IMPORTS as the end of that tree's exercise file, run there."""
    files = {}
    for name, (filename, line) in attacks.MODEL_IMPORTS.items():
        path = folder / name.replace(" ", "_").replace(",", "") / filename
        path.parent.mkdir(parents=True)
        path.write_text((tree / "exercises" / filename).read_text() + "\n" + line + "\n")
        files[name] = str(path)
    done = subprocess.run([sys.executable, "-c", _MODEL_PROBE, str(tree), json.dumps(files)],
                          capture_output=True, text=True, timeout=300, check=False, cwd=folder)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_student_edition_has_no_answer_model_to_import(tmp_path):
    """Tasks 11-13's models are absent from the student edition, not only refused: a student file
    there fails to import every one of them, even with no guard running."""
    from pagedlab import release

    edition = tmp_path / "edition"
    release.build(edition)
    found = _student_files_importing_the_models(edition, tmp_path / "in_edition")
    assert found.pop("pagedlab") == str(edition / "pagedlab" / "__init__.py")
    for name, verdict in found.items():
        assert verdict.startswith(("ModuleNotFoundError", "ImportError")), (name, verdict)
    # The same files do import the models in the instructor edition: the edition is what differs.
    here = _student_files_importing_the_models(ROOT, tmp_path / "in_instructor")
    assert [name for name, verdict in here.items() if verdict == "imported"] == \
        ["buddy model", "swap model", "prefix-cache model", "models by importlib"], here


@pytest.mark.parametrize("source, what", [
    ("from pagedlab.harness import hw3", "imports pagedlab.harness.hw3"),
    ("from pagedlab import load", "imports pagedlab.load"),
    ("import pagedlab.student.cmem", "binds the name pagedlab"),
    ("from pagedlab.drivers import swap", "imports pagedlab.drivers.swap"),
    ("import os", "imports os"),
    ("import subprocess", "imports subprocess"),
    ("from ctypes import CDLL", "imports ctypes.CDLL"),
    ("import ctypes\nctypes.pythonapi.Py_Initialize", "uses .pythonapi"),
    ("from pagedlab.student import cmem\ncmem._libc", "uses cmem._libc"),
    ("from pagedlab.student import cmem\ngetattr(cmem, 's' + 'ys')", "computed attribute name"),
    ("import operator\noperator.attrgetter('sys')", "uses .attrgetter"),
    ("f = lambda: 0\nf.__globals__", "uses .__globals__"),
    ("eval('1')", "uses eval"),
    ("open('/etc/passwd')", "uses open"),
    ("from . import x", "a relative import"),
    ("from ctypes import *\nCDLL(None)", "imports ctypes.*"),
    ("from ctypes import *\nCDLL(None)", "uses CDLL"),
    ("import torch\ntorch.load(b)", "uses .load"),
])
def test_static_check_refuses(source, what):
    findings = static.check_source(source, "s.py")
    assert any(what in f for f in findings), findings
    assert all(f.startswith("s.py:") for f in findings)


@pytest.mark.parametrize("source", [
    "import torch\nimport numpy as np\nimport math, ctypes, hashlib, operator",
    "from typing import Callable\nfrom collections import OrderedDict",
    "from pagedlab import cmem, hw3\nfrom pagedlab.hw3 import Sequence, offsetof",
    "from pagedlab.student.hw3 import *",
    "from pagedlab.student import cmem\nfrom pagedlab.student.hw3 import LLMEngine",
    "import pagedlab.student.hw3 as hw3",
    "class A:\n    def __init__(self):\n        super().__init__()\n        self._x = type(self).__name__",
    "getattr(object(), 'x', None)",
])
def test_static_check_lets_the_student_api_through(source):
    assert static.check_source(source, "s.py") == []


def test_every_listed_pagedlab_module_imports():
    import importlib

    for name in student.PAGEDLAB:
        importlib.import_module(name)
    assert sys.modules["pagedlab.cmem"] is sys.modules["pagedlab.student.cmem"]
    assert sys.modules["pagedlab.hw3"] is sys.modules["pagedlab.student.hw3"]
    assert not hasattr(sys.modules["pagedlab.hw3"], "derive")  # the harness stays outside


# Run-time layer: code the static reading did not see (the file on disk is clean, the code run
# under its name is not), so only the audit hook and the import wrapper stand in the way.
_RUNTIME = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    import pagedlab.harness.hw3, pagedlab.simulator  # the harness has them loaded already
    from pagedlab.guard import StudentAPIError, audit
    folder = Path(sys.argv[1])
    (folder / "clean.py").write_text("x = 1\\n")
    audit.install(folder)
    probes = {
        "uncached harness import": "import pagedlab.drivers.swap",
        "cached harness import": "import pagedlab.harness.hw3",
        "from pagedlab import a model": "from pagedlab import simulator",
        "pythonapi symbol": "import ctypes\\nctypes.pythonapi.PyImport_ImportModule",
        "CDLL": "import ctypes\\nctypes.CDLL(None)",
        "subprocess": "import subprocess",
        "os.system": "import os",
        "read pagedlab source": "open(%r).read()" % str(Path(pagedlab.simulator.__file__)),
        "allowed": "from pagedlab.student import cmem, hw3\\nimport torch, math",
    }
    out = {}
    for name, source in probes.items():
        code = compile(source, str(folder / "clean.py"), "exec")
        def run(code=code):
            exec(code, {"__name__": "student"})
        try:
            run()
            out[name] = "ran"
        except StudentAPIError as exc:
            out[name] = "refused: " + str(exc)
    # Processes: only through modules the student could not import, so call them from a
    # student-owned frame directly.
    # An unpickler (pure Python here, as inside torch.load) imports the cached harness for it.
    import os, pickle, subprocess
    for name, source in {"os.system call": "os.system('true')",
                         "Popen call": "subprocess.run(['true'])",
                         "unpickled harness": "pickle._loads(b'cpagedlab.harness.hw3\\\\nderive\\\\n.')"}.items():
        code = compile(source, str(folder / "clean.py"), "exec")
        try:
            exec(code, {"os": os, "subprocess": subprocess, "pickle": pickle})
            out[name] = "ran"
        except StudentAPIError as exc:
            out[name] = "refused: " + str(exc)
    print(json.dumps(out))
''')


def test_run_time_guard_refuses_what_a_student_frame_asks_for(tmp_path):
    done = subprocess.run([sys.executable, "-c", _RUNTIME, str(tmp_path)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out.pop("allowed") == "ran"
    for name, verdict in out.items():
        assert verdict.startswith("refused: "), (name, verdict)
        assert "pagedlab.student" in verdict, verdict  # the message names the allowed list


def test_a_file_nested_too_deeply_for_the_checker_is_refused_not_a_crash():
    from pagedlab.guard import static

    deep = "x = " + "-" * 100_000 + "1\n"  # a unary chain 100,000 deep: past any recursion limit
    found = static.check_source(deep, "memory_manager.py")
    assert found and "nested too deeply" in found[0], found
