"""Runner mode: the student's C library in `pl_runner.c`'s process, with no Python in it.

In the graded check child the library never shares an interpreter with the grader's drivers and
the student's record. It runs in a runner process (sealed like the kernel runner) whose heap and
pools are a shared arena mapped at the same address in both (`carena`), so the struct views the
checks read and the pointers the C code stores name the same bytes. Calls, heap requests and
printf output cross a pipe as fixed-size little-endian records (pl_runner.c's struct pl_rec and
struct pl_req): this module is that wire format and the process that speaks it.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import select
import shutil
import signal
import struct
import sys
import tempfile
import time
from pathlib import Path

from . import carena
from .cbuild import C_API, INCLUDE, Build, cache_dir, expect_layout, find_compiler, run_compiler
from .heap import HEAP_FREE, CCrash, CTimeout, Diag, heap_request, out_hook

# ---------------------------------------------------------------------------------------------
# Runner mode: the library runs in pl_runner.c's process, with no Python in it
# ---------------------------------------------------------------------------------------------
RUNNER_SOURCE = INCLUDE / "pl_runner.c"
SEAL_HEADER = INCLUDE.parent / "cuda" / "pl_seal.h"
RUNNER_FLAGS = ["-std=gnu11", "-O1", "-w"]
# Records (pl_runner.c's struct pl_rec and struct pl_req): fixed sizes, little-endian.
RECORD_BYTES, REQUEST_BYTES, PAYLOAD_BYTES = 1280, 32, 1240
_REC_HEAD = struct.Struct("<IiiiQQQ")   # kind, a, b, c, x, y, z
_REQ = struct.Struct("<IiQQQ")
REC_READY, REC_ERROR, REC_HEAP, REC_OUT, REC_DONE = range(1, 6)
REQ_CALL, REQ_HEAP_REPLY = 1, 2
# Seconds past the runner's own per-call limit before this side gives up on it (a library that
# blocks SIGALRM): the runner is killed and the call reported as a timeout.
RUNNER_SLACK = 2.0


def runner_mode() -> bool:
    """Whether C libraries run in a runner process (the shared arena is active): in the graded
    check child, which calls `use_runner` before any check runs."""
    return carena.current() is not None


def use_runner(on: bool = True) -> None:
    """From now on, load C libraries into runner processes (on=False: in-process again, for
    tests). Before any Pool or cmem block the C code will see is made: those must come from the
    shared arena.

    Why not always: in a notebook or the explorer the library runs in the student's own kernel,
    where nothing of a grader lives, and in-process calls cost nothing per malloc (the runner's
    cost a round trip each). The check child holds the grader's drivers and the student's record:
    there the library must not share an interpreter with them."""
    carena.activate(on)


def use_runner_for(folder) -> None:
    """What the check child does before its checks run: a folder whose Part A is graded from C
    (`track.decide`; the grader sends its decision as PAGEDLAB_TRACK) gets the runner. Linux
    only (memfd, fixed shared mappings, seccomp): elsewhere (a student's
    Mac) the library is loaded in-process, as in a notebook; graders run on Linux."""
    from .. import track

    if sys.platform.startswith("linux") and track.decide(folder).name == "c":
        use_runner()


def runner_name() -> str:
    """pl_runner.c's program name for this compiler and source (a content hash)."""
    digest = hashlib.sha256()
    for part in [find_compiler().encode(), " ".join(RUNNER_FLAGS).encode(), RUNNER_SOURCE.read_bytes(),
                 SEAL_HEADER.read_bytes()]:
        digest.update(part + b"\0")
    return f"pl-runner-{digest.hexdigest()[:20]}"


# Root's folder of pagedlab's own builds, handed to a grading child (sandbox.trusted_builds.CHILD_ENV,
# cuda.compiler.TRUSTED_ENV: the same name).
TRUSTED_ENV = "PAGEDLAB_TRUSTED_BUILDS"


def _trusted_runner(name: str) -> Path | None:
    """Root's build of the runner, when the grader handed this process its folder of trusted
    builds (sandbox.trusted_builds: root's own, nobody else's to write)."""
    folder = os.environ.get(TRUSTED_ENV)
    path = Path(folder) / name if folder else None
    return path if path is not None and os.access(path, os.X_OK) else None


def runner_program(into: Path | None = None, copy_from: Path | None = None) -> Path:
    """pl_runner.c compiled once per compiler and source: root's trusted build in a grading child
    that was given one (the job's cache is the sandbox user's to write: a program planted there
    would run unsealed as the runner), else built in the build cache; or in `into`, copied from
    `copy_from` when it has it (sandbox.trusted_builds fills root's folder so)."""
    name = runner_name()
    if into is None and (found := _trusted_runner(name)):
        return found
    out = into or cache_dir()
    program = out / name
    if program.is_file():
        return program
    original = copy_from / name if copy_from is not None and Path(copy_from).resolve() != out.resolve() else None
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        if original is not None and original.is_file():
            shutil.copy(original, Path(tmp) / "runner")  # with its mode
        else:
            run_compiler([find_compiler(), *RUNNER_FLAGS, "-I", str(SEAL_HEADER.parent), str(RUNNER_SOURCE), "-o",
                  str(Path(tmp) / "runner"), *([] if sys.platform == "darwin" else ["-ldl"])], Path(tmp),
                 "building pagedlab's C runner")
        os.replace(Path(tmp) / "runner", program)
    return program


