"""How long from a fresh clone to a working course, with uv and with pip, cold and warm cache?

For each installer (uv, then pip; both installing the same hashed requirements.lock through
tools/bootstrap.py) the run takes a fresh clone of this repository's HEAD and times
`./course open` from the start to two moments:

- env ready: the venv's install stamp is written (every package installed, lab settings in);
- HTTP: JupyterLab answers `GET /api/status` with the token (a student could click now).

"cold" uses empty caches made for the run (UV_CACHE_DIR, PIP_CACHE_DIR, XDG_CACHE_HOME), so
every package is fetched; "warm" repeats on a new clone with those caches filled; "again"
re-opens the warm clone (the everyday case: nothing to install). A cold uv run includes
`pip install uv` when uv is not on PATH, as on a student's machine. A local wheelhouse or index
pip is configured with (torch's CPU wheel here) is read by both installers alike; pip also reads
a local index uv is not told about, so on such a machine pip's "cold" is partly local.

Also printed: the venv's size on disk, and the targets: uv cold <= 1/2 pip cold;
warm <= 15 s to a usable `./course open`.

    python3 benchmarks/bench_setup.py [--installers uv,pip] [--keep]

Needs the network to the package registry and ~6 GB of scratch disk (freed at the end);
takes several minutes (pip's cold install dominates).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-setup"
TARGET_WARM_S = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clone(dest: Path) -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    subprocess.run(["git", "clone", "--quiet", "--shared", "--no-checkout", str(ROOT), str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "--quiet", head], check=True)


def du(path: Path) -> int:
    """Bytes on disk under `path` (0 when it does not exist: an installer that cached nothing)."""
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True)
    return int(out.stdout.split()[0]) if out.stdout.strip() else 0


def course_open(repo: Path, env: dict, log: Path, timeout: float = 1800) -> dict:
    """Run ./course open; seconds until the install stamp exists and until HTTP answers."""
    port = free_port()
    stamp = repo / ".venv" / ".pagedlab-installed"
    fresh = not stamp.exists()
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen([str(repo / "course"), "open", "--no-browser", f"--port={port}",
                                 "--ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}"],
                                cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        env_ready = None if fresh else 0.0
        try:
            while True:
                now = time.perf_counter() - t0
                if proc.poll() is not None:
                    raise RuntimeError(f"./course open exited {proc.returncode}; see {log}")
                if now > timeout:
                    raise RuntimeError(f"no HTTP answer after {timeout} s; see {log}")
                if env_ready is None and stamp.exists():
                    env_ready = now
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={TOKEN}",
                                                timeout=2) as r:
                        json.load(r)
                    return {"env": env_ready if env_ready is not None else now, "http": now}
                except OSError:
                    time.sleep(0.1)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def works(repo: Path) -> None:
    """The environment is usable, not just present: the course imports and doctor is happy."""
    subprocess.run([str(repo / ".venv" / "bin" / "pagedlab"), "doctor"], cwd=repo, check=True,
                   stdout=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--installers", default="uv,pip")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = ap.parse_args()
    installers = args.installers.split(",")
    if shutil.which("uv"):
        print("note: uv is on PATH, so the cold uv run does not include `pip install uv`")
    scratch = Path(tempfile.mkdtemp(prefix="pagedlab-bench-setup-"))
    rows: dict[tuple[str, str], dict] = {}
    try:
        for inst in installers:
            cache = scratch / f"cache-{inst}"
            env = {**os.environ, "PAGEDLAB_INSTALLER": inst,
                   "UV_CACHE_DIR": str(cache / "uv"), "PIP_CACHE_DIR": str(cache / "pip"),
                   "XDG_CACHE_HOME": str(cache / "xdg")}  # bootstrap's own copy of uv goes here
            env.pop("PIP_NO_CACHE_DIR", None)
            env.pop("VIRTUAL_ENV", None)
            warm_repo = None
            for phase in ("cold", "warm"):
                repo = scratch / f"clone-{inst}-{phase}"
                clone(repo)
                print(f"{inst:3} {phase}: ./course open on a fresh clone ...", flush=True)
                r = course_open(repo, env, scratch / f"{inst}-{phase}.log")
                works(repo)
                r["size"] = du(repo / ".venv")
                rows[(inst, phase)] = r
                print(f"    env ready {r['env']:.1f} s, HTTP {r['http']:.1f} s, "
                      f".venv {r['size'] / 2**30:.2f} GiB (load average {os.getloadavg()[0]:.1f})",
                      flush=True)
                if phase == "cold":
                    shutil.rmtree(repo)  # keep the scratch disk small; the cache stays
                else:
                    warm_repo = repo
            print(f"{inst:3} again: ./course open on the set-up clone ...", flush=True)
            rows[(inst, "again")] = {**course_open(warm_repo, env, scratch / f"{inst}-again.log"),
                                     "size": rows[(inst, "warm")]["size"]}
            rows[(inst, "again")]["env"] = 0.0
            print(f"    HTTP {rows[(inst, 'again')]['http']:.1f} s", flush=True)
            rows[(inst, "cold")]["cache"] = du(cache)
            shutil.rmtree(warm_repo)
    finally:
        if args.keep:
            print(f"scratch kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)

    print(f"\nfresh clone -> working course, on {os.cpu_count()} cores (seconds; size of .venv); "
          f"load average now {os.getloadavg()[0]:.1f}")
    print(f"{'installer':9} {'cache':6} {'env ready':>9} {'HTTP':>7} {'venv':>8}")
    for (inst, phase), r in rows.items():
        print(f"{inst:9} {phase:6} {r['env']:9.1f} {r['http']:7.1f} {r['size'] / 2**30:7.2f}G")
    for inst in installers:
        if "cache" in rows[(inst, "cold")]:
            print(f"{inst} cache after a cold install: {rows[(inst, 'cold')]['cache'] / 2**30:.2f} GiB")
    ok = True
    if {"uv", "pip"} <= set(installers):
        ratio = rows[("uv", "cold")]["env"] / rows[("pip", "cold")]["env"]
        print(f"\nuv cold / pip cold (env ready): {ratio:.2f}  (target <= 0.50: "
              f"{'met' if ratio <= 0.5 else 'MISSED'})")
        ratio_http = rows[("uv", "cold")]["http"] / rows[("pip", "cold")]["http"]
        print(f"uv cold / pip cold (HTTP):      {ratio_http:.2f}")
        ok &= ratio <= 0.5
    best = installers[0]
    warm = rows[(best, "warm")]["http"]
    print(f"{best} warm, fresh clone to JupyterLab answering: {warm:.1f} s  (target <= "
          f"{TARGET_WARM_S:.0f} s: {'met' if warm <= TARGET_WARM_S else 'MISSED'})")
    ok &= warm <= TARGET_WARM_S
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
