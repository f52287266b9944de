"""Set-up: the lock every install uses, drift reporting, and the quiet JupyterLab settings.

The slow end-to-end timings (fresh clone, uv vs pip) are in benchmarks/bench_setup.py; the
browser's view is tests/test_browser.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
sys.path.insert(0, str(ROOT / "tools"))

import bootstrap  # noqa: E402

from pagedlab import doctor, lockcheck  # noqa: E402

REGENERATE = "regenerate it: python3 tools/lock.py"


def _lock_pins() -> dict[str, str]:
    return lockcheck.read_lock(LOCK.read_text())


def test_the_lock_pins_the_cpu_torch_of_constraints_txt():
    pin = re.search(r"^torch==(\S+)", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    assert _lock_pins()["torch"] == f"{pin}+cpu", f"torch in the lock is not the CPU build of {pin}"


def test_every_locked_package_is_hash_checked():
    blocks = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text().split("\n", 2)[2])
    unhashed = [b.split()[0] for b in blocks if "==" in b and "--hash=sha256:" not in b]
    assert not unhashed, f"lines without a hash: {unhashed}"


def test_the_lock_satisfies_every_dependency_in_pyproject():
    """Fails when a branch adds or tightens a dependency without regenerating the lock."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = {**default_environment(), "python_version": "3.11", "python_full_version": "3.11.0",
           "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}
    pins = _lock_pins()
    wrong = []
    for line in project["dependencies"] + project["optional-dependencies"]["dev"]:
        req = Requirement(line)
        if req.marker and not req.marker.evaluate({**env, "extra": ""}):
            continue
        got = pins.get(lockcheck.canonical(req.name))
        if got is None or not req.specifier.contains(got, prereleases=True):
            wrong.append(f"{line} (lock: {got or 'absent'})")
    assert not wrong, f"requirements.lock is stale for {wrong}; {REGENERATE}"


def test_importing_nbformat_builds_no_grammar():
    """jsonschema 4.25+ imports rfc3987-syntax, which builds Lark parsers: 2.2 CPU-s in every
    process importing nbformat (each pytest, nbval run, Jupyter server, doctor). constraints.txt
    holds jsonschema<4.25; this fails if an upgrade or a new dependency brings the parsers back."""
    import jsonschema  # noqa: F401  (both already loaded by the nbval plugin: free here)
    import nbformat  # noqa: F401

    loaded = {"rfc3987_syntax", "lark"} & set(sys.modules)
    assert not loaded, f"importing nbformat loaded {loaded}; see constraints.txt's jsonschema pin"


def test_bootstrap_and_doctor_agree_on_the_locks_target():
    assert bootstrap.LOCK_PYTHON == lockcheck.LOCK_PYTHON
    assert bootstrap.LOCK_PLATFORM == lockcheck.LOCK_PLATFORM


def test_conda_and_the_grader_install_the_same_lock():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    assert f"python={'.'.join(map(str, lockcheck.LOCK_PYTHON))}" in conda
    # environment.yml takes ranges (it must solve on macOS and Windows too): the lock's versions
    # must lie inside them, so conda users and the grader run the same releases where it matters.
    from packaging.version import Version

    pins = _lock_pins()
    for spec in conda:
        name, _, low = spec.partition(">=")
        name = {"pytorch": "torch"}.get(name.strip(), name.strip())
        if low and name in pins:
            assert Version(pins[name].split("+")[0]) >= Version(low.split()[0]), (name, pins[name], low)
    setup = (ROOT / "grading" / "setup.sh").read_text()
    assert "tools/bootstrap.py" in setup and 'usable_python.sh" nobody 3.11' in setup


def _lock_row(monkeypatch, lock: Path) -> str:
    """The doctor's lock row, as `pagedlab doctor` prints it. Built in this process: the row reads
    only the lock and the installed versions, and the whole command (with this row ok on the
    course's venv) runs in test_doctor_reports_every_piece_on_a_complete_machine."""
    monkeypatch.setenv("PAGEDLAB_LOCK", str(lock))
    row = doctor.lock_row()
    # A drift is worth knowing, not a broken machine: the course may well still work.
    assert row.status != doctor.MISSING, row
    return doctor.format_table([row]).splitlines()[-1]


def test_doctor_names_each_package_that_drifted_from_the_lock(tmp_path, monkeypatch):
    installed = _lock_pins()["numpy"]
    text = re.sub(r"^numpy==\S+", "numpy==1.0.0", LOCK.read_text(), flags=re.M)
    text = re.sub(r"^pyyaml==\S+", "pyyaml==0.1", text, flags=re.M)
    (tmp_path / "requirements.lock").write_text(text)
    row = _lock_row(monkeypatch, tmp_path / "requirements.lock")
    if not lockcheck.lock_applies():
        assert "the lock is for CPython 3.11" in row
        return
    assert "drift" in row and "2 differ" in row, row
    assert f"numpy {installed} (lock 1.0.0)" in row and "pyyaml" in row, row
    assert "./course test" in row, "the row must say how to get back to the lock"


