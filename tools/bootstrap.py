#!/usr/bin/env python3
"""Create or update the course's virtual environment (`./course` runs this before anything else).

Stdlib only: it runs on the student's bare Python, before anything is installed.

Why uv: on the 2-core course machine pip needs minutes to download and unpack the course's
~130 packages; uv does the same from `requirements.lock` several times faster, and from a warm
cache in seconds. uv is used from PATH, else pip-installed once into ~/.cache/pagedlab/uv (one
small wheel, reused by every clone), else into the venv; if all fail, pip does the whole
install, from the same lock.

Why a lock: every student, CI and the grader image get the same versions (hash-checked), so a
failure seen by one is reproducible by the others. The lock targets the course machine (CPython
3.11 on Linux x86_64, torch's CPU build); on any other Python or platform the install resolves
from pyproject.toml + constraints.txt instead, and `pagedlab doctor` reports the drift.

Environment: PAGEDLAB_INSTALLER=uv|pip forces one installer (the set-up benchmark compares them);
UV_CACHE_DIR / PIP_CACHE_DIR choose the package caches as usual.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
CONSTRAINTS = ROOT / "constraints.txt"
LAB_SETTINGS = ROOT / "pagedlab" / "lab"
# The Python and platform requirements.lock was compiled for (tools/lock.py keeps them in step).
LOCK_PYTHON = (3, 11)
LOCK_PLATFORM = ("linux", "x86_64")
# torch's CPU wheels (PyPI's Linux wheel is the multi-GB CUDA build). Used only when no local
# wheelhouse (pip's find-links) already holds the locked torch.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


_BEGAN = time.monotonic()


def say(msg: str) -> None:
    """One line per step of the set-up, with the time since it began: a first install takes a
    minute or more, and a silent minute reads as a hang."""
    print(f"==> [{time.monotonic() - _BEGAN:4.0f} s] {msg}", flush=True)


def locked_count() -> int:
    """How many packages requirements.lock pins (said before the long step)."""
    return len(re.findall(r"^[A-Za-z0-9][\w.\-]*==", LOCK.read_text(), re.M)) if LOCK.exists() else 0


def run(cmd: list[str], **kw) -> None:
    subprocess.run([str(c) for c in cmd], check=True, **kw)


# Bumped when the install steps change, so existing venvs get the new step on the next run.
STEPS = "bytecode-2"


def fingerprint(installer: str) -> str:
    """What the venv was installed from, and how; a change re-runs the install."""
    h = hashlib.sha256(installer.encode() + STEPS.encode())
    for f in (LOCK, ROOT / "pyproject.toml", CONSTRAINTS):
        h.update(f.read_bytes() if f.exists() else b"-")
    return h.hexdigest()


def lock_applies(py: Path) -> bool:
    probe = "import sys, platform; print(sys.version_info[:2] == %r and sys.platform.startswith(%r) and platform.machine() == %r)"
    out = subprocess.run([str(py), "-c", probe % (LOCK_PYTHON, *LOCK_PLATFORM)],
                         capture_output=True, text=True).stdout.strip()
    return LOCK.exists() and out == "True"


def pip_find_links(py: Path) -> list[str]:
    """Local wheelhouses pip is configured with (uv reads no pip config, so it is handed these)."""
    links = os.environ.get("PIP_FIND_LINKS", "").split()
    out = subprocess.run([str(py), "-m", "pip", "config", "list"], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith("find-links"):
            links += value.strip().strip("'\"").split()
    dirs = []
    for link in links:
        path = link[len("file://"):] if link.startswith("file://") else link
        if os.path.isdir(path) and path not in dirs:
            dirs.append(path)
    return dirs


def locked_version(name: str) -> str | None:
    if not LOCK.exists():
        return None
    m = re.search(rf"^{re.escape(name)}==(\S+)", LOCK.read_text(), re.M)
    return m.group(1) if m else None


def torch_sources(wheelhouses: list[str]) -> list[str]:
    """Installer options that make the locked CPU torch findable."""
    pin = re.search(r"^torch==(\S+)", CONSTRAINTS.read_text(), re.M)
    version = locked_version("torch") or (pin.group(1) if pin else "")
    local = any(re.match(rf"torch-{re.escape(version)}(\+cpu)?-", f)
                for d in wheelhouses for f in os.listdir(d))
    return [] if local else ["--extra-index-url", TORCH_CPU_INDEX]


def uv_tool_dir() -> Path:
    """Where bootstrap keeps the uv it pip-installed, shared by every clone of the course."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "pagedlab" / "uv"


