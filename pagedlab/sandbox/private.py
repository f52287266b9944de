"""What encodes an answer, kept root's own in the grading set-up.

The check child runs the submission's code as the sandbox user, and that code can do anything
the user can: read any file it may read, import any module it may import. So everything that
encodes an answer is made unreadable to it (owned by root, mode 0700 / 0600, compiled bytecode
included). In the package that is one folder, the grader's (`pagedlab/grader/`: the judge side
with the reference attention, the expectations and the empty engines' bytes, the answer models,
the committed records, and the pipeline that uses them); no check child imports from it
(tests/test_import_rules.py). Beside the package, the course's own answers: the reference
solutions and the instructor's hidden planners. `grading/setup.sh` seals them in the Gradescope
image; `pagedlab grade` as root warns when one is readable by others.

    python -m pagedlab.sandbox.private seal ROOT     # root-only, as the image needs
    python -m pagedlab.sandbox.private check ROOT    # list what others can still read
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

# Relative to the course's top folder. Folders are sealed whole.
GRADER = "pagedlab/grader"  # the package's one sealed folder
COURSE_ANSWERS = (
    "solutions",
    "grading/hidden",  # planners: the child gets their scenarios as data, never the module
)
ANSWERS = (GRADER, *COURSE_ANSWERS)


def _with_bytecode(path: Path) -> list[Path]:
    """`path` and, for a module, its compiled bytecode (imported without reading the source)."""
    found = [path]
    if path.suffix == ".py":
        found += sorted((path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"))
    return found


def paths(root: Path, names=ANSWERS) -> list[Path]:
    """The answer files and folders under `root` that exist, with their bytecode."""
    return [p for name in names for p in _with_bytecode(Path(root) / name) if p.exists()]


def _walk(path: Path):
    yield path
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
            for name in dirnames + filenames:
                yield Path(dirpath) / name


def seal(root: Path, names=ANSWERS) -> dict[Path, tuple[int, int, int]]:
    """Make every answer path root's alone (owner root when run as root, no group or other
    access). Returns {path: (mode, uid, gid)} as they were, for `unseal`."""
    before = {}
    for top in paths(root, names):
        for item in _walk(top):
            if item.is_symlink():
                continue
            st = item.lstat()
            before[item] = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
            if os.geteuid() == 0:
                os.chown(item, 0, 0)
            item.chmod(stat.S_IMODE(st.st_mode) & 0o700)
    return before


def unseal(before: dict) -> None:
    for item, (mode, uid, gid) in before.items():
        if item.exists():
            if os.geteuid() == 0:
                os.chown(item, uid, gid)
            item.chmod(mode)


def exposed(root: Path, names=ANSWERS) -> list[str]:
    """Answer paths (relative to `root`) that users other than the owner can read or enter."""
    found = []
    for top in paths(root, names):
        for item in _walk(top):
            if not item.is_symlink() and item.lstat().st_mode & 0o077:
                found.append(str(top.relative_to(root)))
                break
    return found


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("seal", "check"):
        print(__doc__.strip().splitlines()[-2:], file=sys.stderr)
        return 2
    root = Path(argv[1])
    if argv[0] == "seal":
        sealed = seal(root)
        print(f"root-only: {', '.join(str(p.relative_to(root)) for p in paths(root))} ({len(sealed)} files and folders)")
        return 0
    left = exposed(root)
    print("readable by others: " + (", ".join(left) if left else "none"))
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
