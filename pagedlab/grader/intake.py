"""Find the students in what an instructor downloaded: a folder of per-student folders, a zip of
them, or Gradescope's "Export Submissions" (a `submission_metadata.yml` naming each folder's
submitters).

A class zip is as hostile as one student's upload (submission.py): so members with an absolute
path, a `..` part or a link type are refused, only the files the grader takes are written (each
under submission.MAX_FILE_BYTES, bytes counted as they are read, not as the header claims), and
the whole archive has a member-count and a total-size cap. A member that cannot be written (a
file and a folder of the same name, a name too long) is refused on its own, and every refusal
inside a student's folder is also that student's (Intake.refused_of), never the class's.

`submission_metadata.yml` is read as hostile too: capped before it is parsed, with no alias to a
collection (a self-referencing one recursed forever; nine lines of nested ones grew root to
3.7 GB), at most MAX_METADATA_DEPTH deep and MAX_METADATA_NODES nodes; a file that breaks a rule
is refused with a line saying why, and the class is graded without its names.
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

from ..untrusted import escape_line
from . import submission

METADATA = "submission_metadata.yml"
# Gradescope writes about 200 bytes and 10 values per submission: 2 MiB is a class of ten thousand.
MAX_METADATA_BYTES = 2 * 2**20
MAX_METADATA_DEPTH = 16  # the export nests 4 deep
MAX_METADATA_NODES = 200_000
MAX_NAME_CHARS = 200  # a name or an e-mail as the class files show it
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
    # The same refusals by the student whose folder they were in (key -> lines).
    by_student: dict[str, list[str]] = field(default_factory=dict)
    unpacked: bool = False  # the folders are the grader's own copy (a zip it unpacked)

    def refused_of(self, key: str) -> list[str]:
        return self.by_student.get(key, [])


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
    limit = _size_limit(path.name)
    if info.file_size > limit:
        return f"{info.file_size / 2**20:.1f} MB, over the {limit // 2**20} MB limit for one file"
    return ""


def _size_limit(name: str) -> int:
    return MAX_METADATA_BYTES if name == METADATA else submission.MAX_FILE_BYTES


def unzip(archive: Path, dest: Path) -> list[str]:
    """Extract the grader's files (and every folder on the way to them) from `archive` into
    `dest`; return the refusals. Raises ValueError for an archive over the caps."""
    return [line for _, line in _unzip(archive, dest)]


def _unzip(archive: Path, dest: Path) -> list[tuple[tuple[str, ...], str]]:
    """unzip's work; each refusal comes with the member's path parts, so it can be given to the
    student whose folder it was in."""
    wanted = set(submission.SUBMISSION_FILES) | {METADATA}
    refused: list[tuple[tuple[str, ...], str]] = []
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError) as exc:
        raise ValueError(f"{archive}: not a zip that can be read ({exc})") from exc
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise ValueError(f"{archive}: {len(infos)} members, over the limit of {MAX_MEMBERS}")
        if sum(i.file_size for i in infos) > MAX_TOTAL_BYTES:
            raise ValueError(f"{archive}: over {MAX_TOTAL_BYTES // 2**30} GiB uncompressed")
        dest.mkdir(parents=True, exist_ok=True)
        for info in infos:
            parts = PurePosixPath(info.filename.replace("\\", "/")).parts
            try:
                why = _extract(zf, info, parts, dest, wanted)
            except OSError as exc:
                # A file and a folder of one name (`x/buddy.py`, then `x/buddy.py/y/`), a name too
                # long for the file system: this member only, said in its student's intake.
                why = f"cannot be written here ({exc.strerror or type(exc).__name__})"
            if why:
                refused.append((parts, f"refused {info.filename[:300]}: {why}"))
    return refused


def _extract(zf: zipfile.ZipFile, info: zipfile.ZipInfo, parts: tuple[str, ...], dest: Path,
             wanted: set[str]) -> str:
    """Write one member (or its folders) under `dest`; the reason it was refused, or ""."""
    why = _member_problem(info)
    unsafe_path = why.startswith(("an absolute", "a path with"))
    if unsafe_path or not parts or any(p in _SKIP for p in parts):
        return why
    # Every student folder appears, even one whose files were all refused (a member too
    # deep: its folders down to the limit).
    folders = (parts if info.is_dir() else parts[:-1])[:MAX_MEMBER_DEPTH]
    target_dir = dest.joinpath(*folders)
    target_dir.mkdir(parents=True, exist_ok=True)
    if why or info.is_dir() or parts[-1] not in wanted:
        return why
    target = target_dir / parts[-1]
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except FileExistsError:
        return "the same path twice in the archive"
    written, problem, limit = 0, "", _size_limit(parts[-1])
    with os.fdopen(fd, "wb") as out:
        try:
            with zf.open(info) as src:
                while chunk := src.read(65536):
                    written += len(chunk)
                    if written > limit:  # the header lied about the size
                        problem = "over the size limit once decompressed"
                        break
                    out.write(chunk)
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
            problem = f"corrupt or unsupported in the archive ({exc})"
        except OSError as exc:  # the disk: no half-written file is left to be graded
            problem = f"cannot be written here ({exc.strerror or type(exc).__name__})"
    if problem:
        target.unlink()
    return problem


def _plain(value):
    """Gradescope writes Ruby symbols as keys (':name'); plain strings are easier to read. (Its
    depth is the document's, which the loader capped.)"""
    if isinstance(value, dict):
        return {str(k).lstrip(":"): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class MetadataRefused(ValueError):
    pass


def _metadata_loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader under a budget: an alias may name a scalar (a writer may share a repeated
        string) but never a list or a mapping, so nothing grows past the file's own size and
        nothing refers to itself; the nesting and the number of nodes are capped as the nodes
        are composed, before the recursive composer or constructor goes deeper."""

        def __init__(self, stream):
            super().__init__(stream)
            self.depth = self.nodes = 0

        def compose_node(self, parent, index):
            self.nodes += 1
            if self.nodes > MAX_METADATA_NODES:
                raise MetadataRefused(f"over {MAX_METADATA_NODES} values")
            if self.check_event(yaml.AliasEvent):
                target = self.anchors.get(self.peek_event().anchor)
                if isinstance(target, yaml.CollectionNode):
                    raise MetadataRefused("an alias (*name) to a list or a mapping, which could "
                                          "refer to itself or multiply the file's size")
                return super().compose_node(parent, index)
            self.depth += 1
            try:
                if self.depth > MAX_METADATA_DEPTH:
                    raise MetadataRefused(f"nested over {MAX_METADATA_DEPTH} deep")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    # Ruby-specific tags (`!ruby/object:BigDecimal` scores) are read as plain values, not run.
    def untagged(loader, suffix, node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node)
        return loader.construct_scalar(node)

    Loader.add_multi_constructor("!", untagged)
    return Loader


def _read_capped(path: Path, limit: int) -> bytes:
    """At most `limit` bytes of a regular file, never through a link; over it is refused unread."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise MetadataRefused("not a regular file")
        if st.st_size > limit:
            raise MetadataRefused(f"{st.st_size / 2**20:.1f} MB, over the {limit // 2**20} MB limit")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                raise MetadataRefused(f"over the {limit // 2**20} MB limit")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _names(submitters, field_name: str) -> str:
    text = "; ".join(str(s.get(field_name, "")) for s in submitters if s.get(field_name))
    return text[:MAX_NAME_CHARS]


def read_metadata(path: Path) -> dict[str, dict]:
    """Folder name -> {"name", "email"} from Gradescope's submission_metadata.yml. Raises
    MetadataRefused (a ValueError) for a file over the caps or that does not parse."""
    import yaml

    text = _read_capped(path, MAX_METADATA_BYTES).decode("utf-8", errors="replace")
    try:
        data = _plain(yaml.load(text, Loader=_metadata_loader()) or {})
    except MetadataRefused:
        raise
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        # a timestamp of 31 February, an unhashable key: the file's fault, said in one line
        raise MetadataRefused(f"not readable YAML ({type(exc).__name__}: {str(exc)[:300]})") from exc
    if not isinstance(data, dict):
        raise MetadataRefused(f"expected a mapping of submission folders, got {type(data).__name__}")
    people = {}
    for folder, entry in data.items():
        submitters = entry.get("submitters", []) if isinstance(entry, dict) else []
        submitters = [s for s in submitters if isinstance(s, dict)] if isinstance(submitters, list) else []
        people[str(folder)] = {"name": _names(submitters, "name"), "email": _names(submitters, "email")}
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
    """The students of `source` (a folder or a .zip), in a stable order. A metadata file that
    cannot be read is refused with a line saying why; the students are found all the same."""
    source = Path(source)
    refused: list[tuple[tuple[str, ...], str]] = []
    unpacked = source.is_file() and zipfile.is_zipfile(source)
    if unpacked:
        if unpack_to.exists():  # a rerun: unpack afresh (a changed zip must not mix with the old)
            shutil.rmtree(unpack_to)
        refused = _unzip(source, unpack_to)
        root = class_root(unpack_to)
    elif source.is_dir() and not source.is_symlink():
        root = class_root(source.resolve())
    else:
        raise FileNotFoundError(f"{source}: not a folder of submissions or a zip of them")
    if any(p.name in submission.SUBMISSION_FILES for p in _entries(root)):
        raise ValueError(f"{escape_line(str(root))} holds one submission's files, not a folder per student: "
                         f"grade it with `pagedlab grade --impl {escape_line(str(root))}`")
    lines = [line for _, line in refused]
    people: dict[str, dict] = {}
    if (root / METADATA).is_file() or (root / METADATA).is_symlink():
        try:
            people = read_metadata(root / METADATA)
        except (OSError, ValueError) as exc:
            lines.append(f"refused {METADATA}: {exc}; the students are graded without its names and e-mails")
    taken: set[str] = set()
    students, by_student = [], {}
    # Which student folder a member was in: the first part below the class folder.
    below = root.relative_to(unpack_to).parts if unpacked else ()
    mine: dict[str, list[str]] = {}
    for parts, line in refused:
        if len(parts) > len(below) + 1 and tuple(parts[:len(below)]) == below:
            mine.setdefault(parts[len(below)], []).append(line)
    for folder in _entries(root):
        if not folder.is_dir():
            continue
        who = people.get(folder.name, {})
        key = safe_key(folder.name, taken)
        students.append(Student(key, folder, who.get("name", ""), who.get("email", ""), folder.name))
        if folder.name in mine:
            by_student[key] = mine[folder.name]
    return Intake(students, lines, by_student, unpacked)
