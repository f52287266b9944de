"""The folders of one child process: a root-only one for what root reads back, and a scratch.

    pagedlab-run-XXXX/      root 0711: the user may pass through, not list or write
        io/                 root 0700: the child's output and record, opened by root only
        home/               the child's cwd, HOME and TMPDIR (the sandbox user's, 0700)

Root never opens a path inside home/. It removes home/ only after the kill step, without
following a link and without recursion, so a 10,000-deep tree or a planted link changes nothing.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0)


class Workspace:
    def __init__(self, prefix: str, owner=None):
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.root.chmod(0o711 if owner is not None else 0o700)
        self.io = self.root / "io"
        self.io.mkdir(mode=0o700)
        self.home = self.root / "home"
        self.home.mkdir(mode=0o700)
        if owner is not None:
            owner.own(self.home)

    def open_channel(self, name: str) -> int:
        """A new root-only file in io/ for the child to write, opened read-write by root."""
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        return os.open(self.io / name, flags, 0o600)

    def remove(self) -> None:
        remove_tree(self.root)


def read_back(fd: int, cap: int, *, tail: bool = False) -> tuple[bytes, int]:
    """(at most `cap` bytes, the file's size) from a descriptor root opened itself: the last
    bytes with `tail`, else the first. Only a regular file is read."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return b"", 0
    start = max(0, st.st_size - cap) if tail else 0
    return os.pread(fd, min(cap, st.st_size), start), st.st_size


def remove_tree(top: Path) -> None:
    """Delete `top` and all below it: never through a link, never by recursion (one directory
    descriptor at a time, climbing back through '..' checked against the inode it came from)."""
    try:
        st = os.lstat(top)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(top)
        return
    fd = os.open(top, _DIR_FLAGS)
    # (name, inode of the folder it sits in, names there it could not enter) of each level
    path: list[tuple[str, int, set]] = []
    skip: set = set()
    try:
        while True:
            sub = None
            with os.scandir(fd) as entries:
                names = []
                for entry in entries:
                    if entry.name in skip:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        sub = entry.name
                        break
                    names.append(entry.name)
            for name in names:
                _quiet(os.unlink, name, dir_fd=fd)
            if sub is not None:
                here = os.fstat(fd).st_ino
                try:
                    child = os.open(sub, _DIR_FLAGS, dir_fd=fd)
                except OSError:  # unreadable (not root): leave it
                    if os.geteuid() == 0:
                        raise
                    skip.add(sub)
                    continue
                os.close(fd)
                fd = child
                path.append((sub, here, skip))
                skip = set()
                continue
            if not path:
                break
            name, parent_ino, skip = path.pop()
            up = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up
            if os.fstat(fd).st_ino != parent_ino:
                raise OSError(f"{top}: a folder moved while it was being removed")
            _quiet(os.rmdir, name, dir_fd=fd)
    finally:
        os.close(fd)
    _quiet(os.rmdir, top)


def _quiet(op, *args, **kw) -> None:
    try:
        op(*args, **kw)
    except FileNotFoundError:
        pass
    except OSError:
        if os.geteuid() == 0:
            raise
