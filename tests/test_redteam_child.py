"""Red team against what the check child holds: submissions that implement nothing and take their
answers from the process they run in.

The child runs the submission's code, so assume that code can do anything there: read every
module in memory, walk the stack, forge a code object's file name, import what the user may
read. Each submission below implements no task; it must score 0 because nothing in the child
can compute an answer (the harness builds engines from data only, the numeric checks' expected
values are computed by the judge, the answer files are root-only in the grading set-up), with
the student-API guard as an early refusal in front.

The sandboxed tests (run as root, with a created user, the answer files sealed as
`grading/setup.sh` seals them) turn the guard off, so only the operating system stands in the
way.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "submissions"))
import student_api_attacks as attacks  # noqa: E402  (the buddy model's adapter, shared)
from test_redteam import sandbox_user  # noqa: F401 - the sandbox user, probed once per module

from pagedlab.grader.cli import grade
from pagedlab.spec import manifest

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ROOT / "exercises"
API_OFF = Path(__file__).parent / "submissions" / "student_api_off.py"

# The module table reached without the word `sys` or `modules` in the source: an aliased getattr
# with computed names (the guard vets only calls spelled `getattr(...)` with constant names).
_MODULES = '''
import typing
_g = getattr
_mods = _g(_g(typing, "sy" + "s"), "mod" + "ules")
'''

# Tasks 1, 3 and 5 from the harness loaded in the child for the checks (8 + 12 + 6 points when the
# harness held a correct llm_init, create/fork and teardown).
HARNESS_STEAL = _MODULES + '''
_h = _mods["pagedlab.harness.hw3"]

def llm_init(pool_addr, pool_size):
    if not pool_addr or pool_size < BLOCK_SIZE:
        return None
    return _h.new_engine(pool_addr, pool_size)

def fork_sequence(engine, parent_id, new_id):
    if engine is None:
        return None
    parent = _h.find(engine, parent_id)
    if parent is None or _h.find(engine, new_id) is not None:
        return None
    return _h.build_sequence(engine, new_id, parent.kv_count, _h.mapping(parent))

def llm_destroy(engine):
    if engine is None:
        return -1
    _h.teardown(engine)
    return 0
'''

# Task 1 from what the child holds to build the engines of Tasks 2-5, each way tried in turn: the
# harness's engine writer (an empty engine's data is Task 1's answer), the checks' scene builder
# over a stand-in for the check's pool, and the root side's engine bytes loaded by the harness.
HARNESS_INIT = _MODULES + '''
import importlib as _il

def llm_init(pool_addr, pool_size):
    if not pool_addr or pool_size < BLOCK_SIZE:
        return None
    n = pool_size // BLOCK_SIZE
    h = _il.import_module("pagedlab.harness.hw3")
    tried = []
    if hasattr(h, "engine_from"):
        return h.engine_from(pool_addr, h.EngineLayout(n, n, (0,) * n, ()))
    class _Pool:
        addr, size = pool_addr, pool_size
    try:
        return _il.import_module("pagedlab.drivers.scenes").engine(_Pool())
    except Exception as exc:
        tried.append(f"scenes: {type(exc).__name__}: {exc}")
    try:
        return h.load(pool_addr, _il.import_module("pagedlab.grader.trusted.engines").empty(n))
    except Exception as exc:
        tried.append(f"trusted: {type(exc).__name__}: {exc}")
    raise NotImplementedError("; ".join(tried))
'''

# Task 9 with paged_attention unwritten: the driver's own check objects replay the judge's
# expectation (`trusted.expectations.expected_stream`) for the case on the caller's stack, with the run's seed.
EXPECTED_REPLAY = _MODULES + '''
def paged_attention(q, k_cache, v_cache, block_tables, seq_lens, scale=None):
    fw = _mods["pagedlab.drivers.record"]
    frame = _g(_mods["sy" + "s"], "_get" + "frame")(1)
    context = _g(frame, "f_lo" + "cals")["context"]
    label = f"paged_attention output ({context})"
    run = fw.current()
    for c in _g(_mods["pagedlab.spec.catalog"], "_REG" + "ISTRY")["task9"]:
        if c.expected is None:
            continue
        judge_side = _g(_mods["importlib"], "import_module")("pagedlab.grader.trusted.expectations")
        for obs in judge_side.expected_stream(c, run.seed).obs:
            if obs["w"] == label:
                decode = fw.decode_array
                return torch.from_numpy(decode(obs["v"]).copy()).to(q.dtype)
    raise NotImplementedError("no expectation to replay")
'''


# Tasks 8 and 9 with nothing gathered: the tokens in sequence order taken from the batch the driver
# built, found on the caller's stack or among the live objects (`gc`), then dense attention on them.
STOLEN_TOKENS = '''
import gc as _gc
import sys as _sys


def _stolen_batch(k_cache):
    frame = _sys._getframe(2)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if getattr(value, "k_cache", None) is k_cache and hasattr(value, "keys"):
                return value
        frame = frame.f_back
    for value in _gc.get_objects():
        try:
            if getattr(value, "k_cache", None) is k_cache and hasattr(value, "keys"):
                return value
        except Exception:  # lazy loaders and proxies raise on getattr
            pass
    for value in _gc.get_objects():  # the poisoned copy's caches are new: match the shape
        if type(value).__name__ == "PagedBatch" and hasattr(value, "keys") and \
                tuple(value.k_cache.shape[1:]) == tuple(k_cache.shape[1:]):
            return value
    raise NotImplementedError("no batch to steal from")


def _stolen_tokens(k_cache, block_table, seq_len):
    batch = _stolen_batch(k_cache)
    table = [int(b) for b in block_table.tolist()]
    for s in range(len(batch.keys)):
        if [int(b) for b in batch.block_tables[s].tolist()] == table and len(batch.keys[s]) == seq_len:
            return batch.keys[s], batch.values[s]
    raise NotImplementedError("no sequence with that table")


def gather_kv(k_cache, v_cache, block_table, seq_len):
    k, v = _stolen_tokens(k_cache, block_table, seq_len)
    return k.clone(), v.clone()


def paged_attention(q, k_cache, v_cache, block_tables, seq_lens, scale=None):
    out = torch.empty_like(q)
    for s in range(q.shape[0]):
        k, v = _stolen_tokens(k_cache, block_tables[s], int(seq_lens[s]))
        k, v = k.to(q.dtype), v.to(q.dtype)
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        step = scale if scale is not None else q.shape[-1] ** -0.5
        weights = torch.softmax(torch.einsum("hd,nhd->hn", q[s], k) * step, dim=-1)
        out[s] = torch.einsum("hn,nhd->hd", weights, v)
    return out
'''


def _forged_import(module: str, names: str) -> str:
    """Source that imports `names` from `module` in code compiled under a pagedlab file name, so
    the guard takes it for pagedlab's own import."""
    return _MODULES + f'''
_b = _mods["buil" + "tins"]
_pkg = _mods["pagedlab"]
_file = _g(_pkg, "__fi" + "le__").replace("__init__.py", "drivers/record.py")
_ns = {{}}
_g(_b, "ex" + "ec")(_g(_b, "comp" + "ile")("from {module} import {names}", _file, "ex" + "ec"), _ns)
'''


