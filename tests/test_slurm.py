"""grading/README.md's Slurm recipe, run as written on a real Slurm: Debian's slurm-wlm and munge,
one node of 2 CPUs started on this machine (tests/slurm_cluster.py), as root with a sandbox pool.

The recipe's three lines are read from the README (between its `slurm-recipe` marks), so this
test fails when the README's recipe and what works differ. A class of six (three finished, two
untouched, one with a syntax error, in a zip whose last folder is named "z\\nalice\\texercises"),
graded on Tasks 1 and 12 (cheap: no torch, no kernel), two array tasks at once on the node:

- the array's grades equal `grade-class`'s exactly, though the options have commas;
- two tasks ran at once, each under its own pool user, and nobody lost a point to the other's
  kill step;
- a merge while the array runs refuses; a cancelled index shows as not graded yet with its
  re-run line, which then completes the merge; a requeued index is graded again, right, with both
  runs in its appended logs;
- a venv the pool cannot run stops every index and grade-class before grading, saying what to do.

Before this recipe (grade_array.sbatch with --export=...,GRADE_ARGS="--tasks 1,12 --no-hidden",
--cpus-per-task=1 on this node): every student graded on Task 1 only, out of 8; one correct
student 0/8 with 5 checks ended by the other task's kill step ("unshare: sigprocmask unblock
failed"); with the pool unable to run the venv, all six 0/8 and no grader problem.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import pytest
from sandbox_users import ensure_user

from pagedlab.sandbox import users

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "grading" / "README.md"
# Two tasks run at once on the 2-CPU node: a pool of two, named for this test (no other test
# kills their processes or takes their locks).
POOL = ["pagedlab-slurmtest-0", "pagedlab-slurmtest-1"]
OPTIONS = "--tasks 1,12 --no-hidden"
EVIL = "z\nalice\texercises"  # a folder name that once added a line to the queue (the red team's)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800), pytest.mark.xdist_group("slurm")]


def recipe() -> list[str]:
    """The README's recipe: its shell commands, continuation lines joined."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"<!-- slurm-recipe -->\s*```bash\n(.*?)```\s*<!-- /slurm-recipe -->", text, re.S)
    assert block, "grading/README.md has no slurm-recipe block"
    return [line.strip() for line in block.group(1).replace("\\\n", " ").splitlines() if line.strip()]


def _csv(path: Path) -> dict[str, dict]:
    return {row["key"]: row for row in csv.DictReader(io.StringIO(path.read_text()))}


def _class_zip(folder: Path) -> Path:
    solution = {name: (ROOT / "solutions" / name).read_text() for name in ("memory_manager.py", "buddy.py")}
    stub = {name: (ROOT / "exercises" / name).read_text() for name in ("memory_manager.py", "buddy.py")}
    broken = dict(solution, **{"memory_manager.py": solution["memory_manager.py"] + "\ndef broken(:\n"})
    archive = folder / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for who, files in (("alice", solution), ("bob", solution), ("carol", solution), ("dan", stub),
                           ("erin", stub), (EVIL, broken)):
            for name, text in files.items():
                zf.writestr(f"{who}/{name}", text)
    archive.chmod(0o600)
    return archive


