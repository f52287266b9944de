"""What a driver records, and how a driver runs: the check child's half of a check.

A check's *driver* runs where the student's code runs (a child process, sandboxed when grading):
it builds the scenario, calls the student's functions and records what it saw as plain data —
return values, ref counts, block tables, which pool words changed, digests of tensors. It never
decides anything: in Python, code that runs in a process can rewrite everything else in it.

The *judge* runs in a process where no student code ever ran (`pagedlab.grader`): it compares that
record, observation by observation, with the record of the same scenario produced by trusted
code. The first difference is the failure, explained with the rule, the expected value and the
student's value.

Drivers keep the readable `expect(...)` / `expect_equal(...)` style: in a driver each call
records an observation (its value, plus the text shown to the student) and stops the check at the
first value the driver itself finds wrong — continuing past a wrong block table only produces
noise. The verdict is still the judge's: a forged record must equal the reference's, and the
hidden checks' scenarios are drawn at grading time.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.util
import random
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..spec.catalog import CHECKS_PACKAGE, Check, CheckFailure, scenario_data, scenario_driver_named
from .given import given_functions as recorded_given_functions


class Stop(Exception):
    """Raised inside a driver after it recorded a value it knows is wrong: the check ends there."""


def find_scenario_driver(name: str) -> Callable:
    """The driver called `name`, importing only its module of the public checks package."""
    module, _, function = str(name).rpartition(".")
    if not module or not all(part.isidentifier() for part in [*module.split("."), function]):
        raise KeyError(f"no scenario driver {name!r}")
    importlib.import_module(f"{CHECKS_PACKAGE}.{module}")
    driver = scenario_driver_named(name)
    if driver is None:
        raise KeyError(f"no scenario driver {name!r}")
    return driver


class Unloadable(ImportError):
    """A file Python cannot make a module of (no such file, not Python)."""


PLUGIN_MODULE = "pagedlab_grading_plugin"  # a test's stand-in checks (grader.registry.PLUGIN_ENV)


def load_file(module_name: str, path) -> object:
    """The module in file `path`, run and registered as `module_name` (a test's stand-in checks,
    a hidden planner): the one way both sides load a module that is not in a package."""
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    if spec is None or spec.loader is None:
        raise Unloadable(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def find_public_driver(function: str, file: str | None = None) -> Callable:
    """The driver the grader named (`public_driver`), importing its module."""
    module_name, _, name = str(function).partition(":")
    if not name.isidentifier() or not all(part.isidentifier() for part in module_name.split(".")):
        raise KeyError(f"no driver {function!r}")
    module = sys.modules.get(module_name)
    if module is None and file:
        try:
            module = load_file(module_name, file)
        except Unloadable as exc:  # what the module's own code raises goes on as it is
            raise KeyError(f"no driver {function!r}: {exc}") from None
    elif module is None:
        if not module_name.startswith("pagedlab."):
            raise KeyError(f"no driver {function!r}: drivers live in pagedlab or in a file the grader names")
        module = importlib.import_module(module_name)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise KeyError(f"no driver {function!r}")
    return fn


# ---------------------------------------------------------------------------------------------
# Observations and their data
# ---------------------------------------------------------------------------------------------
MAX_DEPTH = 24


def to_data(value, depth: int = 0):
    """Plain JSON data for an observed value; tensors become digests or raw buffers."""
    if depth > MAX_DEPTH:
        raise ValueError("observation nested too deeply")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return to_data(value.item(), depth + 1)
    if isinstance(value, dict):
        return {str(k): to_data(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_data(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(to_data(v, depth + 1) for v in value)
    array = _as_numpy(value)
    if array is not None:
        return digest(array)
    return repr(value)


def _as_numpy(value):
    if type(value).__module__ not in ("numpy", "torch") and not type(value).__module__.startswith("torch"):
        return None
    import numpy as np

    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch"):
        return value.detach().cpu().numpy()
    return None


def digest(array) -> dict:
    """What an exact comparison needs of an array: dtype, shape and a hash of its bytes."""
    import numpy as np

    array = np.ascontiguousarray(_as_numpy(array))
    return {"__digest__": hashlib.sha256(array.tobytes()).hexdigest(), "dtype": str(array.dtype),
            "shape": list(array.shape)}



def row_digest(array, row_name: str = "row") -> dict:
    """`digest` plus a short hash of every row (first axis), ``"NaN"`` for a row that holds a NaN:
    the judge can then say which `row_name` (a token of a sequence) differs first, and how."""
    import numpy as np

    array = np.ascontiguousarray(_as_numpy(array))
    found = digest(array)
    rows = array.reshape(array.shape[0] if array.ndim else 1, -1)
    nan = np.isnan(rows).any(1) if rows.dtype.kind == "f" else np.zeros(len(rows), bool)
    found["rows"] = ["NaN" if bad else hashlib.sha256(row.tobytes()).hexdigest()[:12]
                     for row, bad in zip(rows, nan, strict=True)]
    found["row"] = str(row_name)
    return found

def encode_array(array) -> dict:
    import numpy as np

    array = np.ascontiguousarray(_as_numpy(array) if _as_numpy(array) is not None else np.asarray(array))
    return {"__array__": base64.b64encode(array.tobytes()).decode("ascii"), "dtype": str(array.dtype),
            "shape": list(array.shape)}


ALLOWED_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"}


def decode_array(data: dict):
    """An encoded array back, refusing anything but plain numeric dtypes of a consistent size."""
    import numpy as np

    dtype = str(data.get("dtype"))
    shape = data.get("shape")
    if dtype not in ALLOWED_DTYPES or not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise ValueError("malformed array observation")
    raw = base64.b64decode(str(data.get("__array__", "")), validate=True)
    count = int(np.prod(shape)) if shape else 1
    if len(raw) != count * np.dtype(dtype).itemsize:
        raise ValueError("array observation has the wrong number of bytes for its shape")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


@dataclass
class Stream:
    """What one run of a driver recorded, and how it ended."""

    obs: list = field(default_factory=list)   # dicts: w(hat) v(alue) k(ind) [s(hown) x r h tol]
    status: str = "completed"                  # completed | stopped | raised | crashed | timeout | ...
    error: dict | None = None                  # for raised/crashed: type, message, where, text

    def to_json(self) -> dict:
        return {"obs": self.obs, "status": self.status, "error": self.error}

    @classmethod
    def from_json(cls, data) -> Stream:
        if not isinstance(data, dict) or not isinstance(data.get("obs"), list):
            raise ValueError("malformed check record")
        obs = []
        for item in data["obs"]:
            if not isinstance(item, dict) or not isinstance(item.get("w"), str):
                raise ValueError("malformed observation")
            obs.append(item)
        status = data.get("status")
        if not isinstance(status, str):
            raise ValueError("malformed check status")
        error = data.get("error")
        if error is not None and not isinstance(error, dict):
            raise ValueError("malformed error record")
        return cls(obs, status, error)


class Run:
    """What a driver works with: the implementation, the scenario's seed, and the record."""

    def __init__(self, impl=None, seed: int = 0, params: dict | None = None, scenario=None, engines=None):
        self.impl = impl
        self.seed = int(seed)
        self.scenario = scenario  # a drawn scenario's data (hidden checks); the seed is then 0
        # The empty engines the grader wrote for this check ({str(blocks): image}, `scenes`): in a
        # check child always a dict (maybe empty), None where the judge's code may write them.
        self.engines = engines
        self.params = dict(params or {})
        self.rng = random.Random(self.seed)
        self._np_rng = None
        self.stream = Stream()

    @property
    def np_rng(self):
        if self._np_rng is None:
            import numpy as np

            self._np_rng = np.random.default_rng(self.seed)
        return self._np_rng

    def load(self, name: str):
        from ..loader import load

        try:
            return load(name, self.impl)
        except Exception as exc:
            # The student's file did not compile or load: every check that loads it fails the
            # same way, and the report says so once (`explain_exception`, `causes`).
            try:
                exc.pl_load_failed = _file_of(name, self.impl)
            except AttributeError:  # an exception type without a __dict__: reported as raised
                pass
            raise

    def kernel_source(self, filename: str) -> str:
        from ..loader import kernel_source

        return kernel_source(filename, self.impl)

    # -- recording --------------------------------------------------------------------------
    def _record(self, what, value, kind, *, rule="", hint="", shown=None, expected_shown=None, tol=None,
                when=(), setup=False, note=""):
        item = {"w": str(what), "v": value, "k": kind}
        if note:
            item["n"] = _short(note, 600)  # how this run came to the value: shown only if it differs
        if setup:
            item["su"] = True  # the state earlier calls left: a difference here is not this step's bug
        if rule:
            item["r"] = str(rule)
        if hint:
            item["h"] = str(hint)
        if when:
            item["hw"] = [w.to_data() for w in when]  # shown only when their condition holds
        if shown is not None:
            item["s"] = _short(shown)
        if expected_shown is not None:
            item["x"] = _short(expected_shown)
        if tol is not None:
            item["tol"] = float(tol)
        self.stream.obs.append(item)

    def see(self, what: str, value, *, rule: str = "", hint: str = "", shown=None, when=(), setup=False,
            note: str = "") -> None:
        """Record `value` (plain data; tensors as digests) under the label `what`. `setup`: the
        value is the state the check's earlier calls built, not the result of the step it checks.
        `note`: what the driver saw this run's code do on the way (the block size it passed on),
        shown under the difference when the value differs and never compared."""
        self._record(what, to_data(value), "eq", rule=rule, hint=hint, shown=shown, when=when, setup=setup,
                     note=note)

    def see_array(self, what: str, array, *, tol: float, rule: str = "", hint: str = "", when=()) -> None:
        """Record a numeric array in full, to be compared within relative tolerance `tol`."""
        self._record(what, encode_array(array), "array", rule=rule, hint=hint, tol=tol, when=when)

    def see_condition(self, ok: bool, what: str, *, rule="", expected=None, actual=None, hint="", when=()) -> None:
        self._record(what, bool(ok), "cond", rule=rule, hint=hint,
                     shown=None if ok or actual is None else actual,
                     expected_shown=None if expected is None else expected, when=when)
        if not ok:
            raise Stop

    def see_equal(self, actual, expected, what: str, *, rule="", hint="", when=()) -> None:
        value = to_data(actual)
        self._record(what, value, "eq", rule=rule, hint=hint, when=when)
        if value != to_data(expected):
            raise Stop

    def see_failure(self, failure: CheckFailure) -> None:
        self._record(failure.what, False, "cond", rule=failure.rule, hint=failure.hint,
                     shown=failure.actual, expected_shown=failure.expected)