# Task 12 from the instructor edition's buddy model, imported under a forged file name.
FORGED_BUDDY = _forged_import("pagedlab.grader.answers.buddy", "Buddy") + attacks.MODEL_BUDDY.replace(
    "from pagedlab.grader.answers.buddy import Buddy as _Buddy", '_Buddy = _ns["Buddy"]')
assert "_Buddy = _ns[\"Buddy\"]" in FORGED_BUDDY  # the shared adapter still imports the model there


def _submission(folder: Path, filename: str, extra: str) -> Path:
    folder.mkdir(parents=True)
    for path in EXERCISES.iterdir():
        if path.is_file() and path.suffix in (".py", ".cu", ".c"):
            shutil.copyfile(path, folder / path.name)
    (folder / filename).write_text((EXERCISES / filename).read_text() + textwrap.dedent(extra))
    return folder


def _scores(results: dict) -> dict:
    return {t["number"]: t["score"] for t in results["tests"]}


def _grade(sub: Path, tasks, **kw) -> dict:
    return grade(str(sub), tasks=list(tasks), echo=lambda *a: None, **kw)


# ---------------------------------------------------------------------------------------------
# With the student-API guard on (as graded): the guard refuses early, nothing is left to steal
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("guard", ["on", "off"])
def test_taking_tasks_1_3_5_from_the_harness_in_the_child_earns_nothing(tmp_path, monkeypatch, guard):
    """Off too: with no guard in the way the harness still has nothing that answers a task."""
    if guard == "off":
        monkeypatch.setenv("PAGEDLAB_GRADING_PLUGIN", str(API_OFF))
    results = _grade(_submission(tmp_path / "sub", "memory_manager.py", HARNESS_STEAL), ["1", "3", "5"],
                     hidden=False)
    assert results["score"] == 0, _scores(results)


