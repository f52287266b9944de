"""The sandbox's policy: one value, built once from the instructor's knobs, that says how a child
is confined; `run_limited` takes it whole."""

from __future__ import annotations

import sys

import pytest

from pagedlab.sandbox.policy import NO_NETWORK_ENV, NPROC, NPROC_ENV, Policy
from pagedlab.sandbox.process import run_limited


def test_the_knobs_are_read_once_into_the_policy():
    assert Policy.from_env({}) == Policy()
    assert Policy.from_env({NPROC_ENV: "64"}).nproc == 64
    for junk in ("", "0", "-3", "many"):  # not a count: the default, never no limit
        assert Policy.from_env({NPROC_ENV: junk}).nproc == NPROC
    assert Policy.from_env({NO_NETWORK_ENV: "1"} if _has_unshare() else {}).own_network is _has_unshare()


def test_a_knob_the_machine_cannot_honour_stops_before_any_child(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no unshare
    with pytest.raises(ValueError, match=f"{NO_NETWORK_ENV}=1 needs unshare"):
        Policy.from_env({NO_NETWORK_ENV: "1", "PATH": "/nonexistent"})


def test_but_fills_in_a_runs_limits_and_leaves_the_grading_policy_alone():
    base = Policy.from_env({NPROC_ENV: "40"})
    child = base.but(timeout=3, record_cap=1024)
    assert (child.timeout, child.record_cap, child.nproc) == (3, 1024, 40)
    assert (base.timeout, base.record_cap) == (Policy().timeout, 0)


def test_run_limited_takes_its_limits_from_the_policy():
    hog = "x = bytearray(3 * 2**30)\nprint('allocated')"
    small = run_limited([sys.executable, "-c", hog], Policy(timeout=30, memory_bytes=2 * 2**30), env={})
    assert small.returncode != 0 and "MemoryError" in small.output, small
    large = run_limited([sys.executable, "-c", hog], Policy(timeout=30, memory_bytes=8 * 2**30), env={})
    assert large.returncode == 0 and "allocated" in large.output, large
    record = run_limited([sys.executable, "-c", "import os; os.write(int(os.environ['PAGEDLAB_RECORD_FD']), b'r' * 50)"],
                         Policy(timeout=30, record_cap=10), env={})
    assert (record.record, record.record_size) == (b"r" * 10, 50)


def _has_unshare() -> bool:
    import shutil

    return shutil.which("unshare") is not None
