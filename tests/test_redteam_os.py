"""Red team, operating-system wall: a submission with full code execution as the sandbox user, in
Python and in native code, gains nothing from the processes and folders around it.

Each attack is a real submission graded as root with sandbox users (grading/setup.sh's set-up),
the student API off (tests/test_redteam.py says why): the attack meets the OS-level defence it is
written against (pagedlab.sandbox.seal, enter.py, the CPU-time limit). Skipped when not root.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from sandbox_users import ensure_user, interpreter_reachable

from pagedlab.grader.cli import grade

INTEGRATION = [pytest.mark.integration, pytest.mark.xdist_group("users")]  # created sandbox users


def sandboxed(test):
    for mark in INTEGRATION:
        test = mark(test)
    return test

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ROOT / "exercises"
SOLUTIONS = ROOT / "solutions"
API_OFF = Path(__file__).parent / "submissions" / "student_api_off.py"
USER = "pagedlab-sandbox-rt"  # tests/test_redteam.py's
POOL = ["pagedlab-sandbox-p0", "pagedlab-sandbox-p1", "pagedlab-sandbox-p2"]
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


@pytest.fixture(scope="module")
def users():
    """The sandbox users, able to run the grader's Python (as tests/test_redteam.py makes them)."""
    if os.geteuid() != 0:
        pytest.skip("the OS-level red team needs root to create users and switch to them "
                    "(CI runs as root; `sudo pytest tests/test_redteam_os.py` includes it)")
    entries = [ensure_user(name) for name in [USER, *POOL]]
    with interpreter_reachable():
        yield entries


@pytest.fixture
def sandbox(users, monkeypatch):
    monkeypatch.setenv("PAGEDLAB_GRADE_USER", USER)
    monkeypatch.setenv("PAGEDLAB_GRADING_PLUGIN", str(API_OFF))
    private = [SOLUTIONS, ROOT / "pagedlab" / "grader" / "expected.json"]
    modes = {p: p.stat().st_mode for p in private}
    for p in private:
        p.chmod(0o700 if p.is_dir() else 0o600)
    yield USER
    for p, mode in modes.items():
        p.chmod(mode)


