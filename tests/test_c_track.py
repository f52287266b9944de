"""The C track: llm_memory.c graded by the same Task 1-5 checks as memory_manager.py.

A folder holding only llm_memory.c is a submission: the reference passes every check, the
generated stubs fail every task, each planted bug (tests/c_mutants.py) fails the check that
guards its rule, and bugs Python cannot have (double free, use after free, a segfault, an endless
loop) fail with the C file and line in the message while the rest of the run goes on.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import c_mutants  # noqa: E402
from forked_checks import CheckServer  # noqa: E402

from pagedlab import assign, cmem, load
from pagedlab import graded as checks
from pagedlab.engine import cnative, ctrack  # noqa: E402
from pagedlab.engine.pool import Pool  # noqa: E402
from pagedlab.grader import registry
from pagedlab.harness import hw3  # noqa: E402

pytestmark = pytest.mark.skipif(not ctrack.available(), reason="no C compiler on this machine")

ROOT = Path(__file__).resolve().parent.parent
TASKS = ("task1", "task2", "task3", "task4", "task5")


@pytest.fixture(autouse=True)
def _short_call_limit(monkeypatch):
    # The endless-loop mutant should cost 1 s per call, not the default 5.
    monkeypatch.setenv(ctrack.TIMEOUT_ENV, "1")


def _folder(tmp_path: Path, text: str, name: str = "sub") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "llm_memory.c").write_text(text)
    return folder


def _results(folder: Path) -> dict:
    return {task: checks.results(task, str(folder)) for task in TASKS}


def test_reference_passes_every_task_1_to_5(tmp_path):
    folder = _folder(tmp_path, c_mutants.SOLUTION.read_text())
    for task, found in _results(folder).items():
        assert len(found) >= 3, task
        assert all(r.passed for r in found), [(r.name, r.message) for r in found if not r.passed]


def test_generated_stubs_compile_and_fail_every_task(tmp_path):
    text = assign.make_exercise(c_mutants.SOLUTION.read_text(), "solutions/llm_memory.c")
    assert "BEGIN SOLUTION" not in text and "take_block(engine, block + 1)" not in text
    assert text == (ROOT / "exercises" / "llm_memory.c").read_text(), "run `pagedlab assign`"
    folder = _folder(tmp_path, text)
    mm = load("memory_manager", impl=folder)
    assert mm.warnings == "", mm.warnings  # the stubs compile cleanly under -Wall -Wextra
    # As the Python stubs: no check passes, and each says the task is not written yet.
    for task, found in _results(folder).items():
        assert found and not any(r.passed for r in found), task
        assert all(r.message.startswith("not implemented yet: Task") for r in found), found


def test_loader_follows_the_track_rule(tmp_path):
    """The loader takes the file the grade takes (pagedlab/track.py): C alone, C next to the
    untouched Python stub, Python when both are edited, and what track.txt says."""
    folder = _folder(tmp_path, c_mutants.SOLUTION.read_text())
    assert isinstance(load("memory_manager", impl=folder), ctrack.CEngine)
    (folder / "memory_manager.py").write_bytes((ROOT / "exercises" / "memory_manager.py").read_bytes())
    assert isinstance(load("memory_manager", impl=folder), ctrack.CEngine)
    (folder / "memory_manager.py").write_text((ROOT / "solutions" / "memory_manager.py").read_text())
    assert not isinstance(load("memory_manager", impl=folder), ctrack.CEngine)
    (folder / "track.txt").write_text("C\n")
    assert isinstance(load("memory_manager", impl=folder), ctrack.CEngine)


def test_c_engine_has_the_python_call_shape():
    mm = ctrack.load(c_mutants.SOLUTION)
    pool = Pool(64 * 20)
    heap = cmem.snapshot()
    assert mm.llm_init(None, 4096) is None and mm.llm_init(pool.addr, 63) is None
    engine = mm.llm_init(pool.addr, pool.size)
    assert isinstance(engine, hw3.LLMEngine) and engine.total_local_blocks == 20
    seq = mm.create_sequence(engine, 1, 40)
    assert isinstance(seq, hw3.Sequence) and hw3.mapping(seq) == {0: 0, 1: 1, 2: 2}
    assert mm.create_sequence(engine, 1, 5) is None and mm.create_sequence(None, 2, 5) is None
    child = mm.fork_sequence(engine, 1, 2)
    assert hw3.ref_counts(engine)[:3] == [2, 2, 2] and child.kv_count == 40
    assert mm.append_kv(engine, 2, 0x1234) == 0
    assert hw3.mapping(hw3.find(engine, 2))[2] == 3 and pool.words(3)[8] == 0x1234
    assert mm.free_sequence(engine, 9) == -1 and mm.free_sequence(engine, 1) == 0
    where = {a.where for a in cmem.changes_since(heap).allocated}
    assert "llm_memory.c:74 in llm_init" in where, where  # C allocations carry their C line
    assert mm.llm_destroy(engine) == 0
    assert not cmem.changes_since(heap).allocated
    # Values C's int parameters cannot receive are bad input: None / -1, as in the Python track.
    engine = mm.llm_init(pool.addr, pool.size)
    assert mm.create_sequence(engine, "7", 3) is None and mm.append_kv(engine, 1, 2**40) == -1
    assert mm.llm_destroy(engine) == 0


def test_compile_errors_and_warnings_reach_the_student(tmp_path, capsys):
    broken = _folder(tmp_path, c_mutants.SOLUTION.read_text().replace("seq->kv_count++;", "seq->kv_count++"), "broken")
    with pytest.raises(ctrack.CCompileError, match=r"llm_memory\.c:\d+"):
        ctrack.load(broken / "llm_memory.c")
    warned = _folder(tmp_path, c_mutants.SOLUTION.read_text().replace(
        "int free_sequence(LLMEngine *engine, int seq_id)\n{\n",
        "int free_sequence(LLMEngine *engine, int seq_id)\n{\n    int unused;\n"), "warned")
    mm = ctrack.load(warned / "llm_memory.c")
    assert "unused variable" in mm.warnings
    assert "unused variable" in capsys.readouterr().err


def test_a_missing_function_is_not_implemented(tmp_path):
    text = c_mutants.SOLUTION.read_text()
    start = text.index("int llm_destroy(LLMEngine *engine)\n{")
    folder = _folder(tmp_path, text[:start])
    mm = load("memory_manager", impl=folder)
    with pytest.raises(NotImplementedError, match="no function llm_destroy"):
        mm.llm_destroy(None)
    found = checks.results("task5", str(folder))
    assert found and not any(r.passed for r in found)
    assert "not implemented" in found[0].message


@pytest.mark.parametrize("mutant", c_mutants.MUTANTS, ids=lambda m: m.name)
def test_mutant_applies_to_current_solution(mutant):
    text = c_mutants.SOLUTION.read_text()
    assert text.count(mutant.old) == 1, f"{mutant.name} no longer matches solutions/llm_memory.c"


def test_at_least_12_distinct_c_mutants():
    names = [m.name for m in c_mutants.MUTANTS]
    assert len(set(names)) == len(names) >= 12


# The endless-loop mutant hangs in every Task 4 check that takes a block, each one for the whole
# call limit: 0.3 s each instead of 1 (the reference's calls take microseconds).
MUTANT_CALL_LIMIT = "0.3"


@pytest.fixture(scope="module")
def server():
    """The C mutants go through one check server (tests/forked_checks.py): the checks imported
    once, each mutant's drivers in a fork of it, judged by the real judge."""
    found = CheckServer(env={ctrack.TIMEOUT_ENV: MUTANT_CALL_LIMIT})
    yield found
    found.close()