def _short(value, limit: int = 2000) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + " …"


# The driver being run in this process; expect()/expect_equal() record into it.
_current: Run | None = None


def current() -> Run:
    if _current is None:
        raise RuntimeError("expect()/expect_equal() record into a running check: call them from a driver")
    return _current


def expect(condition: bool, what: str, **details) -> None:
    """In a driver: record whether `condition` held; a False ends the check there."""
    current().see_condition(bool(condition), what, **details)


def see(what: str, value, **details) -> None:
    """In a driver: record `value` for the judge (tensors as digests)."""
    current().see(what, value, **details)


def expect_equal(actual, expected, what: str, *, rule: str = "", hint: str = "", when=()) -> None:
    """In a driver: record `actual`; the judge compares it with the reference's value. A value the
    driver already knows is wrong (it differs from `expected`) ends the check there. `when`:
    hints shown only when their condition holds (`hints.When`)."""
    current().see_equal(actual, expected, what, rule=rule, hint=hint, when=when)


# ---------------------------------------------------------------------------------------------
# Running a driver (in whatever process calls this)
# ---------------------------------------------------------------------------------------------
def drive(c: Check, impl=None, seed: int = 0, scenario=None, engines=None) -> Stream:
    """Run the driver of `c` against `impl` and return its record; never raises for student bugs.
    A check with a scenario runs on `scenario` (the data the grader drew), or, in a trusted
    process (tests, the instructor's tools), on the one drawn here from `seed`. `engines`: the
    empty engines' bytes the grader sent (the check child passes its request's, always)."""
    global _current
    if c.scenario is not None:
        run = Run(impl, 0, scenario=scenario_data(c, seed) if scenario is None else scenario, engines=engines)
    else:
        run = Run(impl, seed, scenario=scenario, engines=engines)
    previous, _current = _current, run
    try:
        if c.cases is None:
            c.driver(run)
        else:
            c.driver(run, c.cases)
    except Stop:
        run.stream.status = "stopped"
    except CheckFailure as exc:
        run.see_failure(exc)
        run.stream.status = "stopped"
    except SystemExit as exc:
        run.stream.status = "raised"
        where = student_frame(traceback.extract_tb(exc.__traceback__))
        at = f" at {where.filename}:{where.lineno} ({where.name})" if where and is_student_file(where.filename) else ""
        text = f"your code called sys.exit({exc.code!r}){at}"
        run.stream.error = {"type": "SystemExit", "message": text, "text": text}
    except BaseException as exc:  # noqa: BLE001 - any failure of student code is recorded
        if isinstance(exc, KeyboardInterrupt):
            raise
        run.stream.status = "raised"
        run.stream.error = explain_exception(exc, c)
    finally:
        _current = previous
    return run.stream


