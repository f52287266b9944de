"""The instructor explorer drives the real engine: its methods change blocks, ref counts and the
log exactly as the HW3 calls they wrap (headless: no browser, Agg backend)."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from pagedlab import cmem  # noqa: E402
from pagedlab.explorer import Explorer  # noqa: E402
from pagedlab.harness import hw3  # noqa: E402


@pytest.fixture
def ex():
    before = cmem.live_bytes()
    explorer = Explorer(pool_blocks=16, impl="solutions")
    yield explorer
    explorer.close()
    assert cmem.live_bytes() == before, "the explorer leaked heap memory after close()"


def test_create_maps_blocks_first_fit_and_logs(ex):
    seq = ex.create(1, 40)
    assert seq is not None and seq.seq_id == 1
    st = hw3.state(ex.engine)
    assert dict(st.seq(1).mapping) == {0: 0, 1: 1, 2: 2}
    assert st.free == 13
    last = ex.history[-1]
    assert last.ok and last.call == "create_sequence(engine, 1, 40)"
    assert last.shown == "Sequence(seq_id=1, kv_count=40)"
    assert last.free_blocks == 13


def test_fork_shares_blocks_and_append_copies_on_write(ex):
    ex.create(1, 20)          # blocks 0, 1 (block 1 half full)
    ex.fork(1, 2)
    assert hw3.ref_counts(ex.engine)[:2] == [2, 2]
    assert ex.append(2, 99) == 0
    st = hw3.state(ex.engine)
    assert dict(st.seq(2).mapping) == {0: 0, 1: 2}, "the child's partial block must be copied"
    assert dict(st.seq(1).mapping) == {0: 0, 1: 1}
    assert list(st.refs[:3]) == [2, 1, 1]
    assert ex.pool.read_int32(2, 4) == 99
    assert [s.call.split("(")[0] for s in ex.history] == [
        "llm_init", "create_sequence", "fork_sequence", "append_kv"]


def test_failed_calls_are_logged_with_their_return_value(ex):
    assert ex.create(1, 16 * 17) is None          # 17 blocks > 16 in the pool
    assert ex.free(5) == -1
    assert ex.fork(9, 10) is None
    assert ex.append(3, 1) == -1
    shown = [(s.ok, s.shown) for s in ex.history[1:]]
    assert shown == [(False, "None"), (False, "-1"), (False, "None"), (False, "-1")]
    assert hw3.state(ex.engine).free == 16


def test_free_returns_blocks_and_reset_starts_over(ex):
    ex.create(1, 16)
    ex.create(2, 16)
    assert ex.free(1) == 0
    assert hw3.ref_counts(ex.engine)[:2] == [0, 1]
    ex.append(2, 5)
    ex.reset()
    assert hw3.state(ex.engine).seqs == ()
    assert hw3.state(ex.engine).free == 16
    assert [s.call.split("(")[0] for s in ex.history] == ["llm_destroy", "llm_init"]
    assert ex.pool.words(1) == [ex.pool.words(1)[0] + i for i in range(16)], "pool refilled"


def test_student_exception_is_logged_not_raised():
    import pagedlab

    ex = Explorer(mm=pagedlab.load("memory_manager", "exercises"), pool_blocks=8)
    assert ex.engine is None
    assert "NotImplementedError" in ex.history[0].shown
    assert ex.create(1, 4) is None
    assert not ex.history[-1].ok


def test_the_students_engine_is_checked_in_a_child_before_it_runs_here(tmp_path):
    """The explorer drives the student's own module (impl=) only once the task behind each button
    passes its checks in a separate process: a segfaulting append_kv is never called here."""
    import shutil

    from pagedlab.loader import ROOT

    shutil.copy(ROOT / "solutions" / "memory_manager.py", tmp_path / "memory_manager.py")
    path = tmp_path / "memory_manager.py"
    path.write_text(path.read_text().replace(
        "    record = ctypes.c_int32.from_address(block_address(engine, block) + offset * 4)\n",
        "    record = ctypes.c_int32.from_address(8 + offset * 4)\n"))
    ex = Explorer(pool_blocks=8, impl=tmp_path)
    assert ex.create(1, 3) is not None and ex.history[-1].ok  # Tasks 1-2 pass: runs here
    assert ex.append(1, 5) is None  # Task 4 segfaults in the child: never called here
    shown = ex.history[-1].shown
    assert "needs Task 4" in shown and "notebook 04" in shown, shown


def test_widget_and_figure_render_headless(ex):
    ex.create(1, 30)
    ex.fork(1, 2)
    box = ex.widget
    ex.append(2, 7)
    assert "append_kv(engine, 2, 7) -&gt; 0" in ex._log_html.value
    fig = ex.figure()
    assert len(fig.axes) == 2
    # the buttons call the same methods
    ex._seq_box.value, ex._num_box.value = 3, 5
    create_button = box.children[1].children[0]
    create_button.click()
    assert hw3.find(ex.engine, 3) is not None
    assert ex.history[-1].call == "create_sequence(engine, 3, 5)"
