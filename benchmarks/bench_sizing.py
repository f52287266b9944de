"""How big must a JupyterHub be for a class? Memory per student kernel, CPU seconds per
notebook, the per-user compile cache, and how much N students at once slow each other down.

Each notebook runs as a student's would (nbclient, a fresh kernel, the course folder found from
the working directory) with an empty cache folder, so the first-run compile is counted. The
kernel's peak memory and CPU time come from the OS (getrusage of the finished children: the
kernel and the compilers it started). The slowdown of N students is the wall time of N
simultaneous runs of the heaviest notebook over one run alone, measured in the same run.

    .venv/bin/python benchmarks/bench_sizing.py [--notebooks 02 08] [--impl solutions] [--students 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Runs in a child: execute one notebook, then report this process's children (the kernel and
# everything it spawned) from the OS's accounting.
_CHILD = r"""
import json, resource, sys, time
import nbformat
from nbclient import NotebookClient
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
t = time.perf_counter()
NotebookClient(nb, timeout=900, allow_errors=True, kernel_name="python3",
               resources={"metadata": {"path": sys.argv[2]}}).execute()
wall = time.perf_counter() - t
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
errors = sum(o.get("output_type") == "error" for c in nb.cells for o in c.get("outputs", []))
print(json.dumps({"wall": wall, "cpu": kids.ru_utime + kids.ru_stime, "peak_mb": kids.ru_maxrss / 1024,
                  "errors": errors}))
"""


def _du_mb(path: Path) -> float:
    total = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0
    return total / 2**20


def run(notebook: Path, impl: str, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "PAGEDLAB_IMPL": impl, "PAGEDLAB_CACHE": str(cache), "MPLBACKEND": "Agg"}
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(notebook), str(notebook.parent)],
                            cwd=notebook.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"notebook run failed:\n{err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def server_rss_mb() -> float | None:
    """Resident memory of an idle JupyterLab server (what each student's server costs before any
    kernel), on loopback; None if it did not come up in 60 s."""
    import secrets
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="pagedlab-sizing-server-") as home:
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={home}"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        server = subprocess.Popen(cmd, env={**os.environ, "HOME": home, "JUPYTER_RUNTIME_DIR": home},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=5).read()
                    break
                except OSError:
                    time.sleep(0.5)
            else:
                return None
            time.sleep(2)  # let start-up settle
            for line in Path(f"/proc/{server.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
            return None
        finally:
            server.terminate()
            server.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", nargs="+", default=["02", "08"], help="notebook numbers")
    parser.add_argument("--impl", default="solutions", help="whose code the notebooks run")
    parser.add_argument("--students", type=int, default=3, help="simultaneous runs of the heaviest notebook")
    args = parser.parse_args()
    paths = [next((ROOT / "notebooks").glob(f"{n}_*.ipynb")) for n in args.notebooks]
    rows = []
    with tempfile.TemporaryDirectory(prefix="pagedlab-sizing-") as tmp:
        for path in paths:
            cache = Path(tmp) / f"cold-{path.stem}"
            cold = finish(run(path, args.impl, cache))
            warm = finish(run(path, args.impl, cache))  # a student re-running: the cache is warm
            rows.append((path.stem, cold, warm, _du_mb(cache)))
        print(f"{'notebook':<36} {'peak MB':>8} {'CPU s cold':>10} {'CPU s warm':>10} {'wall s':>7} {'cache MB':>9} errors")
        for name, cold, warm, cache_mb in rows:
            print(f"{name:<36} {max(cold['peak_mb'], warm['peak_mb']):8.0f} {cold['cpu']:10.1f} {warm['cpu']:10.1f} "
                  f"{cold['wall']:7.1f} {cache_mb:9.1f} {cold['errors']}")
        heaviest = max(rows, key=lambda r: r[1]["cpu"])
        path = next(p for p in paths if p.stem == heaviest[0])
        alone = heaviest[2]["wall"]
        caches = [Path(tmp) / f"student{i}" for i in range(args.students)]
        for c in caches:  # each student's own warm cache, as after their first run
            subprocess.run(["cp", "-r", str(Path(tmp) / f"cold-{path.stem}"), str(c)], check=True)
        began = time.perf_counter()
        together = [finish(p) for p in [run(path, args.impl, c) for c in caches]]
        span = time.perf_counter() - began
        print(f"\n{args.students} students run {path.stem} at once on {os.cpu_count()} cores: "
              f"{span:.1f} s wall vs {alone:.1f} s alone = {span / alone:.2f}x; "
              f"peak {max(t['peak_mb'] for t in together):.0f} MB per kernel")
    peak = max(max(c["peak_mb"], w["peak_mb"]) for _, c, w, _ in rows)
    server = server_rss_mb()
    print(f"idle JupyterLab server: {server:.0f} MB" if server else "idle JupyterLab server: did not start")
    server = server or 250.0
    print(f"\nsuggested per-student memory: guarantee {_round_up(peak + server)} MB (one kernel at its peak + "
          f"the server), limit {_round_up(2 * peak + server)} MB (room for a second kernel)")
    return 0


def _round_up(mb: float, step: int = 128) -> int:
    return int(-(-mb // step) * step)


if __name__ == "__main__":
    raise SystemExit(main())
