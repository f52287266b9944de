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
from pathlib import Path

from ..drivers.given import (  # noqa: F401 - the record's home
    PATH,
    VERSION,
    _given,
    _solutions_dir,
    fenced_functions,
    given_functions,
    load,
)
from ..drivers.record import Stream, drive
from ..spec import manifest
from .registry import checks_of


def fingerprint() -> str:
    """Hash of what the records depend on: solution files, check modules, the manifest."""
    digest = hashlib.sha256()
    checks_dir = Path(__file__).parent.parent / "drivers"
    modules = sorted({row.checks for row in manifest.TABLE})
    sources = [checks_dir / f"{m}.py" for m in modules if (checks_dir / f"{m}.py").is_file()] + [manifest.PATH]
    solutions = _solutions_dir()
    sources += sorted(p for name in manifest.SUBMISSION_FILES for p in [solutions / name] if p.is_file())
    for path in sources:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def generate() -> dict:
    """Run every public check on the reference (in this process) and collect the records."""
    # This process holds the judge side: importing it plugs its empty engines into the drivers'
    # scenes, as in a notebook (the drivers import torch anyway).
    from .. import reference  # noqa: F401

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


def record(key: str) -> Stream | None:
    data = load().get("records", {}).get(key)
    return Stream.from_json(data) if data is not None else None


def stale() -> bool:
    """True when solutions/ or the checks changed since expected.json was generated."""
    try:
        return load().get("fingerprint") != fingerprint()
    except (FileNotFoundError, OSError):
        return False
