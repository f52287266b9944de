"""`pagedlab release`: the student edition has what a student needs and nothing of the answers.

The leak check here is written independently of release.py's own guard: it re-reads every fenced
region of solutions/ and searches every released file (notebook sources and outputs decoded) for
each non-trivial line. Planted leaks prove both the guard and this check can fail.
"""

from __future__ import annotations

import json
import re
import shutil
import stat
from pathlib import Path

import pytest

from pagedlab import assign, release
from pagedlab.cuda import compiler
from pagedlab.cuda import runner as kernel_runner

ROOT = Path(__file__).resolve().parent.parent
BEGIN = re.compile(r"^\s*(###|//)\s*BEGIN SOLUTION")
END = re.compile(r"^\s*(###|//)\s*END SOLUTION")


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("student") / "course"
    report = release.build(out)
    return out, report


def released_files(out):
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())


# ---- contents ------------------------------------------------------------------------------


def test_edition_has_what_a_student_needs(edition):
    out, report = edition
    files = released_files(out)
    assert sorted(f.as_posix() for f in report.files) == files
    top = {f.split("/")[0] for f in files}
    course_tools = set(re.findall(r"\btools/[\w./-]+\.py\b", (ROOT / "course").read_text()))
    optional = {"requirements.lock"} | ({"tools"} if course_tools else set())
    assert top - optional == {".ci", ".github", ".gitignore", ".pagedlab-course", "README.md",
                              "constraints.txt", "course", "environment.yml", "environment-gpu.yml", "exercises", "notebooks",
                              "pagedlab", "pyproject.toml", "tests"}
    assert {f for f in files if f.startswith("tools/")} == course_tools  # only what ./course runs
    assert 'edition = "student"' in (out / ".pagedlab-course").read_text()
    for name in ("course", ".ci/run"):
        assert (out / name).stat().st_mode & stat.S_IXUSR, f"{name} is not executable"
    assert "./course test" in (out / ".ci" / "run").read_text()
    # The exercises are what solutions/ generates (the stubs), whatever the local exercises/ says.
    for path, text in assign.plan().items():
        assert (out / "exercises" / path.name).read_text() == text
    assert {p.name for p in (out / "notebooks").glob("*.ipynb")} == {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert (out / "notebooks" / "nbval.cfg").is_file()
    assert [p.name for p in (out / "tests").iterdir()] == ["test_student_setup.py"]
    for module in ("cli.py", "loader.py", "graded.py", "grader/expected.json", "spec/tasks.toml", "assign.py"):
        assert (out / "pagedlab" / module).is_file(), module
    # the kernel runner is built in the student's machine: every file it and the runtime need
    for path in {*compiler.RUNTIME_SOURCES, *kernel_runner.SOURCES}:
        assert (out / "pagedlab" / "cuda" / path.name).is_file(), path.name


def test_student_readme_gives_two_commands_that_exist(edition):
    out, _ = edition
    readme = (out / "README.md").read_text()
    commands = re.findall(r"^\./course (\w+)", readme, re.M)
    assert commands == ["open", "test"]
    course = (out / "course").read_text()
    assert "    open)" in course and "    test)" in course and 'edition *= *"student"' in course
    assert "Course map" in readme and "00_welcome" in readme
    assert "solutions" not in readme and "pagedlab assign" not in readme
    # the grader's notebook run, which Gradescope may do (GRADE_NOTEBOOKS=1), and how to try it
    assert "pagedlab grade --impl exercises --notebooks" in readme and "GRADE_NOTEBOOKS=1" in readme


def test_edition_leaves_out_instructor_material(edition):
    out, _ = edition
    files = released_files(out)
    for banned in ("solutions/", "grading/", "benchmarks/", "tests/submissions/",
                   "tests/cuda_kernels/", "backups/", "build/"):
        assert not [f for f in files if f.startswith(banned)], banned
    assert not [f for f in files if "mutant" in f or "mutation" in f or "hidden" in f]
    assert "pagedlab/release.py" not in files  # quotes solution lines; needs solutions/ anyway
    assert not [f for f in files if f.endswith("README.md") and f != "README.md"]
    assert "exercises/.assign-manifest.json" not in files
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]


