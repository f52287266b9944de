"""Moved to `pagedlab.checks.gpu`: the GPU check is a driver, which the check child loads, so it
lives with the drivers. This name forwards to it for one release."""

import warnings

from ..checks.gpu import *  # noqa: F403
from ..checks.gpu import _cases, _label  # noqa: F401

warnings.warn("pagedlab.grading.gpu_checks is now pagedlab.checks.gpu", DeprecationWarning, stacklevel=2)
