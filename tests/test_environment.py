"""The conda environment file parses and names every package the course is designed around."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_environment_yml_lists_the_course_packages():
    """conda brings Python, the compiler and CuPy; the course's packages come from the lock."""
    text = (ROOT / "environment.yml").read_text()
    env = yaml.safe_load(text)
    conda = [d.split()[0] for d in env["dependencies"] if isinstance(d, str)]
    names = {d.split(">")[0].split("=")[0] for d in conda}
    for package in ("python", "pip", "cupy", "cxx-compiler"):
        assert package in names, f"environment.yml does not list {package}"
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-r requirements.lock" in pip, "the pip section must install the lock"
    locked = (ROOT / "requirements.lock").read_text()
    for package in ("jupyterlab", "torch", "ipywidgets", "matplotlib", "nbval", "numpy"):
        assert f"\n{package}==" in locked, f"requirements.lock does not pin {package}"
    assert "pip install --no-deps -e ." in text, "the header must say how to install pagedlab itself"


def test_constraints_pin_the_cpu_torch_and_the_package_accepts_a_range():
    pins = (ROOT / "constraints.txt").read_text().split()
    assert "torch==2.13.0" in pins
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = next(d for d in deps if d.startswith("torch"))
    assert "==" not in torch, "the package itself must accept a torch range"