# Task 5 from the heap's ledger, with the student API's own `cmem` (guard on): an llm_destroy that
# reads no table. The ledger says where each live block was allocated; what the check built is
# not the submission's file, so free all of it. (The check's other memory, allocated in its own
# module, is spared: the ledger names that file memory_manager.py too.)
LEDGER_DESTROY = '''
def llm_destroy(engine):
    if engine is None:
        return -1
    for block in cmem.live_allocations():
        if "memory_manager.py" not in block.where:
            cmem.free(block.address)
    return 0
'''

# The same without the labels: the engine's memory is what the check allocated last, so free every
# block from the engine's own address up (allocation order, read off the addresses).
LEDGER_DESTROY_BY_ADDRESS = '''
def llm_destroy(engine):
    if engine is None:
        return -1
    for block in cmem.live_allocations():
        if block.address >= addr(engine):
            cmem.free(block.address)
    return 0
'''


@pytest.mark.parametrize("attack", [LEDGER_DESTROY, LEDGER_DESTROY_BY_ADDRESS], ids=["labels", "addresses"])
def test_task_5_from_the_heaps_ledger_earns_nothing(tmp_path, attack):
    """Guard on, hidden checks included: the check's other engines (its twin of the same shape,
    built in the same shuffled burst, and the engines it was derived from) are live memory of the
    harness's own that a correct llm_destroy leaves alone, and the ledger cannot tell them apart."""
    results = _grade(_submission(tmp_path / "sub", "memory_manager.py", attack), ["5"])
    assert results["score"] == 0, _scores(results)
    assert "refused by the student API" not in results["tests"][0]["output"]  # it ran, and lost


def test_replaying_the_expected_stream_of_task_9_earns_nothing(tmp_path):
    results = _grade(_submission(tmp_path / "sub", "paged_attention.py", EXPECTED_REPLAY), ["9"], hidden=False)
    assert results["score"] == 0, _scores(results)


def test_a_forged_pagedlab_file_name_imports_no_answer_model(tmp_path):
    results = _grade(_submission(tmp_path / "sub", "buddy.py", FORGED_BUDDY), ["12"], hidden=False)
    assert results["score"] == 0, _scores(results)
    assert "refused by the student API" in results["tests"][0]["output"], results["tests"][0]["output"]


def test_tokens_taken_from_the_drivers_batch_earn_nothing_on_tasks_8_9(tmp_path, monkeypatch):
    """Guard off (it is no sandbox): the batch a Task 8/9 driver builds holds the caches and tables
    only, so a gather_kv or paged_attention that looks for the tokens in sequence order on the
    stack or among the live objects finds none; hidden checks included."""
    monkeypatch.setenv("PAGEDLAB_GRADING_PLUGIN", str(API_OFF))
    results = _grade(_submission(tmp_path / "sub", "paged_attention.py", STOLEN_TOKENS), ["8", "9"])
    assert results["score"] == 0, _scores(results)
    # it ran and looked everywhere, rather than breaking on the way
    assert all("no batch to steal from" in t["output"] for t in results["tests"]), results["tests"]


