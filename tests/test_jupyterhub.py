"""A class on a real JupyterHub, on loopback: two student accounts, LocalProcessSpawner, the
student edition pulled into each home by nbgitpuller through the link `pagedlab link` prints,
graded cells run by both at once. Graded cells must behave as on a laptop: the untouched stubs
show the task's "not implemented" (notebook 02), a student's finished files show every ✓
(notebooks 02 and 08, the kernel built in that student's own home).

Needs root (real users), the `configurable-http-proxy` npm package (installed into a cache
folder when npm is present) and JupyterHub + nbgitpuller (installed with the wheel).
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from course_lab import free_port
from installed_env import (
    REPO,
    RUNUSER,
    chown_tree,
    create_user,
    installed_env,
    make_student_course,
    need_root,
    remove_user,
    user_env,
)

from pagedlab.deploy import nbgitpuller_link

# Uses the installed venv (built once with test_installed) and creates its own users: conftest.py.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900), pytest.mark.xdist_group("installed-venv")]
# One student per outcome, at once: a third (another finished one) ran the same server, pull and
# cells again and showed nothing new.
USERS = ["pagedlab-hub1", "pagedlab-hub2"]
SOLVED = {"pagedlab-hub2"}  # hub1 keeps the stubs
NOTEBOOKS = ["02_block_table.ipynb", "08_cuda_kernel.ipynb"]
# The stubs' route through the hub is the same for every task: 02's cells show it. Notebook 08 on
# the stubs (about 17 CPU-s, most of it building the kernel runtime in a fresh home) showed
# nothing more; its "never written" message is test_notebooks' and test_grading_real's.
GRADED = {"pagedlab-hub1": NOTEBOOKS[:1], "pagedlab-hub2": NOTEBOOKS}
FOLDER = "pagedlab-student"



def _proxy_command() -> str:
    found = shutil.which("configurable-http-proxy")
    if found:
        return found
    npm = shutil.which("npm")
    if not npm:
        pytest.skip("configurable-http-proxy is not installed and there is no npm to install it")
    prefix = Path.home() / ".cache" / "pagedlab-tests" / "chp"
    exe = prefix / "node_modules" / ".bin" / "configurable-http-proxy"
    if not exe.exists():
        proc = subprocess.run([npm, "install", "--silent", "--prefix", str(prefix), "configurable-http-proxy@5"],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            pytest.skip(f"npm could not install configurable-http-proxy: {proc.stderr[-500:]}")
    # Node must reach it as the hub's user (root) only; the proxy runs as root.
    return str(exe)


def _student_edition_repo(base: Path) -> Path:
    """Stand-in for `pagedlab release`'s output: a git repository of the student edition."""
    repo = make_student_course(base / "pagedlab-student")
    git = ["git", "-C", str(repo), "-c", "user.name=Instructor", "-c", "user.email=instructor@example.invalid"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "student edition"], check=True)
    return repo