# ---------------------------------------------------------------------------------------------
# Student-facing explanations of exceptions
# ---------------------------------------------------------------------------------------------
_LIBRARY_DIRS = tuple(str(Path(p).resolve()) for p in {Path(__file__).parent.parent, sys.prefix, sys.base_prefix})


def is_student_file(filename: str) -> bool:
    """Student code is whatever runs outside pagedlab and the Python installation."""
    if filename.startswith("<"):
        return False
    return not str(Path(filename).resolve()).startswith(_LIBRARY_DIRS)


def given_functions(path: str) -> set[str]:
    """Functions of a course file the student did not write: those without a solution fence in
    the reference file of the same name (list helpers, lookups, ...). The names are recorded in
    expected.json when it is generated, so the student edition knows them too."""
    return set(recorded_given_functions().get(Path(path).name, ()))


def student_frame(frames):
    """The frame to show: the innermost one in the student's file in code the student wrote; a
    crash inside given helper code (a list pop) is the caller's bug, so point at the caller."""
    mine = [f for f in frames if is_student_file(f.filename)]
    if not mine:
        return frames[-1] if frames else None
    for frame in reversed(mine):
        try:
            given = given_functions(frame.filename)
        except Exception:  # noqa: BLE001 - without the reference, every function counts as theirs
            given = set()
        if frame.name not in given:
            return frame
    return mine[-1]


