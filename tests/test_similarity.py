"""The similarity report: the same scores on every run, and highlights only on student-written code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pagedlab.grader import similarity

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "submissions"))
import classroom as fake_class  # noqa: E402  (tests/submissions/classroom.py)

STUDENTS = ("alice_solution", "bob_stub", "nina_copy", "oscar_copy")
SCORES = """
import json, sys
from pathlib import Path
from pagedlab.grader import similarity
base = Path(sys.argv[1])
fps = similarity.fingerprints({k: base / k for k in sys.argv[2:]}, Path(sys.argv[1]).parent / "skeleton")
print(json.dumps([[p.a, p.b, p.sim_a, p.sim_b] for p in similarity.compare(fps)]))
"""


@pytest.fixture(scope="module")
def students(tmp_path_factory):
    dest = tmp_path_factory.mktemp("class") / "students"
    fake_class.make_class(dest)
    (dest.parent / "skeleton").symlink_to(ROOT / "exercises")
    return dest


def _scores(students: Path, seed: str) -> list:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run([sys.executable, "-c", SCORES, str(students), *STUDENTS],
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_two_runs_give_identical_scores(students):
    """Each process salts Python's hash() differently; the scores must not notice."""
    first, second = _scores(students, "1"), _scores(students, "2")
    assert first == second
    assert [a_b[:2] for a_b in first][0] == ["nina_copy", "oscar_copy"], first


def _written_lines(code: str) -> set[int]:
    """Line numbers (0-based) a student wrote in a copy of the solution: inside the solution
    fences, or after the end of the solution file (the helper the copier appended)."""
    solution = (ROOT / "solutions" / "prefix_cache.py").read_text().splitlines()
    inside, written = False, set()
    for n, line in enumerate(code.splitlines()):
        if "BEGIN SOLUTION" in line:
            inside = True
        if inside or n >= len(solution):
            written.add(n)
        if "END SOLUTION" in line:
            inside = False
    return written


def test_highlights_cover_only_student_written_lines_and_start_on_a_token(students):
    fps = similarity.fingerprints({k: students / k for k in STUDENTS}, ROOT / "exercises")
    pair = similarity.compare(fps)[0]
    name, slices_a, _ = pair.files[0]
    code = fps[pair.a][name].raw_code
    marks = similarity.student_slices(code, slices_a, fps[pair.a][name].given)
    assert marks.shape[1] > 0, "the copied helper is highlighted"
    written = _written_lines(code)
    for start, end in zip(*marks):
        lines = set(range(code.count("\n", 0, start), code.count("\n", 0, end) + 1))
        assert lines <= written, f"handed-out line highlighted: {code[start:end][:200]!r}"
        assert not (code[start - 1:start + 1].isidentifier() and code[start].isalnum()), \
            f"a mark starts inside a name: {code[start - 10:start + 10]!r}"
        assert not code[end - 1:end + 1].isalnum(), f"a mark ends inside a name: {code[end - 10:end + 10]!r}"
    html = similarity.side_by_side(pair, fps, {})
    first_column = html.split("<div class='code'>")[1]
    assert first_column.count("<mark>") == marks.shape[1], "the page marks exactly these runs"