def _runs(uv: str) -> bool:
    try:
        return subprocess.run([uv, "--version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_uv(venv: Path, python: str) -> str | None:
    """uv from PATH, the venv or bootstrap's tool folder; else pip-install it there. None: no uv.

    The tool folder (~/.cache/pagedlab/uv) lets a second clone skip both `pip install uv` and
    pip's slow venv creation: uv makes the venv too.
    """
    tool = uv_tool_dir() / "bin" / "uv"
    for uv in (shutil.which("uv"), venv / "bin" / "uv", tool):
        if uv and os.access(uv, os.X_OK) and _runs(str(uv)):
            return str(uv)
    say("installing uv (pip install uv)")
    shutil.rmtree(uv_tool_dir(), ignore_errors=True)
    for cmd in ([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                 "--target", str(uv_tool_dir()), "uv"],
                [venv / "bin" / "python", "-m", "pip", "install", "--quiet",
                 "--disable-pip-version-check", "uv"]):
        if not os.path.exists(cmd[0]):
            continue  # the venv does not exist yet
        if subprocess.run([str(c) for c in cmd], stderr=subprocess.DEVNULL).returncode == 0:
            for uv in (tool, venv / "bin" / "uv"):
                if uv.exists() and _runs(str(uv)):
                    return str(uv)
    return None


def install(venv: Path, installer: str, uv: str | None) -> str:
    py = venv / "bin" / "python"
    wheelhouses = pip_find_links(py) if (venv / "bin" / "pip").exists() else []
    use_lock = lock_applies(py)
    if uv is None and installer in ("auto", "uv"):
        uv = find_uv(venv, sys.executable)  # the venv exists now: pip inside it is a last resort
    if uv is None and installer == "uv":
        sys.exit("PAGEDLAB_INSTALLER=uv, but uv could not be found or installed")
    if not use_lock:
        say(f"requirements.lock is for CPython {'.'.join(map(str, LOCK_PYTHON))} on "
            f"{'/'.join(LOCK_PLATFORM)}; resolving from pyproject.toml + constraints.txt instead")
    links = [a for d in wheelhouses for a in ("--find-links", d)]
    what = f"the {locked_count()} packages of requirements.lock" if use_lock else "the course's packages"
    if uv:
        say(f"installing {what} with uv (torch's CPU build, JupyterLab, ...; the first time downloads "
            "them, about 500 MB: a minute or two, longer on a slow connection; later clones reuse uv's cache)")
        base = [uv, "pip", "install", "--quiet", "--python", py, *links]
        if use_lock:
            extra = torch_sources(wheelhouses)
            if extra:
                extra += ["--index-strategy", "unsafe-best-match"]
            run([*base, *extra, "--require-hashes", "-r", LOCK])
            say("installing pagedlab itself from this folder (editable: your exercises/ stay where they are)")
            run([*base, "--no-deps", "-e", ROOT])
        else:
            run([*base, "-c", CONSTRAINTS, "-e", f"{ROOT}[dev]"])
        return "uv"
    say(f"installing the course's packages with pip{' from requirements.lock' if use_lock else ''} "
        "(uv was not available: this takes a few minutes)")
    base = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *links]
    if os.environ.get("PAGEDLAB_COMPILE_BYTECODE") == "0":
        base.append("--no-compile")  # pip compiles every module it installs unless told: the same step
    if use_lock:
        # --no-deps: the lock already lists every package. Without it, the pip a Python ships
        # (23.x with 3.11) resolves the dependencies again, and an extra such as
        # jsonschema[format-nongpl]>=4.18.0 counts as an unpinned requirement in hash mode.
        run([*base, *torch_sources(wheelhouses), "--no-deps", "--require-hashes", "-r", LOCK])
        run([*base, "--no-deps", "-e", ROOT])
    else:
        run([*base, "-c", CONSTRAINTS, "-e", f"{ROOT}[dev]"])
    return "pip"


# Packages no course process imports (see compile_bytecode), as compileall's -x pattern.
UNUSED_PACKAGES = r"/site-packages/(sympy|networkx)/"


def compile_bytecode(venv: Path) -> None:
    """Compile the venv's packages to bytecode once, when Python may not cache it by itself.

    With PYTHONDONTWRITEBYTECODE set (CI images, some lab machines) and a venv installed by uv
    (which writes no .pyc), every process compiled torch's 2,300 modules again: `import torch`
    cost 5.5 CPU-s instead of 2.4, in every check process and notebook kernel. Compiling them
    once costs under a minute of CPU. PAGEDLAB_COMPILE_BYTECODE=1/0 forces the step on/off
    (off also stops pip from compiling what it installs: the pip fallback test asks for no bytecode).

    sympy and networkx are left out (12 CPU-s of it): torch installs them for its
    graph compiler (torch.compile), which the course never calls; no course process imports
    them, and one that did would still work, compiling them in memory.
    """
    wanted = os.environ.get("PAGEDLAB_COMPILE_BYTECODE", "")
    if wanted == "0" or (wanted != "1" and not os.environ.get("PYTHONDONTWRITEBYTECODE")):
        return  # Python writes each module's bytecode the first time it imports it
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    say("compiling the packages to bytecode (Python may not cache it here: PYTHONDONTWRITEBYTECODE)")
    # Not check=True: a few packages ship files for other Python versions that do not compile.
    subprocess.run([str(py), "-m", "compileall", "-q", "-j", "0", "-x", UNUSED_PACKAGES, purelib],
                   stdout=subprocess.DEVNULL)
    cache_pytest_plugins(py)


def cache_pytest_plugins(py: Path) -> None:
    """Let pytest cache its assertion-rewritten plugins (hypothesis, anyio, xdist, nbval...).

    pytest rewrites every plugin package it loads and keeps the result in its own .pyc, never
    the one compileall wrote; under PYTHONDONTWRITEBYTECODE it redoes that in every pytest process:
    1.1 CPU-s each, and a grade with --notebooks starts one per notebook. One pytest run here
    with bytecode writing on stores them; later runs read them whatever the setting.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as empty:
        ini = Path(empty) / "pytest.ini"
        ini.write_text("[pytest]\n")  # nothing of the checkout's configuration
        # Exit code 5 (no tests) is the expected end; a failure only leaves the cache unwritten.
        subprocess.run([str(py), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "-c", str(ini), "--rootdir", empty, empty],
                       cwd=empty, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def install_lab_settings(venv: Path) -> None:
    """The course's quiet JupyterLab, inside the venv only (the student's ~/.jupyter is untouched).

    share/jupyter/lab/settings/overrides.json changes JupyterLab's defaults (no news, no update
    check); etc/jupyter/jupyter_lab_config.json holds the server side, read by any `jupyter lab`
    started from this venv, so the venv is quiet even when not started through ./course;
    etc/jupyter/labconfig/page_config.json spares every page load a build check (0.8 CPU-s).
    """
    etc = venv / "etc" / "jupyter"
    targets = {
        LAB_SETTINGS / "overrides.json": venv / "share" / "jupyter" / "lab" / "settings" / "overrides.json",
        LAB_SETTINGS / "jupyter_lab_config.json": etc / "jupyter_lab_config.json",
        LAB_SETTINGS / "page_config.json": etc / "labconfig" / "page_config.json",
    }
    for src, dst in targets.items():
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 10):
        sys.exit(f"pagedlab needs Python >= 3.10 (this is {platform.python_version()}); set PYTHON=python3.x")
    venv = Path(argv[1] if len(argv) > 1 else ".venv").absolute()
    installer = os.environ.get("PAGEDLAB_INSTALLER", "auto")
    if installer not in ("auto", "uv", "pip"):
        sys.exit(f"PAGEDLAB_INSTALLER must be uv, pip or unset, not {installer!r}")
    stamp = venv / ".pagedlab-installed"
    py = venv / "bin" / "python"
    if py.exists() and stamp.exists():
        done = stamp.read_text().split()
        if len(done) == 2 and done[1] == fingerprint(done[0]) and installer in ("auto", done[0]):
            install_lab_settings(venv)
            return 0
    uv = find_uv(venv, sys.executable) if installer != "pip" else None
    if not py.exists():
        say(f"creating {venv.name} with {'uv' if uv else 'venv'}")
        if uv:
            run([uv, "venv", "--quiet", "--seed", "--python", sys.executable, venv])
        else:
            run([sys.executable, "-m", "venv", venv])
    used = install(venv, installer, uv)
    compile_bytecode(venv)
    say("writing the course's quiet JupyterLab settings into the venv")
    install_lab_settings(venv)
    stamp.write_text(f"{used} {fingerprint(used)}\n")
    say(f"{venv.name} is ready; later runs skip all of this")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
