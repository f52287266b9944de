"""The docs say what is true: every test file they cite exists, and the task tables and totals
they show are the ones `pagedlab assign` writes from the manifest."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from pagedlab import doctables

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted({*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("grading/**/*.md"),
               *ROOT.glob("pagedlab/**/*.md"), *ROOT.glob("notebooks/*.md"), *ROOT.glob("tests/**/*.md")})
CITED = re.compile(r"(?<![\w/.])(tests/[\w./-]+\.(?:py|md|toml|json|sh))")


@pytest.mark.task_wide
def test_every_tests_path_named_in_the_docs_exists():
    missing = [(doc.relative_to(ROOT), path) for doc in DOCS
               for path in CITED.findall(doc.read_text(encoding="utf-8")) if not (ROOT / path).exists()]
    assert DOCS and not missing, f"docs cite files that do not exist: {missing}"


@pytest.mark.task_wide
def test_the_docs_task_tables_are_what_the_manifest_gives():
    assert doctables.stale(ROOT) == [], "run `.venv/bin/pagedlab assign` to rewrite them"
    for name in doctables.FILES:
        assert "<!-- tasks: points-" in (ROOT / name).read_text(encoding="utf-8"), name


# The recipe's hand-edited files (tests/new_task_recipe.py, for the toy task) as the docs name them.
GENERIC = {"pagedlab/spec/tasks.toml": "pagedlab/spec/tasks.toml", "solutions/toy.py": "solutions/<file>",
           "pagedlab/drivers/toy.py": "pagedlab/drivers/<checks>.py",
           "grading/hidden/toy.py": "grading/hidden/<checks>.py",
           "notebooks/09_prefix_caching_and_utilization.py": "notebooks/NN_name.py",
           "notebooks/00_welcome.py": "notebooks/00_welcome.py", "README.md": "README.md"}


def test_the_manifests_header_and_the_readme_name_every_file_the_recipe_edits():
    sys.path.insert(0, str(ROOT / "tests"))
    from new_task_recipe import BY_HAND

    header = "".join(line for line in (ROOT / "pagedlab" / "spec" / "tasks.toml").read_text().splitlines(True)
                     if line.startswith("#"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    recipe = readme[readme.index("**Adding Task N**"):readme.index("**Rehearsing the recipe**")]
    named = [GENERIC[path] for path in sorted(BY_HAND)]  # a new hand-edited file needs a name here
    assert [n for n in named if f"`{n}`" not in recipe] == [], recipe
    assert [n for n in named if n not in header] == [], header
    assert "Seven files are edited by hand" in recipe and len(BY_HAND) == 7
    assert "notebook sync NN 00" in recipe and "notebook sync NN 00" in header


def _minutes(text: str) -> int:
    return int(re.search(r"(\d+) min", text).group(1)) + (1 if int(re.search(r"(\d+) s\b", text).group(1)) >= 30 else 0)


def test_the_readmes_suite_time_is_the_last_measured_one():
    """README's `./course test` time is docs/testing.md's latest fresh-clone run (the bold row)."""
    testing = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    last = [line for line in testing.splitlines() if line.startswith("| **")][-1]
    wall = last.split("|")[3]
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    said = re.search(r"`\./course test` is the whole suite, as CI runs it: .*? \(about (\d+) minutes", readme)
    assert said and int(said.group(1)) == _minutes(wall), (said and said.group(0), wall)


@pytest.mark.task_wide
def test_no_doc_types_a_total_the_manifest_gives():
    """Totals are generated blocks (pagedlab/doctables.py): outside them no doc states the total
    points, the number of tasks or the worst-case grading time."""
    from pagedlab.spec import manifest

    worst = doctables.worst_case_seconds() / 60
    typed = [rf"\b{manifest.MAX_SCORE:g} points\b", rf"must score {manifest.MAX_SCORE:g}\b",
             rf"\({len(manifest.TABLE)} tasks\)", rf"about {worst:.1f}\s+minutes"]
    found = []
    for name in doctables.FILES:
        outside = doctables.BLOCK.sub("", (ROOT / name).read_text(encoding="utf-8"))
        found += [(name, pattern) for pattern in typed if re.search(pattern, outside)]
    assert found == []


def test_the_points_sentence_never_spans_tasks_of_another_part():
    assert doctables._span([1, 2, 3, 4, 5, 15]) == "Tasks 1–5, 15"
    assert doctables._span([11, 12, 99]) == "Tasks 11–12, 99" and doctables._span([10]) == "Task 10"


def test_the_release_table_ships_the_tools_the_course_script_runs():
    from pagedlab import release

    text = (ROOT / "grading" / "README.md").read_text(encoding="utf-8")
    table = text[text.index("| ships | stays behind |"):]
    table = table[:table.index("\n\n")]
    shipped = [row.split("|")[1] for row in table.splitlines()[2:]]
    needed = sorted(set(release._COURSE_TOOL.findall((ROOT / "course").read_text())))
    assert needed and [n for n in needed if not any(f"`{n}`" in cell for cell in shipped)] == [], table


def test_no_tracked_file_cites_a_tracker_number():
    """A reader of the repository cannot resolve a tracker number: comments and docs name the thing."""
    import subprocess

    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    cited = re.compile(r"\bissues? #?\d+\b", re.I)
    found = []
    for name in names:
        path = ROOT / name
        if path.suffix in {".py", ".md", ".sh", ".toml", ".cu", ".c", ".h", ".cpp", ".hpp", ".ipynb", ".yml", ".txt"} \
                and path.is_file():
            found += [f"{name}:{i}: {line.strip()}" for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
                      if cited.search(line)]
    assert found == [], "\n".join(found)
