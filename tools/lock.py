#!/usr/bin/env python3
"""Regenerate requirements.lock from pyproject.toml + constraints.txt (one command, no arguments):

    python3 tools/lock.py              # after adding or changing a dependency in pyproject.toml
    python3 tools/lock.py --upgrade    # move every package to its newest allowed release

Existing pins are kept unless pyproject.toml or constraints.txt rule them out (uv reads the old
lock as preferences), so adding one dependency changes only the lines it brings in.

The lock is compiled for the course machine and the grader image: CPython 3.11 on Linux x86_64,
with torch's CPU build (from a local wheelhouse pip is configured with, else the PyTorch CPU
index). Every line carries hashes, so an install cannot silently take another file.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import bootstrap  # noqa: E402  (same folder: the lock's target and torch sources live there)


def uv() -> str:
    found = bootstrap.find_uv(ROOT / ".venv", sys.executable)  # PATH, the venv, or bootstrap's copy
    if found:
        return found
    sys.exit("uv not found and `pip install uv` failed: run ./course test once, or pip install uv")


def main(argv: list[str]) -> int:
    py = Path(sys.executable)
    wheelhouses = bootstrap.pip_find_links(py)
    torch = bootstrap.torch_sources(wheelhouses)
    cmd = [uv(), "pip", "compile", "pyproject.toml", "--extra", "dev", "-c", "constraints.txt",
           "--generate-hashes", "--quiet",
           "--python-version", ".".join(map(str, bootstrap.LOCK_PYTHON)),
           "--python-platform", f"{bootstrap.LOCK_PLATFORM[1]}-manylinux_2_28",
           "--custom-compile-command", "python3 tools/lock.py",
           *[a for d in wheelhouses for a in ("--find-links", d)],
           *(torch + ["--index-strategy", "unsafe-best-match"] if torch else []),
           *argv, "-o", "requirements.lock"]
    subprocess.run(cmd, cwd=ROOT, check=True)
    lock = (ROOT / "requirements.lock").read_text()
    if "+cpu" not in (bootstrap.locked_version("torch") or ""):
        sys.exit("requirements.lock did not get torch's CPU build: check the wheelhouse / index")
    print(f"requirements.lock: {lock.count('==')} packages pinned, torch {bootstrap.locked_version('torch')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
