"""Feedback that names the right thing: where a hang was, which rule a difference broke, and
texts that point at things that exist."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pagedlab.grader import pipeline as runner
from pagedlab.spec import manifest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "submissions"))
import broken  # noqa: E402  (copies solutions/ for planted-bug submissions)

# A loop that calls functions: frames come and go under a stack dump taken from another thread.
_CALLING_LOOP = "    while find_sequence(engine, seq_id) is not None:\n        pass\n"


def test_a_python_hang_is_located_at_the_student_line_in_every_run(tmp_path):
    """Measured before: the dump from faulthandler's watchdog thread lost the caller's frames in
    one run of six (a torn stack, or `File ???`). Three runs, each must name the looping line
    (each spins out its 2 s limit: five cost 10 CPU-s for two more draws of a one-in-six flake)."""
    sub = broken.copy_solutions(tmp_path / "hang")
    anchor = "    logical, offset = divmod(seq.kv_count, KV_PER_BLOCK)\n"
    broken.mutate(sub, "memory_manager.py", anchor, _CALLING_LOOP + anchor)
    text = (sub / "memory_manager.py").read_text()
    line = text[:text.index(_CALLING_LOOP)].count("\n") + 1
    where = f'memory_manager.py", line {line} in append_kv'
    for attempt in range(3):
        outcome = runner.run_task(manifest.task("task4"), str(sub), sub, time_limit=2.0)
        hung = next(c for c in outcome.checks if c.passed is not True)
        assert "timed out" in hung.message, hung.message
        assert where in hung.message, f"run {attempt}: the loop's line was lost:\n{hung.message}"


def test_a_hang_inside_one_c_call_is_still_located(tmp_path):
    """A regex that backtracks forever never returns to the interpreter, so no Python signal
    handler runs: faulthandler's watchdog must still name the student's line."""
    sub = broken.copy_solutions(tmp_path / "regex")
    anchor = "    logical, offset = divmod(seq.kv_count, KV_PER_BLOCK)\n"
    spin = "    import re; re.match('(a*)*b', 'a' * 64)\n"
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
    assert "no thread wrote this element" in message, message
    # The shortest sequence has seq_len 1: the read is logits[1], shown against seq_len, not
    # against the 17 elements the launch gave the row (sized for the longest sequence).
    assert "element 1 of __shared__ `logits`" in message and "t = 1 >= seq_len = 1" in message, message
    assert "17 elements" not in message, message
    in_case_terms = message.split("In this case:")[1].split("hint:")[0]
    assert "__syncthreads" not in in_case_terms, message


# ---------------------------------------------------------------- what differed, which rule

def _verdict(task, name, impl):
    from pagedlab.drivers import record as check_record
    from pagedlab.grader import judge, registry

    c = next(c for c in registry.checks_of(task) if c.name == name)
    return judge.judge(check_record.drive(c, "solutions"), check_record.drive(c, str(impl))).message


def _planted(tmp_path, filename, old, new):
    broken.copy_solutions(tmp_path)
    broken.mutate(tmp_path, filename, old, new)
    return tmp_path


def test_a_block_count_off_by_one_cites_the_count_rule_not_first_fit(tmp_path):
    sub = _planted(tmp_path, "memory_manager.py", "(initial_kv_len + KV_PER_BLOCK - 1) // KV_PER_BLOCK",
                   "initial_kv_len // KV_PER_BLOCK + 1")
    for name in ("create_sequence maps ceil(len/16) blocks, first-fit, ref 1, L2 tables on demand",
                 "first-fit reuses the lowest freed blocks after holes"):
        message = _verdict("task2", name, sub)
        assert "ceil(initial_kv_len / 16) blocks" in message and "first-fit" not in message.split("rule:")[1], message


def test_buddy_rounding_down_cites_the_rounding_rule(tmp_path):
    sub = _planted(tmp_path, "buddy.py", "order = (n - 1).bit_length()", "order = n.bit_length() - 1")
    message = _verdict("task12", "a hand-traced sequence of splits and merges", sub)
    assert "rounded up to the next power of two" in message, message
    assert "expected: 4\n  yours:    2" in message, message


def test_buddy_splits_that_keep_the_upper_half_cite_the_split_rule(tmp_path):
    """Measured before: four checks cited "lowest address first" for offsets no tie decides."""
    sub = _planted(tmp_path, "buddy.py", "            self.free_lists[k].add(offset + (1 << k))\n",
                   "            self.free_lists[k].add(offset)\n            offset += 1 << k\n")
    from pagedlab.grader import registry

    for c in registry.checks_of("task12"):
        if c.name.startswith(("freeing everything", "random traces of alloc and free")):
            continue  # merging, and random traces judged call by call against the reference record
        message = _verdict("task12", c.name, sub)
        rule = message.split("rule:")[1].split("\n")[0]
        assert "keeps the lower half" in rule or "keep the lower half" in rule, (c.name, message)


def test_tensors_that_print_the_same_say_what_differed(tmp_path):
    """Measured before (Task 7): `expected: a float32 tensor of shape (…)` and the same `yours:`."""
    sub = _planted(tmp_path, "paged_attention.py", "    v_slots[slots[keep]] = v[keep].to(v_cache.dtype)\n", "")
    message = _verdict("task7", "each new token's K and V land in its slot, nothing else changes", sub)
    lines = message.splitlines()
    assert not any(line.startswith("  expected:") for line in lines), message
    assert "same dtype and shape as expected, but different values" in message, message


def _stream(*obs, status="completed"):
    from pagedlab.drivers.record import Stream

    return Stream(list(obs), status)


def test_a_false_condition_is_a_sentence_not_true_and_false():
    from pagedlab.grader.judge import judge

    want = {"w": "the list is circular", "v": True, "k": "cond", "r": "notebook 03"}
    message = judge(_stream(want), _stream({**want, "v": False}, status="stopped")).message
    assert "True" not in message and "False" not in message, message
    assert "for the reference solution this held; for your code it did not" in message, message


def test_a_differing_table_names_the_first_differing_entry():
    from pagedlab.grader.judge import judge

    table = {str(i): 10 + i for i in range(12)}
    want = {"w": "block table", "v": table, "k": "eq"}
    message = judge(_stream(want), _stream({**want, "v": {**table, "7": 3}})).message
    assert "differs:  at key 7: expected 17, yours 3" in message, message
    message = judge(_stream(want), _stream({**want, "v": {**table, "12": 22}})).message
    assert "yours has 13 entries where 12 were expected" in message and "(12)" in message, message


def test_one_kernel_error_is_shown_once_and_referred_to_after():
    """Measured before: the same sanitizer report, in full, under all five Task 10 checks."""
    from pagedlab.grader.judge import refer_to_first_report
    from pagedlab.verdicts import CheckOutcome

    report = ("  yours:    the kernel failed to run: RaceError: shared-memory race in block (0, 0, 0) "
              "on `partial` ... at paged_attention.cu:{line}, with no barrier")
    outcomes = [CheckOutcome(f"check {i}", False, "kernel output\n" + report.format(line=98)) for i in range(4)]
    outcomes.append(CheckOutcome("check 4", False, "kernel output\n" + report.format(line=120)))
    refer_to_first_report(outcomes)
    assert "shared-memory race" in outcomes[0].message
    for later in outcomes[1:4]:
        assert "shared-memory race" not in later.message
        assert "the same RaceError at paged_attention.cu:98 as under ✗ check 0" in later.message
    assert "shared-memory race" in outcomes[4].message  # another line: its own report


def test_an_id_no_c_int_can_hold_fails_with_the_bad_input_rule_and_its_hint(tmp_path):
    """Measured before: `create_sequence(engine, '7', 5)` gave a bare TypeError with no rule."""
    sub = _planted(tmp_path, "memory_manager.py",
                   "    if engine is None or not is_c_int(seq_id) or not is_c_int(initial_kv_len):\n",
                   "    if engine is None:\n")
    message = _verdict("task2", "create_sequence rejects ids and lengths a C int cannot hold, and changes nothing", sub)
    assert "your code raised TypeError" in message, message
    assert "rule:     notebook 02, Task 2: bad input" in message, message
    assert "is_c_int" in message.split("hint:")[1], message
    assert "during:   create_sequence(engine, '7', 5) should return None" in message, message


def test_notebook_02_and_the_exercise_teach_the_bad_input_rule():
    notebook = (ROOT / "notebooks" / "02_block_table.py").read_text()
    assert "is_c_int" in notebook and "'7'" in notebook
    from pagedlab import load

    doc = load("memory_manager", "exercises").create_sequence.__doc__
    assert "is_c_int" in doc and '"7"' in doc, doc


# ---------------------------------------------------------------- texts that name real things

_DOTTED = __import__("re").compile(r"\bpagedlab(?:\.[A-Za-z_]\w*)+")


def _strings_in(path: Path) -> list[str]:
    import ast

    tree = ast.parse(path.read_text())
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def _resolves(dotted: str) -> bool:
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


@pytest.mark.task_wide
def test_every_pagedlab_path_named_in_a_rule_hint_or_message_exists():
    """Measured before: Task 11's replay hint named pagedlab.checks.prefix.random_ops."""
    import json

    sources = sorted((ROOT / "pagedlab" / "drivers").rglob("*.py")) + sorted((ROOT / "grading" / "hidden").glob("*.py"))
    texts = [s for path in sources for s in _strings_in(path)]
    for record in json.loads((ROOT / "pagedlab" / "grader" / "expected.json").read_text())["records"].values():
        texts += [str(o.get(key, "")) for o in record["obs"] for key in ("r", "h", "w", "x")]
    named = {m.group(0).rstrip(".") for text in texts for m in _DOTTED.finditer(text)}
    assert "pagedlab.drivers.prefix_cache.random_ops" in named  # the scan sees the hints
    missing = sorted(path for path in named if not _resolves(path))
    assert not missing, f"texts name paths that do not exist: {missing}"


