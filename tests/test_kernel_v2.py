"""Part E: the v2 split-K kernel's host API (pagedlab.kernels, version="v1"|"v2"|"auto").

solutions/paged_attention_v2.cu runs on the CPU executor and is compared with dense attention in
float64 (max relative error <= 2e-5); out and the temporaries start as NaN, so anything unwritten
shows. The graded checks (pagedlab/drivers/paged_attention_v2_cu.py) and their planted bugs
(tests/test_v2_mutants.py) cover the kernel's numerics; this file covers the host side.
"""

import numpy as np
import pytest
import torch

from pagedlab import cuda, kernels
from pagedlab.kernels import (
    PARTITION_SIZE,
    choose_version,
    decode_v2_on_executor,
    paged_attention_decode,
    v2_workspace,
)
from pagedlab.loader import kernel_source
from pagedlab.reference import make_paged_batch, max_relative_error

TOL = 2e-5


def test_v2_matches_dense_and_v1_through_the_public_api():
    batch = make_paged_batch([1000, 5, 513], num_heads=4, num_kv_heads=2, head_size=64, block_size=16, seed=30)
    v2 = paged_attention_decode(*batch.numpy(), impl="solutions", backend="cpu", version="v2")
    v1 = paged_attention_decode(*batch.numpy(), impl="solutions", backend="cpu")
    assert max_relative_error(v2, batch.expected()) <= TOL
    assert max_relative_error(v2, torch.from_numpy(v1).double()) <= 2 * TOL


def test_v2_workspace_shows_per_partition_statistics_and_unused_partitions_stay_unwritten():
    batch = make_paged_batch([130, 1], num_heads=2, head_size=32, block_size=16, seed=31)
    out, ws = decode_v2_on_executor(*batch.numpy(), impl="solutions", partition_size=64)
    assert ws.max_num_partitions == 3 and ws.tmp_out.shape == (2, 2, 3, 32)
    assert not kernels.unwritten(ws.exp_sums[0]).any()                       # 130 tokens: 3 partitions
    assert not kernels.unwritten(ws.exp_sums[1, :, 0]).any() and kernels.unwritten(ws.exp_sums[1, :, 1:]).all()
    # One token alone: its max is its logit, its exp-sum exactly 1.
    assert np.all(ws.exp_sums[1, :, 0] == 1.0)
    assert max_relative_error(out, batch.expected()) <= TOL


def test_torch_tensors_round_trip_and_a_reused_workspace_is_accepted():
    batch = make_paged_batch([70, 20], num_heads=2, head_size=32, block_size=16, seed=32)
    ws = v2_workspace(2, 2, 32, max_seq_len=4096, partition_size=64)   # 64 partitions of room
    out = paged_attention_decode(*[torch.from_numpy(a) for a in batch.numpy()], impl="solutions", backend="cpu",
                                 version="v2", partition_size=64, workspace=ws)
    assert isinstance(out, torch.Tensor) and max_relative_error(out, batch.expected()) <= TOL
    assert kernels.unwritten(ws.max_logits[:, :, 2:]).all()


def test_exercise_stub_compiles_and_leaves_every_output_unwritten():
    batch = make_paged_batch([600, 3], num_heads=2, head_size=32, block_size=16, seed=33)
    out, ws = decode_v2_on_executor(*batch.numpy(), impl="exercises")
    assert kernels.unwritten(out).all()
    assert all(kernels.unwritten(a).all() for a in ws.arrays())


@pytest.mark.parametrize("impl", ["solutions", "exercises"])
def test_v2_compiles_to_ptx_with_nvrtc(impl):
    ptx = cuda.compile_ptx(kernel_source("paged_attention_v2.cu", impl), name="paged_attention_v2.cu")
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    assert ".entry paged_attention_v2(" in ptx and ".entry paged_attention_v2_reduce(" in ptx


# --- vLLM's selection heuristic --------------------------------------------------------------


@pytest.mark.parametrize("num_seqs, num_heads, max_len, version", [
    (1, 32, 512, "v1"),      # one partition: nothing to split
    (1, 32, 513, "v2"),      # two partitions, only 32 blocks for v1
    (16, 32, 4096, "v2"),    # 16 * 32 = 512 blocks is not more than 512
    (17, 32, 4096, "v1"),    # 544 > 512 blocks: v1 already fills the GPU
    (64, 32, 8192, "v1"),
    (64, 32, 8193, "v2"),    # past 8192 tokens always v2
    (256, 64, 100_000, "v2"),
])
def test_choose_version_follows_vllm(num_seqs, num_heads, max_len, version):
    assert choose_version(num_seqs, num_heads, max_len) == version


def test_auto_launches_what_choose_version_picks(monkeypatch):
    picked = []
    monkeypatch.setattr(kernels, "decode_v2_on_executor", lambda *a, **k: (picked.append("v2"), (None, None))[1])
    monkeypatch.setattr(kernels, "_kernel", lambda *a: picked.append("v1") or (lambda *x, **y: None))
    short = make_paged_batch([100], num_heads=2, head_size=16, block_size=16, seed=34).numpy()
    long = make_paged_batch([600], num_heads=2, head_size=16, block_size=16, seed=34).numpy()
    paged_attention_decode(*short, impl="solutions", backend="cpu", version="auto")
    paged_attention_decode(*long, impl="solutions", backend="cpu", version="auto")
    assert picked == ["v1", "v2"]