def _usable_python(base: Path) -> str:
    """A Python 3.11 the pool can run, found as grading/setup.sh finds one: the system's, else one
    uv installs into a folder every user may read."""
    usable = [str(ROOT / "grading" / "usable_python.sh"), POOL[0], "3.11"]
    found = subprocess.run([*usable, "/usr/bin/python3.11", "/usr/local/bin/python3.11"], capture_output=True, text=True)
    if found.returncode == 0:
        return found.stdout.strip()
    sys.path.insert(0, str(ROOT / "tools"))
    import bootstrap

    uv = bootstrap.find_uv(ROOT / ".venv", sys.executable)
    if not uv:
        pytest.skip(f"no Python 3.11 the sandbox users can run, and no uv to install one: {found.stderr[-300:]}")
    env = {**os.environ, "UV_PYTHON_INSTALL_DIR": str(base / "python")}
    got = subprocess.run([uv, "python", "install", "3.11"], env=env, capture_output=True, text=True, timeout=900)
    if got.returncode != 0:
        pytest.skip(f"no Python 3.11 the sandbox users can run here ({found.stderr.strip()[-300:]}), and uv "
                    f"could not download one: {got.stderr.strip()[-300:]}")
    subprocess.run(["chmod", "-R", "a+rX", str(base / "python")], check=True)
    where = subprocess.run([uv, "python", "find", "--python-preference", "only-managed", "3.11"], env=env,
                           capture_output=True, text=True).stdout.strip()
    found = subprocess.run([*usable, where], capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    return found.stdout.strip()


def _usable_venv(base: Path) -> Path:
    """The grading venv the README asks for: on a Python the pool can run, built by tools/bootstrap.py
    (uv from the cache the checkout's own .venv filled: seconds)."""
    python = _usable_python(base)
    venv = base / "venv"
    built = subprocess.run([python, str(ROOT / "tools" / "bootstrap.py"), str(venv)],
                           capture_output=True, text=True, timeout=1200, env={**os.environ, "PAGEDLAB_COMPILE_BYTECODE": "0"})
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    return venv


class Instructor:
    """A root shell with the README's settings, running the recipe's lines through bash."""

    def __init__(self, cluster, **settings):
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("PAGEDLAB_", "PYTHON", "SLURM_"))}
        self.env = {**clean, **cluster.env, **settings, "PAGEDLAB_GRADE_USER": ",".join(POOL)}
        self.cwd = ROOT  # where an instructor submits from: the course checkout

    def run(self, command: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=self.env,
                              cwd=self.cwd, timeout=timeout)

    def submit(self, command: str) -> str:
        done = self.run(command)
        assert done.returncode == 0, done.stdout + done.stderr
        return re.search(r"Submitted batch job (\d+)", done.stdout).group(1)


def _wait_until(predicate, what: str, seconds: float = 300):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def held_locks() -> dict[str, str]:
    """Pool user -> pid of the process holding its lock, from the kernel's lock table."""
    inodes = {}
    for user in POOL:
        try:
            inodes[os.stat(users.lock_dir() / f"{user}.lock").st_ino] = user
        except OSError:
            pass
    held = {}
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK":  # "N: -> FLOCK ..." is a waiter
            continue
        user = inodes.get(int(fields[5].rsplit(":", 1)[1]))
        if user:
            held[user] = fields[4]
    return held


def _allocations(cluster) -> list[str]:
    """When slurmctld started each task (its log), for a failure that found no two at once."""
    log = cluster.base / "log" / "slurmctld.log"
    return [line for line in log.read_text(errors="replace").splitlines() if "Allocate" in line] if log.is_file() else []