# The guard's known gaps, each run as code under a clean student file's name after the guard is
# installed (the static reading never sees it): only the audit hook and the import wrappers act.
_GAPS = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    import pagedlab, pagedlab.harness.hw3, pagedlab.drivers.record, pagedlab.reference
    from pagedlab.guard import StudentAPIError, audit
    folder = Path(sys.argv[1])
    (folder / "clean.py").write_text("x = 1\\n")
    audit.install(folder)
    fake = str(Path(pagedlab.__file__).parent / "drivers" / "record.py")
    probes = {
        "compile under a pagedlab name": f"exec(compile('import pagedlab.grader.answers.buddy', {fake!r}, 'exec'))",
        "code.replace under a pagedlab name": "def f(): import pagedlab.grader.answers.swap\\n"
                                             f"type(f)(f.__code__.replace(co_filename={fake!r}), {{}})()",
        "importlib of the cached harness": "importlib.import_module('pagedlab.harness.hw3')",
        "the guard's folder reset": "audit._student_dir = '/nowhere/'\\nimport pagedlab.drivers.swap",
        "the judge's empty engine, through pagedlab": "ref.empty_engine(64)",
        "sys._getframe": "sys._getframe(0)",
    }
    # Modules the student reached some other way (the static reading would refuse the imports).
    import importlib
    given = {"importlib": importlib, "audit": audit, "fw": pagedlab.drivers.record, "sys": sys,
             "ref": pagedlab.reference}
    out = {}
    for name, source in probes.items():
        code = compile(source, str(folder / "clean.py"), "exec")
        try:
            exec(code, {"__name__": "student", **given})
            out[name] = "ran"
        except StudentAPIError as exc:
            out[name] = "refused: " + str(exc)
        except Exception as exc:  # the probe itself broke: not a refusal
            out[name] = f"broke: {type(exc).__name__}: {exc}"
    # A thread whose target is a library callable: no student frame on its stack.
    import os, threading
    got = []
    def hook(args):
        got.append("refused: " + str(args.exc_value))
    threading.excepthook = hook
    exec(compile("t = threading.Thread(target=os.system, args=('true',))\\nt.start(); t.join()",
                 str(folder / "clean.py"), "exec"), {"threading": threading, "os": os})
    out["thread running os.system"] = got[0] if got and str(got[0]).startswith("refused") else "ran"
    print(json.dumps(out))
''')


def test_the_guard_closes_its_known_gaps(tmp_path):
    import json

    done = subprocess.run([sys.executable, "-c", _GAPS, str(tmp_path)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.splitlines()[-1])
    ran = {name: verdict for name, verdict in out.items() if not verdict.startswith("refused")}
    assert not ran, ran


def test_the_child_holds_no_answer_code():
    """What a check child imports for every task: no harness builder that answers a task, no
    expectation, no reference attention, no answer model."""
    probe = textwrap.dedent('''
        import sys
        from pagedlab.spec import catalog, manifest
        from pagedlab.grader import registry
        for row in manifest.TABLE:
            # every task's driver module (the child loads those its plan names; a hidden check's
            # driver arrives by name, its scenario as data)
            for c in registry.checks_of(row.id, hidden=False):
                assert c.expected is None or isinstance(c.expected, catalog.Expected), c.key
        import pagedlab.drivers.drawn.memory_manager, pagedlab.drivers.drawn.paged_attention  # noqa
        import pagedlab.drivers.drawn.paged_attention_cu, pagedlab.drivers.drawn.swap  # noqa
        from pagedlab.harness import hw3
        print(sorted(m for m in sys.modules if m.startswith("pagedlab.") and
                     m.split(".")[1] == "reference" or m.startswith(("pagedlab.grader.trusted", "pagedlab.grader.answers"))))
        print([name for name in ("new_engine", "build_sequence", "teardown", "engine_from", "release")
               if hasattr(hw3, name)])
    ''')
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PAGEDLAB_GRADE_GPU": "0"}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["[]", "[]"], out.stdout


# ---------------------------------------------------------------------------------------------
# Sandboxed, guard off: the answer files are root-only, the operating system is the wall
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def sealed(sandbox_user, monkeypatch):  # noqa: F811 - the fixture imported above
    """The grading set-up: the submission's code runs as the sandbox user, the answer files are
    root-only (as `grading/setup.sh` leaves them), the guard is off."""
    from pagedlab.sandbox import private

    monkeypatch.setenv("PAGEDLAB_GRADE_USER", sandbox_user)
    monkeypatch.setenv("PAGEDLAB_GRADING_PLUGIN", str(API_OFF))
    before = private.seal(ROOT)
    try:
        yield sandbox_user
    finally:
        private.unseal(before)


_PROBE = textwrap.dedent('''
    import importlib, json, os, sys
    from pathlib import Path
    def _raise(exc):
        raise exc
    root = Path(sys.argv[1])
    got = {}
    for rel in sys.argv[2:]:
        path = root / rel
        try:
            files = [path]
            if path.is_dir():  # listing it must fail too (rglob would swallow the error)
                files = [Path(d) / n for d, _, names in os.walk(path, onerror=_raise) for n in names]
            got[rel] = "read " + str(len(b"".join(p.read_bytes() for p in files))) + " bytes"
        except OSError as exc:
            got[rel] = type(exc).__name__
    for module in ("pagedlab.grader.trusted.reference", "pagedlab.grader.trusted.expectations", "pagedlab.grader.answers.buddy",
                   "pagedlab.grader.answers.swap", "pagedlab.grader.answers.prefix_cache"):
        try:
            importlib.import_module(module)
            got[module] = "imported"
        except Exception as exc:
            got[module] = type(exc).__name__
    # pagedlab.reference is the notebooks' name for it, imported when called: a call computes nothing
    try:
        import numpy as np
        from pagedlab.reference import dense_attention
        dense_attention(np.ones((1, 1, 2)), np.ones((1, 1, 2)), np.ones((1, 1, 2)))
        got["pagedlab.reference.dense_attention"] = "imported"
    except Exception as exc:
        got["pagedlab.reference.dense_attention"] = type(exc).__name__
    print(json.dumps(got))
