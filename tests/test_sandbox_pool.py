"""One sandbox user per grading job on a machine, whoever started the jobs (`users.claimed`), and a
pool that cannot run the grader's Python is told what to do before anything is graded.

Two tasks of a Slurm array on one node each graded as the pool's first user: one task's kill step
ended the other's checks ("unshare: sigprocmask unblock failed" x23) and correct students lost 4-8
of 18 points with no grader problem. The users here are this module's own (no other test kills
their processes), and their locks live in a folder of the test's, not the machine's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_users import ensure_user

from pagedlab.grader import usable
from pagedlab.sandbox import users

ROOT = Path(__file__).resolve().parent.parent
POOL = ["pagedlab-pooltest-0", "pagedlab-pooltest-1"]


@pytest.fixture
def pool(monkeypatch, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("a sandbox pool needs root (CI runs as root)")
    for name in POOL:
        ensure_user(name)
    monkeypatch.setenv(users.USER_ENV, ",".join(POOL))
    monkeypatch.setenv(users.LOCK_DIR_ENV, str(tmp_path / "locks"))
    return POOL


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


HOLD = """
import sys, time
from pagedlab.sandbox import users
with users.claimed(wait=0) as user:
    print(user.name, flush=True)
    time.sleep(120)
"""


def test_each_job_holds_its_own_user_and_a_killed_job_frees_it(pool):
    other = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert other.stdout.readline().strip() == POOL[0]  # another grading job on this machine
        with users.claimed(wait=0) as mine:
            assert mine.name == POOL[1]  # never the user that job holds
            with pytest.raises(users.PoolBusy, match="held by other grading jobs"):
                with users.claimed(wait=0.6, echo=lambda text: None):
                    pass
        # SIGKILL (scancel's last word, a node going down): the kernel drops its lock.
        other.send_signal(signal.SIGKILL)
        other.wait()
        with users.claimed(wait=5) as mine:
            assert mine.name == POOL[0]
    finally:
        other.kill()
        other.wait()


def test_a_grade_whose_pool_is_all_held_is_a_grader_problem_not_a_score(pool, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "buddy.py").write_text((ROOT / "solutions" / "buddy.py").read_text())
    with users.claimed(wait=0), users.claimed(wait=0):
        run = subprocess.run([sys.executable, "-m", "pagedlab", "grade", "--impl", str(tmp_path / "sub"),
                              "--tasks", "12", "--no-hidden", "--json", str(tmp_path / "r.json")],
                             capture_output=True, text=True, env={**_env(), users.WAIT_ENV: "1"}, timeout=300)
    assert run.returncode == 2, run.stdout + run.stderr
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"].startswith("Grader misconfigured: all 2 users of the sandbox pool")
    assert "task12" not in run.stdout  # nothing was graded


def test_a_python_the_pool_cannot_run_is_refused_with_what_to_do(pool, tmp_path):
    # A venv on a Python in a root-only folder (a pyenv under /root): every check process would
    # die before its first check, and every student, correct ones too, would score 0.
    locked = tmp_path / "root-only"
    locked.mkdir(mode=0o700)
    (locked / "python").symlink_to(os.path.realpath(sys.executable))
    user = users.pool()[0]
    problem = usable._probe(user.name, user.uid, user.gid, str(locked / "python"), "")
    assert f"the sandbox user {POOL[0]!r} cannot run this grader's Python ({locked / 'python'}" in problem
    assert "Permission denied" in problem and "nothing was graded" in problem
    assert "grading/usable_python.sh" in problem and "tools/bootstrap.py" in problem


def test_an_index_on_a_node_without_the_pool_users_is_a_grader_problem(pool, tmp_path):
    """A node of the cluster where the pool was never created: that index says so, as the
    grader's problem, and grades nobody as anyone."""
    src = tmp_path / "in" / "ann"
    src.mkdir(parents=True)
    (src / "buddy.py").write_text((ROOT / "solutions" / "buddy.py").read_text())
    (tmp_path / "in").chmod(0o700)
    out = tmp_path / "out"
    prepare = subprocess.run([sys.executable, "-m", "pagedlab", "grade-class", str(tmp_path / "in"), "--out", str(out),
                              "--prepare-only", "--tasks", "12", "--no-hidden"], capture_output=True, text=True,
                             env={**_env(), users.USER_ENV: ",".join(POOL)}, timeout=300)
    assert prepare.returncode == 0, prepare.stderr
    options = json.loads((out / "options.json").read_text())
    (out / "options.json").write_text(json.dumps(dict(options, pool="pagedlab-pooltest-absent")))
    run = subprocess.run([sys.executable, "-m", "pagedlab", "grade-index", str(out), "0"], capture_output=True,
                         text=True, env=_env(), timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "ann: GRADER PROBLEM: PAGEDLAB_GRADE_USER: no such user 'pagedlab-pooltest-absent'" in run.stdout
    state = json.loads((out / "students" / "ann" / "state.json").read_text())
    assert state["status"] == "grader problem" and not (out / "students" / "ann" / "results.json").exists()
