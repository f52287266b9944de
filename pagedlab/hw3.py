"""Old name of `pagedlab.student.hw3` (the HW3 structs and constants), kept for student files and
notebooks: the same module. The harness side is `pagedlab.harness.hw3`."""

import sys

from .student import hw3 as _hw3

sys.modules[__name__] = _hw3
