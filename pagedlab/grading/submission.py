"""Find a student's files in what they uploaded.

Students upload their `exercises/` files, but not always flat: a zipped `exercises/` folder, a
repository checkout, macOS resource forks. The grader takes each expected file from the
shallowest place it appears and says what it found.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .points import SUBMISSION_FILES

_SKIP_PARTS = {"__MACOSX", ".ipynb_checkpoints", "__pycache__", ".git", "solutions"}


def _candidates(root: Path, name: str) -> list[Path]:
    found = [p for p in root.rglob(name)
             if p.is_file() and not any(part in _SKIP_PARTS or part.startswith(".")
                                        for part in p.relative_to(root).parts[:-1])]
    # Shallowest first; among equals prefer a folder called exercises, then by path for stability.
    return sorted(found, key=lambda p: (len(p.relative_to(root).parts), p.parent.name != "exercises", str(p)))


def find(root: Path) -> dict[str, Path | None]:
    """Expected file name -> where it is under `root` (None when absent)."""
    return {name: next(iter(_candidates(root, name)), None) for name in SUBMISSION_FILES}


def prepare(root: Path, workdir: Path, *, copy: bool = False) -> tuple[Path, str]:
    """A folder holding the submission's files flat, and a report of what was found.

    Returns `root` itself when every file it has sits at its top level (and `copy` is false);
    otherwise copies the files it found into `workdir`, readable by everyone (the tasks may run
    as another user).
    """
    root = Path(root).resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"submission folder {root} does not exist")
    located = find(root)
    lines = []
    for name, path in located.items():
        lines.append(f"  {name:<22} {path.relative_to(root) if path else 'MISSING'}")
    report = "Submission files:\n" + "\n".join(lines)
    if not copy and all(path is None or path.parent == root for path in located.values()):
        return root, report
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o755)
    for name, path in located.items():
        if path is not None:
            shutil.copyfile(path, workdir / name)
            (workdir / name).chmod(0o644)
    return workdir, report
