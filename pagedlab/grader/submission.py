"""Take a student's files out of what they uploaded, safely.

Students upload their `exercises/` files, but not always flat: a zipped `exercises/` folder, a
repository checkout, macOS resource forks. The grader takes each expected file, by name, from
the shallowest place it appears, and copies it into a folder of its own.

The upload is hostile ground: a zip or a repository can carry symbolic links (a link named
`memory_manager.py` pointing at the private solutions once scored full marks), FIFOs that block a
reader, devices, or gigabytes. So nothing is ever read through a link (`O_NOFOLLOW`, and folders
are walked without following links), only regular files are taken, each at most MAX_FILE_BYTES,
and every refusal is reported with its reason.
"""

from __future__ import annotations

import collections
import os
import stat
from pathlib import Path

from .. import track
from ..engine.ctrack import ALTERNATE_FILES
from ..guard import static
from ..spec.points import SUBMISSION_FILES
from ..untrusted import escape_line

# What the intake takes: the task files, plus files that may stand in for one (llm_memory.c, the
# C track's memory_manager.py), plus track.txt (a student's choice of track, when both are edited).
SUBMISSION_FILES = SUBMISSION_FILES + tuple(alt for alts in ALTERNATE_FILES.values() for alt in alts) + (track.MARKER,)

MAX_FILE_BYTES = 1024 * 1024
# The walk of an upload: folders deeper than this are not entered, and it stops after this many
# entries (a repository checkout with its history is a few thousand).
MAX_DEPTH = 32
MAX_ENTRIES = 50_000
_SKIP_PARTS = {"__MACOSX", ".ipynb_checkpoints", "__pycache__", ".git", "solutions"}


class Refused(Exception):
    pass


