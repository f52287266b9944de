"""`expected.json`: the reference solution's record of every public check, committed.

The public checks' scenarios are fixed, so what the reference records for them is data: it is
generated from solutions/ by `pagedlab assign` and shipped in both editions, which lets a
notebook judge a student's record without the solutions (the student edition has none). A
fingerprint of the solution files and check modules it came from says when it is stale.
Hidden checks are never in here: their scenarios are drawn at grading time.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path

from .. import manifest
from .framework import Stream, checks_of, drive

PATH = Path(__file__).with_name("expected.json")
VERSION = 1
_DEF = re.compile(r"^(\s*)def\s+(\w+)\s*\(")
_FENCE = re.compile(r"^\s*(###|//)\s*BEGIN SOLUTION\b")


def _solutions_dir() -> Path:
    from ..loader import impl_dir

    return impl_dir("solutions")


def fingerprint() -> str:
    """Hash of what the records depend on: solution files, check modules, the manifest."""
    digest = hashlib.sha256()
    checks_dir = Path(__file__).parent
    modules = sorted({row.checks for row in manifest.TABLE})
    sources = [checks_dir / f"{m}.py" for m in modules if (checks_dir / f"{m}.py").is_file()] + [manifest.PATH]
    solutions = _solutions_dir()
    sources += sorted(p for name in manifest.SUBMISSION_FILES for p in [solutions / name] if p.is_file())
    for path in sources:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def fenced_functions(text: str) -> set[str]:
    """Names of the Python functions that contain a solution fence (the ones students write)."""
    names, stack = set(), []
    for line in text.splitlines():
        found = _DEF.match(line)
        if found:
            indent = len(found.group(1))
            stack = [(i, n) for i, n in stack if i < indent] + [(indent, found.group(2))]
        elif _FENCE.match(line) and stack:
            names.add(stack[-1][1])
    return names


def _given(solutions: Path) -> dict[str, list[str]]:
    given = {}
    for name in manifest.SUBMISSION_FILES:
        path = solutions / name
        if path.suffix == ".py" and path.is_file():
            text = path.read_text()
            every = {m.group(2) for m in map(_DEF.match, text.splitlines()) if m}
            given[name] = sorted(every - fenced_functions(text))
    return given


def generate() -> dict:
    """Run every public check on the reference (in this process) and collect the records."""
    records = {}
    for row in manifest.TABLE:
        for c in checks_of(row.id, hidden=False):
            if c.expected is None:
                records[c.key] = drive(c, "solutions", seed=0).to_json()
    return {"version": VERSION, "fingerprint": fingerprint(), "given": _given(_solutions_dir()),
            "records": records}


def write(path: Path = PATH) -> Path:
    data = generate()
    broken = [key for key, rec in data["records"].items() if rec["status"] != "completed"]
    if broken:
        details = "; ".join(f"{k}: {(data['records'][k].get('error') or {}).get('text') or data['records'][k]['obs'][-1:]}"
                            for k in broken[:5])
        raise RuntimeError(f"the reference solution fails {len(broken)} public checks: {details}")
    # One record per line: a change to one check shows as a one-line diff.
    compact = {"separators": (",", ":"), "ensure_ascii": False, "sort_keys": True}
    head = {k: v for k, v in data.items() if k != "records"}
    lines = [json.dumps(head, **compact)[:-1] + ',"records":{']
    items = sorted(data["records"].items())
    lines += [f"{json.dumps(k)}:{json.dumps(v, **compact)}" + ("," if i < len(items) - 1 else "")
              for i, (k, v) in enumerate(items)]
    path.write_text("\n".join(lines) + "\n}}\n", encoding="utf-8")
    load.cache_clear()
    return path


@lru_cache(maxsize=1)
def load(path: Path = PATH) -> dict:
    if not path.is_file():
        return {"version": VERSION, "fingerprint": "", "given": {}, "records": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def record(key: str) -> Stream | None:
    data = load().get("records", {}).get(key)
    return Stream.from_json(data) if data is not None else None


def given_functions() -> dict[str, list[str]]:
    data = load().get("given") or {}
    if data:
        return data
    try:
        return _given(_solutions_dir())
    except (FileNotFoundError, OSError):
        return {}


def stale() -> bool:
    """True when solutions/ or the checks changed since expected.json was generated."""
    try:
        return load().get("fingerprint") != fingerprint()
    except (FileNotFoundError, OSError):
        return False
