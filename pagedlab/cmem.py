"""Old name of `pagedlab.student.cmem`, kept for student files and notebooks: the same module."""

import sys

from .student import cmem as _cmem

sys.modules[__name__] = _cmem
