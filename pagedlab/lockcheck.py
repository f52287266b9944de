"""Installed versions against requirements.lock, for `pagedlab doctor`.

A student whose notebook fails differently from everyone else's usually has a package that
moved (a `pip install -U` for another course, say). Naming the packages that differ from the
lock turns "works on my machine" into a one-line fix.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# What requirements.lock is compiled for (tools/lock.py and tools/bootstrap.py use the same).
LOCK_PYTHON = (3, 11)
LOCK_PLATFORM = ("linux", "x86_64")


def lock_path() -> Path | None:
    """requirements.lock of the checkout pagedlab runs from (an editable install), if any.

    PAGEDLAB_LOCK names another lock file (a grader image checking against a course's lock).
    """
    override = os.environ.get("PAGEDLAB_LOCK")
    path = Path(override) if override else Path(__file__).resolve().parent.parent / "requirements.lock"
    return path if path.is_file() else None


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(text: str) -> dict[str, str]:
    """{canonical name: version} of every `name==version` line."""
    pins = {}
    for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", text, re.M):
        pins[canonical(m.group(1))] = m.group(2)
    return pins


@dataclass
class Drift:
    name: str
    locked: str
    installed: str | None  # None: not installed

    def __str__(self) -> str:
        return f"{self.name} {self.installed or 'missing'} (lock {self.locked})"


def drift(pins: dict[str, str]) -> list[Drift]:
    out = []
    for name, locked in sorted(pins.items()):
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != locked:
            out.append(Drift(name, locked, installed))
    return out


def lock_applies() -> bool:
    return (sys.version_info[:2] == LOCK_PYTHON and sys.platform.startswith(LOCK_PLATFORM[0])
            and platform.machine() == LOCK_PLATFORM[1])