@pytest.mark.xdist_group("course-venv")  # bootstrap on the checkout's .venv (conftest.py)
def test_bootstrap_returns_at_once_when_nothing_changed():
    """The everyday `./course open`: no installer runs, nothing printed."""
    venv = Path(sys.prefix)
    assert (venv / ".pagedlab-installed").exists(), "run the tests through ./course test"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bootstrap.py"), str(venv)],
                          capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr
    assert elapsed < 5, f"the up-to-date check took {elapsed:.1f} s"


@pytest.mark.xdist_group("course-venv")  # bootstrap on the checkout's .venv (conftest.py)
def test_lab_settings_live_in_the_venv_not_in_the_students_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    venv = Path(sys.prefix)
    subprocess.run([sys.executable, str(ROOT / "tools" / "bootstrap.py"), str(venv)], check=True,
                   env={**os.environ, "HOME": str(home)}, timeout=60)
    overrides = venv / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    assert json.loads(overrides.read_text()) == json.loads((ROOT / "pagedlab/lab/overrides.json").read_text())
    assert (venv / "etc" / "jupyter" / "jupyter_lab_config.json").exists()
    assert not any(home.iterdir()), f"bootstrap wrote into $HOME: {list(home.iterdir())}"


@pytest.mark.xdist_group("course-venv")  # bootstrap on the checkout's .venv (conftest.py)
def test_course_jupyterlab_fetches_no_news_and_checks_no_updates(course_lab):
    """What the browser would get: the server's page config and the notification settings."""
    _, page = course_lab.get("lab")
    config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>', page.decode(), re.S).group(1))
    assert config["news"] == {"disabled": True}, config.get("news")
    # No page load asks the server whether JupyterLab needs a rebuild (node, 0.8 CPU-s each time).
    assert config["buildCheck"] is False and config["buildAvailable"] is False, config
    _, body = course_lab.get("lab/api/settings/@jupyterlab/apputils-extension:notification")
    defaults = {k: v.get("default") for k, v in json.loads(body)["schema"]["properties"].items()}
    # overrides.json turns JupyterLab's defaults into the course's (a student's choice still wins)
    assert defaults["fetchNews"] == "false" and defaults["checkForUpdates"] is False, defaults
    _, body = course_lab.get("lab/api/update")
    assert json.loads(body)["notification"] is None  # the never-checking update checker


def test_the_course_venv_holds_torchs_bytecode():
    """Where Python may not write bytecode (PYTHONDONTWRITEBYTECODE, or a venv its user cannot
    write), bootstrap compiles it: without it every check process compiled torch anew."""
    import torch

    cached = Path(torch.__file__).parent / "__pycache__"
    assert cached.is_dir() and any(cached.glob("__init__.*.pyc")), f"no bytecode in {cached}"
    assert 'PAGEDLAB_COMPILE_BYTECODE="${PAGEDLAB_COMPILE_BYTECODE:-1}"' in (ROOT / "grading" / "setup.sh").read_text()


def test_the_course_venv_holds_pytests_rewritten_plugins():
    """pytest reads the plugins it rewrites (hypothesis first) from its own .pyc files; where
    Python may not write bytecode, bootstrap stores them, or every pytest process (one per notebook
    in a grade with --notebooks) rewrote them again: 1.1 CPU-s each."""
    import hypothesis

    cached = Path(hypothesis.__file__).parent / "__pycache__"
    assert any(cached.glob("__init__.*-pytest-*.pyc")), f"no pytest-rewritten bytecode in {cached}"