def _caller_of_deliberate_raise(frames, where):
    """The student's frame that called `where`, when `where` failed on purpose (a `raise` line)."""
    if where is None or not (where.line or "").lstrip().startswith("raise"):
        return None
    index = next((i for i, f in enumerate(frames) if f is where), None)
    for frame in reversed(frames[:index] if index else []):
        if is_student_file(frame.filename):
            return frame
    return None


def _file_of(name: str, impl) -> str:
    """The student file that stands for module `name` in `impl` (llm_memory.c on the C track)."""
    from .. import track
    from ..loader import impl_dir

    try:
        if f"{name}.py" == track.PYTHON_FILE and track.decide(impl_dir(impl)).name == "c":
            return track.C_FILE
    except Exception:  # noqa: BLE001 - naming the file must never hide the error itself
        pass
    return f"{name}.py"


def _load_failure(exc: BaseException, filename: str) -> dict:
    """A student file that does not compile or load: the compiler's or interpreter's words at
    the student's line, never a frame of pagedlab's loader, and marked `load` (not a step's bug)."""
    if isinstance(exc, SyntaxError) and exc.lineno:
        line = (exc.text or "").rstrip("\n")
        caret = ""
        if line and exc.offset and exc.offset > 0:
            shown = line.lstrip()
            caret = "\n    " + " " * max(0, exc.offset - 1 - (len(line) - len(shown))) + "^"
            line = shown
        text = (f"{filename} does not compile: {type(exc).__name__}: {exc.msg} at line {exc.lineno}"
                + (f":\n    {line}{caret}" if line else ""))
        where = f"{exc.filename or filename}:{exc.lineno}"
    elif getattr(exc, "c_compile_log", None) is not None:  # ctrack.CCompileError: the compiler's text
        verb = "does not link" if getattr(exc, "c_phase", "") == "linking" else "does not compile"
        text = f"{filename} {verb}:\n{exc.c_compile_log}"
        where = f"{filename}:{getattr(exc, 'line', 0) or '?'}"
    else:
        found = explain_exception(exc)
        text = f"{filename} failed to load: {found['text']}"
        where = found.get("where", "")
    return {"type": type(exc).__name__, "message": _short(str(exc), 500), "text": _short(text, 4000),
            "where": where, "load": filename}


def explain_exception(exc: BaseException, c: Check | None = None) -> dict:
    filename = getattr(exc, "pl_load_failed", None)
    if filename and not isinstance(exc, NotImplementedError):
        exc.pl_load_failed = None
        return _load_failure(exc, filename)
    if isinstance(exc, NotImplementedError):
        text = f"not implemented yet: {exc or 'the stub still raises NotImplementedError'}"
        return {"type": "NotImplementedError", "message": str(exc), "text": text, "where": ""}
    if getattr(exc, "plain_text", False):  # the course's limit, not the student's bug (ctrack.NoCVersion)
        return {"type": type(exc).__name__, "message": str(exc), "text": str(exc), "where": ""}
    frames = traceback.extract_tb(exc.__traceback__)
    where = student_frame(frames)
    at = f" at {where.filename}:{where.lineno} ({where.name}): {where.line}" if where else ""
    caller = _caller_of_deliberate_raise(frames, where)
    if caller is not None:
        # `popleft` raising "no free block" is popleft doing its job: the bug is in its caller.
        at = (f" in {where.name} (line {where.lineno}, a deliberate `raise`), called from "
              f"{caller.filename}:{caller.lineno} ({caller.name}): {caller.line}")
        where = caller
    text = f"your code raised {type(exc).__name__}: {exc}{at}"
    return {"type": type(exc).__name__, "message": _short(str(exc), 500), "text": _short(text, 1500),
            "where": f"{where.filename}:{where.lineno}" if where else ""}
