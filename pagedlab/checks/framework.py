"""Split in the 2026-12 layout: what a check is (`pagedlab.spec.catalog`), what its driver records
in the check child (`pagedlab.drivers.record`) and which checks a task has (`pagedlab.grader.registry`).
This path re-exports all three for one release; assigning to its names changes nothing there."""

from pagedlab._moved import warn_moved
from pagedlab.drivers.record import *  # noqa: F403
from pagedlab.drivers.record import _current, _load_failure  # noqa: F401
from pagedlab.grader.registry import *  # noqa: F403
from pagedlab.grader.registry import _checks_of, _loaded  # noqa: F401
from pagedlab.spec.catalog import *  # noqa: F403
from pagedlab.spec.catalog import _REGISTRY, _SCENARIO_DRIVERS  # noqa: F401

warn_moved(__name__, "pagedlab.spec.catalog, pagedlab.drivers.record and pagedlab.grader.registry")
