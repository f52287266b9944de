"""Seal every Python process of a sandboxed notebook run, before its first line of user code.

A notebook's run is several Python processes (nbval's pytest, the Jupyter kernel it starts, what
the notebook starts in turn), each a fresh execve, and execve makes a process dumpable again: its
/proc/<pid>/mem, environ and ptrace would be open to its siblings of the same uid. This folder
comes first on the run's PYTHONPATH, so Python's `site` imports this file in each of them before
`-m pytest` or `-m ipykernel_launcher` runs. With PAGEDLAB_SEAL=inet each one seals itself
(pagedlab/sandbox/seal.py with Internet sockets for Jupyter's ZMQ): non-dumpable, no-new-privs and the
seccomp filter. The first process's filter is inherited by all the others, which stack theirs
on it (cheap; a filter some other process set, such as a container's, is never taken for ours).
A process that cannot seal itself ends here: nothing of the notebook runs unsealed.
"""

import os

if os.environ.get("PAGEDLAB_SEAL") == "inet":
    import importlib.util
    import sys

    def _seal_this_process() -> None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "seal.py")
        spec = importlib.util.spec_from_file_location("_pagedlab_seal", path)
        seal = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(seal)
        try:
            seal.seal(inet=True)
        except OSError as exc:
            sys.stderr.write(f"this process of the notebook's run could not seal itself: {exc}\n")
            sys.stderr.flush()
            os._exit(3)

    _seal_this_process()
    del _seal_this_process