def _walk(root: Path, refused: list[str]):
    """(relative path, lstat) of every entry under `root`, never following links, shallowest
    folders first. Iterative, and capped: folders deeper than MAX_DEPTH are not entered and the
    walk stops after MAX_ENTRIES entries, each said in `refused` (an upload 1200 folders deep
    once overflowed os.walk's recursion and took the whole class's grading down)."""
    queue = collections.deque([Path()])
    seen = too_deep = 0
    while queue:
        rel_folder = queue.popleft()
        try:
            with os.scandir(root / rel_folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            refused.append(f"  refused {_short(rel_folder)}/: cannot be listed ({exc.strerror or type(exc).__name__})")
            continue
        seen += len(entries)
        if seen > MAX_ENTRIES:
            refused.append(f"  refused the rest of the upload: over {MAX_ENTRIES} files and folders "
                           "(only the first ones were searched)")
            return
        for entry in entries:
            st = entry.stat(follow_symlinks=False)
            rel = rel_folder / entry.name
            is_dir = stat.S_ISDIR(st.st_mode)
            if not is_dir or entry.name in SUBMISSION_FILES:
                yield rel, st
            if is_dir and entry.name not in _SKIP_PARTS and not entry.name.startswith("."):
                if len(rel.parts) >= MAX_DEPTH:
                    too_deep += 1
                    if too_deep <= 3:
                        refused.append(f"  refused {_short(rel)}: folders nested over {MAX_DEPTH} deep "
                                       "are not searched")
                    continue
                queue.append(rel)


def _short(rel: Path) -> str:
    """A path of the upload as every output shows it: clipped, then on one line with its
    control characters escaped (a folder named "x\n✓ task1 8/8 … total 110/110" once printed
    a forged score table in the listing)."""
    text = str(rel)
    return escape_line(text if len(text) <= 200 else text[:100] + " … " + text[-60:])


def _kind(st: os.stat_result) -> str:
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return "a symbolic link (links are never followed: upload the file itself)"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    if st.st_size > MAX_FILE_BYTES:
        return f"{st.st_size / 2**20:.1f} MB, over the {MAX_FILE_BYTES // 2**20} MB limit for one file"
    return ""


def find(root: Path) -> tuple[dict[str, Path | None], list[str]]:
    """Expected file name -> its path relative to `root` (None when absent), and the refusals."""
    candidates: dict[str, list[tuple[Path, os.stat_result]]] = {name: [] for name in SUBMISSION_FILES}
    walk_refused: list[str] = []
    for rel, st in _walk(root, walk_refused):
        if rel.name in candidates:
            candidates[rel.name].append((rel, st))
    chosen, refused = {}, walk_refused
    for name, found in candidates.items():
        # Shallowest first; among equals prefer a folder called exercises, then by path.
        found.sort(key=lambda item: (len(item[0].parts), item[0].parent.name != "exercises", str(item[0])))
        chosen[name] = None
        for rel, st in found:
            why = _kind(st)
            if why:
                refused.append(f"  refused {_short(rel)}: {why}")
                continue
            chosen[name] = rel
            break
    return chosen, refused


def _copy_regular(src: Path, dst: Path) -> None:
    """Copy without ever following a link or blocking on a special file."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(src, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            raise Refused(f"{src.name} changed while it was being read")
        data = os.read(fd, MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise Refused(f"{src.name} is over the size limit")
    finally:
        os.close(fd)
    out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        os.write(out, data)
    finally:
        os.close(out)


def listing(located: dict[str, Path | None], part_a: track.Track | None = None) -> list[str]:
    """One line per task file: where it was found, or MISSING. A stand-in (the C track's
    llm_memory.c) and track.txt are listed only when uploaded; the two Part A files say which one
    is graded (`part_a`, decided on the grader's copy by the track rule)."""
    stand_ins = {alt: name for name, alts in ALTERNATE_FILES.items() for alt in alts}
    lines = []
    for name, rel in located.items():
        if name == track.MARKER:
            if rel:
                lines.append(f"  {name:<22} {rel}  (a choice of track for Part A)")
            continue
        graded = part_a is not None and name in track.FILES.values()
        verdict = "" if not graded else ("  (graded: Part A)" if name == part_a.file
                                         else f"  (not graded: Part A is graded from {part_a.file})")
        if name in stand_ins:
            if rel:
                lines.append(f"  {name:<22} {_short(rel)}{verdict}")
            continue
        alts = [alt for alt in ALTERNATE_FILES.get(name, ()) if located.get(alt)]
        if rel:
            lines.append(f"  {name:<22} {_short(rel)}{verdict}")
        elif alts:
            lines.append(f"  {name:<22} not uploaded ({alts[0]} is graded instead)")
        else:
            also = "".join(f" (or {alt} for the C track)" for alt in ALTERNATE_FILES.get(name, ()))
            lines.append(f"  {name:<22} MISSING{also}")
    return lines


def _link_regular(src: Path, dst: Path) -> None:
    """`dst` as a second name of `src`, a file of the grader's own tree (a class zip it unpacked):
    the bytes are on disk once. Checked as a copy is; a link across file systems is a copy."""
    st = os.lstat(src)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
        raise Refused(f"{src.name} changed while it was being read")
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        _copy_regular(src, dst)


def prepare(root: Path, workdir: Path, *, copy: bool = True, own: bool = False,
            track_choice: str | None = None) -> tuple[Path, str]:
    """A folder of the grader's own holding the submission's files flat, and a report of what was
    found and what was refused. (`copy` is kept for callers; the files are always copied.)

    `own`: `root` is in a tree only the grader writes (grade-class's unpacked zip), so the files
    are hard-linked rather than copied: a class zip filled to its size cap takes the cap on disk
    once, not twice. `track_choice`: the grade's --track, for the listing's "graded" marks."""
    root = Path(os.path.abspath(root))
    if root.is_symlink() or not root.is_dir():
        raise FileNotFoundError(f"submission folder {escape_line(str(root))} does not exist (or is a link)")
    located, refused = find(root)
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o755)
    not_copied = set()
    for name, rel in located.items():
        if rel is None:
            continue
        try:
            (_link_regular if own else _copy_regular)(root / rel, workdir / name)
        except (Refused, OSError) as exc:
            refused.append(f"  refused {_short(rel)}: {escape_line(str(exc))}")
            not_copied.add(name)
    try:
        part_a = track.decide(workdir, track_choice)
    except track.TrackError:
        part_a = None  # the grade itself reports the bad choice
    lines = [line if line.split()[0] not in not_copied else f"  {line.split()[0]:<22} REFUSED"
             for line in listing(located, part_a)]
    report = "Submission files:\n" + "\n".join(lines)
    if refused:
        report += "\nNot taken from the submission:\n" + "\n".join(refused)
    # Read before anything runs; the checks' child refuses the same files again when it loads them.
    outside_api = static.check_folder(workdir)
    if outside_api:
        report += "\nOutside the student API (the tasks that load these files score 0):\n  " + "\n  ".join(outside_api)
    return workdir, report
