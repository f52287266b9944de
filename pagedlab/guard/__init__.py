"""Keeps student files to the student API (`pagedlab.student`): `static` reads a file's source
and names every forbidden import or call with its line; `audit` refuses the same at run time,
in the checks' child process, with an audit hook that cannot be removed."""

from __future__ import annotations


class StudentAPIError(PermissionError):
    """A student file used something outside the student API."""
