"""The conda environment file parses and names every package the course is designed around."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _conda_names(filename):
    env = yaml.safe_load((ROOT / filename).read_text())
    conda = [d.split()[0] for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    return {d.split(">")[0].split("=")[0] for d in conda}, pip


def test_environment_yml_lists_the_course_packages():
    names, pip = _conda_names("environment.yml")
    for package in ("python", "pip", "jupyterlab", "pytorch", "ipywidgets", "matplotlib", "nbval", "cxx-compiler"):
        assert package in names, f"environment.yml does not list {package}"
    assert any(line.startswith("-e .") for line in pip), "the pip section must install pagedlab itself"


def test_default_environment_is_cpu_only_and_the_gpu_one_adds_only_cupy():
    # conda-forge has no CuPy (nor CUDA libraries) for macOS: the default file must not name them,
    # or it cannot be created on a Mac and a CPU-only Binder pulls gigabytes it never uses.
    cpu, cpu_pip = _conda_names("environment.yml")
    gpu, gpu_pip = _conda_names("environment-gpu.yml")
    assert not {n for n in cpu if "cupy" in n or "cuda" in n}, cpu
    assert gpu - cpu == {"cupy"} and cpu <= gpu
    assert gpu_pip == cpu_pip


def test_dev_extra_installs_on_macos():
    # NVRTC and cuda-bindings publish no macOS wheels; unmarked, `pip install -e .[dev]` fails there.
    import tomllib

    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    for dist in ("nvidia-cuda-nvrtc", "cuda-bindings"):
        line = next(d for d in dev if d.startswith(dist))
        assert "sys_platform != 'darwin'" in line, line


def test_constraints_pin_the_cpu_torch_and_the_package_accepts_a_range():
    pins = (ROOT / "constraints.txt").read_text().split()
    assert "torch==2.13.0" in pins
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = next(d for d in deps if d.startswith("torch"))
    assert "==" not in torch, "the package itself must accept a torch range"
