"""The course's JupyterLab as `./course open` starts it, for the tests that talk to a running Lab.

Three tests need one (tests/test_browser.py, tests/test_course_script.py and test_setup.py's
quiet-Lab test). They share the `course_lab` fixture (tests/conftest.py): one server per worker,
and all three sit in the `course-venv` xdist group, so one server per run instead of one per
test (a start costs about 4.5 CPU-s, half of it jsonschema's import).

The server serves a copy of notebooks/ (`PAGEDLAB_NOTEBOOKS`: the browser test edits and saves
a notebook) with its own settings, workspaces and runtime folders, so its first page load is
what a new student sees. The default folder, `./course open` without `PAGEDLAB_NOTEBOOKS`, is
served in the student edition's clone (test_release_integration).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "pagedlab-course-lab"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CourseLab:
    """`./course open --no-browser` on a copy of notebooks/, answering on a free port."""

    def __init__(self, tmp: Path):
        self.folder = tmp / "notebooks"
        shutil.copytree(ROOT / "notebooks", self.folder,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        self.runtime = tmp / "runtime"  # kernel connection files: the browser test reads one
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / "jupyterlab.log"
        env = {
            **os.environ,
            "PAGEDLAB_IMPL": "solutions",  # the explorer runs a finished engine
            "JUPYTER_RUNTIME_DIR": str(self.runtime),
            # A first open, as a new student sees it: no saved settings or workspace of the tester's.
            "JUPYTERLAB_SETTINGS_DIR": str(tmp / "user-settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
            "PAGEDLAB_NOTEBOOKS": str(self.folder),
        }
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [str(ROOT / "course"), "open", "--no-browser", f"--port={self.port}", "--ip=127.0.0.1",
             f"--IdentityProvider.token={TOKEN}"],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.time() + 120
        while True:
            assert self.proc.poll() is None, self.log_path.read_text()
            try:
                self.api("status")
                return
            except OSError:
                assert time.time() < deadline, "JupyterLab did not answer within 120 s"
                time.sleep(0.5)

    def get(self, path: str) -> tuple[str, bytes]:
        """GET `path` (the token added): the URL the redirects ended at, and the body."""
        sep = "&" if "?" in path else "?"
        with urllib.request.urlopen(f"{self.url}/{path.lstrip('/')}{sep}token={TOKEN}", timeout=10) as r:
            return r.geturl(), r.read()

    def api(self, path: str):
        return json.loads(self.get(f"api/{path}")[1])

    def shutdown_kernels(self):
        """Stop every kernel (a test's notebooks), so none idles while the worker runs on."""
        for kernel in self.api("kernels"):
            req = urllib.request.Request(f"{self.url}/api/kernels/{kernel['id']}?token={TOKEN}",
                                         method="DELETE")
            urllib.request.urlopen(req, timeout=30).close()

    def close(self):
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()