# --- validation of v2's own arguments, before any launch -------------------------------------


def _args():
    return list(make_paged_batch([100, 40], num_heads=4, num_kv_heads=2, head_size=32, block_size=16,
                                 seed=35).numpy())


def _ws(**change):
    ws = v2_workspace(2, 4, 32, 100, 64)
    arrays = dict(zip(("exp_sums", "max_logits", "tmp_out"), ws.arrays(), strict=True))
    for name, fn in change.items():
        arrays[name] = fn(arrays[name])
    return tuple(arrays.values())


BAD_V2 = {
    "unknown version": (ValueError, "version must be one of", dict(version="v3")),
    "partition_size with v1": (ValueError, "belong to the v2 kernel", dict(version="v1", partition_size=64)),
    "partition not a multiple of block_size": (ValueError, "multiple of block_size", dict(partition_size=40)),
    "partition below block_size": (ValueError, "multiple of block_size", dict(partition_size=8)),
    "partition a float": (TypeError, "partition_size must be an int", dict(partition_size=64.0)),
    "partition too big for shared memory": (ValueError, "dynamic shared memory",
                                            dict(partition_size=16 * (cuda.MAX_DYNAMIC_SHARED_MEMORY // 64 + 1))),
    "workspace of the wrong type": (TypeError, "V2Workspace", dict(workspace={"exp_sums": 1})),
    "exp_sums float64": (TypeError, "exp_sums must be a float32", dict(workspace=_ws(exp_sums=lambda a: a.astype(np.float64)))),
    "tmp_out without head_size": (ValueError, r"tmp_out must have shape \(2, 4, 2, 32\)",
                                  dict(workspace=_ws(tmp_out=lambda a: a[..., :16].copy()))),
    "max_logits for 3 seqs": (ValueError, "max_logits must have shape", dict(workspace=_ws(max_logits=lambda a: np.concatenate([a, a[:1]])))),
    "too few partitions": (ValueError, "needs 2 partitions", dict(workspace=tuple(a[:, :, :1].copy() for a in _ws()))),
    "tmp_out not contiguous": (ValueError, "tmp_out must be C-contiguous",
                               dict(workspace=_ws(tmp_out=lambda a: np.asfortranarray(a)))),
    "exp_sums aliasing max_logits": (ValueError, "overlaps", dict(workspace=(lambda e: (e, e, _ws()[2]))(_ws()[0]))),
}


@pytest.mark.parametrize("case", sorted(BAD_V2))
def test_bad_v2_input_is_refused_before_launch(case, monkeypatch):
    error, words, kwargs = BAD_V2[case]
    launched = []
    monkeypatch.setattr(kernels, "_named_kernel", lambda *a: launched.append(a))
    monkeypatch.setattr(kernels, "_kernel", lambda *a: launched.append(a))
    kwargs = {"version": "v2", "partition_size": 64, **kwargs}
    if kwargs["version"] == "v1":
        kwargs.pop("workspace", None)
    with pytest.raises(error, match=words):
        paged_attention_decode(*_args(), impl="solutions", backend="cpu", **kwargs)
    assert not launched


def test_v2_takes_contexts_that_v1_cannot_hold_in_shared_memory():
    tokens = cuda.MAX_DYNAMIC_SHARED_MEMORY // 4 + 1    # one logit too many for v1
    batch = make_paged_batch([tokens], num_heads=1, head_size=16, block_size=16, seed=36)
    with pytest.raises(ValueError, match="dynamic shared memory"):
        paged_attention_decode(*batch.numpy(), impl="solutions", backend="cpu", version="v1")
    out = paged_attention_decode(*batch.numpy(), impl="solutions", backend="cpu", version="v2")
    assert max_relative_error(out, batch.expected()) <= TOL
    assert PARTITION_SIZE == 512


# --- on a GPU (skipped on machines without CuPy and a device) ----------------------------------

needs_gpu = pytest.mark.skipif(not cuda.cupy_available(), reason="needs CuPy and a CUDA GPU")


@pytest.mark.gpu
@needs_gpu
def test_cupy_backend_runs_v2_and_auto():
    import cupy

    batch = make_paged_batch([9000, 3, 513], num_heads=8, num_kv_heads=2, head_size=128, block_size=16, seed=40)
    device_args = [cupy.asarray(a) for a in batch.numpy()]
    out = paged_attention_decode(*device_args, impl="solutions", backend="cupy", version="v2")
    assert isinstance(out, cupy.ndarray) and max_relative_error(cupy.asnumpy(out), batch.expected()) <= TOL
    auto = paged_attention_decode(*batch.numpy(), impl="solutions", backend="cupy", version="auto")  # > 8192: v2
    assert max_relative_error(auto, batch.expected()) <= TOL
