"""Binder builds the student edition with repo2docker from its environment.yml. Render the
Dockerfile (no Docker needed: `--no-build --debug`) and check it installs what the course needs."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parent.parent
# What the student edition carries at its top (pagedlab release); repo2docker reads environment.yml.
EDITION = ["environment.yml", "pyproject.toml", "constraints.txt", "README.md", ".pagedlab-course",
           "exercises", "notebooks", "pagedlab"]


def _repo2docker() -> Path:
    found = shutil.which("repo2docker")
    if found:
        return Path(found)
    env = Path.home() / ".cache" / "pagedlab-tests" / "repo2docker"
    exe = env / "bin" / "repo2docker"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
        proc = subprocess.run([str(env / "bin" / "pip"), "install", "--quiet", "jupyter-repo2docker"],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            pytest.skip(f"pip could not install jupyter-repo2docker: {proc.stderr[-500:]}")
    return exe


def test_repo2docker_builds_the_cpu_environment_with_the_course_installed(tmp_path):
    edition = tmp_path / "pagedlab-student"
    edition.mkdir()
    for name in EDITION:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, edition / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, edition / name)
    proc = subprocess.run([str(_repo2docker()), "--no-build", "--debug", str(edition)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dockerfile = proc.stdout + proc.stderr
    assert "Building conda environment for python=3.11" in dockerfile
    # environment.yml installs pagedlab from the repository (`-e .`), so the repository must be
    # copied in before the environment is built from it.
    copy_at = dockerfile.index("COPY --chown=0:0 src/ ${REPO_DIR}/")
    update_at = dockerfile.index('env update -p ${NB_PYTHON_PREFIX} --file "environment.yml"')
    assert copy_at < update_at
    env = yaml.safe_load((edition / "environment.yml").read_text())
    names = {d.split()[0].split(">")[0].split("=")[0] for d in env["dependencies"] if isinstance(d, str)}
    assert {"pytorch", "jupyterlab", "nbval", "cxx-compiler"} <= names
    assert "cupy" not in names and "cupy" not in dockerfile, "Binder has no GPU: the image must not pull CUDA"
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert any(line.split("[")[0].strip() in ("-e .", ".") for line in pip)