def test_every_c_mutant_is_caught(tmp_path, server):
    jobs = [(m, tmp_path / m.name) for m in c_mutants.MUTANTS]
    outcomes = []
    for mutant, folder in jobs:
        text = c_mutants.write_mutant(mutant, folder).read_text()
        found = [checks.Result(mutant.task, name, passed, message)
                 for (_, name), (passed, message) in server.grade(folder, [mutant.task]).items()]
        outcomes.append((found, text))
    problems = []
    for (mutant, _), (found, text) in zip(jobs, outcomes, strict=True):
        failed = [r for r in found if r.passed is False and mutant.must_fail in r.name]
        if not failed:
            problems.append(f"{mutant.name}: no failing check named like {mutant.must_fail!r}; "
                            f"failed: {[r.name for r in found if not r.passed]}")
            continue
        message = failed[0].message
        if not any(marker in message for marker in mutant.markers):
            problems.append(f"{mutant.name}: none of {mutant.markers} in:\n{message}")
        if mutant.at and not any(f"llm_memory.c:{line}" in message for line in mutant.lines(text)):
            problems.append(f"{mutant.name}: the C line {mutant.lines(text)} is not named in:\n{message}")
    assert not problems, "\n".join(problems)


def test_a_segfaulting_mutant_fails_its_check_and_the_run_goes_on(tmp_path):
    mutant = next(m for m in c_mutants.MUTANTS if m.name == "wild_write_segfaults")
    c_mutants.write_mutant(mutant, tmp_path / "m")
    found = {r.name: r for r in checks.results("task4", str(tmp_path / "m"))}
    crashed = found["append_kv translates record 613 to block_table[2][6], slot 5 (the handout's example)"]
    assert crashed.passed is False and "SIGSEGV" in crashed.message
    # Every check after the crash still ran in the same task process and gave a verdict ...
    assert all(r.passed is not None for r in found.values())
    # ... and the checks that never append through the bad line pass.
    assert found["append_kv of an unknown sequence returns -1 and changes nothing"].passed is False  # appends at the end
    assert found["OOM when the L2 table itself is missing: -1, no L2 allocated"].passed is True
    # Other tasks of the same submission are graded as usual.
    assert all(r.passed for r in checks.results("task3", str(tmp_path / "m")))