class LockWatch(threading.Thread):
    """Samples the kernel's lock table while the array runs: which student's grading process holds
    the lock of which pool user (users.claimed), ten times a second."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples: list[dict[str, str]] = []
        self.done = threading.Event()

    @staticmethod
    def _student(pid: str) -> str | None:
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            return None
        impl = args[args.index("--impl") + 1] if "--impl" in args else ""
        return Path(impl).parent.name if impl.endswith("/files") else None

    def run(self) -> None:
        while not self.done.wait(0.1):
            held = {user: self._student(pid) for user, pid in held_locks().items()}
            if held:
                self.samples.append(held)

    def stop(self) -> list[dict[str, str]]:
        self.done.set()
        self.join()
        return self.samples


def _users_in_log(student: Path) -> set[str]:
    """The users its grading runs (each appended to the log) said they graded as."""
    return set(re.findall(r"runs as user '([^']+)'", (student / "grade.log").read_text()))


ARRAY_CPU: list[float] = []  # CPU-s of each array index's grading (state.json), filled by `setting`


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("the Slurm recipe grades as root with a sandbox pool (CI runs as root)")
    from slurm_cluster import Cluster

    wall, own, reaped = time.monotonic(), time.process_time(), os.times()
    node = Cluster()
    yield node
    node.stop()
    now = os.times()
    children = now.children_user + now.children_system - reaped.children_user - reaped.children_system
    # Slurm's job steps are not reaped by the daemons this process reaps: the array's gradings
    # count their own CPU time (grade-index writes it into each state.json).
    print(f"\ntest_slurm: {time.monotonic() - wall:.0f} s on the clock; CPU-s: {time.process_time() - own:.1f} "
          f"in pytest, {children:.1f} in its reaped children (Slurm's daemons, the venv, grade-class, prepare "
          f"and merges), {sum(ARRAY_CPU):.1f} in the array's {len(ARRAY_CPU)} gradings")


@pytest.fixture(scope="module")
def setting(cluster):
    for name in POOL:
        ensure_user(name)
    base = Path(tempfile.mkdtemp(prefix="pagedlab-slurmtest-"))
    base.chmod(0o755)  # the venv inside must be reachable by the pool
    uploads = base / "uploads"
    uploads.mkdir(mode=0o700)
    yield {"base": base, "zip": _class_zip(uploads), "venv": _usable_venv(base)}
    for state in base.glob("*/students/*/state.json"):
        seconds = json.loads(state.read_text()).get("cpu_seconds")
        if seconds is not None:
            ARRAY_CPU.append(seconds)
    shutil.rmtree(base, ignore_errors=True)


def test_the_readme_recipe_on_a_real_slurm_gives_grade_class_grades(cluster, setting):
    commands = recipe()
    assert [c.split()[0] for c in commands] == ['"$PAGEDLAB"', "sbatch", '"$PAGEDLAB"'], commands
    prepare, submit, merge = commands
    base, pagedlab = setting["base"], str(setting["venv"] / "bin" / "pagedlab")
    me = Instructor(cluster, COURSE=str(ROOT), PAGEDLAB=pagedlab, SUBMISSIONS=str(setting["zip"]),
                    DIR=str(base / "array"), OPTIONS=OPTIONS)
    out = base / "array"

    # The grades to match: grade-class on the same class, options and pool (two jobs at once).
    reference = me.run(f'"$PAGEDLAB" grade-class "$SUBMISSIONS" --out {base / "reference"} --jobs 2 $OPTIONS')
    assert reference.returncode == 0, reference.stdout[-3000:] + reference.stderr[-3000:]
    expected = _csv(base / "reference" / "grades.csv")
    keys = ["alice", "bob", "carol", "dan", "erin", "z_alice_exercises"]
    assert {k: (r["status"], r["total"], r["max"]) for k, r in expected.items()} == {
        "alice": ("graded", "12", "12"), "bob": ("graded", "12", "12"), "carol": ("graded", "12", "12"),
        "dan": ("graded", "0", "12"), "erin": ("graded", "0", "12"), "z_alice_exercises": ("graded", "4", "12")}

    done = me.run(prepare)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "queue.txt").read_text().splitlines() == keys  # the evil name added no line
    watch = LockWatch()
    watch.start()
    job = me.submit(submit)
    # Index 5 cancelled while pending (the array runs two at a time, in index order).
    assert cluster.run("scancel", f"{job}_5").returncode == 0
    # Index 0 requeued while it grades: graded again from the start, right.
    _wait_until(lambda: cluster.tasks(job).get(f"{job}_0") == "RUNNING"
                and (out / "students" / "alice" / "grade.log").is_file(), "index 0 grading")
    assert cluster.run("scontrol", "requeue", f"{job}_0").returncode == 0
    _wait_until(lambda: cluster.tasks(job).get(f"{job}_0") == "PENDING", "index 0 requeued")
    assert cluster.run("scontrol", "update", f"jobid={job}_0", "starttime=now").returncode == 0
    # A merge in the middle of the array refuses, and names what is not graded yet.
    _wait_until(lambda: (out / "students" / "bob" / "state.json").is_file(), "a first grade")
    assert cluster.tasks(job), "the array ended before the merge: not a merge mid-array"
    early = me.run(merge)
    assert early.returncode == 3, early.stdout + early.stderr
    assert re.search(r"incomplete: \d not graded yet \(array indices [0-9,-]+\)", early.stdout), early.stdout
    assert not (out / "grades.csv").exists()
    cluster.wait_for(job)
    samples = watch.stop()
    # Every exit let its user go: finished, cancelled, requeued mid-grading.
    assert held_locks() == {}

    # The cancelled index: not graded yet, with the line that grades it; that line completes the merge.
    partial = me.run(merge)
    assert partial.returncode == 3, partial.stdout
    assert "incomplete: 1 not graded yet (array indices 5): z_alice_exercises (5)" in partial.stdout
    rerun = re.search(r"grade them: (sbatch .*)", partial.stdout).group(1)
    assert rerun == _readme_line_for(me, submit, "5")
    cluster.wait_for(me.submit(rerun))
    final = me.run(merge)
    assert final.returncode == 0, final.stdout + final.stderr
    assert _csv(out / "grades.csv") == expected  # exactly grade-class's rows

    # Two tasks graded at once, each holding its own user's lock (the kernel's lock table says
    # so), each graded as the user it held, and no check died of the other's kill step.
    assert any(len(held) == 2 and None not in held.values() and len(set(held.values())) == 2
               for held in samples), (samples[-20:], _allocations(cluster))
    for held in samples:
        for user, key in held.items():
            if key:
                assert user in _users_in_log(out / "students" / key), (key, held)
    logs = {p.name: p.read_text() for p in (out / "logs").iterdir()}
    assert not any("sigprocmask" in (out / "students" / k / "grade.log").read_text() for k in keys)
    # Logs named by job and index, under DIR, appended: the requeued index's holds both runs.
    assert {f"{job}_{i}.log" for i in range(5)} <= set(logs), sorted(logs)
    assert logs[f"{job}_0.log"].count("pagedlab grade-index: index 0 of 6 is student alice") == 2
    assert "run 2" in logs[f"{job}_0.log"] and "alice: graded, 12 points" in logs[f"{job}_0.log"]
    assert (out / "students" / "alice" / "grade.log").read_text().count("pagedlab grade-index 0:") == 2
    assert f"{job}_5.log" not in logs  # cancelled before it ran


def _readme_line_for(me: Instructor, submit: str, spec: str) -> str:
    """The README's sbatch line as the shell expands it, for array `spec` only."""
    words = me.run("printf '%s\\n' " + submit.removeprefix("sbatch ")).stdout.splitlines()
    words = [re.sub(r"^--array=[^%]*", f"--array={spec}", w) for w in words]
    return " ".join(["sbatch", *words])


