"""The Gradescope package end to end: the zip built, unpacked in a temporary autograder root,
`setup.sh` run there (interpreter chosen for the sandbox user, venv, smoke grades), then
`run_autograder` on a submission whose code runs as a user the test creates.

Root only (it installs packages and creates a user); minutes: marked integration.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from pagedlab import manifest

ROOT = Path(__file__).resolve().parent.parent
USER = "pagedlab-wt-instructor-ag"
SUBMITTED = ("memory_manager.py", "buddy.py")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser") or not shutil.which("apt-get"),
                       reason="needs root, runuser and apt-get (it runs Gradescope's setup.sh)"),
]


@pytest.fixture()
def autograder():
    # Under /tmp, world-traversable: the sandbox user must reach the venv (pytest's tmp is 0700).
    root = Path(tempfile.mkdtemp(prefix="pagedlab-autograder-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    subprocess.run(["userdel", USER], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.task_wide
def test_the_package_sets_up_and_grades_in_a_temporary_root_as_a_created_user(autograder, tmp_path):
    zip_path = tmp_path / "autograder.zip"
    subprocess.run([sys.executable, "-m", "pagedlab.grading.package", "--out", str(zip_path)],
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
    env.update(PAGEDLAB_AUTOGRADER_ROOT=str(autograder), PAGEDLAB_GRADE_USER=USER, PAGEDLAB_SETUP_TASKS="1,12",
               PAGEDLAB_COMPILE_BYTECODE="0")  # a minute of compiling that two HW3 tasks never repay

    setup = subprocess.run(["bash", str(source / "setup.sh")], env=env, cwd=autograder,
                           capture_output=True, text=True, timeout=3600)
    log = setup.stdout[-3000:] + setup.stderr[-3000:]
    assert setup.returncode == 0, log
    assert "autograder image OK" in setup.stdout, log
    assert pwd.getpwnam(USER), "setup.sh created the sandbox user"
    base = Path(os.path.realpath(autograder / "venv" / "bin" / "python"))
    assert subprocess.run(["runuser", "-u", USER, "--", str(base), "-c", "pass"], cwd="/").returncode == 0

    (autograder / "submission").mkdir()
    for name in SUBMITTED:
        shutil.copy2(ROOT / "solutions" / name, autograder / "submission" / name)
    done = subprocess.run(["bash", str(autograder / "run_autograder")], env=env, cwd=autograder,
                          capture_output=True, text=True, timeout=1800)
    results = json.loads((autograder / "results" / "results.json").read_text())
    expected = sum(t.points for t in manifest.TABLE if set(t.files) <= set(SUBMITTED))
    assert results["score"] == expected, (results["output"][:2000], done.stderr[-2000:])
    assert "autograder problem" not in json.dumps(results)
    assert "llm_memory.c" not in results["output"]
