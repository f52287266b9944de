"""A grader's notebook run judges nothing in the kernel (`pagedlab grade --notebooks`).

The kernel runs as the sandbox user, which may read no expected value; root judges the tasks
first and the graded cells read its verdicts (`pagedlab.verdicts`), and the demos' judge-side
answers (dense attention, "are these the sequence's tokens") come from root over a socket
(`pagedlab.judge_link`, `pagedlab.grader.judge_service`). These tests drive both ends in one
process; the whole path, sealed and as a sandbox user, is tests/test_autograder_package.py's.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from pagedlab import graded, judge_link, verdicts
from pagedlab.grader import judge_service, notebook_plan
from pagedlab.grader.pipeline import CheckOutcome, TaskOutcome
from pagedlab.spec import manifest
from pagedlab.spec.catalog import CheckFailure

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


@pytest.fixture
def grader_run(tmp_path, monkeypatch):
    """A submission folder and a verdict file for it, as root writes them; the kernel's caches
    fresh, and any attempt of the kernel to run or judge a check an error."""
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "memory_manager.py").write_text("# the student's Task 1\n")
    monkeypatch.setattr(graded, "_passed", set())
    monkeypatch.setattr(graded, "_failed", {})

    def no_checks_here(*args, **kwargs):
        raise AssertionError("a grader's notebook kernel ran checks")

    monkeypatch.setattr("pagedlab.grader.pipeline.run_task", no_checks_here)
    monkeypatch.setattr("pagedlab.drivers.given.load", no_checks_here)  # expected.json: root's

    def write(*checks: CheckOutcome) -> Path:
        row = manifest.task("task1")
        outcome = TaskOutcome(row, list(checks))
        path = tmp_path / f"verdicts-{len(list(tmp_path.glob('verdicts-*')))}.json"
        verdicts.write(path, {verdicts.key(row, folder): verdicts.entry(outcome)})
        monkeypatch.setenv(verdicts.ENV, str(path))
        return path

    return folder, write


def test_a_graded_cell_shows_roots_verdict_without_running_a_check(grader_run, capsys):
    folder, write = grader_run
    write(CheckOutcome("counts whole blocks", True),
          CheckOutcome("rejects a NULL pool", False, "expected: None\n  yours: an LLMEngine", rule="R1: engine pointer",
                       gist="your value differs from the reference solution's"),
          CheckOutcome("a hidden one", False, "expected: 42", hidden=True, gist="hidden gist"))
    with pytest.raises(CheckFailure, match=r"1 of 2 checks did not pass for Task 1"):
        graded.run("task1", impl=folder)
    out = capsys.readouterr().out
    assert "  ✓ counts whole blocks" in out and "  ✗ rejects a NULL pool" in out
    assert "what went wrong: your value differs from the reference solution's" in out and "rule: R1: engine pointer" in out
    assert "judged by the grader outside this notebook" in out
    assert "expected" not in out.replace("the expected and actual values", "") and "hidden" not in out
    # A demo's require reads the same verdict, once.
    with pytest.raises(CheckFailure, match="needs Task 1 · .* to pass first"):
        graded.require("task1", impl=folder)


def test_require_passes_on_a_passing_verdict_and_other_bytes_find_none(grader_run, capsys):
    folder, write = grader_run
    write(CheckOutcome("counts whole blocks", True), CheckOutcome("rejects a NULL pool", True))
    graded.run("task1", impl=folder)
    assert "All 2 checks passed." in capsys.readouterr().out
    graded.require("task1", impl=folder)
    # The kernel changed the file (or asks about another folder): no verdict is for these bytes.
    (folder / "memory_manager.py").write_text("# rewritten in the kernel\n")
    with pytest.raises(CheckFailure):
        graded.run("task1", impl=folder)
    assert "autograder problem, not your code (tell your instructor): the grader judged no Task 1" in capsys.readouterr().out
    # An llm_memory.c beside it is another version of Part A: root's key covers it too.
    (folder / "memory_manager.py").write_text("# the student's Task 1\n")
    (folder / "llm_memory.c").write_text("/* C */\n")
    with pytest.raises(CheckFailure):
        graded.run("task1", impl=folder)


# ---------------------------------------------------------------------------------- the judge
@pytest.fixture
def judge(tmp_path, monkeypatch):
    with judge_service.serving(tmp_path) as path:
        monkeypatch.setenv(judge_link.ENV, str(path))
        yield path


def test_demos_get_the_judges_answers_from_root(judge, monkeypatch):
    """batch.expected(), batch.holds() and dense_attention give in a grader's notebook run what
    the trusted code gives (computed by root), each in the kind of its inputs."""
    from pagedlab.reference import dense_attention, make_paged_batch

    batch = make_paged_batch([5, 33, 17], num_heads=4, num_kv_heads=2, head_size=32, seed=3)
    remote = batch.expected()
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((1, 4, 32)), rng.standard_normal((9, 2, 32)), rng.standard_normal((9, 2, 32))
    remote_dense = dense_attention(q, k, v, 0.25)
    remote_prefill = dense_attention(torch.from_numpy(k[:, :1].repeat(2, 1)), torch.from_numpy(k), torch.from_numpy(v))
    from pagedlab.grader.trusted.attention import _sequence_tokens

    k1, v1 = _sequence_tokens(batch, 1)
    holds = batch.holds(1, torch.from_numpy(k1), torch.from_numpy(v1)), batch.holds(1, torch.from_numpy(k1[::-1].copy()), v1)
    monkeypatch.delenv(judge_link.ENV)  # the same calls, judged here
    assert isinstance(remote, torch.Tensor) and remote.dtype == torch.float64
    assert torch.equal(remote, batch.expected())
    assert isinstance(remote_dense, np.ndarray) and np.array_equal(remote_dense, dense_attention(q, k, v, 0.25))
    local_prefill = dense_attention(torch.from_numpy(k[:, :1].repeat(2, 1)), torch.from_numpy(k), torch.from_numpy(v))
    assert isinstance(remote_prefill, torch.Tensor) and torch.equal(remote_prefill, local_prefill)
    assert holds == (True, False)


def test_notebook_engines_come_from_roots_judge_in_a_grader_run(judge, monkeypatch):
    """Notebooks 03 and 10 draw harness-built engines: in a grader's notebook run the empty
    engine's bytes come from root (the kernel cannot import `pagedlab.grader.trusted`), the same bytes
    the trusted code writes, and the engine built from them reads back as the layout it was given."""
    from pagedlab import reference
    from pagedlab.engine.pool import Pool
    from pagedlab.grader.trusted import engines
    from pagedlab.harness import hw3
    from pagedlab.reference import scenes  # as notebooks 03 and 10 import it

    monkeypatch.setattr(scenes, "LOCAL_IMAGES", reference.empty_engine)  # what that import plugs in
    asked = []
    monkeypatch.setattr(judge_link, "call", lambda op, arrays, **args: asked.append(op) or _real_call(op, arrays, **args))
    assert scenes.empty_image(37) == engines.empty(37) and asked == ["empty_engine"]
    pools = [Pool(37 * hw3.BLOCK_SIZE) for _ in range(2)]
    remote = hw3.snapshot(scenes.engine(pools[0], [(5, 20, [3, 9])]))
    with pytest.raises(judge_link.JudgeError, match="an engine of 1..1048576 blocks"):
        judge_link.empty_engine(0)
    monkeypatch.delenv(judge_link.ENV)  # the same engine, its bytes written here
    assert remote == hw3.snapshot(scenes.engine(pools[1], [(5, 20, [3, 9])]))
    assert asked == ["empty_engine"] * 3


_real_call = judge_link.call


def test_the_judge_refuses_bad_questions_in_one_line_and_keeps_serving(judge):
    from pagedlab.reference import dense_attention

    rng = np.random.default_rng(0)
    with pytest.raises(judge_link.JudgeError, match="too big for the judge"):  # 2^31 multiply-adds
        dense_attention(np.zeros((4096, 8, 128)), np.zeros((512, 8, 128)), np.zeros((512, 8, 128)))
    with pytest.raises(judge_link.JudgeError, match="num_heads"):
        dense_attention(rng.standard_normal((1, 3, 8)), rng.standard_normal((4, 2, 8)), rng.standard_normal((4, 2, 8)))
    with pytest.raises(judge_link.JudgeError, match="no judge question"):
        judge_link.call("solutions_please", {})
    # Raw bytes: a header longer than its cap, a header that claims 16 GB of arrays, one whose
    # element count (2^144) wraps a 64-bit product to 0, and arguments that are not a mapping.
    huge = b'{"op": "dense_attention", "arrays": [{"name": "q", "dtype": "float64", "shape": [16384, 16384, 8]}]}'
    wraps = b'{"op": "dense_attention", "arrays": [{"name": "q", "dtype": "float64", "shape": [16777216, 16777216, 16777216, 16777216, 16777216, 16777216]}]}'
    listed = b'{"op": "dense_attention", "args": [1, 2], "arrays": []}'
    for frame, said in ((struct.pack(">I", 1 << 30), "limit 65536"),
                        (struct.pack(">I", len(huge)) + huge, "arrays of over 64 MB"),
                        (struct.pack(">I", len(wraps)) + wraps, "arrays of over 64 MB"),
                        (struct.pack(">I", len(listed)) + listed, "dense_attention needs q, k and v")):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(judge))
            sock.sendall(frame)
            sock.shutdown(socket.SHUT_WR)
            header, _ = judge_link.read_frame(sock)
        assert not header["ok"] and said in header["error"], header
    q = rng.standard_normal((1, 2, 8))
    assert dense_attention(q, q, q).shape == (1, 2, 8)  # still serving


# ---------------------------------------------------------------------------- which notebooks
@pytest.mark.task_wide
def test_tasks_pick_the_notebooks_that_serve_them():
    every = sorted(NOTEBOOKS.glob("[0-9][0-9]*.ipynb"))
    names = lambda tasks: [p.stem[:3].rstrip("_") for p in notebook_plan.select(every, tasks)[0]]  # noqa: E731
    assert names(["11", "12"]) == ["09"]
    assert names(["9"]) == ["07"]
    assert names(["10"]) == ["08"]
    # Part A's tasks also take 02c (its file stands in for memory_manager.py) and the notebooks
    # without a task of their own that run memory_manager.py (00, 01, 03).
    assert names(["1"]) == ["00", "01", "02", "02c", "03"]
    assert names(["5"]) == ["00", "01", "02c", "03", "05"]
    assert names(None) == [p.stem[:3].rstrip("_") for p in every]
    # Every graded cell names its task: root judges what each notebook asks before it runs.
    graded_tasks = {t for p in every for c in notebook_plan.code_cells(p) if c.graded for t in c.tasks}
    assert graded_tasks == {row.id for row in manifest.TABLE}
