"""`pagedlab link`: the nbgitpuller link an instructor posts for a JupyterHub class.

Opening the link logs the student in, starts their server, clones (or merges into) the student
edition in their home folder and opens the welcome notebook. nbgitpuller never overwrites a
student's changed file, so posting the same link again after an update is safe.
"""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

DEFAULT_PATH = "notebooks/00_welcome.ipynb"


def _folder_name(repo: str) -> str:
    """The repository's last path part without .git. nbgitpuller's own default keeps the .git, so
    the link names the folder (targetpath) and opens the notebook inside it."""
    name = urlsplit(repo).path.rstrip("/").rsplit("/", 1)[-1]
    return name[:-4] if name.endswith(".git") else name


def nbgitpuller_link(hub: str, repo: str, *, branch: str | None = None, path: str | None = None) -> str:
    """The hub's `user-redirect/git-pull` URL for `repo`, opening `path` (inside the clone) in Lab."""
    for label, url in (("--hub", hub), ("--repo", repo)):
        if not isinstance(url, str) or not url.strip():
            raise ValueError(f"{label} must be a URL, got {url!r}")
    parts = urlsplit(hub)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--hub must be an http(s) URL like https://hub.example.edu, got {hub!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"--hub must be the hub's base URL without ?query or #fragment, got {hub!r}")
    if urlsplit(repo).scheme not in ("http", "https", "file", "ssh", "git"):
        raise ValueError(f"--repo must be a git URL (https://..., file://...), got {repo!r}")
    folder = _folder_name(repo)
    if not folder:
        raise ValueError(f"--repo {repo!r} has no repository name to clone into")
    inner = (path or DEFAULT_PATH).lstrip("/")
    query = {"repo": repo}
    if branch:
        query["branch"] = branch
    query["targetpath"] = folder
    query["urlpath"] = f"lab/tree/{folder}/{inner}"
    base = hub.rstrip("/")
    if not base.endswith("/hub"):
        base += "/hub"
    return f"{base}/user-redirect/git-pull?{urlencode(query)}"