def test_notebooks_ship_stripped_except_checked_outputs(edition):
    out, _ = edition
    kept = 0
    for path in sorted((out / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            checked = "NBVAL_CHECK_OUTPUT" in "".join(cell["source"])
            if checked:
                kept += bool(cell["outputs"])
            else:
                assert cell["outputs"] == [] and cell["execution_count"] is None, path.name
    assert kept >= 5  # 00, 01, 02, 03, 06 carry checked outputs that nbval compares


def test_strip_notebook_keeps_checked_cells_by_comment_or_tag():
    out = {"output_type": "stream", "name": "stdout", "text": ["42\n"]}
    nb = {"cells": [
        {"cell_type": "code", "source": "# NBVAL_CHECK_OUTPUT\nprint(42)", "outputs": [out], "execution_count": 3, "metadata": {}},
        {"cell_type": "code", "source": "print(42)", "outputs": [out], "execution_count": 4, "metadata": {"tags": ["nbval-check-output"]}},
        {"cell_type": "code", "source": "print(42)", "outputs": [out], "execution_count": 5, "metadata": {"execution": {"x": 1}}},
        {"cell_type": "markdown", "source": "text", "metadata": {}},
    ], "metadata": {"widgets": {"state": {}}}}
    stripped = release.strip_notebook(nb)
    assert [c.get("outputs") for c in stripped["cells"]] == [[out], [out], [], None]
    assert [c.get("execution_count") for c in stripped["cells"]] == [3, 4, None, None]
    assert "execution" not in stripped["cells"][2]["metadata"] and "widgets" not in stripped["metadata"]
    assert nb["cells"][2]["outputs"] == [out]  # the instructor's notebook object is not modified


# ---- no solution text ----------------------------------------------------------------------


def solution_lines():
    """{line: (solution file, why it is not trivial)} written here, apart from release.py."""
    lines = {}
    for sol in sorted((ROOT / "solutions").rglob("*")):
        if not sol.is_file() or sol.suffix not in (".py", ".cu", ".cuh", ".c", ".h"):
            continue
        inside, fenced, outside = False, [], []
        for line in sol.read_text().splitlines():
            if BEGIN.match(line):
                inside = True
            elif END.match(line):
                inside = False
            else:
                (fenced if inside else outside).append(line)
        exercise = ROOT / "exercises" / sol.name
        context = "\n".join(outside) + "\n" + (exercise.read_text() if exercise.is_file() else "")
        for line in fenced:
            s = line.strip()
            if not s or s.startswith(("#", "//", "/*", "*")) or len(s) < 12:
                continue
            if re.search(r"(?<!\w)" + re.escape(s) + r"(?!\w)", context):
                continue  # a signature or given code the exercise shows anyway
            lines[s] = sol.name
    return lines


def text_of(path: Path) -> str:
    raw = path.read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        return raw
    nb = json.loads(raw)
    parts = [raw]
    for cell in nb["cells"]:
        parts.append("".join(cell["source"]))
        for o in cell.get("outputs", []):
            parts.append("".join(o.get("text", "")))
            parts += ["".join(v) if isinstance(v, list) else str(v) for v in o.get("data", {}).values()]
    return "\n".join(parts)


def leaks_in(out: Path) -> list[tuple[str, str, str]]:
    lines = solution_lines()
    found = []
    for rel in released_files(out):
        text = text_of(out / rel)
        for line, sol in lines.items():
            if line in release.SHARED_IDIOMS:
                continue
            if line in text and re.search(r"(?<!\w)" + re.escape(line) + r"(?!\w)", text):
                found.append((rel, line, sol))
    return found


def test_the_solutions_have_enough_fenced_lines_to_look_for():
    lines = solution_lines()
    assert len(lines) > 150
    assert {sol for sol in lines.values()} >= {"memory_manager.py", "paged_attention.py",
                                               "paged_attention.cu", "prefix_cache.py", "buddy.py"}


def test_no_line_of_a_solution_region_in_any_released_file(edition):
    out, _ = edition
    leaks = [leak for leak in leaks_in(out) if leak[:2] not in release.PENDING]
    assert not leaks, "\n".join(f"{f}: {line!r} (solutions/{sol})" for f, line, sol in leaks)


def test_shared_idioms_are_really_in_the_shipped_harness():
    """Each allowed line must be a line some shipped harness or demo needs; stale ones go."""
    answers = ROOT / "pagedlab" / "grader" / "answers"
    shipped = "\n".join(p.read_text() for d in ("pagedlab", "notebooks") for p in (ROOT / d).rglob("*")
                        if p.is_file() and p.suffix in (".py", ".ipynb") and answers not in p.parents)
    unused = [line for line in {**release.SHARED_IDIOMS, **release.SHARED_MODEL_LINES} if line not in shipped]
    assert not unused, f"remove from release.SHARED_IDIOMS / SHARED_MODEL_LINES: {unused}"


# ---- the answer models (Tasks 11-13) stay in the instructor edition -----------------------------

# Lines only the models' logic has (written here, independently of release.model_lines).
MODEL_LINES = {
    "buddy.py": ["while k < top and (addr ^ (1 << k)) in self.free_lists.get(k, ()):",
                 "for j in sorted(o for o, addrs in self.free_lists.items() if o >= k and addrs):",
                 "self.free_lists.setdefault(j, set()).add(addr + (1 << j))"],
    "swap.py": ["linked = [other for other in owned if other not in members and owned[other] & owned[current]]",
                "moved[block] = dst_refs.index(0)",
                "if any(dst.seq(entry.seq_id) is not None for entry in group) or len(reached) > dst.free:"],
    "prefix_cache.py": ["if need > len(self.free) - sum(self.ref[b] == 0 for b in hits):",
                        "b = self.cache.get(tuple(prompt[:(i + 1) * B]))",
                        "del self.cache[self.key_of.pop(b)]"],
}
MODEL_NAMES = [r"\bexpected_move\b", r"\bReferenceCache\b", r"\bclass Buddy\b", r"\bclass Move\b"]


def test_edition_has_none_of_the_answer_models(edition):
    out, _ = edition
    answers = ROOT / "pagedlab" / "grader" / "answers"
    assert not [f for f in released_files(out) if f.startswith("pagedlab/grader/answers")]
    texts = {rel: text_of(out / rel) for rel in released_files(out)}
    texts = {rel: text for rel, text in texts.items() if text is not None}
    for name, lines in MODEL_LINES.items():
        model = (answers / name).read_text()
        for line in lines:
            assert line in model, f"{name} no longer has {line!r}: pick another of its lines"
            assert not [rel for rel, text in texts.items() if line in text], line
    for pattern in MODEL_NAMES:
        assert re.search(pattern, "\n".join(p.read_text() for p in answers.glob("*.py"))), pattern
        assert not [rel for rel, text in texts.items() if re.search(pattern, text)], pattern
    # The release's own guard knows these lines too (a copy in a shipped module fails the release).
    assert {line for lines in MODEL_LINES.values() for line in lines} <= set(release.model_lines(answers))


def test_a_model_line_planted_in_the_library_fails_the_release(tmp_path):
    src = _source_copy(tmp_path)
    line = MODEL_LINES["swap.py"][0]
    viz = src / "pagedlab" / "viz.py"
    viz.write_text(viz.read_text() + f"\n# e.g. {line}\n")
    out = tmp_path / "out"
    with pytest.raises(release.ReleaseError, match="would ship") as caught:
        release.build(out, source=src)
    assert line in str(caught.value) and "answers/swap.py" in str(caught.value)
    assert list(out.iterdir()) == []


def _source_copy(tmp_path):
    src = tmp_path / "instructor"
    for name in ("pagedlab", "solutions", "exercises", "notebooks", "tests/student"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in release.TOP_LEVEL + ("README.md",):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, src / name)
    return src


def _plant_in_notebook(path: Path, text: str, *, output: bool, checked: bool = False):
    nb = json.loads(path.read_text())
    if output:
        cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
        if checked:
            cell["source"] = ["# NBVAL_CHECK_OUTPUT\n"] + list(cell["source"])
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": [text + "\n"]}]
    else:
        nb["cells"].append({"cell_type": "markdown", "id": "planted", "metadata": {}, "source": [text]})
    path.write_text(json.dumps(nb, indent=1))


def _a_distinctive_line(sol="paged_attention.cu"):
    return max((line for line, s in solution_lines().items() if s == sol), key=len)


@pytest.mark.parametrize("where", ["library", "markdown", "checked output"])
def test_planted_leak_fails_the_release_and_leaves_nothing(tmp_path, where):
    src = _source_copy(tmp_path)
    line = _a_distinctive_line()
    nb = src / "notebooks" / "04_fork_cow.ipynb"
    if where == "library":
        viz = src / "pagedlab" / "viz.py"
        viz.write_text(viz.read_text() + f"\n# e.g. {line}\n")
    else:
        _plant_in_notebook(nb, line, output=where == "checked output", checked=True)
    out = tmp_path / "out"
    with pytest.raises(release.ReleaseError, match="would ship") as caught:
        release.build(out, source=src)
    assert line in str(caught.value)
    expected = "pagedlab/viz.py" if where == "library" else "notebooks/04_fork_cow.ipynb"
    assert expected in str(caught.value)
    assert list(out.iterdir()) == []  # nothing left to publish by mistake


def test_outputs_of_unchecked_cells_are_stripped_so_they_cannot_leak(tmp_path):
    src = _source_copy(tmp_path)
    line = _a_distinctive_line("memory_manager.py")
    _plant_in_notebook(src / "notebooks" / "04_fork_cow.ipynb", line, output=True, checked=False)
    out = tmp_path / "out"
    release.build(out, source=src)
    assert line not in (out / "notebooks" / "04_fork_cow.ipynb").read_text()
    assert not [leak for leak in leaks_in(out) if leak[:2] not in release.PENDING]


def test_a_fenced_file_assign_cannot_stub_still_counts(tmp_path, monkeypatch):
    """A fenced kind of file the generator copies verbatim (here: .c, as if assign did not know
    it) would ship a solution in exercises/: the guard reads every file under solutions/."""
    monkeypatch.delitem(assign.FENCES, ".c", raising=False)
    src = _source_copy(tmp_path)
    (src / "solutions" / "llm_memory.c").write_text(
        "int llm_init(void) {\n  // BEGIN SOLUTION Task 1\n  engine_total_blocks = pool_size / 64;\n"
        "  // END SOLUTION\n  return 0;\n}\n")
    with pytest.raises(release.ReleaseError, match=r"exercises/llm_memory\.c: engine_total_blocks"):
        release.build(tmp_path / "out", source=src)


# ---- where it writes -----------------------------------------------------------------------


def test_refuses_a_folder_with_other_content_and_replaces_only_an_earlier_edition(tmp_path):
    src = _source_copy(tmp_path)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "thesis.tex").write_text("years of work")
    with pytest.raises(release.ReleaseError, match="not a student edition"):
        release.build(busy, source=src, force=True)
    assert (busy / "thesis.tex").read_text() == "years of work" and len(list(busy.iterdir())) == 1

    out = tmp_path / "edition"
    release.build(out, source=src)
    (out / ".git").mkdir()
    (out / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (out / "stray.txt").write_text("left over")
    with pytest.raises(release.ReleaseError, match="--force"):
        release.build(out, source=src)
    assert (out / "stray.txt").exists()
    report = release.build(out, source=src, force=True)
    assert not (out / "stray.txt").exists() and (out / ".git" / "HEAD").is_file()
    assert (out / ".pagedlab-course").is_file()
    assert not report.notes and not list(tmp_path.glob("edition-exercises-*"))  # stubs only: no copy

    # Released into someone's working copy by mistake: their exercises are saved next to it.
    mine = b"def take_block(engine, start=0):\n    return 3  # my work\n"
    (out / "exercises" / "memory_manager.py").write_bytes(mine)
    report = release.build(out, source=src, force=True)
    saved = list(tmp_path.glob("edition-exercises-*"))
    assert len(saved) == 1 and (saved[0] / "memory_manager.py").read_bytes() == mine
    assert str(saved[0]) in report.summary()
    assert (out / "exercises" / "memory_manager.py").read_bytes() != mine


def test_ships_only_the_tools_the_course_script_runs(tmp_path):
    src = _source_copy(tmp_path)
    (src / "tools").mkdir()
    (src / "tools" / "bootstrap.py").write_text("print('set up')\n")
    (src / "tools" / "build_notebook_99.py").write_text("print('instructor only')\n")
    (src / "requirements.lock").write_text("torch==2.13.0\n")
    course = src / "course"
    course.write_text(course.read_text().replace("bootstrap() {", 'bootstrap() {\n    python3 tools/bootstrap.py "$VENV"', 1))
    out = tmp_path / "out"
    release.build(out, source=src)
    assert sorted(p.name for p in (out / "tools").iterdir()) == ["bootstrap.py"]
    assert (out / "requirements.lock").read_text() == "torch==2.13.0\n"


def test_refuses_to_write_inside_the_course_or_over_it(tmp_path):
    src = _source_copy(tmp_path)
    for bad in (src, src / "notebooks" / "x", tmp_path):
        with pytest.raises(release.ReleaseError, match="outside the course folder"):
            release.build(bad, source=src)
    release.build(src / "build" / "student", source=src)  # build/ is fine (git ignores it)


def test_student_edition_never_suggests_a_command_that_replaces_exercises(edition):
    out, _ = edition
    prose = [rel for rel in released_files(out)
             if rel.startswith(("notebooks/", "tests/", ".ci/", ".github/")) or rel == "README.md"]
    assert len(prose) > 10
    for rel in prose:
        text = text_of(out / rel)
        assert "pagedlab assign" not in text and "assign --force" not in text, rel
    # `course test` in this edition returns before the instructor branch that runs assign --check.
    course = (out / "course").read_text()
    student = course.index('edition *= *"student"')
    assert course.index("exec \"$PY\" -m pagedlab grade --impl exercises", student) < course.index("pagedlab assign")
