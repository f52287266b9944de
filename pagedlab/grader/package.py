"""Build the zip an instructor uploads to Gradescope as the programming assignment's autograder.

    python -m pagedlab.grader.package            # -> build/pagedlab-autograder.zip

Gradescope wants `setup.sh` and `run_autograder` at the root of the zip and unpacks the rest to
/autograder/source ($PAGEDLAB_AUTOGRADER_ROOT/source when that is set, e.g. to try the zip in a
temporary folder), so the zip is the repository (files git knows about, committed or not, minus
what .gitignore excludes) with those two copied up from grading/.
"""

from __future__ import annotations

import argparse
import stat
import subprocess
import zipfile
from pathlib import Path

from ..loader import ROOT

ENTRY_POINTS = ("setup.sh", "run_autograder")
DEFAULT_OUT = ROOT / "build" / "pagedlab-autograder.zip"


def repository_files(root: Path = ROOT) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                            cwd=root, check=True, capture_output=True).stdout.decode()
    return sorted(name for name in listed.split("\0") if name and (root / name).is_file())


# run_autograder's line for the class's track (empty: each submission's files decide).
TRACK_LINE = 'export PAGEDLAB_TRACK="${PAGEDLAB_TRACK:-}"'


def _add(zf: zipfile.ZipFile, path: Path, arcname: str, data: bytes | None = None) -> None:
    info = zipfile.ZipInfo.from_file(path, arcname)
    info.compress_type = zipfile.ZIP_DEFLATED
    if arcname in ENTRY_POINTS:
        info.external_attr = (stat.S_IFREG | 0o755) << 16
    zf.writestr(info, path.read_bytes() if data is None else data)


def with_track(run_autograder: str, track_choice: str | None) -> str:
    """run_autograder's text grading every Part A from `track_choice` ("c" or "python") unless
    the container sets PAGEDLAB_TRACK itself."""
    if not track_choice:
        return run_autograder
    if track_choice not in ("c", "python") or run_autograder.count(TRACK_LINE) != 1:
        raise ValueError(f"--track {track_choice!r}: the track is c or python, set on run_autograder's "
                         f"line {TRACK_LINE!r}")
    return run_autograder.replace(TRACK_LINE, TRACK_LINE.replace(":-}", f":-{track_choice}}}"))


def build(out: Path = DEFAULT_OUT, root: Path = ROOT, track_choice: str | None = None) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    runner = with_track((root / "grading" / "run_autograder").read_text(), track_choice).encode()
    with zipfile.ZipFile(out, "w") as zf:
        for name in ENTRY_POINTS:
            _add(zf, root / "grading" / name, name, runner if name == "run_autograder" else None)
        for name in repository_files(root):
            if not name.startswith("build/"):
                _add(zf, root / name, name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedlab.grader.package", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--track", choices=["c", "python"], default=None,
                        help="grade every student's Part A from llm_memory.c (c) or memory_manager.py "
                             "(python); default: each submission's files decide")
    args = parser.parse_args(argv)
    path = build(args.out, track_choice=args.track)
    with zipfile.ZipFile(path) as zf:
        count = len(zf.namelist())
    print(f"wrote {path} ({count} files, {path.stat().st_size / 1e6:.1f} MB); upload it as the autograder")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
