"""Generate the student files in exercises/ from the reference files in solutions/.

solutions/ is the only implementation anyone edits by hand. A fenced region

    ### BEGIN SOLUTION Task 2: create_sequence        (Python)
    // BEGIN SOLUTION Task 7: softmax                   (CUDA)

ends at the matching ``END SOLUTION`` line and becomes a prompt plus a stub that fails loudly
(Python: ``raise NotImplementedError``) or leaves the kernel's output unwritten (CUDA:
``return;``). The label after ``SOLUTION`` names the task; without one the enclosing function's
name is used. ``| <statement>`` at the end of the BEGIN line replaces the default stub, e.g.
``// BEGIN SOLUTION Task 8: warp max | return -INFINITY;`` inside a helper that returns a value.

No run destroys anyone's work. ``exercises/.assign-manifest.json`` records the SHA-256 of the
text assign last wrote to each exercise file. A file whose bytes no longer match that record was
edited (a student's work, or an instructor's hand edit) and is left alone; ``force=True`` first
copies it to ``backups/assign-<UTC time>/`` and then replaces it. A file that still matches the
record but not what solutions/ generates today is *stale*: the instructor changed solutions/ and
did not regenerate, so assign rewrites it and ``--check`` fails.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from .course import root as course_root
from .loader import ROOT  # noqa: F401 - where the library is; kept for callers

FENCES = {  # suffix -> (comment prefix, default stub template)
    ".py": ("###", 'raise NotImplementedError("{label}")'),
    ".cu": ("//", "return;"),
    ".cuh": ("//", "return;"),
    # C track: every fence names its stub (return NULL; / return -1;), after PL_NOT_IMPLEMENTED
    # (hw3.h), which makes the call say "not implemented yet: <label>" under pagedlab.
    ".c": ("//", "return;"),
}
KERNEL_STUB_NOTE = "// Until this part is written the kernel leaves its output unwritten."
_DEF = re.compile(r"^\s*(?:def|class)\s+(\w+)|^\s*(?:__global__|__device__)[^()]*?\b(\w+)\s*\(")


class AssignError(ValueError):
    """A solution file whose fences cannot be turned into an exercise."""


@dataclass
class Region:
    begin: int  # 1-based line numbers
    end: int
    label: str


def _fence_re(prefix: str, word: str) -> re.Pattern:
    return re.compile(rf"^(\s*){re.escape(prefix)}\s*{word} SOLUTION\b(.*)$")


def make_exercise(text: str, filename: str) -> str:
    """Replace every fenced region of `text` (the contents of `filename`) by its stub."""
    suffix = Path(filename).suffix
    if suffix not in FENCES:
        return text
    prefix, default_stub = FENCES[suffix]
    begin_re, end_re = _fence_re(prefix, "BEGIN"), _fence_re(prefix, "END")
    out: list[str] = []
    open_at: int | None = None
    enclosing = "this part"
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        found = _DEF.match(line)
        if found and open_at is None:
            enclosing = found.group(1) or found.group(2)
        begin, end = begin_re.match(line), end_re.match(line)
        if begin:
            if open_at is not None:
                raise AssignError(f"{filename}:{number}: BEGIN SOLUTION inside the region opened at line {open_at} (fences cannot nest)")
            open_at = number
            indent, rest = begin.group(1), begin.group(2).strip()
            label, _, stub = (part.strip() for part in rest.partition("|"))
            label = label or enclosing
            stub = stub or default_stub.format(label=label.replace('"', "'"))
            out.append(f"{indent}{prefix[:2] if prefix == '//' else '#'} YOUR CODE HERE ({label})\n")
            if suffix in (".cu", ".cuh") and not stub.startswith("//"):
                out.append(f"{indent}{KERNEL_STUB_NOTE}\n")
            if suffix == ".c":  # the C track's stub says "not implemented yet" as Python's raise does
                out.append(f'{indent}PL_NOT_IMPLEMENTED("{label.replace(chr(34), chr(39))}");\n')
            out.append(f"{indent}{stub}\n")
        elif end:
            if open_at is None:
                raise AssignError(f"{filename}:{number}: END SOLUTION without a BEGIN SOLUTION before it")
            open_at = None
        elif open_at is None:
            out.append(line)
    if open_at is not None:
        raise AssignError(f"{filename}:{open_at}: BEGIN SOLUTION is never closed by END SOLUTION")
    return "".join(out)


def _source_files(solutions: Path) -> list[Path]:
    return sorted(
        p for p in solutions.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".")
    )


def plan(solutions: Path | None = None, exercises: Path | None = None) -> dict[Path, str]:
    """Map each exercise file to the text it should have."""
    solutions = solutions or course_root() / "solutions"
    exercises = exercises or course_root() / "exercises"
    wanted = {}
    for src in _source_files(solutions):
        rel = src.relative_to(solutions)
        wanted[exercises / rel] = make_exercise(src.read_text(), str(src.relative_to(solutions.parent)))
    return wanted


MANIFEST_NAME = ".assign-manifest.json"
BACKUPS = "backups"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _manifest_path(exercises: Path) -> Path:
    return exercises / MANIFEST_NAME


def read_manifest(exercises: Path) -> dict[str, str]:
    """{path relative to exercises/: SHA-256 of the text assign last wrote there}."""
    path = _manifest_path(exercises)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        files = data["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}  # no record: every file that differs counts as edited, so nothing is lost
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def _write_manifest(exercises: Path, records: dict[str, str]) -> None:
    body = {"about": "what `pagedlab assign` last generated in this folder (SHA-256 per file); "
                     "a file that no longer matches was edited and is never overwritten",
            "files": dict(sorted(records.items()))}
    _manifest_path(exercises).write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")


@dataclass
class Survey:
    """Where each exercise file stands against solutions/ and the manifest."""

    exercises: Path
    wanted: dict[Path, str]
    current: list[Path] = field(default_factory=list)   # what solutions/ generates today
    unrecorded: list[Path] = field(default_factory=list)  # current, but the manifest lags behind
    stale: list[Path] = field(default_factory=list)     # untouched, but solutions/ changed since
    missing: list[Path] = field(default_factory=list)   # not there at all
    edited: list[Path] = field(default_factory=list)    # differ from what assign last wrote
    orphaned: list[Path] = field(default_factory=list)  # generated once, solutions/ dropped it
    extra: list[Path] = field(default_factory=list)     # never generated (someone's own file)

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.exercises.parent))


def survey(solutions: Path | None = None, exercises: Path | None = None) -> Survey:
    solutions = solutions or course_root() / "solutions"
    exercises = exercises or course_root() / "exercises"
    if not solutions.is_dir():
        raise AssignError(f"no {solutions}: this copy of the course has no solutions/ to generate "
                          "exercises/ from (a student edition); nothing was changed")
    records = read_manifest(exercises)
    result = Survey(exercises, plan(solutions, exercises))
    for path, text in result.wanted.items():
        key = path.relative_to(exercises).as_posix()
        if not path.exists():
            result.missing.append(path)
            continue
        have = path.read_bytes()
        if have == text.encode("utf-8"):
            result.current.append(path)
            if records.get(key) != digest(text):
                result.unrecorded.append(path)
        elif digest_bytes(have) == records.get(key):
            result.stale.append(path)
        else:
            result.edited.append(path)
    for path in _source_files(exercises) if exercises.is_dir() else []:
        if path in result.wanted:
            continue
        key = path.relative_to(exercises).as_posix()
        untouched = digest_bytes(path.read_bytes()) == records.get(key)
        (result.orphaned if untouched else result.extra).append(path)
    return result


def digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stale(solutions: Path | None = None, exercises: Path | None = None) -> list[str]:
    """What the instructor has to regenerate: missing or untouched-but-outdated exercise files.

    Edited files are not in this list: they are someone's work, not a stale copy.
    """
    s = survey(solutions, exercises)
    return ([f"{s.rel(p)} (missing)" for p in s.missing]
            + [f"{s.rel(p)} (differs from what solutions/ generates)" for p in s.stale]
            + [f"{s.rel(p)} (generated earlier, but solutions/ no longer has it)" for p in s.orphaned]
            # Without its record a later change to solutions/ would pass for a student's edit.
            + [f"{s.rel(p)} (up to date, but not recorded in exercises/{MANIFEST_NAME})" for p in s.unrecorded])


@dataclass
class Written:
    written: list[Path]
    kept: list[Path]            # edited files left alone (no force)
    backup: Path | None = None  # where force copied the edited files first
    removed: list[Path] = field(default_factory=list)  # untouched files solutions/ dropped


def backup(paths: list[Path], course: Path) -> Path:
    """Copy `paths` (files under `course`) to a new backups/assign-<UTC time>/ folder."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    folder = course / BACKUPS / f"assign-{stamp}"
    n = 1
    while folder.exists():
        n += 1
        folder = course / BACKUPS / f"assign-{stamp}-{n}"
    for path in paths:
        target = folder / path.relative_to(course)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        if target.read_bytes() != path.read_bytes():
            raise OSError(f"backup of {path} to {target} does not match; nothing was overwritten")
    return folder


def write(solutions: Path | None = None, exercises: Path | None = None, *,
          force: bool = False) -> Written:
    """Regenerate exercises/: missing and stale files are written, edited ones kept.

    With `force`, edited files are first copied to a backup folder, then regenerated.
    """
    exercises = exercises or course_root() / "exercises"
    s = survey(solutions, exercises)
    done = Written(written=[], kept=[])
    if s.edited and force:
        done.backup = backup(s.edited, exercises.parent)
    elif s.edited:
        done.kept = list(s.edited)
    records = read_manifest(exercises)
    for path, text in s.wanted.items():
        key = path.relative_to(exercises).as_posix()
        if path in done.kept:
            continue
        if path in s.missing or path in s.stale or path in s.edited:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            done.written.append(path)
        records[key] = digest(text)
    for path in s.orphaned:  # assign wrote it, nobody edited it, solutions/ dropped it
        path.unlink()
        records.pop(path.relative_to(exercises).as_posix(), None)
        done.removed.append(path)
    if exercises.is_dir() and records != read_manifest(exercises):
        _write_manifest(exercises, records)
    return done
