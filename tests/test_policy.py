"""The sandbox's policy: one value, built once from the instructor's knobs, that says how a child
is confined; `run_limited` takes it whole."""

from __future__ import annotations

import shutil
import sys

import pytest

from pagedlab.sandbox.policy import NO_NETWORK_ENV, NPROC, NPROC_ENV, Policy
from pagedlab.sandbox.process import run_limited


def test_the_knobs_are_read_once_into_the_policy():
    assert Policy.from_env({}) == Policy()
    assert Policy.from_env({NPROC_ENV: "64"}).nproc == 64
    for junk in ("", "0", "-3", "many"):  # not a count: the default, never no limit
        assert Policy.from_env({NPROC_ENV: junk}).nproc == NPROC
    if shutil.which("unshare"):  # the machine can give every child a network of its own
        assert Policy.from_env({NO_NETWORK_ENV: "1"}).own_network


def test_a_knob_the_machine_cannot_honour_stops_the_grade_before_any_child(monkeypatch, tmp_path):
    from pagedlab.grader import cli

    with pytest.raises(ValueError, match=f"{NO_NETWORK_ENV}=1 needs unshare"):
        monkeypatch.setenv(NO_NETWORK_ENV, "1")
        monkeypatch.setenv("PATH", str(tmp_path))  # no unshare on it
        monkeypatch.setattr(cli, "run_task", lambda *a, **k: pytest.fail("a task ran under a weaker sandbox"))
        cli.grade("solutions", tasks=["1"], json_path=str(tmp_path / "results.json"))
    assert not (tmp_path / "results.json").exists()


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