class RunnerGone(CCrash):
    """The runner process ended (or broke the protocol) during a call: the C code killed it."""


class Runner:
    """One runner process for one library: started on first use and again after it died."""

    def __init__(self, b: Build, seconds: float):
        self.build, self.seconds = b, seconds
        self.pid = 0
        self.base = self.span = 0
        self.diag = Diag()

    def start(self) -> None:
        if self.pid:
            return
        arena = carena.current()
        program = runner_program()
        req_r, req_w = os.pipe()
        rec_r, rec_w = os.pipe()
        # Above 9, so the dup2s onto 3, 4 and 5 never overwrite each other's source.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (arena.fd, req_r, rec_w)]
        try:
            self.pid = os.posix_spawn(
                str(program), [str(program), str(self.build.library), hex(arena.base), str(arena.size),
                               repr(self.seconds), str(os.getpid())], {},
                file_actions=[(os.POSIX_SPAWN_DUP2, high[0], 3), (os.POSIX_SPAWN_DUP2, high[1], 4),
                              (os.POSIX_SPAWN_DUP2, high[2], 5)])
        except BaseException:
            os.close(req_w)
            os.close(rec_r)
            raise
        finally:
            for fd in (*high, req_r, rec_w):
                os.close(fd)
        self.req, self.rec = req_w, rec_r
        deadline = time.monotonic() + max(30.0, self.seconds + RUNNER_SLACK)
        try:
            kind, a, b_, _, x, y, _, payload = self._read(deadline, "loading the library")
            if kind == REC_ERROR:
                why = payload.split(b"\0", 1)[0].decode(errors="replace")[:500]
                raise CCrash(f"the C library could not start in its runner process: {why}")
            if kind != REC_READY:
                raise RunnerGone(f"the C runner process sent a record of kind {kind} before it was ready")
            expect_layout(list(struct.unpack_from("<4Q", payload)))
            self.base, self.span, self.locked = x, y, (a, b_)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> str:
        """End the runner; how it ended, in words."""
        if not self.pid:
            return "not running"
        for fd in (self.req, self.rec):
            os.close(fd)
        pid, self.pid = self.pid, 0
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                time.sleep(0.01)
                done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                return "it was still running and was killed"
        except ChildProcessError:
            return "it ended"
        if os.WIFSIGNALED(status):
            try:
                name = signal.Signals(os.WTERMSIG(status)).name
            except ValueError:
                name = f"signal {os.WTERMSIG(status)}"
            return f"it was killed by {name}"
        return f"it exited with status {os.WEXITSTATUS(status)}"

    def _read(self, deadline: float, during: str):
        """One whole record, or RunnerGone / CTimeout (the runner is stopped then)."""
        data = b""
        while len(data) < RECORD_BYTES:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.rec], [], [], left)[0]:
                self.stop()
                raise CTimeout(f"{during} did not return within {self.seconds:g} s and the C code did not stop "
                               f"at the time limit, so its runner process was killed (an infinite loop with "
                               f"SIGALRM blocked?)")
            chunk = os.read(self.rec, RECORD_BYTES - len(data))
            if not chunk:
                how = self.stop()
                raise RunnerGone(f"{during} ended the process that runs the C code ({how}): the C code "
                                 f"ended its own process (_exit, a signal it sent itself, or a crash the "
                                 f"trampoline could not catch)")
            data += chunk
        return (*_REC_HEAD.unpack_from(data), data[_REC_HEAD.size:_REC_HEAD.size + PAYLOAD_BYTES])

    def _send(self, kind: int, a: int, x: int = 0, y: int = 0, z: int = 0) -> None:
        data = _REQ.pack(kind, a, x & (2**64 - 1), y & (2**64 - 1), z & (2**64 - 1))
        try:
            while data:
                data = data[os.write(self.req, data):]
        except OSError:
            how = self.stop()
            raise RunnerGone(f"the process that runs the C code is gone ({how})") from None

    def call(self, name: str, args) -> tuple[int, int]:
        """(status, returned value) of pl_call_NAME(args) in the runner; self.diag filled in."""
        self.start()
        self._send(REQ_CALL, C_API.index(name), *args)  # pl_runner.c's NAMES
        deadline = time.monotonic() + self.seconds + RUNNER_SLACK
        during = f"{name}()"
        while True:
            kind, a, b_, _, x, y, z, payload = self._read(deadline, during)
            if kind == REC_HEAP and 0 <= a <= HEAP_FREE:
                file, func = payload[:256].split(b"\0", 1)[0], payload[256:320].split(b"\0", 1)[0]
                failed, out = heap_request(a, x, y, z, file, b_, func)
                self._send(REQ_HEAP_REPLY, failed, out or 0)
            elif kind == REC_OUT and a in (1, 2) and 0 <= b_ <= PAYLOAD_BYTES:
                out_hook(a, payload[:b_])
            elif kind == REC_DONE:
                self.diag = Diag.from_buffer_copy(payload[:ctypes.sizeof(Diag)])
                return a, x
            else:
                how = self.stop()
                raise RunnerGone(f"{during}: the process that runs the C code sent a malformed record "
                                 f"(kind {kind}); it was stopped ({how})")


runners: dict[tuple, Runner] = {}