def test_a_venv_the_pool_cannot_run_stops_before_grading_with_what_to_do(cluster, setting):
    prepare, submit, merge = recipe()
    base, venv = setting["base"], setting["venv"]
    me = Instructor(cluster, COURSE=str(ROOT), PAGEDLAB=str(venv / "bin" / "pagedlab"),
                    SUBMISSIONS=str(setting["zip"]), DIR=str(base / "locked"), OPTIONS=OPTIONS)
    out = base / "locked"
    # The venv behind a root-only folder, as one built on a pyenv Python under /root is.
    base.chmod(0o700)
    try:
        stopped = me.run(f'"$PAGEDLAB" grade-class "$SUBMISSIONS" --out {base / "locked-class"} --jobs 2 $OPTIONS')
        assert stopped.returncode == 2, stopped.stdout + stopped.stderr
        assert f"the sandbox user {POOL[0]!r} cannot run this grader's Python" in stopped.stderr
        assert "tools/bootstrap.py" in stopped.stderr
        assert not list((base / "locked-class" / "students").glob("*/results.json"))  # nobody graded
        assert me.run(prepare).returncode == 0
        cluster.wait_for(me.submit(submit))
    finally:
        base.chmod(0o755)
    logs = [p.read_text() for p in (out / "logs").iterdir()]
    assert len(logs) == 6
    assert all("GRADER PROBLEM" in log and "cannot run this grader's Python" in log for log in logs), logs[0]
    merged = me.run(merge)
    assert merged.returncode == 0, merged.stdout
    rows = _csv(out / "grades.csv")
    assert {r["status"] for r in rows.values()} == {"grader problem"}, rows  # not six zeros
    assert "cannot run this grader's Python" in (out / "grader_problems.log").read_text()
    assert "grade them again: sbatch --array=0-5%50" in merged.stdout
