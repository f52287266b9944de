"""Sandbox users for the red teams and the sandbox benchmarks: created as `grading/setup.sh` makes
them, and the grader's interpreter made reachable for them while a block runs."""

from __future__ import annotations

import contextlib
import os
import pwd
import subprocess
import sys
from pathlib import Path


def ensure_user(name: str) -> pwd.struct_passwd:
    """The sandbox user `name`, created (no home, no shell) if it does not exist yet."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        return pwd.getpwnam(name)


@contextlib.contextmanager
def interpreter_reachable():
    """The grader's interpreter must be one the sandbox users may run (Gradescope's is
    /usr/bin/python3 in /autograder/venv). Here it may live under /root (pyenv): while the block
    runs, its folders let others traverse (not list) them."""
    opened = []
    for folder in Path(os.path.realpath(sys.executable)).parents:
        mode = folder.stat().st_mode
        if not mode & 0o001:
            folder.chmod(mode | 0o001)
            opened.append((folder, mode))
    try:
        yield
    finally:
        for folder, mode in opened:
            folder.chmod(mode)