@pytest.fixture
def drop():
    """A folder every user may write, outside the private temporary folders: where an attack
    that wins leaves its proof."""
    folder = Path(tempfile.mkdtemp(prefix=".redteam-drop-", dir=ROOT))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _submission(tmp_path: Path, *, py: str = "", cu: str = "", honest: bool = False) -> Path:
    sub = tmp_path / "submission"
    if honest:  # the reference, every file
        shutil.copytree(SOLUTIONS, sub, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        sub.mkdir()
    source = SOLUTIONS if honest else EXERCISES
    (sub / "memory_manager.py").write_text((source / "memory_manager.py").read_text() + textwrap.dedent(py))
    (sub / "paged_attention.cu").write_text((source / "paged_attention.cu").read_text() + textwrap.dedent(cu))
    return sub


def _grade(sub: Path, tasks: list[str]) -> dict:
    return grade(str(sub), tasks=tasks, hidden=False, echo=lambda *a: None)


def _leftovers(uid: int) -> list[str]:
    found = []
    for top in PRIVATE_DIRS:
        for entry in os.scandir(top):
            try:
                if entry.stat(follow_symlinks=False).st_uid == uid:
                    found.append(entry.path)
            except OSError:
                pass
    return found


def _user_processes(name: str) -> str:
    deadline = time.monotonic() + 10  # SIGKILLed processes take a moment to be reaped
    while True:
        out = subprocess.run(["pgrep", "-u", name], capture_output=True, text=True).stdout.strip()
        if not out or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


# A kernel whose constructor (it runs when the runner loads the library, before any launch)
# opens the Python check process above it through /proc/<ppid>/mem, looks for the grader's
# record descriptor and opens an Internet socket; each success leaves a file in DROP.
PROC_MEM_KERNEL = r'''
extern "C" int open(const char*, int, ...);
extern "C" int close(int);
extern "C" int getppid(void);
extern "C" long write(int, const void*, unsigned long);
extern "C" long readlink(const char*, char*, unsigned long);
extern "C" int socket(int, int, int);
extern "C" void* dlopen(const char*, int);
static void pl_mark(const char* what) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", DROP, what);
  int fd = open(path, 0101, 0666);  // O_WRONLY | O_CREAT
  if (fd >= 0) { write(fd, "won\n", 4); close(fd); }
}
struct ParentMem { ParentMem() {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/mem", getppid());
  int fd = open(path, 02);  // O_RDWR: what writing code into the parent needs
  if (fd >= 0) { pl_mark("proc-mem-opened"); close(fd); }
  for (int n = 3; n < 64; ++n) {
    char link[64], target[512] = {0};
    snprintf(link, sizeof link, "/proc/self/fd/%d", n);
    if (readlink(link, target, sizeof target - 1) > 0 && strstr(target, "/io/record")) pl_mark("record-fd");
  }
  int s = socket(2, 1, 0);  // AF_INET, SOCK_STREAM
  if (s >= 0) { pl_mark("runner-socket"); close(s); }
  // An interpreter of its own in the runner, and any file on disk.
  if (dlopen(LIBPYTHON, 2)) pl_mark("libpython-loaded");  // RTLD_NOW
  int f = open("/etc/passwd", 0);
  if (f >= 0) { pl_mark("file-read"); close(f); }
} } parent_mem_instance;
'''


@sandboxed
def test_a_kernel_cannot_reach_the_python_process_above_it(sandbox, tmp_path, drop):
    import sysconfig

    libpython = Path(sysconfig.get_config_var("LIBDIR")) / str(sysconfig.get_config_var("LDLIBRARY"))
    kernel = PROC_MEM_KERNEL.replace("DROP", json.dumps(str(drop))).replace("LIBPYTHON", json.dumps(str(libpython)))
    sub = _submission(tmp_path, cu=kernel)
    results = _grade(sub, ["10"])
    output = results["tests"][0]["output"]
    assert "CompileError" not in output, output[-2000:]
    assert sorted(os.listdir(drop)) == [], output[-2000:]
    assert results["score"] == 0


PHONE_HOME = '''
def llm_init(pool_addr, pool_size):
    import socket
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            socket.create_connection((host, PORT), timeout=2).sendall(b"solutions?")
        except OSError as exc:
            print(f"network: {exc}")
    with open("/proc/net/dev") as f:  # the interfaces of the child's network namespace
        raise RuntimeError("interfaces: " + ",".join(sorted(l.split(":")[0].strip() for l in list(f)[2:])))
'''


def _connections(server: socket.socket) -> int:
    """How many connections `server` (a listener with a short timeout) has waiting; each is closed."""
    connected = 0
    while True:
        try:
            server.accept()[0].close()
            connected += 1
        except (TimeoutError, socket.timeout):
            return connected


@sandboxed
def test_a_submission_gets_no_network(sandbox, tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    results = _grade(_submission(tmp_path, py=PHONE_HOME.replace("PORT", str(port))), ["1"])
    connected = _connections(server)
    server.close()
    assert connected == 0, results["tests"][0]["output"][-1000:]
    assert results["score"] == 0
    from pagedlab.sandbox.process import net_namespace

    if net_namespace():  # a second wall where the machine allows it: only a loopback, down
        assert "interfaces: lo" in results["tests"][0]["output"], results["tests"][0]["output"][-1000:]


PLANT = '''
def llm_init(pool_addr, pool_size):
    import os
    for top in ("/tmp", "/var/tmp", "/dev/shm"):
        with open(os.path.join(top, "pagedlab-planted"), "wb") as f:
            f.write(b"x" * (1 << 20))
        os.makedirs(os.path.join(top, "pagedlab-planted-dir", "deep"), exist_ok=True)
    return None
'''

PEEK = '''
def llm_init(pool_addr, pool_size):
    import os
    seen = [os.path.join(top, n) for top in ("/tmp", "/var/tmp", "/dev/shm") for n in os.listdir(top)
            if "planted" in n]
    raise RuntimeError(f"planted files seen: {seen}")
'''


@sandboxed
def test_files_a_task_leaves_in_tmp_are_gone_for_the_next(sandbox, users, tmp_path):
    uid = pwd.getpwnam(USER).pw_uid
    for path in _leftovers(uid):  # an earlier run's, graded without private folders
        subprocess.run(["rm", "-rf", "--one-file-system", path], check=True)
    (tmp_path / "a").mkdir()
    results = _grade(_submission(tmp_path / "a", py=PLANT), ["1"])
    assert results["score"] == 0
    assert _leftovers(uid) == []
    (tmp_path / "b").mkdir()
    results = _grade(_submission(tmp_path / "b", py=PEEK), ["1"])
    assert "planted files seen: []" in results["tests"][0]["output"], results["tests"][0]["output"][-1500:]
    (tmp_path / "c").mkdir()
    results = _grade(_submission(tmp_path / "c", honest=True), ["1"])
    assert results["score"] == 8, results["tests"][0]["output"][-1500:]


# 120 processes in sessions of their own, spinning, while the check sleeps: the task's processes
# beside the check, which then fails. They leave the task's session and inherit its
# non-dumpable flag (their /proc folders are root's): only the task's cgroup still sees them.
SPINNERS = '''
def llm_init(pool_addr, pool_size):
    import os, time
    for _ in range(120):
        try:
            if os.fork() == 0:
                os.setsid()
                while True:
                    pass
        except OSError:
            break
    time.sleep(600)
'''


def _cli(sub: Path, out: Path, user: str, tasks: str, scale: str = "1") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PAGEDLAB_GRADE_USER": user,
           "PAGEDLAB_GRADING_PLUGIN": str(API_OFF), "PAGEDLAB_GRADE_TIME_SCALE": scale}
    return subprocess.Popen([sys.executable, "-m", "pagedlab", "grade", "--impl", str(sub), "--json", str(out),
                             "--tasks", tasks, "--no-hidden"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


@sandboxed
def test_spinning_processes_are_killed_and_a_classmate_beside_them_keeps_full_marks(sandbox, tmp_path):
    """A hostile job and an honest one at once, each under its own user (grade-class --jobs 2).
    The classmate's Task 6 needs seconds of CPU time that 120 spinners would stretch past a
    wall-clock limit; in its own cgroup it keeps its share of the CPU, and its limit is CPU time."""
    (tmp_path / "m").mkdir()
    (tmp_path / "a").mkdir()
    mallory = _cli(_submission(tmp_path / "m", py=SPINNERS), tmp_path / "m.json", POOL[0], "1")
    # Task 6's limit cut to 15 s (of CPU time), 3.5 times what it needs: a wall-clock limit that
    # short is hit beside the spinners.
    alice = _cli(_submission(tmp_path / "a", honest=True), tmp_path / "a.json", POOL[1], "1,6", scale="0.25")
    logs = [mallory.communicate(timeout=900)[0], alice.communicate(timeout=900)[0]]
    bad = json.loads((tmp_path / "m.json").read_text())
    good = json.loads((tmp_path / "a.json").read_text())
    assert bad["score"] == 0, logs[0][-1500:]
    assert good["score"] == 12, logs[1][-3000:]
    assert _user_processes(POOL[0]) == "", "a spinning process outlived its task"


SPIN = "import time\nend = time.time() + 600\nwhile time.time() < end:\n    pass\n"


@sandboxed
def test_an_honest_submission_keeps_full_marks_on_a_loaded_machine(sandbox, users, tmp_path, monkeypatch):
    """Time limits count CPU time: spinning processes of another user (other grading on the
    machine) slow the task down but cost it nothing. Task 6's limit is cut to 9 s, twice the
    CPU time it needs, so that a wall-clock limit would be hit under this load. Two runs here;
    ten, on Tasks 1, 6, 9 and 10 with hidden checks, are `benchmarks/bench_loaded_regrade.py`."""
    spinner = pwd.getpwnam(POOL[2])
    load = [subprocess.Popen([sys.executable, "-c", SPIN], user=spinner.pw_uid, group=spinner.pw_gid,
                             extra_groups=[], cwd="/", env={"PATH": os.defpath}) for _ in range(12)]
    try:
        monkeypatch.setenv("PAGEDLAB_GRADE_TIME_SCALE", "0.15")
        scores = []
        for run in range(2):
            (tmp_path / str(run)).mkdir()
            results = _grade(_submission(tmp_path / str(run), honest=True), ["6"])
            scores.append(results["score"])
            assert results["score"] == 4, results["tests"][0]["output"][-1500:]
        assert scores == [4, 4]
    finally:
        for proc in load:
            proc.kill()
            proc.wait()


# Without root: the seal and the CPU-time limit on their own.
SEALED_PARENT = r"""
import os, socket, sys
from pagedlab.sandbox import seal
if os.geteuid() == 0:  # root may open any process's memory: be a user (nobody)
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
    import ctypes  # a uid change clears dumpable; an exec as that user (the real child) sets it
    ctypes.CDLL(None).prctl(seal.PR_SET_DUMPABLE, 1, 0, 0, 0)
seal.seal()
found = []
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    found.append("inet socket")
except PermissionError:
    pass
socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
pid = os.fork()
if pid == 0:  # what a kernel's constructor in the runner would try on the process above it
    try:
        os.open(f"/proc/{os.getppid()}/mem", os.O_RDWR)
        os._exit(10)
    except PermissionError:
        os._exit(0)
_, status = os.waitpid(pid, 0)
if os.waitstatus_to_exitcode(status) != 0:
    found.append("/proc/<ppid>/mem")
print("open:", found)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="seccomp and PR_SET_DUMPABLE are Linux's")
def test_a_sealed_process_has_no_network_and_its_memory_is_closed_to_its_own_children():
    out = subprocess.run([sys.executable, "-c", SEALED_PARENT], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.stdout.strip() == "open: []", out.stdout + out.stderr
    # ...and unsealed, both are open (what the test would miss if it could not fail).
    unsealed = SEALED_PARENT.replace("seal.seal()", "pass")
    out = subprocess.run([sys.executable, "-c", unsealed], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.stdout.strip() == "open: ['inet socket', '/proc/<ppid>/mem']", out.stdout + out.stderr


# What a notebook's run may open: Jupyter's ZMQ over TCP, and the interface list libzmq reads.
SOCKETS = r"""
import errno, socket, sys
from pagedlab.sandbox import seal
if sys.argv[1] != "unsealed":
    seal.seal(inet=sys.argv[1] == "inet")
opened = []
for name, family, kind, proto in (("unix", 1, 1, 0), ("inet", 2, 1, 0), ("inet6", 10, 1, 0),
                                  ("netlink route", 16, 3, 0), ("netlink audit", 16, 3, 9)):
    try:
        socket.socket(family, kind, proto).close()
        opened.append(name)
    except OSError as exc:
        if exc.errno != errno.EPERM:  # not the filter's refusal (no IPv6 here...)
            opened.append(name)
print(opened)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="seccomp is Linux's")
def test_a_notebooks_filter_allows_internet_sockets_and_the_route_list_only():
    def opened(mode: str) -> str:
        out = subprocess.run([sys.executable, "-c", SOCKETS, mode], capture_output=True, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
        return out.stdout.strip() + out.stderr[-500:]

    everything = "['unix', 'inet', 'inet6', 'netlink route', 'netlink audit']"
    assert opened("unsealed") == everything
    assert opened("inet") == "['unix', 'inet', 'inet6', 'netlink route']"
    assert opened("checks") == "['unix']"


SEALED_SITE_PROBE = r"""
import ctypes, subprocess, sys
def status():
    seccomp = [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0]
    return f"seccomp={seccomp} dumpable={ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)}"
if sys.argv[1:] == ["child"]:
    print(status())
else:
    print(status(), subprocess.run([sys.executable, __file__, "child"], capture_output=True, text=True).stdout.strip())
"""


@pytest.mark.skipif(sys.platform != "linux", reason="seccomp and PR_SET_DUMPABLE are Linux's")
def test_every_python_process_of_a_notebook_run_seals_itself(tmp_path):
    """sealed_site/sitecustomize.py, first on the run's PYTHONPATH: each Python process seals
    itself, the one an execve made dumpable again included."""
    from pagedlab.sandbox.process import SEALED_SITE

    probe = tmp_path / "probe.py"
    probe.write_text(SEALED_SITE_PROBE)

    def run(seal: str) -> str:
        env = {**os.environ, "PYTHONPATH": SEALED_SITE, "PAGEDLAB_SEAL": seal}
        out = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, env=env, timeout=60)
        return out.stdout.strip() + out.stderr[-500:]

    assert run("inet") == "seccomp=2 dumpable=0 seccomp=2 dumpable=0"
    assert run("") == "seccomp=0 dumpable=1 seccomp=0 dumpable=1"


@pytest.mark.skipif(sys.platform != "linux", reason="CPU time is read from /proc")
def test_the_time_limit_is_cpu_time_and_a_sleeper_is_told_it_slept():
    from pagedlab.sandbox.policy import Policy
    from pagedlab.sandbox.process import run_limited

    policy = Policy(timeout=1, memory_bytes=2**32)
    spin = run_limited([sys.executable, "-c", "while True: pass"], policy, env={})
    assert spin.timed_out and not spin.wall_out and spin.cpu_seconds >= 1, spin
    sleep = run_limited([sys.executable, "-c", "import time; time.sleep(60)"], policy, env={})
    assert sleep.timed_out and sleep.wall_out and not sleep.starved and sleep.cpu_seconds < 1, sleep


# ------------------------------------------------------------------ grade --notebooks, sealed
# The submission's code as a notebook imports it (`pagedlab.load("memory_manager")`), in the
# Jupyter kernel of `grade --notebooks`: it tries root's TCP listener through the loopback and
# the machine's own address, the nbval/pytest process above it (/proc/<ppid>/mem and environ),
# and plants a file in /tmp. Each success leaves a file in DROP; "kernel-ran" says it ran at all.
NOTEBOOK_ATTACK = '''
import sys as _sys
if "ipykernel" in _sys.modules:
    import ctypes as _ctypes, os as _os, socket as _socket

    def _mark(what):
        with open(_os.path.join(DROP, what), "w") as f:
            f.write("won")

    _mark("kernel-ran")
    for _host in HOSTS:
        try:
            _socket.create_connection((_host, PORT), timeout=3).close()
            _mark("tcp-" + _host)
        except OSError:
            pass
    try:
        _os.close(_os.open(f"/proc/{_os.getppid()}/mem", _os.O_RDWR))
        _mark("parent-mem")
    except OSError:
        pass
    try:
        with open(f"/proc/{_os.getppid()}/environ", "rb") as f:
            if f.read():
                _mark("parent-environ")
    except OSError:
        pass
    if _ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 1:  # PR_GET_DUMPABLE: its own siblings could open it
        _mark("kernel-dumpable")
    with open("/proc/self/status") as f:
        if "Seccomp:\\t2" not in f.read():
            _mark("kernel-unfiltered")
    with open("/tmp/pagedlab-notebook-planted", "w") as f:
        f.write("x")
'''


def _host_addresses() -> list[str]:
    """The machine's own IPv4 addresses but the loopback's (where root's listener also waits)."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]
    return [a for a in found if not a.startswith("127.")]


@pytest.fixture
def notebook_folder(monkeypatch):
    """A course notebook copied to a folder the sandbox user may read, the only one graded."""
    from pagedlab.grader import cli

    folder = Path(tempfile.mkdtemp(prefix=".redteam-notebooks-", dir=ROOT))
    folder.chmod(0o755)
    for name in ("01_kv_cache_size.ipynb", "nbval.cfg"):
        shutil.copy(ROOT / "notebooks" / name, folder / name)
    monkeypatch.setattr(cli, "notebook_paths", lambda _folder=None, _submission=None: [folder / "01_kv_cache_size.ipynb"])
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _grade_notebook_attack(tmp_path: Path, drop: Path) -> tuple[dict, list[str], int]:
    """(results, the grader's output lines, connections root's listener took)."""
    uid = pwd.getpwnam(USER).pw_uid
    for path in _leftovers(uid):
        subprocess.run(["rm", "-rf", "--one-file-system", path], check=True)
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 0))
    server.listen(8)
    server.settimeout(0.2)
    hosts = ["127.0.0.1", *_host_addresses()]
    attack = (NOTEBOOK_ATTACK.replace("DROP", json.dumps(str(drop))).replace("HOSTS", json.dumps(hosts))
              .replace("PORT", str(server.getsockname()[1])))
    lines = []
    try:
        results = grade(str(_submission(tmp_path, py=attack, honest=True)), tasks=["1"], hidden=False,
                        notebooks=True, echo=lambda *a: lines.append(" ".join(map(str, a))))
        connected = _connections(server)
    finally:
        server.close()
    notebook = results["tests"][-1]
    assert notebook["name"].startswith("Notebook 01_kv_cache_size"), notebook
    assert notebook["status"] == "passed", notebook["output"]  # Jupyter's ZMQ works in there
    assert _leftovers(uid) == []
    return results, lines, connected


@sandboxed
def test_a_notebook_run_is_sealed_like_the_check_children(sandbox, users, tmp_path, drop, notebook_folder):
    results, lines, connected = _grade_notebook_attack(tmp_path, drop)
    assert sorted(os.listdir(drop)) == ["kernel-ran"], (sorted(os.listdir(drop)), results["tests"][-1]["output"])
    assert connected == 0
    assert any("in a network namespace of its own with only its loopback up" in line for line in lines), lines


@sandboxed
def test_without_namespaces_a_notebook_run_is_still_sealed_and_says_it_has_the_network(
        sandbox, users, tmp_path, drop, notebook_folder, monkeypatch):
    """A machine without CAP_SYS_ADMIN (a default Docker container): no PID, mount or network
    namespace, but every process of the run is still non-dumpable under seccomp, and the
    grader's output says that the notebook's code can reach the network."""
    from pagedlab.sandbox import process

    for probe in ("pid_namespace", "private_namespace", "net_namespace"):
        monkeypatch.setattr(process, probe, lambda: False)
    results, lines, connected = _grade_notebook_attack(tmp_path, drop)
    won = sorted(os.listdir(drop))
    assert [w for w in won if not w.startswith("tcp-")] == ["kernel-ran"], (won, results["tests"][-1]["output"])
    assert "tcp-127.0.0.1" in won and connected >= 1  # what the output below owns up to
    assert any("allows no network namespace: the notebook's code can reach the network" in line
               for line in lines), lines


# ------------------------------------------------------------------ leftovers that outlive a grading
# A C track library whose constructor (it runs in the runner, before any call) leaves System V
# shared memory (4 x 64 MB, mode 0666, a message written in it), a message queue, a semaphore set
# and a POSIX message queue behind: none belongs to a process, so killing the user's processes
# and sweeping /tmp leaves them all, readable by that pool user's next job.
IPC_LEFT_BEHIND = r'''
#include <fcntl.h>
#include <mqueue.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
__attribute__((constructor)) static void pl_leave_ipc(void)
{
    for (int i = 0; i < 4; i++) {
        int id = shmget(0x504c4100 + i, 64 << 20, IPC_CREAT | 0666);
        char *p = id >= 0 ? shmat(id, 0, 0) : (char *)-1;
        if (p != (char *)-1) {
            strcpy(p, "left behind by a grading");
            shmdt(p);
        }
    }
    msgget(0x504c4200, IPC_CREAT | 0666);
    semget(0x504c4300, 1, IPC_CREAT | 0666);
    mqd_t q = mq_open("/pagedlab-left-behind", O_CREAT | O_RDWR, 0666, NULL);
    if (q != (mqd_t)-1)
        mq_close(q);
}
'''


def _c_submission(folder: Path, extra: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "llm_memory.c").write_text("#define _GNU_SOURCE\n" + (EXERCISES / "llm_memory.c").read_text() + extra)
    return folder


def _ipc_of(uid: int) -> list[str]:
    """System V objects (shared memory, message queues, semaphore sets) owned or made by `uid`."""
    found = []
    for kind in ("shm", "msg", "sem"):
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        head = lines[0].split()
        for line in lines[1:]:
            row = dict(zip(head, line.split()))
            if uid in (int(row["uid"]), int(row["cuid"])):
                found.append(f"{kind} {row['key']} (id {row.get('shmid') or row.get('msqid') or row.get('semid')})")
    return found


def _posix_queues(uid: int) -> list[str]:
    """POSIX message queues of `uid`, listed through an mqueue file system of root's own."""
    where = Path(tempfile.mkdtemp(prefix="pagedlab-mq-"))
    try:
        subprocess.run(["mount", "-t", "mqueue", "none", str(where)], check=True)
        try:
            return sorted(e.name for e in os.scandir(where) if e.stat().st_uid == uid)
        finally:
            subprocess.run(["umount", str(where)], check=True)
    finally:
        where.rmdir()


def _remove_ipc_of(uid: int) -> None:
    for entry in _ipc_of(uid):
        kind, _, rest = entry.partition(" ")
        ident = rest.split("id ")[1].rstrip(")")
        subprocess.run(["ipcrm", {"shm": "-m", "msg": "-q", "sem": "-s"}[kind], ident], check=False)
    subprocess.run(["sh", "-c", "mkdir -p /tmp/pagedlab-mq-clean && mount -t mqueue none /tmp/pagedlab-mq-clean"
                    " && rm -f /tmp/pagedlab-mq-clean/pagedlab-left-behind; umount /tmp/pagedlab-mq-clean;"
                    " rmdir /tmp/pagedlab-mq-clean"], check=False)


@sandboxed
@pytest.mark.parametrize("namespaces", ["allowed", "refused"])
def test_ipc_objects_a_task_makes_are_gone_after_its_child(sandbox, users, tmp_path, monkeypatch, namespaces):
    """With namespaces each child has an IPC namespace of its own (its objects die with it);
    where the machine refuses them (no CAP_SYS_ADMIN: a default Docker container), root removes
    the user's System V objects and POSIX message queues after each child, as it sweeps /tmp."""
    from pagedlab.sandbox import process

    if namespaces == "refused":
        for probe in ("pid_namespace", "private_namespace", "net_namespace", "ipc_namespace"):
            monkeypatch.setattr(process, probe, lambda: False, raising=False)
    uid = pwd.getpwnam(USER).pw_uid
    _remove_ipc_of(uid)  # an earlier run's
    try:
        results = _grade(_c_submission(tmp_path / "sub", IPC_LEFT_BEHIND), ["1", "2"])
        outputs = [t["output"] for t in results["tests"]]
        assert not any("CCompileError" in o or "could not start" in o for o in outputs), outputs
        assert _ipc_of(uid) == [] and _posix_queues(uid) == [], (_ipc_of(uid), _posix_queues(uid))
    finally:
        _remove_ipc_of(uid)


# Code the job's user runs before a C task (here a grading plugin the child imports; on a grader
# without Landlock, the library's own constructor in an earlier runner; a notebook's kernel)
# writes a program of its own where the check child looks for pagedlab's C runner, in the job's
# cache: the child then runs it, unsealed, as the runner of every C call. It proves it ran by
# answering the runner's first record with an error of its own.
PLANT_RUNNER = '''
import os
from pathlib import Path
if os.getuid() != 0 and os.environ.get("PAGEDLAB_CACHE"):
    from pagedlab.engine import ctrack
    planted = Path(os.environ["PAGEDLAB_CACHE"]) / "c" / ctrack.runner_name()
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text("#!/bin/sh\\nexec PYTHON -S -c 'import os, struct; os.write(5, (struct.pack(\\"<IiiiQQQ\\", 2, "
                       "0, 0, 0, 0, 0, 0) + b\\"a planted runner ran, unsealed, as uid %d\\" % os.getuid())"
                       ".ljust(1280, bytes(1)))'\\n")
    planted.chmod(0o755)
'''


@sandboxed
def test_a_runner_planted_in_the_jobs_cache_is_never_run(sandbox, users, tmp_path, drop, monkeypatch):
    plugin = drop / "plant.py"  # where the sandbox user may read it
    plugin.write_text(PLANT_RUNNER.replace("PYTHON", os.path.realpath(sys.executable)))
    plugin.chmod(0o644)
    monkeypatch.setenv("PAGEDLAB_GRADING_PLUGIN", str(plugin))
    attack = _grade(_c_submission(tmp_path / "attack", ""), ["1"])
    assert not any("planted runner ran" in t["output"] for t in attack["tests"]), attack["tests"][0]["output"][-1500:]
    honest = tmp_path / "honest"
    honest.mkdir()
    shutil.copyfile(SOLUTIONS / "llm_memory.c", honest / "llm_memory.c")
    assert _grade(honest, ["1"])["score"] == 8  # root's runner, the plant in the cache or not


# Each seccomp filter on its own: the check child's (pagedlab.sandbox.seal) and the runners'
# (pagedlab/cuda/pl_seal.h). A runner is started by a sealed child, whose filter it inherits, but
# not only: a runner of the reference's run, a notebook's, or a grade without a sandbox user has
# its own filter alone, and so would any runner started from a filter that missed a call. Every
# call one filter refuses must be refused by the other (but for what a runner alone refuses: it
# runs no program and starts no process); each probe below calls them all under one filter.
def _refused_by_the_child_filter() -> dict:
    from pagedlab.sandbox import seal

    code = textwrap.dedent(f"""
        import ctypes, json, os, platform
        from pagedlab.sandbox import seal
        nr = seal._ARCH[platform.machine()][1]
        libc = ctypes.CDLL(None, use_errno=True)
        seal.seal()
        got = {{}}
        for name in {sorted(seal.ALWAYS_DENIED)!r}:
            ctypes.set_errno(0)
            libc.syscall(nr[name], 0, 0, 0, 0, 0)
            got[name] = ctypes.get_errno()
        print(json.dumps(got))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def _refused_by_the_runner_filter(tmp_path: Path) -> dict:
    from pagedlab.sandbox import seal

    calls = []
    for name in sorted(seal.ALWAYS_DENIED):
        calls.append(f'    errno = 0; syscall(__NR_{name}, 0, 0, 0, 0, 0); '
                     f'printf("%s\\"{name}\\": %d", first ? "" : ", ", errno); first = 0;')
    probe = tmp_path / "probe.c"
    probe.write_text("\n".join(["#define _GNU_SOURCE", "#include <stdio.h>", '#include "pl_seal.h"',
                                "int main(void) {", "    int first = 1;", "    if (!lock_down()) return 2;",
                                '    printf("{");', *calls, '    printf("}\\n");', "    return 0;", "}", ""]))
    header = ROOT / "pagedlab" / "cuda"
    subprocess.run(["cc", "-O1", "-I", str(header), str(probe), "-o", str(tmp_path / "probe")], check=True, timeout=120)
    out = subprocess.run([str(tmp_path / "probe")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, (out.returncode, out.stderr)
    return json.loads(out.stdout)


@pytest.mark.skipif(sys.platform != "linux" or shutil.which("cc") is None, reason="seccomp is Linux's; a C compiler")
def test_each_filter_refuses_every_call_the_other_refuses(tmp_path):
    """add_key and request_key (a user's keyring outlives all its processes: bytes left there
    reach the pool user's next job) were refused by the child's filter only."""
    from pagedlab.sandbox import seal

    expected = {name: 38 if name == "clone3" else 1 for name in seal.ALWAYS_DENIED}  # ENOSYS, EPERM
    assert _refused_by_the_child_filter() == expected
    assert _refused_by_the_runner_filter(tmp_path) == expected


def test_the_two_filters_list_the_same_calls():
    """The runner's header and the child's filter name the same calls (the header's extras are
    the runner's own: no program, no process, no socket of any family)."""
    from pagedlab.sandbox import seal

    header = (ROOT / "pagedlab" / "cuda" / "pl_seal.h").read_text()
    import re

    in_header = set(re.findall(r"PL_DENY\(__NR_(\w+),", header))
    assert in_header - seal.RUNNER_ONLY == set(seal.ALWAYS_DENIED)
    assert "PL_DENY(__NR_clone3, ENOSYS)" in header and "clone3" not in seal.DENIED  # libc's fallback
    assert in_header >= seal.RUNNER_ONLY
