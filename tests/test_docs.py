"""The docs say what is true: every test file they cite exists, and the task tables and totals
they show are the ones `pagedlab assign` writes from the manifest."""

from __future__ import annotations

import re
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