@pytest.fixture(params=["in-process", "runner"])
def mode(request):
    """Where the library runs: in this process (notebooks), or in the C runner (the check child)."""
    if request.param == "runner":
        if not sys.platform.startswith("linux"):
            pytest.skip("the C runner is Linux's (memfd, fixed shared mappings)")
        ctrack.use_runner()
        yield request.param
        ctrack.use_runner(False)
    else:
        yield request.param


def test_crash_keeps_python_alive_and_names_the_line(tmp_path, mode):
    mutant = next(m for m in c_mutants.MUTANTS if m.name == "wild_write_segfaults")
    path = c_mutants.write_mutant(mutant, tmp_path / "m")
    mm = ctrack.load(path)
    pool = Pool(64 * 4)
    engine = mm.llm_init(pool.addr, pool.size)
    assert mm.create_sequence(engine, 1, 3) is not None
    with pytest.raises(ctrack.CCrash, match=r"SIGSEGV, a NULL pointer dereference") as info:
        mm.append_kv(engine, 1, 5)
    line = mutant.lines(path.read_text())[0]
    assert f"append_kv, llm_memory.c:{line}" in str(info.value)
    last = info.traceback[-1]
    assert Path(str(last.path)).name == "llm_memory.c" and last.lineno + 1 == line
    # The process lives on and the engine still works for the calls that avoid the bad line.
    assert mm.free_sequence(engine, 1) == 0 and mm.llm_destroy(engine) == 0


def test_grade_cli_grades_a_c_submission(tmp_path):
    from pagedlab.grader.cli import grade

    folder = _folder(tmp_path, c_mutants.SOLUTION.read_text(), "upload")
    result = grade(str(folder), tasks=list(TASKS), echo=lambda *_: None, hidden=True, hidden_seed=11)
    scored = {t["name"]: (t["score"], t["max_score"]) for t in result["tests"]}
    short = {name: got for name, got in scored.items() if got[0] != got[1]}
    assert scored and not short, [(t["name"], t["output"][-1500:]) for t in result["tests"] if t["name"] in short]


def test_heap_hook_accounts_each_call_at_its_c_line():
    """Every malloc/calloc/free of the C code is one entry in cmem's counters."""
    mm = ctrack.load(c_mutants.SOLUTION)
    pool = Pool(64 * 300)
    snap = cmem.snapshot()
    engine = mm.llm_init(pool.addr, pool.size)               # engine + refs: 2 allocations
    mm.create_sequence(engine, 1, 4096)                      # seq + L1 + 16 L2: 18
    mm.fork_sequence(engine, 1, 2)                           # 18 more
    assert cmem.changes_since(snap).mallocs == 38
    mm.llm_destroy(engine)                                   # 38 frees
    changes = cmem.changes_since(snap)
    assert (changes.mallocs, changes.frees, changes.allocated) == (38, 38, [])


def test_layout_of_the_shipped_header_matches_pagedlab_hw3():
    lib = ctrack.load(c_mutants.SOLUTION)._lib
    assert [lib.pl_layout(i) for i in range(4)] == [ctypes.sizeof(hw3.Sequence), 24, ctypes.sizeof(hw3.LLMEngine),
                                                    hw3.LLMEngine.active_seqs.offset]
    assert os.path.isfile(ctrack.INCLUDE / "hw3.h")


# -- the tracked heap against the real allocator (Valgrind, ASan) ------------------------------
LEAKY = ["free_keeps_l2", "destroy_leaks_ref_array"]