def _ci_run_with_fake_apt(tmp_path, apt_exit: int, apt_seconds: int, have=()) -> subprocess.CompletedProcess:
    """.ci/run in a copy whose PATH has no Chromium nor LibreOffice (but the commands in `have`),
    an apt-get taking `apt_seconds` per call whose install exits `apt_exit`, and stand-ins for
    bootstrap and ./course that only say they ran (bootstrap also whether apt had finished)."""
    (tmp_path / ".ci").mkdir(parents=True)
    shutil.copy2(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "bootstrap.py").write_text(
        "import os\nprint('bootstrap ran', 'after apt' if os.path.exists('apt-done') else 'while apt ran')\n")
    fake = tmp_path / "bin"
    fake.mkdir()
    scripts = {"course": "echo course test ran", "bin/id": "echo 0",
               "bin/apt-get": f'echo "apt-get $*"; sleep {apt_seconds}; [ "$1" = update ] && exit 0; '
                              f'touch apt-done; [ {apt_exit} = 0 ] || {{ echo "E: apt says {apt_exit}" >&2; exit {apt_exit}; }}',
               **{f"bin/{command}": "true" for command in have}}
    for name, body in scripts.items():
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    for tool in ("bash", "sh", "cat", "mktemp", "dirname", "sleep"):
        (fake / tool).symlink_to(shutil.which(tool))
    env = {"PATH": str(fake), "PYTHON": sys.executable, "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    return subprocess.run([str(fake / "bash"), str(tmp_path / ".ci" / "run")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def test_ci_run_installs_chromium_and_libreoffice_beside_the_venv_and_stops_when_apt_fails(tmp_path):
    ok = _ci_run_with_fake_apt(tmp_path / "ok", 0, apt_seconds=1)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "bootstrap ran while apt ran" in ok.stdout, ok.stdout  # side by side, not one after the other
    assert ok.stdout.index("bootstrap ran") < ok.stdout.index("course test ran"), ok.stdout
    failed = _ci_run_with_fake_apt(tmp_path / "failed", 100, apt_seconds=0)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "bootstrap ran" in failed.stdout and "course test ran" not in failed.stdout
    assert "E: apt says 100" in failed.stderr
    assert "install -y -qq chromium chromium-driver slurm-wlm munge" in failed.stderr, failed.stderr
    assert "installing chromium chromium-driver libreoffice-calc-nogui slurm-wlm munge failed" in failed.stderr
    # Chromium and Slurm there, LibreOffice not: only LibreOffice, without its recommends
    calc = _ci_run_with_fake_apt(tmp_path / "calc", 100, apt_seconds=0,
                                 have=("chromium", "chromedriver", "slurmctld", "munged"))
    assert "install -y -qq --no-install-recommends libreoffice-calc-nogui" in calc.stderr, calc.stderr
    assert "install -y -qq chromium" not in calc.stderr and "slurm-wlm" not in calc.stderr, calc.stderr


def _python_with_its_own_pip(version: tuple[int, int]) -> str | None:
    """A python{version} outside any venv that can make a venv with the pip it bundles."""
    for candidate in (f"/usr/bin/python{version[0]}.{version[1]}", shutil.which(f"python{version[0]}.{version[1]}")):
        if candidate and os.access(candidate, os.X_OK) and subprocess.run(
                [candidate, "-c", "import ensurepip, venv"], capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.mark.integration
@pytest.mark.xdist_group("pip-fallback")  # minutes of download and unpacking: started first (conftest.py)
def test_the_pip_fallback_installs_the_lock_with_the_pip_the_oldest_locked_python_ships(tmp_path):
    """PAGEDLAB_INSTALLER=pip on a fresh venv of the lock's Python (3.11, the oldest one the lock
    is for; older ones resolve from pyproject.toml without hashes) and the pip it bundles (23.x):
    that pip read the lock's dependencies again and refused an extra as unpinned in hash mode."""
    python = _python_with_its_own_pip(bootstrap.LOCK_PYTHON)
    if python is None:
        pytest.skip(f"no python{'.'.join(map(str, bootstrap.LOCK_PYTHON))} with ensurepip here")
    venv = tmp_path / "venv"
    env = {**os.environ, "PAGEDLAB_INSTALLER": "pip", "PAGEDLAB_COMPILE_BYTECODE": "0"}
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run([python, str(ROOT / "tools" / "bootstrap.py"), str(venv)],
                          capture_output=True, text=True, env=env, timeout=1800)
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "is ignored: it is neither" not in line]
    assert proc.returncode == 0, "\n".join(said[-30:])
    assert "installing the course's packages with pip from requirements.lock" in proc.stdout, proc.stdout
    py = venv / "bin" / "python"
    bundled = subprocess.run([python, "-c", "import ensurepip; print(ensurepip.version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    used = subprocess.run([py, "-m", "pip", "--version"], capture_output=True, text=True, check=True).stdout
    assert used.split()[1] == bundled, f"the venv's pip is not the bundled {bundled}: {used}"
    drift = subprocess.run([py, "-c", "from pagedlab import lockcheck; import sys; "
                            f"print(lockcheck.drift(lockcheck.read_lock(open({str(LOCK)!r}).read())))"],
                           capture_output=True, text=True, env=env)
    assert drift.returncode == 0 and drift.stdout.strip() == "[]", drift.stdout + drift.stderr
    check = subprocess.run([py, "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    stamp = (venv / ".pagedlab-installed").read_text().split()
    assert stamp[0] == "pip", stamp
