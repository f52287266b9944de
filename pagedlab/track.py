"""Which file Part A (Tasks 1–5, the HW3 memory manager) is graded from: the Python or the C track.

Every copy of the course ships both `memory_manager.py` and `llm_memory.c` as stubs, and a student
finishes one of them. A finished file must never be passed over for an untouched stub, and the
decision must be the same wherever the files are read: the student's clone, a Gradescope upload of
the folder, a class zip. So it depends only on the files themselves:

1. an explicit choice: `--track c|python` (`pagedlab grade`, `grade-class`; `track=` in a graded
   cell), else `PAGEDLAB_TRACK` (the grader's setting, e.g. a C-only class's autograder), else a
   file `track.txt` next to the exercises holding `c` or `python` (what a student who edited both
   files writes, and uploads with them);
2. otherwise the file that is not the shipped stub: a file counts as the shipped stub when its
   code, whitespace and comments aside, is one `pagedlab assign` generated (every stub the course
   ever shipped is fingerprinted in `stubs.json`, so an older release's stub still counts);
3. both edited, or neither: the Python track, and the grade says how to choose C instead.

Every grade prints `Track.line()` on its first lines: which file, and why.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

PYTHON_FILE = "memory_manager.py"
C_FILE = "llm_memory.c"
FILES = {"python": PYTHON_FILE, "c": C_FILE}
TRACKS = tuple(FILES)
ENV_VAR = "PAGEDLAB_TRACK"
MARKER = "track.txt"
STUBS = Path(__file__).resolve().parent / "stubs.json"
# The words a choice may use (a student writes "C", "py" or "Python" as often as "c").
_WORDS = {"c": "c", "python": "python", "py": "python"}


class TrackError(ValueError):
    """A track choice that names no track."""


def parse(choice: str | None, where: str) -> str | None:
    """`choice` as "c" or "python" (None: no choice); anything else raises, naming `where`."""
    if choice is None or not str(choice).strip():
        return None
    word = _WORDS.get(str(choice).strip().lower())
    if word is None:
        raise TrackError(f"{where} says {str(choice).strip()[:40]!r}: the track is c or python")
    return word


# -- the shipped stubs ----------------------------------------------------------------------------
# A token: a string literal (Python's triple-quoted ones too), a comment (dropped), a word or
# number, one other character. A regular expression rather than `tokenize`, so every Python
# version cuts a file alike (3.12 splits an f-string into parts: a stub holding one would stop
# being recognised there).
_TOKEN = {
    ".c": re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/|\w+|\S', re.S),
    ".py": re.compile(r'"""(?:\\.|[^\\])*?"""|\'\'\'(?:\\.|[^\\])*?\'\'\'|"(?:\\.|[^"\\\n])*"'
                      r"|'(?:\\.|[^'\\\n])*'|#[^\n]*|\w+|\S", re.S),
}
_COMMENT = {".c": ("//", "/*"), ".py": ("#",)}


def code_tokens(text: str, suffix: str) -> list[str]:
    """The file's code as tokens, whitespace and comments dropped, each string literal's runs of
    whitespace made one space. Line endings, indentation, trailing spaces (docstrings' included),
    blank lines and comments make no difference; any change to the code does."""
    pattern, comment = _TOKEN.get(suffix, _TOKEN[".py"]), _COMMENT.get(suffix, ("#",))
    return [" ".join(t.split()) if t[0] in "\"'" else t for t in pattern.findall(text) if not t.startswith(comment)]


def fingerprint(text: str, suffix: str) -> str:
    return hashlib.sha256("\x00".join(code_tokens(text, suffix)).encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def _shipped() -> dict:
    try:
        return json.loads(STUBS.read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError):
        return {}


@functools.lru_cache(maxsize=64)
def _is_stub(name: str, data: bytes) -> bool:
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    return fingerprint(text, Path(name).suffix) in _shipped().get(name, ())


def is_shipped_stub(path: Path) -> bool:
    """True when `path` is still a stub the course shipped (whitespace and comments aside)."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    return _is_stub(path.name, data)


def stale(stubs: dict[str, str]) -> list[str]:
    """The track files whose stub (`stubs`: name -> text, what assign generates) is not yet
    fingerprinted in stubs.json."""
    known = _shipped()
    return [name for name in FILES.values() if name in stubs
            and fingerprint(stubs[name], Path(name).suffix) not in known.get(name, ())]


def record(stubs: dict[str, str]) -> Path:
    """Add the fingerprints of `stubs` to stubs.json, keeping every earlier one (a student may
    hold a stub of an older release)."""
    files = {name: list(prints) for name, prints in _shipped().items()}
    for name in FILES.values():
        if name in stubs:
            found = fingerprint(stubs[name], Path(name).suffix)
            if found and found not in files.setdefault(name, []):
                files[name].append(found)
    body = {"about": "SHA-256 of the code (whitespace and comments dropped) of every stub `pagedlab "
                     "assign` generated for the two Part A files; a file matching one is an untouched "
                     "stub, not a submission of its track (pagedlab/track.py)",
            "files": files}
    STUBS.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    _shipped.cache_clear()
    _is_stub.cache_clear()
    return STUBS


# -- the decision ---------------------------------------------------------------------------------
def describe(impl=None) -> str:
    """The decision for `impl`'s folder (as `pagedlab.load` takes it), for a notebook to print."""
    from .impl import impl_dir

    return decide(impl_dir(impl)).line()


@dataclass(frozen=True)
class Track:
    name: str          # "python" or "c"
    why: str           # the reason, as the grade's first lines say it
    chosen_by: str     # "" (decided from the files), "--track", ENV_VAR or MARKER
    present: bool      # the chosen file is there
    note: str = ""     # a marker that could not be read, said next to the decision

    @property
    def file(self) -> str:
        return FILES[self.name]

    def line(self) -> str:
        """The sentence every grade starts with."""
        head = f"Part A (Tasks 1–5) is graded from {self.file}: {self.why}."
        return f"{head} {self.note}" if self.note else head


def _choice(folder: Path, choice: str | None) -> tuple[str | None, str, str]:
    """(track or None, who chose it, a note about a marker that says nothing usable)."""
    if choice is not None:
        return parse(choice, "--track"), "--track", ""
    if os.environ.get(ENV_VAR, "").strip():
        return parse(os.environ[ENV_VAR], ENV_VAR), ENV_VAR, ""
    marker = folder / MARKER
    if marker.is_file() and not marker.is_symlink():
        try:
            with open(marker, "rb") as f:  # one word is wanted: the first 200 bytes hold it
                text = f.read(200).decode("utf-8", errors="replace")
            words = re.sub(r"#.*", "", text).split()  # a comment line may say why
            return (parse(words[0], MARKER) if words else None), MARKER, ""
        except TrackError as exc:
            return None, "", f"({exc}; decided from the files instead.)"
    return None, "", ""


def decide(folder: str | os.PathLike, choice: str | None = None) -> Track:
    """The track of the files in `folder` (see the module docstring for the rule)."""
    folder = Path(folder)
    chosen, by, note = _choice(folder, choice)
    has = {name: (folder / f).is_file() for name, f in FILES.items()}
    if chosen is not None:
        said = {"--track": f"--track {chosen}", ENV_VAR: f"the grader's setting {ENV_VAR}={chosen}",
                MARKER: f"{MARKER} says {chosen}"}[by]
        why = said if has[chosen] else f"{said}, but {FILES[chosen]} was not submitted, so Tasks 1–5 cannot run"
        return Track(chosen, why, by, has[chosen])
    if not has["c"]:
        why = "it is the only Part A file submitted" if has["python"] else "neither Part A file was submitted"
        return Track("python", why, "", has["python"], note)
    if not has["python"]:
        return Track("c", "it is the only Part A file submitted", "", True, note)
    stub = {name: is_shipped_stub(folder / f) for name, f in FILES.items()}
    if stub["python"] and not stub["c"]:
        why = f"{PYTHON_FILE} is the untouched stub the course shipped, and {C_FILE} is edited"
        return Track("c", why, "", True, note)
    if stub["c"] and stub["python"]:
        why = "neither file is edited yet (both are the shipped stubs), and the Python track is the default"
    elif stub["c"]:
        why = f"{C_FILE} is the untouched stub the course shipped"
    else:
        why = (f"both {PYTHON_FILE} and {C_FILE} are edited, and Python is the default; to grade "
               f"{C_FILE} instead write c in exercises/{MARKER} (submit it with your files) or pass --track c")
    return Track("python", why, "", True, note)
