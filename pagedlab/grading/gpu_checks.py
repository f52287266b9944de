"""Moved to `pagedlab.drivers.gpu`: the GPU check is a driver, which the check child loads, so it
lives with the drivers. This name forwards to it for one release."""

import warnings

from ..drivers.gpu import *  # noqa: F403
from ..drivers.gpu import _cases, _label  # noqa: F401

warnings.warn("pagedlab.grading.gpu_checks is now pagedlab.drivers.gpu", DeprecationWarning, stacklevel=2)