''')


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # the sandbox user (conftest.py)
def test_the_sandbox_user_can_read_or_import_no_answer(sealed):
    import json

    from pagedlab.sandbox import private

    entry = pwd.getpwnam(sealed)
    names = [n for n in private.ANSWERS if (ROOT / n).exists()]
    out = subprocess.run([sys.executable, "-s", "-c", _PROBE, str(ROOT), *names], user=entry.pw_uid,
                         group=entry.pw_gid, extra_groups=[], capture_output=True, text=True, cwd="/",
                         env={**os.environ, "HOME": "/tmp", "PYTHONPATH": str(ROOT)}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    leaked = {k: v for k, v in got.items() if v.startswith(("read", "imported"))}
    assert not leaked, leaked
    assert private.exposed(ROOT) == []


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # the sandbox user (conftest.py)
def test_sandboxed_submissions_that_take_answers_from_the_child_earn_nothing(sealed, tmp_path):
    """Guard off: the harness steal (Task 1 from what builds the engines of Tasks 2-5 too), Task 5
    from the heap's ledger, the expectation replay and a plain import of the answer models, each
    graded as on Gradescope, hidden checks included."""
    plain_buddy = FORGED_BUDDY.replace(_forged_import("pagedlab.grader.answers.buddy", "Buddy"),
                                       "from pagedlab.grader.answers.buddy import Buddy\n_ns = {'Buddy': Buddy}\n")
    for name, (filename, extra, tasks) in {
            "harness": ("memory_manager.py", HARNESS_STEAL, ["1", "3", "5"]),
            "harness init": ("memory_manager.py", HARNESS_INIT, ["1"]),
            "ledger": ("memory_manager.py", LEDGER_DESTROY, ["5"]),
            "replay": ("paged_attention.py", EXPECTED_REPLAY, ["9"]),
            "model": ("buddy.py", plain_buddy, ["12"])}.items():
        results = _grade(_submission(tmp_path / name, filename, extra), tasks)
        assert results["score"] == 0, (name, _scores(results))


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # the sandbox user (conftest.py)
def test_sealed_answers_leave_honest_work_full_marks(sealed, tmp_path):
    """The child needs none of the sealed files: the solutions, graded as a submission, keep full
    marks on the tasks whose checks used them (harness engines, expectations, models)."""
    sub = tmp_path / "sub"
    shutil.copytree(ROOT / "solutions", sub)
    tasks = ["1", "3", "5", "9", "12", "13"]
    results = _grade(sub, tasks)
    assert results["score"] == sum(r.points for r in manifest.TABLE if r.id.removeprefix("task") in tasks), \
        {t["number"]: (t["score"], t["output"][-300:]) for t in results["tests"] if t["score"] != t["max_score"]}


# ---------------------------------------------------------------------------------------------
# The C track: a library's constructor looks for the interpreter of the process that loads it
# ---------------------------------------------------------------------------------------------
def _python_from_c(python_source: str) -> str:
    """C appended to llm_memory.c: at load time, find the CPython API among the loaded symbols
    and run `python_source` in whatever interpreter is there (none: do nothing)."""
    hexed = python_source.encode().hex()
    chunks = "\n".join(f'        "{hexed[i:i + 120]}"' for i in range(0, len(hexed), 120))
    return textwrap.dedent('''
        #define _GNU_SOURCE
        #include <dlfcn.h>
        __attribute__((constructor)) static void pl_attack(void)
        {
            int (*run)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
            int (*ensure)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
            void (*release)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "PyGILState_Release");
            if (!run || !ensure || !release)
                return;
            int gil = ensure();
            run("exec(bytes.fromhex('"
    ''') + chunks + textwrap.dedent('''
                "').decode())");
            release(gil);
        }
    ''')


# Runs in the grader's check child when the library loads there: the C stubs' methods become a
# Python memory manager's (the solution's text, carried in the C file), so the C file "passes".
C_CTOR_PYTHON = '''
import types, pagedlab.engine.ctrack as _ct
_m = types.ModuleType("carried_in_c")
exec(compile(SOURCE, "carried_in_c", "exec"), _m.__dict__)
for _n in _ct.C_API:
    setattr(_ct.CEngine, _n, (lambda f: lambda self, *a: f(*a))(getattr(_m, _n)))
