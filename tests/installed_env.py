"""A course as classes run it: pagedlab installed from its wheel (not editable) into a fresh
environment every user can execute, a student course folder elsewhere, and real users.

Built once per test process (seconds with uv from bootstrap's cache, 2-3 minutes with pip) and
shared by the installed-library and JupyterHub tests, which `./course test` runs on one worker
(the "installed-venv" xdist group, conftest.py); removed at exit.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import bootstrap  # noqa: E402  (uv and the wheelhouses the course's own set-up uses)

# [dev] (in the lock) as the documented Colab cell and the hub image install it: notebook 08 compile-checks the
# kernel with NVRTC, which only [dev] brings.
EXTRA = ["nbclient", "jupyterhub>=5", "nbgitpuller>=1.2"]
MARKER = ".pagedlab-course"
# Imported by every student's processes here and absent from the course's venv: compiled once.
PER_USER_PACKAGES = ("pagedlab", "jupyterhub", "nbgitpuller")
# Found on root's PATH now: a student's environment (user_env) has no sbin folders.
RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"


def _world_executable(path: Path) -> bool:
    path = path.resolve()
    return all(os.stat(p).st_mode & 0o001 for p in [path, *path.parents])


def _in_roots_home(path: Path) -> bool:
    # The red team (group "users", which runs beside this one) makes root's home traversable
    # while it runs: a Python found there now would be locked away from the students later.
    return Path(pwd.getpwuid(0).pw_dir).resolve() in path.resolve().parents


def base_python() -> str:
    """A Python >= 3.10 that users other than root may run (a pyenv under /root is not one)."""
    for candidate in (getattr(sys, "_base_executable", sys.executable), shutil.which("python3"), "/usr/bin/python3"):
        if not candidate or not Path(candidate).exists() or not _world_executable(Path(candidate)):
            continue
        if _in_roots_home(Path(candidate)):
            continue
        ok = subprocess.run([candidate, "-c", "import sys, venv, ensurepip; assert sys.version_info >= (3, 10)"],
                            capture_output=True)
        if ok.returncode == 0:
            return candidate
    pytest.skip("no Python >= 3.10 with venv that other users can execute (install python3-venv)")


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create student users and switch to them (CI runs as root)")


def _install(env: Path, wheel: Path) -> None:
    """The locked packages (what a class installs), the wheel, then the hub's extras. With uv the
    locked files come from the cache bootstrap filled for this checkout: seconds, where pip takes
    minutes (and past the time limit when the machine is busy)."""
    py = env / "bin" / "python"
    uv = bootstrap.find_uv(env, sys.executable)
    if uv:
        links = [a for d in bootstrap.pip_find_links(py) for a in ("--find-links", d)]
        torch = bootstrap.torch_sources(bootstrap.pip_find_links(py))
        base = [uv, "pip", "install", "--quiet", "--python", str(py), *links]
        steps = [[*base, *torch, *(["--index-strategy", "unsafe-best-match"] if torch else []),
                  "--require-hashes", "-r", str(REPO / "requirements.lock")],
                 [*base, "--no-deps", str(wheel)],
                 [*base, "-c", str(REPO / "constraints.txt"), *EXTRA]]
    else:
        steps = [[str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                  "-c", str(REPO / "constraints.txt"), f"{wheel}[dev]", *EXTRA]]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:4])} ... failed:\n{proc.stderr[-3000:]}")


_BUILT: dict[str, object] = {}


def installed_env() -> Path:
    """bin/ folder of a fresh venv holding the pagedlab wheel and what students run notebooks with.
    Built once per test process, and a failed build is not retried (every later test fails with
    the first error at once). PAGEDLAB_TEST_ENV_BIN reuses one built earlier."""
    if os.environ.get("PAGEDLAB_TEST_ENV_BIN"):
        return Path(os.environ["PAGEDLAB_TEST_ENV_BIN"])
    if "bin" not in _BUILT:
        try:
            _BUILT["bin"] = _build()
        except Exception as exc:  # noqa: BLE001  (timeouts, installer errors: all reported alike)
            _BUILT["bin"] = exc
    if isinstance(_BUILT["bin"], Exception):
        pytest.fail(f"building the installed-wheel venv failed: {_BUILT['bin']}")
    return _BUILT["bin"]


def _build() -> Path:
    base = Path(tempfile.mkdtemp(prefix="pagedlab-installed-"))
    base.chmod(0o755)
    atexit.register(shutil.rmtree, base, True)
    wheels, env = base / "wheels", base / "env"
    uv = bootstrap.find_uv(env, sys.executable)
    # With uv: the same wheel and venv for about 3 CPU-s less each (pip's own start-up; ensurepip).
    if uv:
        build = [uv, "build", "--quiet", "--wheel", "--no-build-isolation", "--python", sys.executable, "-o"]
        create = [uv, "venv", "--quiet", "--seed", "--python", base_python()]  # --seed: _install asks pip
    else:
        build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w"]
        create = [base_python(), "-m", "venv"]
    subprocess.run([*build, str(wheels), str(REPO)], check=True, capture_output=True, timeout=300)
    wheel = next(wheels.glob("pagedlab-*.whl"))
    subprocess.run([*create, str(env)], check=True, timeout=300)
    _install(env, wheel)
    _bytecode(env)
    return env / "bin"


def _site_packages(python: Path | str) -> Path:
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())


def _bytecode(env: Path) -> None:
    """Give the venv the bytecode a class's install has (pip compiles what it installs; bootstrap
    compiles the venv where Python may not write it).

    The venv is root's and its students may not write into it: without bytecode every student
    process compiled what it imported again (a doctor 11.7 -> 6.0 CPU-s, the hub's test 49 -> 37).
    The course's own venv holds the same files (uv links both from its cache: same size and time,
    so its .pyc are valid here) and they are linked, not compiled again. Of what it lacks, only
    the packages every student process imports are compiled (the wheel, the hub's single-user
    server and nbgitpuller); the hub's own (sqlalchemy, alembic...) are imported once, by root.
    A .pyc that does not match its source is ignored by Python, never wrong."""
    here, there = _site_packages(sys.executable), _site_packages(env / "bin" / "python")
    for cache in here.rglob("__pycache__"):
        target = there / cache.relative_to(here)
        if not target.parent.is_dir() or target.exists():
            continue
        target.mkdir()
        for pyc in cache.iterdir():
            try:
                os.link(pyc, target / pyc.name)
            except OSError:  # another filesystem
                shutil.copy2(pyc, target / pyc.name)
    every_user = [str(there / name) for name in PER_USER_PACKAGES if (there / name).is_dir()]
    subprocess.run([str(env / "bin" / "python"), "-m", "compileall", "-q", "-j", "0", *every_user],
                   stdout=subprocess.DEVNULL, timeout=900)


def make_student_course(folder: Path, *, solved: bool = False) -> Path:
    """A student edition's course folder: exercises/ (stubs, or the solutions when `solved`),
    the numbered notebooks, the marker. No solutions/ and no library source."""
    (folder / "exercises").mkdir(parents=True)
    (folder / "notebooks").mkdir()
    source = REPO / ("solutions" if solved else "exercises")
    for path in source.iterdir():
        if path.is_file():
            shutil.copy2(path, folder / "exercises" / path.name)
    for path in (REPO / "notebooks").iterdir():
        if path.suffix in (".ipynb", ".cfg") or path.name.endswith(".py"):
            shutil.copy2(path, folder / "notebooks" / path.name)
    (folder / MARKER).write_text('edition = "student"\n')
    return folder


def create_user(name: str, home: Path) -> pwd.struct_passwd:
    """A student account with a private home (700: other students may not read it)."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash", name],
                       check=True, capture_output=True)
    entry = pwd.getpwnam(name)
    Path(entry.pw_dir).chmod(0o700)
    return entry


def remove_user(name: str) -> None:
    subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)  # that user's processes only
    subprocess.run(["userdel", "--remove", name], capture_output=True)


def user_env(bin_dir: Path, home: str, **extra: str) -> dict:
    """What a student's own shell has: no PAGEDLAB_IMPL, no PAGEDLAB_COURSE, the shared env first."""
    return {"HOME": home, "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
            "MPLBACKEND": "Agg", **extra}


def chown_tree(path: Path, entry: pwd.struct_passwd) -> None:
    for folder, _dirs, files in os.walk(path):
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        for name in files:
            os.chown(os.path.join(folder, name), entry.pw_uid, entry.pw_gid)
