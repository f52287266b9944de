"""The student edition says only what is true for a student: no instructor-only notebook text,
no set-up claims the course does not keep."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pagedlab import notebooks, release

ROOT = Path(__file__).resolve().parent.parent
# Text that is for instructors only: solution fences, instructor sections, running the answers.
INSTRUCTOR_TEXT = re.compile(r"BEGIN SOLUTION|END SOLUTION|For instructors|PAGEDLAB_IMPL=solutions|"
                             r"impl=[\"']solutions[\"']|--impl solutions|solutions/")


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("student-text") / "course"
    release.build(out)
    return out


def test_released_notebooks_hold_no_instructor_only_text(edition):
    """Measured before: notebook 08 named the BEGIN SOLUTION markers and notebook 02 shipped a
    "For instructors" section."""
    found = []
    for path in sorted((edition / "notebooks").iterdir()):
        if path.suffix in (".py", ".ipynb"):
            text = release.searchable_text(path) or ""
            found += [f"{path.name}: {m.group(0)}" for m in INSTRUCTOR_TEXT.finditer(text)]
    assert not found, found


def test_the_instructor_edition_still_has_the_instructor_cells_and_they_are_tagged():
    source = (ROOT / "notebooks" / "02_block_table.py").read_text()
    assert '# %% [markdown] tags=["instructor"]\n# ## For instructors' in source


def test_released_notebook_pairs_still_agree(edition):
    """The .py and .ipynb lose the same cells, so JupyterLab's pairing stays quiet."""
    for path in sorted((edition / "notebooks").glob("*.ipynb")):
        assert notebooks.sync_problems(path) == [], path.name


def test_strip_percent_source_drops_only_tagged_cells():
    text = ('# %%\nx = 1\n\n# %% [markdown] tags=["instructor"]\n# ## For instructors\n\n'
            '# %% tags=["instructor"]\nsecret = 2\n\n# %% [markdown]\n# ## Next\n')
    assert release.strip_percent_source(text) == "# %%\nx = 1\n\n# %% [markdown]\n# ## Next\n"


def test_student_readme_says_where_versions_come_from_and_how_long_set_up_takes(edition):
    """Measured before: "pinned by constraints.txt", "the first run takes a few minutes", then
    "well under a minute" against 81 s on a busy 2-core machine; measured now from a fresh clone
    with an empty package cache: the venv in 25 s, JupyterLab answering at 40 s (README.md)."""
    readme = " ".join((edition / "README.md").read_text().split())
    assert "at the versions in `requirements.lock`" in readme
    assert "pinned by `constraints.txt`" not in readme
    assert "well under a minute" not in readme and "in about a minute (40 s measured" in readme
    assert "prints a line per step" in readme and 'say(f"installing' in (ROOT / "tools" / "bootstrap.py").read_text()
    assert "requirements.lock" in (ROOT / "tools" / "bootstrap.py").read_text()  # what the text claims


def test_student_readme_says_which_file_part_a_is_graded_from(edition):
    readme = " ".join((edition / "README.md").read_text().split())
    assert "takes Part A from the file that is not the untouched stub" in readme
    assert "`exercises/track.txt`" in readme and "--track c" in readme
    assert "every task grades memory_manager.py" not in readme
