"""The C track's runner: in the graded check child a student's llm_memory.c library runs in a
process of its own with no Python in it (pagedlab/include/pl_runner.c), its heap and the pools in
memory shared at the same address, so the checks read the engine as before.

These tests switch runner mode on in this process (what the check child does before its checks)
and compare with the in-process mode notebooks keep.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import c_mutants  # noqa: E402

from pagedlab import cmem  # noqa: E402
from pagedlab.drivers import scenes  # noqa: E402
from pagedlab.engine import carena, ctrack
from pagedlab.engine.pool import Pool  # noqa: E402
from pagedlab.harness import hw3  # noqa: E402

pytestmark = pytest.mark.skipif(not ctrack.available() or not sys.platform.startswith("linux"),
                                reason="the runner needs a C compiler and Linux (memfd, fixed mappings)")


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.setenv(ctrack.TIMEOUT_ENV, "1")
    ctrack.use_runner()
    yield
    ctrack.use_runner(False)


def _load(tmp_path: Path, text: str, name: str = "sub") -> ctrack.CEngine:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "llm_memory.c").write_text(text)
    return ctrack.load(folder / "llm_memory.c", show_warnings=False)


# free_sequence(engine, 55) answers what the library could reach from where it runs, as bits.
PROBE = c_mutants.SOLUTION.read_text().replace(
    "#include <stdlib.h>\n", "#include <stdlib.h>\n#include <stdio.h>\n#include <dlfcn.h>\n#include <unistd.h>\n"
    "#include <sys/socket.h>\n", 1).replace(
    "int free_sequence(LLMEngine *engine, int seq_id)\n{\n",
    "int free_sequence(LLMEngine *engine, int seq_id)\n{\n"
    "    if (seq_id == 55) {\n"
    "        int found = 0;\n"
    "        if (dlsym(RTLD_DEFAULT, \"PyRun_SimpleString\")) found |= 1;\n"
    "        FILE *f = fopen(\"/etc/passwd\", \"r\");\n"
    "        if (f) { found |= 2; fclose(f); }\n"
    "        if (socket(AF_INET, SOCK_STREAM, 0) >= 0) found |= 4;\n"
    "        if (dlopen(\"libz.so.1\", RTLD_NOW)) found |= 8;\n"
    "        if (truncate(TRUNCATE_ME, 0) == 0) found |= 16;\n"
    "        return found;\n"
    "    }\n"
    "    if (seq_id == 66) kill(getpid(), 9);\n"
    "    if (seq_id == 67) _exit(7);\n", 1).replace("#include <stdlib.h>", "#define _GNU_SOURCE\n#include <signal.h>\n#include <stdlib.h>", 1)


def _probe(tmp_path: Path) -> str:
    """PROBE with a file of ten bytes the library may try to truncate by its path."""
    victim = tmp_path / "ten-bytes"
    victim.write_bytes(b"0123456789")
    return PROBE.replace("TRUNCATE_ME", json.dumps(str(victim)))


def _landlock_abi() -> int:
    return ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1)  # landlock_create_ruleset: version


def test_in_process_the_library_finds_python(tmp_path):
    """The probe is real: loaded into this Python process, it finds the interpreter's API and may
    truncate a file."""
    mm = _load(tmp_path, _probe(tmp_path))
    assert mm.free_sequence(None, 55) & (1 | 16) == 1 | 16


def test_in_the_runner_the_library_finds_no_python_no_files_no_network(tmp_path, runner):
    mm = _load(tmp_path, _probe(tmp_path))
    found = mm.free_sequence(None, 55)
    assert not found & 1, "PyRun_SimpleString was found in the runner"
    assert not found & 4, "the runner opened a socket"
    runner_obj = mm._runner
    abi = _landlock_abi()
    assert bool(runner_obj.locked[1]) == (abi >= 1), (runner_obj.locked, abi)
    if abi >= 1:  # Landlock where the kernel has it: no file but the library
        assert not found & 2 and not found & 8, found
    if abi >= 3:  # and no truncating one by its path (Landlock's third version)
        assert not found & 16 and (tmp_path / "ten-bytes").stat().st_size == 10, found


def test_the_engine_lives_in_shared_memory_and_the_checks_read_it(tmp_path, runner):
    mm = ctrack.load(c_mutants.SOLUTION)
    arena = carena.current()
    pool = Pool(64 * 20)
    heap = cmem.snapshot()
    engine = mm.llm_init(pool.addr, pool.size)
    assert arena.owns(pool.addr) and arena.owns(cmem.address(engine))
    seq = mm.create_sequence(engine, 1, 40)
    assert hw3.mapping(seq) == {0: 0, 1: 1, 2: 2}
    mm.fork_sequence(engine, 1, 2)
    assert hw3.ref_counts(engine)[:3] == [2, 2, 2]
    assert mm.append_kv(engine, 2, 0x1234) == 0 and pool.words(3)[8] == 0x1234
    where = {a.where for a in cmem.changes_since(heap).allocated}
    assert "llm_memory.c:74 in llm_init" in where, where
    # An engine the harness built here (from root's bytes, as in the check child) is one the C code
    # reads and frees there.
    built = scenes.build(pool, hw3.snapshot(engine))
    assert mm.free_sequence(built, 2) == 0 and hw3.find(built, 2) is None
    assert mm.llm_destroy(built) == 0 and mm.llm_destroy(engine) == 0
    hw3.sweep(heap)  # the empty engine `built` was derived from: the harness's own


@pytest.mark.parametrize(("seq_id", "how"), [(66, "killed by SIGKILL"), (67, "exited with status 7")])
def test_a_library_that_ends_its_runner_fails_that_call_and_the_next_gets_a_fresh_one(tmp_path, runner, seq_id, how):
    mm = _load(tmp_path, _probe(tmp_path))
    pool = Pool(64 * 8)
    engine = mm.llm_init(pool.addr, pool.size)
    first = mm._runner.pid
    with pytest.raises(ctrack.RunnerGone, match=f"free_sequence.*ended the process that runs the C code.*{how}"):
        mm.free_sequence(engine, seq_id)
    # The engine is in shared memory: a fresh runner carries on with it.
    assert mm.create_sequence(engine, 1, 3) is not None and mm._runner.pid != first
    assert mm.llm_destroy(engine) == 0


def test_heap_errors_exit_printf_and_timeouts_read_as_in_process(tmp_path, runner, capsys):
    """(A segfault's line, in both modes: test_c_track's test_crash_keeps_python_alive_and_names_the_line.)"""
    pool = Pool(64 * 4)
    text = c_mutants.SOLUTION.read_text().replace(
        "    seq->kv_count++;\n",
        '    seq->kv_count++;\n    printf("appended %d\\n", kv_data);\n'
        "    if (kv_data == 13)\n        exit(3);\n"
        "    if (kv_data == 14) {\n        int *p = malloc(sizeof *p);\n        free(p);\n        free(p);\n    }\n"
        "    if (kv_data == 15) {\n        int *q = malloc(16 * sizeof *q);\n        q[16] = 1;\n        free(q);\n    }\n"
        "    if (kv_data == 16)\n        for (;;) {}\n", 1)
    mm = _load(tmp_path, text, "more")
    engine = mm.llm_init(pool.addr, pool.size)
    mm.create_sequence(engine, 1, 2)
    assert mm.append_kv(engine, 1, 5) == 0
    assert capsys.readouterr().out == "appended 5\n"
    with pytest.raises(ctrack.CExit, match=r"exit\(3\) in append_kv, llm_memory\.c:\d+"):
        mm.append_kv(engine, 1, 13)
    with pytest.raises(cmem.DoubleFree, match="double free"):
        mm.append_kv(engine, 1, 14)
    with pytest.raises(cmem.InvalidAccess, match="heap buffer overflow: up to 4 bytes"):
        mm.append_kv(engine, 1, 15)
    with pytest.raises(ctrack.CTimeout, match=r"did not return within 1 s .*append_kv, llm_memory\.c:\d+"):
        mm.append_kv(engine, 1, 16)
    assert mm.llm_destroy(engine) == 0


def test_forged_records_and_a_deaf_runner_fail_the_call_cleanly(tmp_path, runner):
    """The library writes its own bytes to the runner's record pipe, or ignores its time limit's
    alarm and sleeps: the call fails with a clear error, the grader's process carries on."""
    text = c_mutants.SOLUTION.read_text().replace(
        "#include <stdlib.h>", "#define _GNU_SOURCE\n#include <signal.h>\n#include <stdlib.h>\n#include <unistd.h>", 1).replace(
        "int free_sequence(LLMEngine *engine, int seq_id)\n{\n",
        "int free_sequence(LLMEngine *engine, int seq_id)\n{\n"
        "    if (seq_id == 88) { char junk[1280]; memset(junk, 0x41, sizeof junk); write(5, junk, sizeof junk); }\n"
        "    if (seq_id == 89) { char junk[7] = {3, 0, 0, 0}; write(5, junk, sizeof junk); _exit(0); }\n"
        "    if (seq_id == 90) { signal(SIGALRM, SIG_IGN); for (;;) pause(); }\n", 1)
    mm = _load(tmp_path, text)
    with pytest.raises(ctrack.RunnerGone, match="malformed record"):
        mm.free_sequence(None, 88)
    with pytest.raises(ctrack.RunnerGone, match="ended the process"):
        mm.free_sequence(None, 89)
    # The call's alarm ignored, asleep: the runner's own limit cannot fire, this side's does.
    with pytest.raises(ctrack.CTimeout, match="did not stop at the time limit, so its runner process was killed"):
        mm.free_sequence(None, 90)
    assert mm.free_sequence(None, 1) == -1


def test_the_runner_calls_every_function_of_the_c_api():
    import re

    text = (ctrack.INCLUDE / "pl_runner.c").read_text()
    names = re.search(r"NAMES\[\] = \{(.*?)\};", text, re.S).group(1)
    assert tuple(re.findall(r'"pl_call_(\w+)"', names)) == ctrack.C_API
    assert f"#define NFUNCS {len(ctrack.C_API)}" in text
