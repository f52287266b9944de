"""A grader's notebook run asks root for the judge side's answers to its demo cells.

The demos of notebooks 07, 08 and 10 put the student's attention next to dense float64 attention
(`pagedlab.reference`: `PagedBatch.expected`, `PagedBatch.holds`, `dense_attention`), and notebooks
03 and 10 draw engines the harness builds from an empty engine's bytes (`drivers.scenes`, which
`pagedlab.reference.empty_engine` serves). That
code is the judge's (`pagedlab.grader.trusted`): in the grading set-up it is root-only, and the notebook's kernel
runs as the sandbox user with the submission's code in it. So in `pagedlab grade --notebooks` the
kernel sends the demo's arrays to root over a socket root made in a folder of its own
(PAGEDLAB_JUDGE_SOCKET) and gets the result back as data; root computes it with the trusted code
(`pagedlab.grader.judge_service`). The kernel never holds the code, and it learns nothing a
check keeps secret: the arrays are the demo's own, and root serves only while notebooks run,
after every check of the submission has finished.

Frames, both ways: 4 bytes of big-endian length, a JSON header, then the arrays' bytes in the
order the header lists them (C order; dtype and shape in the header). Never pickle.
"""

from __future__ import annotations

import json
import math
import os
import socket
import struct

import numpy as np

ENV = "PAGEDLAB_JUDGE_SOCKET"
DTYPES = ("float16", "float32", "float64", "int32", "int64", "bool")
MAX_HEADER = 64 * 1024
MAX_PAYLOAD = 64 * 1024 * 1024  # the notebooks' biggest question is 8.4 MB (a batch's caches)
MAX_DIMS = 6
TIMEOUT = 120.0  # seconds for one answer (root computes it; a big batch takes a second)


class JudgeError(ValueError):
    """Root could not answer: the inputs were outside what the judge side accepts."""


def active() -> str:
    """The socket of this notebook run's judge, or '' outside a grader's notebook run."""
    return os.environ.get(ENV, "")


def encode(header: dict, arrays: dict) -> bytes:
    """One frame: `header` plus `arrays` (name -> numpy array or torch tensor)."""
    listed, blobs = [], []
    for name, value in arrays.items():
        is_torch = type(value).__module__.startswith("torch")
        array = np.ascontiguousarray(value.detach().cpu().numpy() if is_torch else np.asarray(value))
        if array.dtype.name not in DTYPES:
            raise TypeError(f"{name}: dtype {array.dtype} cannot be sent to the judge (allowed: {', '.join(DTYPES)})")
        listed.append({"name": name, "dtype": array.dtype.name, "shape": list(array.shape), "torch": is_torch})
        blobs.append(array.tobytes())
    head = json.dumps({**header, "arrays": listed}).encode()
    return struct.pack(">I", len(head)) + head + b"".join(blobs)


def _exactly(sock: socket.socket, count: int) -> bytes:
    parts, left = [], count
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError(f"the frame ended {left} bytes short")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_frame(sock: socket.socket, max_payload: int = MAX_PAYLOAD) -> tuple[dict, dict]:
    """(header, arrays as numpy) of one frame from `sock`, every size checked before it is read."""
    (size,) = struct.unpack(">I", _exactly(sock, 4))
    if size > MAX_HEADER:
        raise ValueError(f"a header of {size} bytes (limit {MAX_HEADER})")
    header = json.loads(_exactly(sock, size).decode("utf-8"))
    if not isinstance(header, dict) or not isinstance(header.get("arrays", []), list):
        raise ValueError("a malformed header")
    shapes, total = [], 0
    for item in header.get("arrays", []):
        if not isinstance(item, dict) or item.get("dtype") not in DTYPES or not isinstance(item.get("name"), str):
            raise ValueError("an array of an unknown dtype or without a name")
        shape = item.get("shape")
        if (not isinstance(shape, list) or len(shape) > MAX_DIMS
                or not all(type(d) is int and 0 <= d <= 1 << 24 for d in shape)):
            raise ValueError(f"a malformed shape for {item['name'][:40]!r}")
        nbytes = math.prod(shape) * np.dtype(item["dtype"]).itemsize  # exact: no int64 to wrap
        total += nbytes
        if total > max_payload:
            raise ValueError(f"arrays of over {max_payload // 2**20} MB")
        shapes.append((item, nbytes))
    arrays = {}
    for item, nbytes in shapes:
        data = _exactly(sock, nbytes)
        arrays[item["name"]] = (np.frombuffer(data, dtype=item["dtype"]).reshape(item["shape"]).copy(),
                                bool(item.get("torch")))
    return header, arrays


def call(op: str, arrays: dict, **args):
    """Ask root's judge for `op` on `arrays` (with scalar `args`); its answer as the caller's
    kind: a torch tensor for torch inputs, else numpy, or a plain value."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT)
        sock.connect(active())
        sock.sendall(encode({"op": op, "args": args}, arrays))
        sock.shutdown(socket.SHUT_WR)
        header, found = read_frame(sock)
    if not header.get("ok"):
        raise JudgeError(str(header.get("error") or "the judge could not answer"))
    if "result" not in found:
        return header.get("value")
    array, as_torch = found["result"]
    if as_torch:
        import torch

        return torch.from_numpy(array)
    return array


def _batch_arrays(batch) -> dict:
    return {name: getattr(batch, name) for name in ("q", "k_cache", "v_cache", "block_tables", "seq_lens")}


def batch_expected(batch, scale):
    return call("batch_expected", _batch_arrays(batch), scale=scale)


def batch_holds(batch, s: int, k, v) -> bool:
    return bool(call("batch_holds", {**_batch_arrays(batch), "k": k, "v": v}, s=int(s)))


def dense_attention(q, k, v, scale, causal: bool):
    return call("dense_attention", {"q": q, "k": k, "v": v}, scale=scale, causal=bool(causal))


def empty_engine(total: int) -> dict:
    """The image of an empty engine of `total` blocks (`pagedlab.grader.trusted.engines.empty`), as data."""
    image = call("empty_engine", {}, total=int(total))
    if not isinstance(image, dict):
        raise JudgeError("the judge sent no engine image")
    return image
