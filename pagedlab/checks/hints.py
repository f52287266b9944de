"""Hints shown only when what they explain is what differed.

A hint that names one bug misleads every student with another, so an observation may carry
conditional hints, ``when=[When("name", text, arg)]``, recorded as ``hw``. The judge (trusted
code; the conditions and texts come from the trusted record) shows a hint only when its condition
holds for the expected and the student's value, and fills ``{key}``, ``{expected}``,
``{yours}`` in its text from the first difference. The conditions:

- ``equals``: the student's value is `arg` (the value a known bug produces, computed by the
  trusted side);
- ``same_keys``: two dicts with the same keys: a value changed, not what is mapped;
- ``other_keys``: two dicts whose keys differ (more or fewer entries);
- ``unwritten``: an array of which some elements still hold the fill NaN;
- ``computed_nan``: an array with a NaN the code computed (it read something never written);
- ``finite``: an array with no NaN at all (wrong numbers, not unwritten memory);
- ``rows_only``: a finite array wrong only in the rows (first axis) listed in `arg`;
- ``nan_row``: two row digests (`framework.row_digest`) whose first differing row is NaN in
  the student's (``{row}``: its index);
- ``close``: a finite array within `arg["tol"]` of the array `arg["array"]` (what a known bug
  computes), which itself is not within tolerance of the expected one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels import UNWRITTEN_BITS


@dataclass(frozen=True)
class When:
    condition: str
    text: str
    arg: object = None

    def to_data(self) -> dict:
        from .framework import encode_array, to_data

        arg = self.arg
        if isinstance(arg, dict) and "array" in arg:
            arg = {"array": encode_array(np.asarray(arg["array"], dtype=np.float64)), "tol": float(arg["tol"])}
        else:
            arg = to_data(arg)
        return {"if": self.condition, "h": self.text, "arg": arg}


def _first_key(want: dict, mine: dict):
    for key in want:
        if key in mine and want[key] != mine[key]:
            return key
    return None


def _array(data):
    from .framework import decode_array

    if not isinstance(data, dict) or "__array__" not in data:
        return None, None
    try:
        raw = decode_array(data)
    except (ValueError, TypeError):
        return None, None
    return raw, raw.astype(np.float64)


def _unwritten(raw) -> np.ndarray:
    if raw.dtype == np.float32:
        return raw.view(np.uint32) == UNWRITTEN_BITS
    return np.zeros(raw.shape, bool)


def _within(mine, other, tol) -> bool:
    if mine.shape != other.shape or np.isnan(mine).any():
        return False
    scale = max(float(np.max(np.abs(other))) if other.size else 0.0, 1e-30)
    return bool(np.all(np.abs(mine - other) / scale <= tol))


def first_row(want, mine) -> int | None:
    """The first row where two row digests (`framework.row_digest`) of one shape differ, or None."""
    if not all(isinstance(d, dict) and isinstance(d.get("rows"), list) for d in (want, mine)):
        return None
    if (want.get("dtype"), want.get("shape")) != (mine.get("dtype"), mine.get("shape")):
        return None
    return next((i for i, (a, b) in enumerate(zip(want["rows"], mine["rows"])) if a != b), None)


def holds(condition: str, arg, want, mine, tol: float = 0.0) -> dict | None:
    """The fields for the hint's text when `condition` holds for (want, mine), else None."""
    if condition == "nan_row":
        row = first_row(want, mine)
        return {"row": row} if row is not None and mine["rows"][row] == "NaN" else None
    if condition == "equals":
        return {} if mine == arg else None
    if condition in ("same_keys", "other_keys"):
        if not isinstance(want, dict) or not isinstance(mine, dict) or want == mine:
            return None
        same = set(want) == set(mine)
        if condition == "other_keys":
            return {} if not same else None
        key = _first_key(want, mine) if same else None
        return None if key is None else {"key": key, "expected": want[key], "yours": mine[key]}
    raw, values = _array(mine)
    if raw is None:
        return None
    unwritten = _unwritten(raw)
    nan = np.isnan(values)
    if condition == "unwritten":
        return {} if unwritten.any() else None
    if condition == "computed_nan":
        return {} if (nan & ~unwritten).any() else None
    if nan.any():
        return None  # the conditions below explain wrong numbers, not NaN
    if condition == "finite":
        return {}
    _, expected = _array(want)
    if expected is None or expected.shape != values.shape:
        return None
    if condition == "rows_only":
        scale = max(float(np.max(np.abs(expected))) if expected.size else 0.0, 1e-30)
        wrong = np.abs(values - expected) / scale > tol
        rows = {int(i) for i in np.nonzero(wrong.reshape(wrong.shape[0], -1).any(1))[0]}
        return {} if rows and rows <= set(arg or ()) else None
    if condition == "close":
        _, other = _array((arg or {}).get("array"))
        if other is None or _within(expected, other, tol):
            return None  # the bug's output is the right one here: it tells nothing apart
        return {} if _within(values, other, float(arg.get("tol", tol))) else None
    return None


def shown(want: dict, mine: dict) -> str:
    """The hint text for one differing observation: its unconditional hint, then every
    conditional one whose condition holds."""
    texts = [want["h"]] if want.get("h") else []
    for item in want.get("hw") or ():
        if not isinstance(item, dict):
            continue
        try:
            fields = holds(str(item.get("if")), item.get("arg"), want.get("v"), mine.get("v"),
                           float(want.get("tol", 0.0)))
        except (ValueError, TypeError, KeyError):
            fields = None
        if fields is None:
            continue
        text = str(item.get("h", ""))
        try:
            text = text.format(**fields) if fields else text
        except (KeyError, IndexError, ValueError):
            pass
        if text and text not in texts:
            texts.append(text)
    return "\n            ".join(texts)
