"""The code students and instructors read stays lint-clean (ruff, configured in pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_clean():
    paths = [p for p in ("pagedlab", "solutions", "tests", "benchmarks", "grading", "notebooks") if (ROOT / p).exists()]
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", *paths],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