def _sources(tmp_path: Path) -> list[Path]:
    paths = [c_mutants.SOLUTION]
    for name in LEAKY:
        mutant = next(m for m in c_mutants.MUTANTS if m.name == name)
        paths.append(c_mutants.write_mutant(mutant, tmp_path / name))
    return paths


@pytest.mark.skipif(cnative.valgrind() is None, reason="valgrind is not installed (optional cross-check)")
def test_tracked_heap_equals_valgrind_on_the_real_allocator(tmp_path):
    """Same session, two ledgers: cmem through ctrack's hook, Valgrind on plain libc malloc. The
    call counts, the bytes and every leaked block with its C line must agree exactly."""
    no_destroy = cnative.DEMO_SESSION[:-1]  # ends like a C program that forgot llm_destroy
    # No leak, everything left live, and each mutant's own leak (a mutant without llm_destroy adds
    # only what the reference without it shows; Valgrind costs 0.7 CPU-s a run).
    solution, *mutants = _sources(tmp_path)
    runs = [(solution, cnative.DEMO_SESSION), (solution, no_destroy)]
    runs += [(mutant, cnative.DEMO_SESSION) for mutant in mutants]
    for source, session in runs:
        tracked, real = cnative.run_tracked(source, session), cnative.run_valgrind(source, session)
        assert real.allocs and real.allocs > 10, real.output
        assert (tracked.allocs, tracked.frees, tracked.bytes_allocated) == \
            (real.allocs, real.frees, real.bytes_allocated), (source, tracked, real.output[-2000:])
        assert tracked.leaks == real.leaks, (source, tracked.leaks, real.leaks)
    assert cnative.run_tracked(c_mutants.SOLUTION).leaks == []
    assert cnative.run_tracked(tmp_path / "free_keeps_l2" / "llm_memory.c").lost_bytes == 5 * 64


@pytest.mark.skipif(not cnative.asan_available(), reason="no AddressSanitizer runtime (optional cross-check)")
def test_asan_leaks_are_leaks_the_tracked_heap_reports(tmp_path):
    """LeakSanitizer may miss a block a stale stack slot still points to, never invent one: what it
    reports is a sub-multiset of the tracked leaks, at the same C lines."""
    for source in _sources(tmp_path):
        tracked, asan = cnative.run_tracked(source), cnative.run_asan(source)
        remaining = list(tracked.leaks)
        for leak in asan.leaks:
            assert leak in remaining, (source, leak, tracked.leaks)
            remaining.remove(leak)
        assert bool(asan.leaks) == bool(tracked.leaks), (source, asan.output[-1500:])


