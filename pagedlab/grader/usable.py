"""Whether a sandbox user can start this grader's check processes at all.

Every task's child is `sys.executable -m pagedlab.drivers.child`, run as the sandbox user. A venv
only links to its base interpreter, so a venv built on a Python under a root-only folder (a pyenv
install in /root) cannot be run by that user: every child dies before its first check and every
student, correct ones too, scores 0, which reads as the students' failure. So before grading the
grader starts the same interpreter the same way (the same wall, environment and PYTHONPATH) and
imports the child's module; if that fails, nothing is graded and the message says what to do.
grading/usable_python.sh is the same question asked by setup.sh before it builds the venv.
"""

from __future__ import annotations

import os
import sys
from functools import lru_cache

from ..sandbox.users import Sandbox

PROBE = "import pagedlab, pagedlab.drivers.child"
PROBE_SECONDS = 60.0


def interpreter_problem(sandbox: Sandbox) -> str:
    """'' when `sandbox`'s user can run this interpreter and import pagedlab as a check child
    does; otherwise what failed and what to do about it. Asked once per process and user."""
    return _probe(sandbox.name, sandbox.uid, sandbox.gid, sys.executable, os.environ.get("PYTHONPATH", ""))


@lru_cache(maxsize=8)
def _probe(name: str, uid: int, gid: int, executable: str, pythonpath: str) -> str:
    from ..sandbox.policy import Policy
    from ..sandbox.process import run_limited
    from .pipeline import PACKAGE_PARENT

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_PARENT, pythonpath]))
    policy = Policy.from_env().but(timeout=PROBE_SECONDS, memory_bytes=4 * 2**30, sandbox=Sandbox(name, uid, gid))
    end = run_limited([executable, "-s", "-c", PROBE], policy, env=env)
    if end.returncode == 0:
        return ""
    real = os.path.realpath(executable)
    where = executable if real == executable else f"{executable}, a link to {real}"
    lines = [line for line in end.output.splitlines() if line.strip()]
    return (f"the sandbox user {name!r} cannot run this grader's Python ({where}) and import pagedlab: "
            f"{lines[-1] if lines else f'exit code {end.returncode}'}. Every check would fail before it "
            f"started, for correct submissions too, so nothing was graded. Grade with a venv built on a "
            f"Python every user can run, in folders they may enter and read: "
            f"`grading/usable_python.sh {name} 3.11 /usr/bin/python3.11` names one, then "
            f"`/usr/bin/python3.11 tools/bootstrap.py /srv/pagedlab-venv` builds it (grading/setup.sh does "
            f"both); or let the pool reach this one (`chmod o+x` on each folder above {real}, "
            f"`chmod -R a+rX` on the venv and the course)")