'''


def c_ctor_attack(folder: Path) -> Path:
    """exercises/llm_memory.c (stubs: no C work) plus a constructor running Python in its loader."""
    source = (ROOT / "solutions" / "memory_manager.py").read_text()
    python = C_CTOR_PYTHON.replace("SOURCE", repr(source))
    stub = (EXERCISES / "llm_memory.c").read_text()
    folder.mkdir(parents=True)
    (folder / "llm_memory.c").write_text("#define _GNU_SOURCE\n" + stub + _python_from_c(python))
    return folder


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # the sandbox user (conftest.py)
def test_a_c_library_constructor_finds_no_python_to_run(sealed, tmp_path):
    """The C track's library runs in a runner with no interpreter in it: a constructor that looks
    up PyRun_SimpleString finds nothing, so the submission earns what its C earns (the stubs'
    score), and the honest C solution keeps full marks there."""
    tasks = ["1", "2", "3", "4", "5"]
    attack = _grade(c_ctor_attack(tmp_path / "attack"), tasks, hidden=False)
    (tmp_path / "stubs").mkdir()
    shutil.copyfile(EXERCISES / "llm_memory.c", tmp_path / "stubs" / "llm_memory.c")
    stubs = _grade(tmp_path / "stubs", tasks, hidden=False)
    assert not any(f"llm_memory.c {words}" in t["output"] for t in attack["tests"]
                   for words in ("does not compile", "does not link")), "the attack must compile"
    assert _scores(attack) == _scores(stubs), (_scores(attack), _scores(stubs))
    (tmp_path / "honest").mkdir()
    shutil.copyfile(ROOT / "solutions" / "llm_memory.c", tmp_path / "honest" / "llm_memory.c")
    honest = _grade(tmp_path / "honest", tasks, hidden=False)
    assert honest["score"] == sum(r.points for r in manifest.TABLE if r.id.removeprefix("task") in tasks), \
        {t["number"]: (t["score"], t["output"][-300:]) for t in honest["tests"] if t["score"] != t["max_score"]}


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # the sandbox user (conftest.py)
def test_a_sealed_grade_tells_a_crash_in_a_given_helper_at_the_students_call(sealed, tmp_path):
    """Which functions of a course file are given (the list helpers) is in expected.json, which the
    sealed child cannot read, as it cannot read solutions/: the plan carries their names, so a
    crash inside `list_del` is told at the student's line that called it, as on a laptop."""
    sub = tmp_path / "sub"
    shutil.copytree(ROOT / "solutions", sub)
    text = (sub / "memory_manager.py").read_text()
    call = "    destroy_sequence(engine, seq)\n    return 0\n"
    assert call in text
    (sub / "memory_manager.py").write_text(text.replace(call, "    list_del(None)\n" + call, 1))
    results = _grade(sub, ["2"], hidden=False)
    out = next(t["output"] for t in results["tests"] if t["number"] == "2")
    assert results["score"] == 0 and "(free_sequence): list_del(None)" in out and "(list_del)" not in out, \
        out[-2500:]
