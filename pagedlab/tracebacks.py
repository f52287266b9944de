"""A notebook traceback that pairs each line number with its own text.

In Jupyter, IPython formats the frames of a cell on its fast path (the cell's file name, e.g.
/tmp/ipykernel_123/456.py, is not a file it can open). There it shows `raw_lines[line -
code.co_firstlineno]`, but takes `raw_lines` from `inspect.getsourcelines(frame)`, which for a
comprehension's frame (Python 3.11: a code object of its own, starting at its line) walks back to
the nearest `def` or to the cell's first line. So notebook 01's `runs = [sim.simulate(...) for
...]` on line 4 was shown as "----> 4 from pagedlab import simulator as sim", line 1's text.

`install()` makes those lines start at the code object's first line, which is what the formatter
assumes; the module and function frames it already got right come out the same. Called when
pagedlab is imported in an IPython kernel (every notebook's first cell does that).
"""

from __future__ import annotations

import linecache
import types


def aligned_lines(code: types.CodeType) -> list[str]:
    """The source from `code`'s first line on (empty when no source is known)."""
    lines = linecache.getlines(code.co_filename)
    return lines[max(code.co_firstlineno - 1, 0):] if lines else []


def install() -> bool:
    """Patch IPython's fast-path frame (once); False where this IPython has no such path."""
    try:
        from IPython.core import tbtools
    except ImportError:
        return False
    frame_info = getattr(tbtools, "FrameInfo", None)
    if frame_info is None or not hasattr(frame_info, "_from_stack_data_FrameInfo"):
        return False  # another IPython: its formatter is not the one this fixes
    if getattr(frame_info, "_pagedlab_aligned", False):
        return True
    original = frame_info.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        code = getattr(self, "code", None)
        if getattr(self, "_sd", True) is None and isinstance(code, types.CodeType):
            lines = aligned_lines(code)
            if lines:
                self.raw_lines = lines

    frame_info._pagedlab_original_init = original  # the test shows the bug on it
    frame_info.__init__ = __init__
    frame_info._pagedlab_aligned = True
    return True
