"""Red team: submissions that want points without the work. Each must score 0 for the tasks it
did not really do, and the grader must come out of it unharmed.

In-process variants always run. The sandboxed variants (the exact Gradescope set-up: grader as
root, the submission's code as an unprivileged user, solutions private) run when the tests run
as root, with a user created for them; elsewhere they are skipped saying why.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pagedlab import manifest
from pagedlab.grading.cli import grade

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ROOT / "exercises"
PY_FILES = ("memory_manager.py", "paged_attention.py", "prefix_cache.py", "buddy.py", "swap.py")
PY_TASKS = [r.id for r in manifest.TABLE if set(r.files) & set(PY_FILES)]

# Appended to every Python exercise: forge a perfect record from the committed expected results
# (every public check), claim every other check passed, and leave before the driver runs.
FORGE_RECORDS = textwrap.dedent('''
    import json as _j, os as _o, sys as _s
    from pathlib import Path as _P
    def _forge():
        events = _s.argv[1] if len(_s.argv) > 1 else None
        if not events:
            return
        import pagedlab.checks.golden as g
        records = g.load()["records"]
        req = {"checks": []}
        with open(events, "a") as out:
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
    import pagedlab.checks.judge as _jd, pagedlab.checks.framework as _fw
    _jd.judge = lambda *a, **k: _jd.Verdict(True)
    _fw.drive = lambda c, impl=None, seed=0: _fw.Stream([], "completed")
''')

# Finds the running record through gc and replaces it with the reference's committed values.
GC_TAMPER = textwrap.dedent('''
    import gc as _gc
    def _tamper():
        import pagedlab.checks.framework as fw, pagedlab.checks.golden as g
        for obj in _gc.get_objects():
            if isinstance(obj, fw.Run):
                rec = next(iter(g.load()["records"].values()))
                obj.stream.obs[:] = rec["obs"]
        return None
''')


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


def test_forged_records_from_the_committed_results_earn_nothing(tmp_path):
    results = _grade(_submission(tmp_path, FORGE_RECORDS))
    assert results["score"] == 0, _scores(results)


def test_patching_the_judge_or_the_registry_in_the_child_earns_nothing(tmp_path):
    results = _grade(_submission(tmp_path, PATCH_JUDGE))
    assert results["score"] == 0, _scores(results)


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
        if len(_s.argv) > 1:
            with open(_s.argv[1], "a") as _f:
                _f.write('{"event": "start"}\\n')
                _f.write('{"event": "record", "index": 0, "record": ' + '[' * 100000 + ']' * 100000 + '}\\n')
                chunk = "x" * (1 << 20)
                for _ in range(70):
                    _f.write(chunk)
            _o._exit(0)
    ''')
    results = _grade(_submission(tmp_path, flood), tasks=["1", "6"])
    assert results["score"] == 0
    assert all("autograder problem" not in t["output"] for t in results["tests"])


def test_an_output_flood_fails_its_task_and_leaves_the_grader_alone(tmp_path):
    flood = "\nimport sys as _s\nif len(_s.argv) > 1:\n    _s.stdout.write('spam' * (1 << 29))\n"
    results = _grade(_submission(tmp_path, flood, files=("memory_manager.py",)), tasks=["1"])
    assert results["score"] == 0


# ---------------------------------------------------------------------------------------------
# Sandboxed: as on Gradescope
# ---------------------------------------------------------------------------------------------
SANDBOX_USER = "pagedlab-redteam"


@pytest.fixture
def sandbox(monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("the sandboxed red team needs root to create a user and switch to it "
                    "(CI runs as root; run `sudo pytest tests/test_redteam.py` to include it)")
    try:
        pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", SANDBOX_USER], check=True)
    monkeypatch.setenv("PAGEDLAB_GRADE_USER", SANDBOX_USER)
    # The grader's interpreter must be one the user may run (Gradescope's is /usr/bin/python3 in
    # /autograder/venv). Here it may live under /root (pyenv): let the user traverse, not list.
    opened = []
    for folder in Path(os.path.realpath(sys.executable)).parents:
        mode = folder.stat().st_mode
        if not mode & 0o001:
            folder.chmod(mode | 0o001)
            opened.append((folder, mode))
    entry = pwd.getpwnam(SANDBOX_USER)
    probe = subprocess.run([sys.executable, "-c", "import numpy, torch, pagedlab"], user=entry.pw_uid,
                           group=entry.pw_gid, extra_groups=[], capture_output=True, text=True, cwd="/",
                           env={**os.environ, "HOME": "/tmp"})
    if probe.returncode != 0:
        for folder, mode in opened:
            folder.chmod(mode)
        pytest.fail(f"the sandbox user cannot run the grader's Python: {probe.stderr[-500:]}")
    private = [ROOT / "solutions", ROOT / "pagedlab" / "checks" / "expected.json"]
    modes = {p: p.stat().st_mode for p in private}
    for p in private:
        p.chmod(0o700 if p.is_dir() else 0o600)
    yield SANDBOX_USER
    for p, mode in modes.items():
        p.chmod(mode)
    for folder, mode in opened:
        folder.chmod(mode)


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # the sandbox user (conftest.py)
def test_sandboxed_solutions_still_earn_full_marks(sandbox, tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(ROOT / "solutions", sub)
    results = _grade(sub)
    assert results["score"] == manifest.MAX_SCORE, _scores(results)


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
    for no_network, reached in (("0", True), ("1", False)):
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
