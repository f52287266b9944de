"""README's opening command: `./course open` serves JupyterLab on notebooks/, landing in 00."""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.xdist_group("course-venv")  # ./course open bootstraps the checkout's .venv (conftest.py)
def test_course_open_serves_the_notebooks_and_lands_in_welcome():
    port, token = _free_port(), "pagedlab-test"
    proc = subprocess.Popen(
        [str(ROOT / "course"), "open", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "JUPYTER_RUNTIME_DIR": str(ROOT / ".venv" / "jupyter-runtime-test")},
    )
    try:
        listing, landing = None, None
        deadline = time.time() + 90
        while time.time() < deadline and listing is None:
            time.sleep(1)
            assert proc.poll() is None, proc.stdout.read()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents?token={token}", timeout=5) as r:
                    listing = json.load(r)
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/?token={token}", timeout=5) as r:
                    landing = r.geturl()
            except OSError:
                continue
        assert listing is not None, "JupyterLab did not answer within 90 s"
        served = {item["name"] for item in listing["content"]}
        expected = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
        assert "00_welcome.ipynb" in served and expected <= served
        assert landing.split("?")[0].endswith("/lab/tree/00_welcome.ipynb"), landing
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
