"""Feedback that names the right thing: where a hang was, which rule a difference broke, and
texts that point at things that exist."""

from __future__ import annotations

import sys
from pathlib import Path

from pagedlab import manifest
from pagedlab.grading import runner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "submissions"))
import broken  # noqa: E402  (copies solutions/ for planted-bug submissions)

# A loop that calls functions: frames come and go under a stack dump taken from another thread.
_CALLING_LOOP = "    while find_sequence(engine, seq_id) is not None:\n        pass\n"


def test_a_python_hang_is_located_at_the_student_line_in_every_run(tmp_path):
    """Measured before: the dump from faulthandler's watchdog thread lost the caller's frames in
    one run of six (a torn stack, or `File ???`). Five runs, each must name the looping line."""
    sub = broken.copy_solutions(tmp_path / "hang")
    anchor = "    logical, offset = divmod(seq.kv_count, KV_PER_BLOCK)\n"
    broken.mutate(sub, "memory_manager.py", anchor, _CALLING_LOOP + anchor)
    text = (sub / "memory_manager.py").read_text()
    line = text[:text.index(_CALLING_LOOP)].count("\n") + 1
    where = f'memory_manager.py", line {line} in append_kv'
    for attempt in range(5):
        outcome = runner.run_task(manifest.task("task4"), str(sub), sub, time_limit=2.0)
        hung = next(c for c in outcome.checks if c.passed is not True)
        assert "timed out" in hung.message, hung.message
        assert where in hung.message, f"run {attempt}: the loop's line was lost:\n{hung.message}"


def test_a_hang_inside_one_c_call_is_still_located(tmp_path):
    """A regex that backtracks forever never returns to the interpreter, so no Python signal
    handler runs: faulthandler's watchdog must still name the student's line."""
    sub = broken.copy_solutions(tmp_path / "regex")
    anchor = "    logical, offset = divmod(seq.kv_count, KV_PER_BLOCK)\n"
    spin = "    __import__('re').match('(a*)*b', 'a' * 64)\n"
    broken.mutate(sub, "memory_manager.py", anchor, spin + anchor)
    text = (sub / "memory_manager.py").read_text()
    line = text[:text.index(spin)].count("\n") + 1
    outcome = runner.run_task(manifest.task("task4"), str(sub), sub, time_limit=2.0)
    hung = next(c for c in outcome.checks if c.passed is not True)
    assert f'memory_manager.py", line {line} in append_kv' in hung.message, hung.message


def test_a_read_past_seq_len_says_no_thread_wrote_the_element_and_shows_the_index(tmp_path):
    """Measured before: the report advised a __syncthreads(), which cannot fix a loop bound."""
    sys.path.insert(0, str(ROOT / "tests"))
    import test_kernel

    text = (ROOT / "solutions" / "paged_attention.cu").read_text()
    softmax_loop = "for (int t = tid; t < seq_len; t += NUM_THREADS) {\n    const float e"
    assert text.count(softmax_loop) == 1
    (tmp_path / "paged_attention.cu").write_text(
        text.replace(softmax_loop, softmax_loop.replace("t < seq_len", "t <= seq_len")))
    _, message = test_kernel.first_failing_check(tmp_path)
    assert "UninitializedReadError" in message, message
    assert "no thread of this block wrote this element" in message, message
    # The shortest sequence has seq_len 1: the read is at index 1 of a 17-element logits row.
    assert "index 1 of `logits`, which has 17 elements" in message, message
    assert "bound the read" in message, message
