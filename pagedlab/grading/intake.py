"""Find the students in what an instructor downloaded: a folder of per-student folders, a zip of
them, or Gradescope's "Export Submissions" (a `submission_metadata.yml` naming each folder's
submitters).

A class zip is as hostile as one student's upload (submission.py): so members with an absolute
path, a `..` part or a link type are refused, only the files the grader takes are written (each
under submission.MAX_FILE_BYTES, bytes counted as they are read, not as the header claims), and
the whole archive has a member-count and a total-size cap.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from . import submission

METADATA = "submission_metadata.yml"
MAX_MEMBERS = 200_000
MAX_TOTAL_BYTES = 4 * 2**30
# A wrapper folder, the student's folder, then what a student's own upload may hold.
MAX_MEMBER_DEPTH = submission.MAX_DEPTH + 3
_SKIP = {"__MACOSX", "__pycache__", ".ipynb_checkpoints"}


@dataclass
class Student:
    key: str  # a file-system-safe name, unique in the class: the folder under DIR/students/
    folder: Path  # the submission as uploaded (what `pagedlab grade --impl` gets)
    name: str = ""
    email: str = ""
    source: str = ""  # the folder's own name in the export

    def meta(self) -> dict:
        return {"key": self.key, "name": self.name, "email": self.email, "source": self.source,
                "folder": str(self.folder)}


@dataclass
class Intake:
    students: list[Student]
    refused: list[str] = field(default_factory=list)  # zip members not extracted, with why


def safe_key(text: str, taken: set[str]) -> str:
    key = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "student"
    unique, n = key, 2
    while unique in taken:
        unique, n = f"{key}-{n}", n + 1
    taken.add(unique)
    return unique


def _member_problem(info: zipfile.ZipInfo) -> str:
    name = info.filename.replace("\\", "/")
    path = PurePosixPath(name)
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "an absolute path"
    if ".." in path.parts:
        return "a path with '..'"
    if len(path.parts) > MAX_MEMBER_DEPTH:
        return f"a path {len(path.parts)} folders deep (the limit is {MAX_MEMBER_DEPTH})"
    if stat.S_ISLNK(info.external_attr >> 16):
        return "a symbolic link"
    if info.file_size > submission.MAX_FILE_BYTES:
        return f"{info.file_size / 2**20:.1f} MB, over the {submission.MAX_FILE_BYTES // 2**20} MB limit for one file"
    return ""


def unzip(archive: Path, dest: Path) -> list[str]:
    """Extract the grader's files (and every folder on the way to them) from `archive` into
    `dest`; return the refusals. Raises ValueError for an archive over the caps."""
    wanted = set(submission.SUBMISSION_FILES) | {METADATA}
    refused = []
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise ValueError(f"{archive}: {len(infos)} members, over the limit of {MAX_MEMBERS}")
        if sum(i.file_size for i in infos) > MAX_TOTAL_BYTES:
            raise ValueError(f"{archive}: over {MAX_TOTAL_BYTES // 2**30} GiB uncompressed")
        dest.mkdir(parents=True, exist_ok=True)
        for info in infos:
            why = _member_problem(info)
            parts = PurePosixPath(info.filename.replace("\\", "/")).parts
            unsafe_path = why.startswith(("an absolute", "a path with"))
            if unsafe_path or not parts or any(p in _SKIP for p in parts):
                if why:
                    refused.append(f"refused {info.filename[:300]}: {why}")
                continue
            # Every student folder appears, even one whose files were all refused (a member too
            # deep: its folders down to the limit).
            folders = (parts if info.is_dir() else parts[:-1])[:MAX_MEMBER_DEPTH]
            target_dir = dest.joinpath(*folders)
            target_dir.mkdir(parents=True, exist_ok=True)
            if why:
                refused.append(f"refused {info.filename[:300]}: {why}")
                continue
            if info.is_dir() or parts[-1] not in wanted:
                continue
            target = target_dir / parts[-1]
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            except FileExistsError:
                refused.append(f"refused {info.filename}: the same path twice in the archive")
                continue
            written, problem = 0, ""
            with os.fdopen(fd, "wb") as out:
                try:
                    with zf.open(info) as src:
                        while chunk := src.read(65536):
                            written += len(chunk)
                            if written > submission.MAX_FILE_BYTES:  # the header lied about the size
                                problem = "over the size limit once decompressed"
                                break
                            out.write(chunk)
                except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
                    problem = f"corrupt or unsupported in the archive ({exc})"
            if problem:
                target.unlink()
                refused.append(f"refused {info.filename}: {problem}")
    return refused


def _plain(value):
    """Gradescope writes Ruby symbols as keys (':name'); plain strings are easier to read."""
    if isinstance(value, dict):
        return {str(k).lstrip(":"): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def read_metadata(path: Path) -> dict[str, dict]:
    """Folder name -> {"name", "email"} from Gradescope's submission_metadata.yml."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    # Ruby-specific tags (`!ruby/object:BigDecimal` scores) are read as plain values, not run.
    def untagged(loader, suffix, node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node)
        return loader.construct_scalar(node)

    Loader.add_multi_constructor("!", untagged)
    data = _plain(yaml.load(path.read_text(encoding="utf-8"), Loader=Loader) or {})
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of submission folders, got {type(data).__name__}")
    people = {}
    for folder, entry in data.items():
        submitters = entry.get("submitters", []) if isinstance(entry, dict) else []
        submitters = [s for s in submitters if isinstance(s, dict)]
        people[str(folder)] = {
            "name": "; ".join(str(s.get("name", "")) for s in submitters if s.get("name")),
            "email": "; ".join(str(s.get("email", "")) for s in submitters if s.get("email")),
        }
    return people


def _entries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir()
                  if not p.name.startswith(".") and p.name not in _SKIP and not p.is_symlink())


def class_root(folder: Path) -> Path:
    """Step into wrapper folders (a zip of one folder holding the class)."""
    while True:
        entries = _entries(folder)
        if (folder / METADATA).is_file() or any(p.name in submission.SUBMISSION_FILES for p in entries):
            return folder
        dirs = [p for p in entries if p.is_dir()]
        # ... unless that one folder is a student's (a class of one): it holds the files itself.
        if len(dirs) == 1 and len(entries) == 1 and not any(
                p.name in submission.SUBMISSION_FILES for p in _entries(dirs[0])):
            folder = dirs[0]
            continue
        return folder


def discover(source: Path, unpack_to: Path) -> Intake:
    """The students of `source` (a folder or a .zip), in a stable order."""
    source = Path(source)
    refused: list[str] = []
    if source.is_file() and zipfile.is_zipfile(source):
        if unpack_to.exists():  # a rerun: unpack afresh (a changed zip must not mix with the old)
            shutil.rmtree(unpack_to)
        refused = unzip(source, unpack_to)
        root = class_root(unpack_to)
    elif source.is_dir() and not source.is_symlink():
        root = class_root(source.resolve())
    else:
        raise FileNotFoundError(f"{source}: not a folder of submissions or a zip of them")
    if any(p.name in submission.SUBMISSION_FILES for p in _entries(root)):
        raise ValueError(f"{root} holds one submission's files, not a folder per student: "
                         f"grade it with `pagedlab grade --impl {root}`")
    people = read_metadata(root / METADATA) if (root / METADATA).is_file() else {}
    taken: set[str] = set()
    students = []
    for folder in _entries(root):
        if not folder.is_dir():
            continue
        who = people.get(folder.name, {})
        key = safe_key(folder.name, taken)
        students.append(Student(key, folder, who.get("name", ""), who.get("email", ""), folder.name))
    return Intake(students, refused)