_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}


def test_a_notebook_that_counts_fenced_parts_counts_the_exercise_file_right():
    """Measured before: notebook 10 said four fenced parts (and the logits given);
    exercises/paged_attention_v2.cu has five."""
    import re

    claims = []
    for notebook in sorted((ROOT / "notebooks").glob("[0-9]*.py")):
        text = notebook.read_text().replace("\n# ", " ")  # markdown lines joined
        for found in re.finditer(r"You write (\w+)\s+fenced parts", text):
            exercise = re.findall(r"`exercises/([\w.]+)`", text[:found.start() + 200])[-1]
            claims.append((notebook.name, exercise, _NUMBERS[found.group(1).lower()]))
    assert claims, "no notebook counts its fenced parts any more: drop this test"
    for notebook, exercise, said in claims:
        parts = (ROOT / "exercises" / exercise).read_text().count("YOUR CODE HERE (Task")
        assert said == parts, f"{notebook} says {said} fenced parts, exercises/{exercise} has {parts}"


# ---------------------------------------------------------------- pictures


def test_pool_legends_side_by_side_stay_clear_of_the_next_panel():
    """Measured before (notebook 10's GPU/CPU pools): the left legend ran under the right panel,
    clipping "seq 2 (20" …. Every legend entry must lie outside every other panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pagedlab import cmem, viz
    from pagedlab.drivers import scenes
    from pagedlab.engine.pool import Pool
    from pagedlab.harness import hw3

    pools = Pool(32 * hw3.BLOCK_SIZE), Pool(24 * hw3.BLOCK_SIZE)
    heap = cmem.snapshot()
    gpu = scenes.engine(pools[0], [(1, 50, [3, 6, 1, 8]), (2, 20, [0]), (3, 51, [3, 6, 1, 10]),
                                   (4, 60, [3, 6, 11, 12]), (5, 70, [13, 14, 15, 16, 17]), (6, 33, [12, 20, 21])])
    cpu = scenes.engine(pools[1], [(100, 40, [1, 3, 4])])
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 2.8))
    viz.draw_pool(gpu, ax=left, cols=16)
    viz.draw_pool(cpu, ax=right, cols=12)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax, other in ((left, right), (right, left)):
        panel = other.get_window_extent(renderer)
        for text in ax.get_legend().get_texts():
            box = text.get_window_extent(renderer)
            assert not box.overlaps(panel), f"legend entry {text.get_text()!r} lies under the other panel"
    labels = [t.get_text() for t in left.get_legend().get_texts()]
    assert "seq 2 (20 rec)" in labels
    plt.close(fig)
    hw3.sweep(heap)


# ---------------------------------------------------------------- demo cells


def test_require_asks_once_per_version_of_the_files(monkeypatch):
    """A demo's require after a passing graded cell, or a second require on the same unfinished
    files, does not run the checks again; it says the same one line."""
    from pagedlab import graded
    from pagedlab.spec.catalog import CheckFailure

    graded.run("task1", impl="solutions", quiet=True)
    calls = []
    real = graded._outcome
    monkeypatch.setattr(graded, "_outcome", lambda *a, **k: calls.append(a) or real(*a, **k))
    graded.require("task1", impl="solutions")
    assert calls == []
    messages = []
    for _ in range(2):
        try:
            graded.require("task1", impl="exercises")
        except CheckFailure as exc:
            messages.append(str(exc))
    assert len(calls) == 1 and len(messages) == 2 and messages[0] == messages[1]
    assert "needs Task 1" in messages[0] and "\n" not in messages[0], messages[0]
    assert graded._blocking == messages[0]


_GATHER = "    positions = torch.arange(seq_len, device=k_cache.device)\n"


@pytest.mark.parametrize("bug, said", [
    # one row too far: the 1-token sequence reads the rest of its block
    ("positions = positions + 1", "first at token 0: yours holds NaN"),
    # backwards: the 1-token sequence is right, the next one wrong from its first token
    ("positions = positions.flip(0)", "first at token 0: yours holds other values than the reference's")])
def test_a_wrong_gather_is_told_at_its_first_token_by_the_judge(tmp_path, bug, said):
    """The batch the check child builds holds no tokens in order, so the driver records the
    gathered K/V token by token and the judge says which token differs first, and for a NaN
    there, that an unused slot of the cache was read."""
    sub = broken.copy_solutions(tmp_path / "gather")
    broken.mutate(sub, "paged_attention.py", _GATHER, _GATHER + f"    {bug}\n")
    outcome = runner.run_task(manifest.task("task8"), str(sub), sub, time_limit=60.0)
    wrong = next(c for c in outcome.checks if c.passed is not True)
    assert said in wrong.message, wrong.message
    assert ("an unused slot of the cache was read" in wrong.message) == ("NaN" in said), wrong.message
    assert "token p comes from slot_mapping(block_table, p, block_size)" in wrong.message, wrong.message


def test_a_demo_cell_stopped_for_an_unfinished_task_draws_no_empty_axes(tmp_path, capsys):
    """Measured before (notebook 09 on the stubs): the utilization bars and timelines showed
    empty axes under 'needs Task 12 to pass first'; the cells open a figure, then read what the
    stopped demo would have made. Now a stopped cell's figures are closed; a cell that fails for
    another reason keeps its figure (the student may want it)."""
    import shutil

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from IPython.core.interactiveshell import InteractiveShell

    from pagedlab import graded

    shutil.copy(ROOT / "exercises" / "buddy.py", tmp_path)
    cells = [f'import pagedlab\npagedlab.graded.require("task12", impl={str(tmp_path)!r})\nruns = []\n',
             'fig, ax = plt.subplots()\nax.bar(["a"], [len(runs)])\n',
             f'fig, ax = plt.subplots()\npagedlab.graded.require("task12", impl={str(tmp_path)!r})\n',
             'fig, ax = plt.subplots()\nraise ValueError("not a task")\n']
    shell = InteractiveShell.instance()
    shell.user_ns["plt"] = plt
    installed = graded._installed
    plt.close("all")
    open_after = []
    try:
        graded._installed = False
        for cell in cells:
            shell.run_cell(cell)
            open_after.append(len(plt.get_fignums()))
    finally:
        shell.set_custom_exc((), None)
        graded._installed = installed
        InteractiveShell.clear_instance()
        plt.close("all")
    out = capsys.readouterr().out
    assert out.count("needs Task 12 · a buddy allocator") == 3, out
    assert open_after == [0, 0, 0, 1], open_after
