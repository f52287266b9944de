"""Build the zip an instructor uploads to Gradescope as the programming assignment's autograder.

    python -m pagedlab.grading.package            # -> build/pagedlab-autograder.zip

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


def _add(zf: zipfile.ZipFile, path: Path, arcname: str) -> None:
    info = zipfile.ZipInfo.from_file(path, arcname)
    info.compress_type = zipfile.ZIP_DEFLATED
    if arcname in ENTRY_POINTS:
        info.external_attr = (stat.S_IFREG | 0o755) << 16
    zf.writestr(info, path.read_bytes())


def build(out: Path = DEFAULT_OUT, root: Path = ROOT) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as zf:
        for name in ENTRY_POINTS:
            _add(zf, root / "grading" / name, name)
        for name in repository_files(root):
            if not name.startswith("build/"):
                _add(zf, root / name, name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedlab.grading.package", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    path = build(args.out)
    with zipfile.ZipFile(path) as zf:
        count = len(zf.namelist())
    print(f"wrote {path} ({count} files, {path.stat().st_size / 1e6:.1f} MB); upload it as the autograder")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
