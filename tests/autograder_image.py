"""Gradescope's image in a temporary root, for tests/test_autograder_package.py and
benchmarks/bench_notebooks_sealed.py: the package's zip unpacked, its setup.sh run (a created
sandbox user, the venv, the smoke grades, every answer sealed root-only), then `run_autograder` on
a submission as Gradescope runs it. Root only."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pagedlab.spec import manifest

ROOT = Path(__file__).resolve().parent.parent
USER = "pagedlab-wt-instructor-ag"


def build_image(autograder: Path, zip_dir: Path, setup_tasks: str = "1,12", *, user: str = USER,
                bytecode: bool = False) -> dict:
    """The package's zip unpacked in `autograder` and its setup.sh run there; the environment
    run_autograder then needs."""
    zip_path = zip_dir / "autograder.zip"
    subprocess.run([sys.executable, "-m", "pagedlab.grader.package", "--out", str(zip_path)],
                   check=True, cwd=ROOT, capture_output=True)
    source = autograder / "source"
    with zipfile.ZipFile(zip_path) as zf:  # what Gradescope does with the upload
        zf.extractall(source)
        for info in zf.infolist():
            mode = info.external_attr >> 16
            if mode:
                (source / info.filename).chmod(mode & 0o777)
    shutil.copy2(source / "run_autograder", autograder / "run_autograder")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAGEDLAB_", "VIRTUAL_ENV"))}
    # The smoke grade at set-up covers the submitted files' tasks; every task's grade on the
    # solutions is test_grading_real's.
    env.update(PAGEDLAB_AUTOGRADER_ROOT=str(autograder), PAGEDLAB_GRADE_USER=user, PAGEDLAB_SETUP_TASKS=setup_tasks,
               PAGEDLAB_COMPILE_BYTECODE="1" if bytecode else "0")  # a test's few tasks never repay its minute
    setup = subprocess.run(["bash", str(source / "setup.sh")], env=env, cwd=autograder,
                           capture_output=True, text=True, timeout=3600)
    log = setup.stdout[-3000:] + setup.stderr[-3000:]
    assert setup.returncode == 0, log
    assert "autograder image OK" in setup.stdout, log
    return env


def run_autograder(autograder: Path, env: dict, files: dict[str, str], *args: str,
                   notebooks: bool = False) -> tuple[dict, subprocess.CompletedProcess]:
    """Gradescope's run of one submission (`files`: name -> text): (results.json, the run)."""
    for folder in ("submission", "results"):
        shutil.rmtree(autograder / folder, ignore_errors=True)
    (autograder / "submission").mkdir()
    for name, text in files.items():
        (autograder / "submission" / name).write_text(text)
    done = subprocess.run(["bash", str(autograder / "run_autograder"), *args],
                          env={**env, "GRADE_NOTEBOOKS": "1" if notebooks else "0"}, cwd=autograder,
                          capture_output=True, text=True, timeout=1800)
    return json.loads((autograder / "results" / "results.json").read_text()), done


def solutions(replace: dict[str, tuple[str, str]] | None = None) -> dict[str, str]:
    """Every submission file of the reference; `replace`: file name -> (text, planted text)."""
    files = {p.name: p.read_text() for p in sorted((ROOT / "solutions").iterdir()) if p.is_file()
             and p.name in manifest.SUBMISSION_FILES + ("llm_memory.c",)}
    for name, (old, new) in (replace or {}).items():
        assert old in files[name], f"the plant's anchor is not in solutions/{name}"
        files[name] = files[name].replace(old, new)
    return files




@contextlib.contextmanager
def temporary_image(setup_tasks: str = "1,12", *, user: str = USER, bytecode: bool = False):
    """(the autograder root, run_autograder's environment) of an image built for the block; the
    root, the zip and the sandbox user removed after it."""
    # Under /tmp, world-traversable: the sandbox user must reach the venv (pytest's tmp is 0700).
    autograder = Path(tempfile.mkdtemp(prefix="pagedlab-autograder-", dir="/tmp"))
    autograder.chmod(0o755)
    zip_dir = Path(tempfile.mkdtemp(prefix="pagedlab-autograder-zip-"))
    try:
        yield autograder, build_image(autograder, zip_dir, setup_tasks, user=user, bytecode=bytecode)
    finally:
        subprocess.run(["userdel", user], capture_output=True)
        shutil.rmtree(autograder, ignore_errors=True)
        shutil.rmtree(zip_dir, ignore_errors=True)
