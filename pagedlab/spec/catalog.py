"""The catalog of graded checks: what each check is, as data that every side reads.

A check is a key (task/name), the rule and hint a student sees, a driver (the function the check
child runs) and its data: public case data, or a hidden planner's scenario drawn at grading time.
The driver modules (`pagedlab.drivers`) add their checks here as they load; which modules load is
the grader's decision (`pagedlab.grader.registry`), and the check child loads only the drivers its
plan names. Standard library only, as all of `pagedlab.spec`: a check's text and data never pull in
the code that runs it or judges it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from . import manifest


class CheckFailure(AssertionError):
    """A graded check failed: which rule, what was expected, what happened."""

    def __init__(self, what: str, *, rule: str = "", expected=None, actual=None, hint: str = ""):
        self.what, self.rule, self.expected, self.actual, self.hint = what, rule, expected, actual, hint
        super().__init__(self.report())

    def report(self) -> str:
        lines = [self.what]
        if self.rule:
            lines.append(f"  rule:     {self.rule}")
        if self.expected is not None:
            lines.append(f"  expected: {self.expected}")
        if self.actual is not None:
            lines.append(f"  yours:    {self.actual}")
        if self.hint:
            lines.append(f"  hint:     {self.hint}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------
@dataclass
class Check:
    task: str
    name: str
    driver: Callable
    rule: str = ""
    hint: str = ""
    hidden: bool = False
    # Trusted expectations for numeric checks: fn(run) -> [(label, ndarray, tol)], computed in the
    # judge's process; the course's own are `Expected` (a name in the judge-side module, plus
    # data), so the check child holds nothing that computes them. None: the expected record comes
    # from the reference solution.
    expected: Callable | None = None
    module: str = ""
    # Hidden checks: fn(seed) -> JSON data, the scenario, drawn in the grader (root) only. The
    # driver (a public `@scenario_driver`) then gets the data as `run.scenario`, never the seed.
    scenario: Callable | None = None
    when: tuple = ()  # conditional hints (hints.When) for the trusted numeric record
    # Names of earlier checks of the task whose rules this one's scenario relies on: when one of
    # them fails too, this failure is reported as following from it (`causes`), not explained anew.
    follows: tuple = ()
    # Public case data one driver shared by several checks runs on: the driver is called as
    # `driver(run, cases)`. The grader sends the data with the driver's name (`public_driver`),
    # so the child builds the check from the plan alone.
    cases: object = None

    @property
    def key(self) -> str:
        return f"{self.task}/{'hidden/' if self.hidden else ''}{self.name}"


@dataclass(frozen=True)
class Expected:
    """A check's expectation as data: the name of a function of `pagedlab.grader.trusted.expectations`
    (judge side: the check child never imports it, and the grading set-up makes it root-only) and
    the public scenario data it takes. The judge side evaluates it
    (`pagedlab.grader.trusted.expectations.expected_stream`); nothing here can."""

    function: str
    args: tuple = ()

_REGISTRY: dict[str, list[Check]] = {}


def check(task: str, name: str, rule: str = "", *, hint: str = "", hidden: bool = False,
          expected: Callable | None = None, scenario: Callable | None = None, when=(), follows=(),
          cases=None):
    """Register a driver ``fn(run)`` as a graded check of `task` (``fn(run, cases)`` with public
    `cases`, JSON data: one driver for several checks). With `scenario` (hidden checks:
    ``scenario(seed) -> JSON data``, run in the grader only) the driver must be a public
    `scenario_driver`, which the sandboxed child runs on the data alone. `when`: conditional
    hints (hints.When) for the trusted numeric record. `follows`: names of checks of the task
    whose rules this scenario relies on (see `Check.follows`)."""
    if task not in manifest.TASKS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(manifest.TASKS)}")

    def register(fn):
        module = getattr(fn, "__module__", "")
        if scenario is not None and driver_name(fn) is None:
            raise ValueError(f"{task}/{name}: a check with a scenario needs a @scenario_driver driver")
        found = Check(task, name, fn, rule, hint, hidden, expected, module, scenario, tuple(when), tuple(follows),
                      cases)
        bucket = _REGISTRY.setdefault(task, [])
        bucket[:] = [c for c in bucket if c.key != found.key]  # re-registering replaces
        bucket.append(found)
        return fn

    return register


def hidden_scenario(task: str, name: str, rule: str = "", *, driver: Callable, hint: str = "",
                    expected: Callable | None = None, when=()):
    """Register ``fn(seed) -> JSON data`` as the scenario planner of a hidden check of `task`
    whose driver is the public `driver` (a `scenario_driver`)."""
    def register(fn):
        check(task, name, rule, hint=hint, hidden=True, expected=expected, scenario=fn, when=when)(driver)
        return fn

    return register


# Drivers that run on scenario data: the only code the child runs for a hidden check, all of it
# public (`pagedlab.drivers.drawn.*`, or a task's own checks module). Named after their module
# under pagedlab.checks and their function: "drawn.memory_manager.create_free".
_SCENARIO_DRIVERS: dict[str, Callable] = {}
CHECKS_PACKAGE = "pagedlab.drivers"


def scenario_driver(fn):
    """Mark `fn(run)`, a public driver that reads its scenario from `run.scenario`."""
    module = getattr(fn, "__module__", "")
    if not module.startswith(CHECKS_PACKAGE + "."):
        raise ValueError(f"scenario drivers live in {CHECKS_PACKAGE}, not {module}")
    _SCENARIO_DRIVERS[f"{module.removeprefix(CHECKS_PACKAGE + '.')}.{fn.__name__}"] = fn
    return fn


def driver_name(fn) -> str | None:
    return next((name for name, known in _SCENARIO_DRIVERS.items() if known is fn), None)


MAX_SCENARIO_BYTES = 4 * 2**20  # what the grader sends the child for one check


def block_counts(data) -> list[int]:
    """Every int under a key ending in "blocks" anywhere in scenario `data` (the pools' block
    counts of a drawn HW3 or swap scenario: "blocks", "empty_blocks", "gpu_blocks"...)."""
    found, stack = [], [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if str(key).endswith("blocks") and isinstance(value, int) and not isinstance(value, bool):
                    found.append(value)
                else:
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return found


def scenario_data(c: Check, seed: int):
    """The scenario of `c` for `seed` as the child receives it: drawn here, through JSON."""
    if c.scenario is None:
        return None
    text = json.dumps(c.scenario(int(seed)), allow_nan=False)
    if len(text) > MAX_SCENARIO_BYTES:
        raise ValueError(f"the scenario of {c.key!r} is {len(text)} bytes (at most {MAX_SCENARIO_BYTES})")
    return json.loads(text)


def registered(task: str) -> list[Check]:
    """The checks of `task` registered so far (the grader decides which modules load)."""
    return list(_REGISTRY.get(task, []))


def scenario_driver_named(name: str) -> Callable | None:
    """The `scenario_driver` registered as `name`, if its module has loaded."""
    return _SCENARIO_DRIVERS.get(name)


def unregister(task: str, name: str) -> None:
    _REGISTRY[task] = [c for c in _REGISTRY.get(task, []) if c.name != name]
