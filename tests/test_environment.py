"""The conda environment file parses and names every package the course is designed around."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_environment_yml_lists_the_course_packages():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d.split()[0] for d in env["dependencies"] if isinstance(d, str)]
    names = {d.split(">")[0].split("=")[0] for d in conda}
    for package in ("python", "pip", "jupyterlab", "pytorch", "cupy", "ipywidgets", "matplotlib", "nbval"):
        assert package in names, f"environment.yml does not list {package}"
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert any(line.startswith("-e .") for line in pip), "the pip section must install pagedlab itself"


def test_constraints_pin_the_cpu_torch_and_the_package_accepts_a_range():
    pins = (ROOT / "constraints.txt").read_text().split()
    assert "torch==2.13.0" in pins
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = next(d for d in deps if d.startswith("torch"))
    assert "==" not in torch, "the package itself must accept a torch range"