class Hub:
    def __init__(self, base: Path, bin_dir: Path, gitconfig: Path):
        self.port, self.hub_port, self.api_port = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_hex(24)
        self.password = secrets.token_hex(16)
        config = base / "jupyterhub_config.py"
        config.write_text(f"""
c = get_config()  # noqa
c.JupyterHub.bind_url = {self.url + '/'!r}
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{self.hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.api_port}"
c.ConfigurableHTTPProxy.command = [{_proxy_command()!r}]
c.JupyterHub.db_url = "sqlite:///{base}/hub.sqlite"
c.JupyterHub.cookie_secret_file = "{base}/cookie_secret"
c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
c.Spawner.cmd = [{str(bin_dir / 'jupyterhub-singleuser')!r}]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
# file:// clones of a repository owned by someone else need git's safe.directory.
c.Spawner.environment = {{"GIT_CONFIG_SYSTEM": {str(gitconfig)!r}, "MPLBACKEND": "Agg"}}
c.Authenticator.allowed_users = set({USERS!r})
c.JupyterHub.authenticator_class = "jupyterhub.auth.DummyAuthenticator"
c.DummyAuthenticator.password = {self.password!r}
c.JupyterHub.services = [{{"name": "course-test", "api_token": {self.token!r}}}]
c.JupyterHub.load_roles = [{{"name": "course-test", "services": ["course-test"],
    "scopes": ["admin:users", "admin:servers", "tokens", "access:servers"]}}]
""")
        # Without PYTHONDONTWRITEBYTECODE (CI sets it) the hub, root, leaves the bytecode of what it
        # imports in the venv, as a pip-built hub image ships it: each student's server then
        # imports jupyterhub's and jupyter_server's shared modules about 1.7 CPU-s faster.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEDLAB_") and k != "PYTHONDONTWRITEBYTECODE"}
        env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
        self.log = base / "hub.log"
        self.proc = subprocess.Popen([str(bin_dir / "jupyterhub"), "-f", str(config)], cwd=base, env=env,
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"jupyterhub exited:\n{self.log.read_text()[-3000:]}")
            try:
                self.api("GET", "/hub/api/")
                return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(1)
        pytest.fail(f"jupyterhub did not answer in 90 s:\n{self.log.read_text()[-3000:]}")

    def api(self, method: str, path: str, body=None, token: str | None = None, timeout: float = 60):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"token {token or self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read().decode()
            return resp.status, resp.geturl(), text

    def start_server(self, user: str) -> None:
        try:
            self.api("POST", f"/hub/api/users/{user}/server")
        except urllib.error.HTTPError as exc:
            if exc.code != 400:  # 400: already running
                raise
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            _, _, text = self.api("GET", f"/hub/api/users/{user}")
            server = json.loads(text).get("servers", {}).get("", {})
            if server.get("ready"):
                return
            time.sleep(1)
        pytest.fail(f"{user}'s server did not start:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the hub and the proxy it started
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture(scope="module")
def hub():
    need_root()
    bin_dir = installed_env()
    if not (bin_dir / "jupyterhub-singleuser").exists():
        pytest.fail("jupyterhub did not install with the wheel")
    base = Path(tempfile.mkdtemp(prefix="pagedlab-hub-"))
    base.chmod(0o711)  # students reach their homes under it, and read nothing else
    (base / "homes").mkdir(mode=0o711)
    repo = _student_edition_repo(base / "source")
    for p in (base / "source", repo):
        p.chmod(0o755)
    subprocess.run(["chmod", "-R", "a+rX", str(base / "source")], check=True)
    gitconfig = base / "gitconfig"
    gitconfig.write_text(f"[safe]\n\tdirectory = {repo}\n\tdirectory = {repo}/.git\n")
    gitconfig.chmod(0o644)
    runner = base / "graded_cells.py"  # the students read this copy, nothing of the checkout
    shutil.copy2(REPO / "tests" / "graded_cells.py", runner)
    runner.chmod(0o644)
    entries = {u: create_user(u, base / "homes" / u) for u in USERS}
    server = None
    try:
        server = Hub(base, bin_dir, gitconfig)
        yield server, repo, entries, bin_dir, runner
    finally:
        if server is not None:
            server.stop()
        for u in USERS:
            remove_user(u)
        shutil.rmtree(base, ignore_errors=True)


def _pull(server: Hub, user: str, repo: Path) -> None:
    """Log in as the student, open the link `pagedlab link` prints, run the pull its page starts."""
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    browser.open(f"{server.url}/hub/login", timeout=60).read()
    jar = next(h.cookiejar for h in browser.handlers if isinstance(h, urllib.request.HTTPCookieProcessor))
    xsrf = next((c.value for c in jar if c.name == "_xsrf"), "")
    form = urllib.parse.urlencode({"username": user, "password": server.password, "_xsrf": xsrf}).encode()
    browser.open(f"{server.url}/hub/login?_xsrf={xsrf}", data=form, timeout=60).read()
    link = nbgitpuller_link(server.url, f"file://{repo}", branch="main")
    with browser.open(link, timeout=120) as page:
        landed = page.geturl()
    assert f"/user/{user}/git-pull" in landed, landed
    query = urllib.parse.urlsplit(link).query
    with browser.open(f"{server.url}/user/{user}/git-pull/api?{query}", timeout=180) as stream:
        events = stream.read().decode()
    assert '"phase": "finished"' in events and '"phase": "error"' not in events, events[-2000:]
    with browser.open(f"{server.url}/user/{user}/api/contents/{FOLDER}/notebooks", timeout=60) as listing:
        names = {item["name"] for item in json.loads(listing.read())["content"]}
    assert set(NOTEBOOKS) <= names, names


def _run_notebooks(user: str, entry, bin_dir: Path, runner: Path) -> list[dict]:
    course = Path(entry.pw_dir) / FOLDER
    # Graded cells only: every cell of both notebooks runs under nbval in this CI already; what
    # only a hub shows is the graded cells working for real users on the pulled course.
    cmd = [RUNUSER, "-u", user, "--", str(bin_dir / "python"), str(runner), "--graded-only",
           *[str(course / "notebooks" / nb) for nb in GRADED[user]]]
    proc = subprocess.run(cmd, cwd=course / "notebooks", capture_output=True, text=True, timeout=600,
                          env=user_env(bin_dir, entry.pw_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_a_class_on_jupyterhub(hub):
    server, repo, entries, bin_dir, runner = hub
    began = time.perf_counter()
    with ThreadPoolExecutor(len(USERS)) as pool:
        list(pool.map(server.start_server, USERS))
        list(pool.map(lambda u: _pull(server, u, repo), USERS))
    for user in USERS:
        home = Path(entries[user].pw_dir)
        assert (home / FOLDER / ".pagedlab-course").is_file()
        assert not (home / FOLDER / "solutions").exists()
        assert home.stat().st_mode & 0o077 == 0, f"{home} is readable by other students"
        if user in SOLVED:  # this student has finished every task
            for path in (REPO / "solutions").iterdir():
                if path.is_file():
                    (home / FOLDER / "exercises" / path.name).write_bytes(path.read_bytes())
            chown_tree(home / FOLDER, entries[user])
    other = subprocess.run([RUNUSER, "-u", USERS[0], "--", "ls", entries[USERS[1]].pw_dir], capture_output=True)
    assert other.returncode != 0, "one student could list another's home"
    with ThreadPoolExecutor(len(USERS)) as pool:
        reports = dict(zip(USERS, pool.map(lambda u: _run_notebooks(u, entries[u], bin_dir, runner), USERS)))
    print(f"{len(USERS)} students, their graded cells at once: {time.perf_counter() - began:.0f} s from spawn to done")
    for user, report in reports.items():
        assert [nb["notebook"] for nb in report] == GRADED[user], report
        for nb in report:
            assert nb["graded"], f"{user}: {nb['notebook']} ran no graded cell"
            for cell in nb["graded"]:
                where = f"{user} {nb['notebook']} {cell['source']}"
                if user in SOLVED:
                    assert not cell["error"] and "✓" in cell["text"] and "✗" not in cell["text"], f"{where}:\n{cell['text']}"
                else:
                    assert cell["error"] and "✓" not in cell["text"], f"{where}:\n{cell['text']}"
                    assert "not implemented yet" in cell["text"] or "never written" in cell["text"], f"{where}:\n{cell['text']}"
    for user in SOLVED:  # the student who built the kernel built it in their own home
        cache = Path(entries[user].pw_dir) / ".cache" / "pagedlab" / "cuda"
        assert cache.is_dir() and cache.stat().st_uid == entries[user].pw_uid, f"{user}'s cache: {cache}"
        assert any(p.name.startswith("k_paged_attention") for p in cache.iterdir()), list(cache.iterdir())


def test_link_command_prints_the_same_link():
    proc = subprocess.run([sys.executable, "-m", "pagedlab", "link", "--hub", "http://127.0.0.1:8000",
                           "--repo", "file:///srv/pagedlab-student", "--branch", "main"],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == nbgitpuller_link("http://127.0.0.1:8000", "file:///srv/pagedlab-student",
                                                   branch="main")
