"""Root's side of `pagedlab.judge_link`: the judge's answers to a grader's notebook demos.

While `pagedlab grade --notebooks` runs the notebooks, a thread of root's grader listens on a
Unix socket it made in a folder of its own (root-owned, the sandbox user's group may enter and
connect, nobody else); each connection is one question: a demo's arrays, answered with the
trusted code (`pagedlab.grader.trusted`) and sent back as data. The arrays are untrusted: every size is
checked before it is read, the work an answer takes is capped, a connection has a deadline, and
an error goes back as a one-line message. It serves only after every check child of the job has
ended, so a check never reaches it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path

import numpy as np

from .. import judge_link
from ..untrusted import clip

# Multiply-adds one answer may take (query heads x head size x keys, summed): the notebooks'
# biggest demo is ~2^22; 2^30 is about a second of root's CPU.
MAX_WORK = 1 << 30
MAX_ENGINE_BLOCKS = 1 << 20  # a ref-count array of 4 MB: more than any notebook's pool
MAX_QUESTIONS = 10_000  # per notebook run
CONNECTION_DEADLINE = 60.0


def _reply(sock: socket.socket, header: dict, result=None) -> None:
    arrays = {} if result is None else {"result": result}
    sock.sendall(judge_link.encode(header, arrays))


def _tensor(array: np.ndarray, as_torch: bool):
    if as_torch:
        import torch

        return torch.from_numpy(array)
    return array


def _batch(arrays: dict):
    import torch

    from ..drivers.batches import PagedBatch

    names = ("q", "k_cache", "v_cache", "block_tables", "seq_lens")
    missing = [n for n in names if n not in arrays]
    if missing:
        raise ValueError(f"the batch lacks {', '.join(missing)}")
    q, k_cache, v_cache, tables, lens = (arrays[n][0] for n in names)
    if q.ndim != 3 or k_cache.ndim != 4 or v_cache.shape != k_cache.shape or tables.ndim != 2 or lens.ndim != 1:
        raise ValueError("expected q [seqs, heads, head_size], k/v caches [blocks, block_size, kv_heads, "
                         "head_size], block tables [seqs, columns] and seq_lens [seqs]")
    if len(lens) != q.shape[0] or len(tables) != q.shape[0]:
        raise ValueError("q, block_tables and seq_lens must have one row per sequence")
    if lens.size and (int(lens.min()) < 1 or int(lens.max()) > tables.shape[1] * k_cache.shape[1]):
        raise ValueError("a sequence length outside 1..(table columns x block size)")
    work = int(lens.astype(np.int64).sum()) * q.shape[1] * q.shape[2]
    if work > MAX_WORK:
        raise ValueError(f"the batch is too big for the judge ({work:.2e} multiply-adds, limit {MAX_WORK:.1e})")
    return PagedBatch(*(torch.from_numpy(a) for a in (q, k_cache, v_cache, tables, lens)))


def answer(op: str, args: dict, arrays: dict):
    """(value, result array or None, the result's kind is torch) for one question."""
    if op == "batch_expected":
        scale = args.get("scale")
        from .trusted.reference import paged_expected

        out = paged_expected(_batch(arrays), None if scale is None else float(scale))
        return None, out.numpy(), True
    if op == "batch_holds":
        if "k" not in arrays or "v" not in arrays:
            raise ValueError("batch_holds needs k and v")
        batch = _batch(arrays)
        s = args.get("s")
        if type(s) is not int or not 0 <= s < len(batch.seq_lens):
            raise ValueError(f"no sequence {s!r} in this batch")
        from .trusted.attention import holds

        return bool(holds(batch, s, _tensor(*arrays["k"]), _tensor(*arrays["v"]))), None, False
    if op == "dense_attention":
        from .trusted.reference import dense_attention

        q, k, v = (arrays.get(n) for n in ("q", "k", "v"))
        if q is None or k is None or v is None:
            raise ValueError("dense_attention needs q, k and v")
        if q[0].ndim not in (3, 4) or k[0].ndim != q[0].ndim:
            raise ValueError("expected q [q_len, heads, head_size] and k, v [kv_len, kv_heads, head_size]")
        work = int(np.prod(q[0].shape, dtype=np.int64)) * k[0].shape[-3]
        if work > MAX_WORK:
            raise ValueError(f"too big for the judge ({work:.2e} multiply-adds, limit {MAX_WORK:.1e})")
        scale = args.get("scale")
        out = dense_attention(_tensor(*q), _tensor(*k), _tensor(*v), None if scale is None else float(scale),
                              causal=bool(args.get("causal", True)))
        as_torch = not isinstance(out, np.ndarray)
        return None, (out.numpy() if as_torch else out), as_torch
    if op == "empty_engine":
        from .trusted import engines

        total = args.get("total")
        if type(total) is not int or not 1 <= total <= MAX_ENGINE_BLOCKS:
            raise ValueError(f"an engine of 1..{MAX_ENGINE_BLOCKS} blocks, not {total!r}")
        return engines.empty(total), None, False
    raise ValueError(f"no judge question {op!r}")


def _serve_one(conn: socket.socket) -> None:
    conn.settimeout(CONNECTION_DEADLINE)
    # One deadline for the whole question: a sender trickling a byte a minute is cut off too.
    cut = threading.Timer(CONNECTION_DEADLINE, lambda: _quiet_shutdown(conn))
    cut.start()
    try:
        _answer_on(conn)
    finally:
        cut.cancel()


def _quiet_shutdown(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


def _answer_on(conn: socket.socket) -> None:
    try:
        header, arrays = judge_link.read_frame(conn)
        args = header.get("args")
        value, result, as_torch = answer(str(header.get("op")), args if isinstance(args, dict) else {}, arrays)
    except Exception as exc:  # noqa: BLE001 - the question is the kernel's data: what it breaks is its answer
        with contextlib.suppress(OSError):
            _reply(conn, {"ok": False, "error": clip(f"{type(exc).__name__}: {exc}", 500)})
        return
    # The answer's kind travels in its array's "torch" flag (judge_link.encode sets it).
    if result is not None and as_torch:
        import torch

        result = torch.from_numpy(np.ascontiguousarray(result))
    _reply(conn, {"ok": True, "value": value}, result)


@contextlib.contextmanager
def serving(folder: Path, group: int | None = None):
    """A judge on `folder`/judge.sock while the block runs (`folder` is root's, not writable by
    the sandbox user); yields the socket's path, for PAGEDLAB_JUDGE_SOCKET."""
    path = Path(folder) / "judge.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    if group is not None:  # the notebooks' user connects through its group, nobody else
        os.chown(path, 0, group)
    os.chmod(path, 0o660 if group is not None else 0o600)
    server.listen(4)
    server.settimeout(0.25)
    stop = threading.Event()

    def loop() -> None:
        for _ in range(MAX_QUESTIONS):
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                    break
                except TimeoutError:
                    continue
                except OSError:
                    return
            else:
                return
            with conn:
                _serve_one(conn)

    worker = threading.Thread(target=loop, name="pagedlab-judge", daemon=True)
    worker.start()
    try:
        yield path
    finally:
        stop.set()
        worker.join(timeout=CONNECTION_DEADLINE + 5)
        server.close()
        path.unlink(missing_ok=True)
