"""`pagedlab doctor` prints one table and says what to do about each missing piece."""

import os
import subprocess
import sys

from pagedlab import doctor as doctor_module


def doctor(**env):
    return subprocess.run([sys.executable, "-m", "pagedlab", "doctor"], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def doctor_here(monkeypatch, capsys, **env) -> tuple[int, str]:
    """The doctor's main in this process: (exit code, what it printed). Its imports (torch,
    JupyterLab, ...) cost about 10 CPU-s in a fresh process and are paid here once per worker;
    the command line itself is run by test_doctor_reports_every_piece_on_a_complete_machine."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = doctor_module.main()
    return code, capsys.readouterr().out


def test_doctor_reports_every_piece_on_a_complete_machine():
    proc = doctor()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for piece in ("Python", "numpy", "torch", "JupyterLab", "ipywidgets", "nbval", "C++20 compiler", "NVRTC", "CuPy"):
        assert piece in proc.stdout
    assert "Everything the course needs is here." in proc.stdout
    # The course's own venv, installed by ./course from the lock, has drifted from nothing.
    lock_row = next(line for line in proc.stdout.splitlines() if line.startswith("versions vs requirements.lock"))
    assert " ok " in lock_row and "every package as locked" in lock_row, lock_row


def test_doctor_names_a_missing_compiler_and_the_fix(monkeypatch, capsys):
    code, out = doctor_here(monkeypatch, capsys, CXX="/nonexistent/g++")
    assert code == 1
    line = next(l for l in out.splitlines() if l.startswith("C++20 compiler"))
    assert "MISSING" in line and "install g++" in line
    assert "1 required piece(s) missing: C++20 compiler" in out


def test_doctor_rejects_a_compiler_without_cxx20(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "oldcc"
    fake.write_text("#!/bin/sh\necho 'error: unrecognized option -std=c++20' >&2\nexit 1\n")
    fake.chmod(0o755)
    code, out = doctor_here(monkeypatch, capsys, CXX=str(fake))
    assert code == 1
    assert "cannot build C++20" in out