def test_explorer_and_pictures_drive_a_c_engine(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from pagedlab import viz
    from pagedlab.explorer import Explorer

    folder = _folder(tmp_path, c_mutants.SOLUTION.read_text())
    ex = Explorer(impl=folder, pool_blocks=8)
    assert isinstance(ex.mm, ctrack.CEngine)
    ex.create(1, 20)
    ex.fork(1, 2)
    ex.append(2, 99)                      # CoW of the shared second block
    view = ex.view()
    assert [s.seq_id for s in view.seqs] == [1, 2]
    assert hw3.ref_counts(ex.engine)[:3] == [2, 1, 1]
    assert "append_kv(engine, 2, 99) -> 0" in ex.history_text()
    fig = viz.draw_engine(ex.engine)
    assert fig is not None
    ex.close()
    assert "✓ llm_destroy(engine) -> 0" in ex.history_text()


def test_a_crash_shows_in_the_explorer_log_with_its_line(tmp_path):
    from pagedlab.explorer import Explorer

    mutant = next(m for m in c_mutants.MUTANTS if m.name == "wild_write_segfaults")
    path = c_mutants.write_mutant(mutant, tmp_path / "m")
    # mm= (not impl=): run the C engine here even though Task 4 crashes, to see the trampoline
    # turn the segfault into a logged CCrash (impl= would check the task in a child first).
    ex = Explorer(mm=load("memory_manager", path.parent), pool_blocks=8)
    ex.create(1, 3)
    ex.append(1, 5)
    line = mutant.lines(path.read_text())[0]
    assert "raised CCrash: append_kv() crashed with SIGSEGV" in ex.history_text()
    assert f"llm_memory.c:{line}" in ex.history_text()


def test_printf_reaches_python_and_exit_ends_only_the_call(tmp_path, capsys):
    text = c_mutants.SOLUTION.read_text().replace(
        "    seq->kv_count++;\n",
        '    seq->kv_count++;\n    printf("appended %d\\n", kv_data);\n    fprintf(stderr, "warn %d\\n", seq_id);\n'
        "    if (kv_data == 13)\n        exit(3);\n").replace("#include <stdlib.h>\n", "#include <stdlib.h>\n#include <malloc.h>\n")
    folder = _folder(tmp_path, text)
    mm = load("memory_manager", impl=folder)
    pool = Pool(64 * 4)
    engine = mm.llm_init(pool.addr, pool.size)
    mm.create_sequence(engine, 1, 2)
    assert mm.append_kv(engine, 1, 5) == 0
    out = capsys.readouterr()
    assert out.out == "appended 5\n" and out.err == "warn 1\n"
    with pytest.raises(ctrack.CExit, match=r"exit\(3\) in append_kv, llm_memory\.c:\d+"):
        mm.append_kv(engine, 1, 13)
    assert mm.llm_destroy(engine) == 0  # the process, and the engine, are still there


@pytest.mark.parametrize(("bug", "words"), [
    ("if (seq_id == 77) return free_sequence(engine, seq_id) + 1;", "a stack overflow"),
    ("if (seq_id == 77) return 5 / (seq_id - 77);", "SIGFPE, an arithmetic error"),
])
def test_stack_overflow_and_division_by_zero_are_named(tmp_path, bug, words):
    text = c_mutants.SOLUTION.read_text().replace(
        "int free_sequence(LLMEngine *engine, int seq_id)\n{\n",
        f"int free_sequence(LLMEngine *engine, int seq_id)\n{{\n    {bug}\n")
    mm = load("memory_manager", impl=_folder(tmp_path, text))
    pool = Pool(64 * 4)
    engine = mm.llm_init(pool.addr, pool.size)
    with pytest.raises(ctrack.CCrash, match=words):
        mm.free_sequence(engine, 77)
    assert mm.create_sequence(engine, 1, 3) is not None and mm.llm_destroy(engine) == 0


def test_a_part_a_task_added_after_the_c_track_says_there_is_no_c_version(tmp_path):
    """A new Part A task whose check calls a memory_manager.py function the C API lacks (here
    take_block, as a toy task's check would): on a C-only submission the grader says "no C
    version of this task", never "your code raised" (the student's C code is not at fault)."""
    from pagedlab.drivers import record
    from pagedlab.drivers.record import expect_equal
    from pagedlab.grader import judge
    from pagedlab.spec import catalog

    rule = "notebook 02, the toy Part A task: take_block is first-fit"

    def driver(run):
        mm = run.load("memory_manager")
        pool = Pool(64 * 4)
        engine = mm.llm_init(pool.addr, pool.size)
        expect_equal(mm.take_block(engine), 0, "take_block on a fresh engine", rule=rule)

    toy = catalog.Check("task99", "take_block takes the lowest free block", driver, rule, "", False, None, __name__)
    folder = _folder(tmp_path, c_mutants.SOLUTION.read_text())
    trusted = record.drive(toy, "solutions")
    assert trusted.status == "completed"
    verdict = judge.judge(trusted, record.drive(toy, str(folder)))
    assert not verdict.passed
    assert verdict.message.startswith("no C version of this task: llm_memory.c stands in for "
                                      "memory_manager.py only for llm_init()"), verdict.message
    assert "take_block()" in verdict.message and "your code raised" not in verdict.message
    assert not hasattr(ctrack.load(c_mutants.SOLUTION), "take_block")  # still an AttributeError


def test_the_c_api_named_in_no_c_version_is_the_runtimes_trampolines():
    import re

    runtime = (ROOT / "pagedlab" / "include" / "pl_runtime.c").read_text()
    assert tuple(re.findall(r"^PL_TRAMPOLINE\((\w+),", runtime, re.M)) == ctrack.C_API


# -- feedback that names the first cause ---------------------------------------------------------
def test_a_compile_error_is_shown_once_per_grade(tmp_path):
    """Measured before: the compiler's output under each of Task 1's 5 checks, with 'your code
    raised CCompileError', a rule and a 'during' of a step that never ran, and again under every
    check of Task 2. Now: once, under the first check; the rest refer to it."""
    from pagedlab.grader.cli import grade

    folder = _folder(tmp_path, c_mutants.SOLUTION.read_text().replace("seq->kv_count++;", "seq->kv_count++"))
    said = []
    result = grade(str(folder), tasks=["1", "2"], echo=lambda text="": said.append(text), hidden=False)
    text = "\n".join(said)
    assert text.count("error: expected ‘;’ before ‘return’") == 1, text
    assert "your code raised" not in text and "during:" not in text, text
    outputs = {t["name"]: t["output"] for t in result["tests"]}
    task1, task2 = (next(o for name, o in outputs.items() if name.startswith(f"Task {n} ")) for n in (1, 2))
    assert task1.count("llm_memory.c does not compile") == 5 and task1.count("the same error as under ✗") == 4
    assert task2.count("llm_memory.c does not compile: the same error as under Task 1 · ") == \
        len(registry.checks_of("task2")), task2
    assert all(t["score"] == 0 for t in result["tests"])
    # The class report counts it as one file that does not compile, with the compiler's first error.
    from pagedlab.grader import class_report

    found = [(file, why) for output in (task1, task2) for _, why, file in class_report._failed_checks(output)]
    assert {file for file, _ in found} == {"llm_memory.c"}, found
    line = 1 + next(i for i, t in enumerate(c_mutants.SOLUTION.read_text().splitlines()) if "seq->kv_count++;" in t)
    assert found[0][1] == f"llm_memory.c:{line}:20: error: expected ‘;’ before ‘return’", found  # read_student keeps the first


def test_a_c_append_without_copy_on_write_names_cow_and_the_rest_follows(tmp_path, server):
    """Measured before: 3 checks failed; the third, 'appended records read back', blamed
    'translation logical = kv_count // 16'. Now the CoW check says the block was written in place
    and the other two follow from it."""
    from pagedlab.drivers.memory_manager import COW_IN_PLACE_HINT, T4_COW

    text = c_mutants.SOLUTION.read_text()
    bug = "    int copy_on_write = !new_page && engine->ref_count[block] > 1;\n"
    assert bug in text
    folder = _folder(tmp_path, text.replace(bug, "    int copy_on_write = 0;\n"))
    found = {name: (passed, message) for (_, name), (passed, message) in server.grade(folder, ["task4"]).items()}
    failed = {name: message for name, (passed, message) in found.items() if passed is False}
    assert len(failed) == 3 and COW_IN_PLACE_HINT in failed.pop(T4_COW), failed
    for name, message in failed.items():
        assert message.startswith(f"follows from ✗ {T4_COW}") and "translation" not in message, (name, message)


UAF_LOOP = ("    while (head->next != head)\n        destroy_sequence(engine, container_of(head->next, Sequence, node));\n",
            "    for (struct list_node *pos = head->next; pos != head; pos = pos->next)\n"
            "        destroy_sequence(engine, container_of(pos, Sequence, node));\n")


def test_a_read_of_freed_memory_is_reported_at_the_line_that_reads_it(tmp_path, mode):
    """llm_destroy's loop frees pos's Sequence, then reads pos->next. Measured before (both modes):
    'a pointer read out of freed memory … in list_del, llm_memory.c:40, called from
    destroy_sequence (…:176), called from llm_destroy (…:312)', the given helper that followed the
    poisoned pointer. Now the read itself faults, at the loop's line."""
    text = c_mutants.SOLUTION.read_text()
    assert UAF_LOOP[0] in text
    path = _folder(tmp_path, text.replace(*UAF_LOOP)) / "llm_memory.c"
    line = path.read_text().splitlines().index(UAF_LOOP[1].splitlines()[0]) + 1
    mm = ctrack.load(path)
    pool = Pool(64 * 16)
    engine = mm.llm_init(pool.addr, pool.size)
    assert mm.create_sequence(engine, 1, 40) is not None and mm.fork_sequence(engine, 1, 2) is not None
    first = cmem.address(engine.active_seqs.next)
    with pytest.raises(ctrack.CCrash) as info:
        mm.llm_destroy(engine)
    message = str(info.value)
    assert "read of freed memory (use after free): 32 bytes into the 40-byte block allocated at llm_memory.c:" in message
    assert "freed at llm_memory.c:" in message and "in destroy_sequence" in message, message
    assert f"in llm_destroy, llm_memory.c:{line}" in message and "list_del" not in message, message
    # Once the call is over the block is readable again (its poison), and the process goes on.
    assert cmem.freed_block_at(first) is not None and ctypes.c_int32.from_address(first).value == cmem.FREED_INT
    assert mm.create_sequence(mm.llm_init(pool.addr, pool.size), 3, 5) is not None
