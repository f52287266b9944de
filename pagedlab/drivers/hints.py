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
- ``nan_row``: two row digests (`record.row_digest`) whose first differing row is NaN in
  the student's (``{row}``: its index);
- ``close``: an array within `arg["tol"]` of the array `arg["array"]` (what a known bug
  computes, NaN where the bug's is), which itself is not within tolerance of the expected one;
- ``unmerged_buddies``: a list of free blocks ``[offset, size]`` (Task 12) holding two buddies,
  ``(o, s)`` and ``(o ^ s, s)``, both free (``{a}``, ``{b}``: the pair; ``{merged}``: the block
  they make together). Read from the student's value itself, so the judge needs no model of a
  bug (a model is a near-answer, and the check child must hold none).

A known bug's hint (``equals``, ``close``) replaces the symptom hints (``unwritten``,
``computed_nan``, ``finite``) when both hold: it says more. A hidden check shows its conditional
hints before its scenario is published, as written (never filled with ``{fields}``): keep the
scenario's values out of their texts.
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
        from .record import encode_array, to_data

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
    from .record import decode_array

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
    """The first row where two row digests (`record.row_digest`) of one shape differ, or None."""
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
    if condition == "unmerged_buddies":
        return _unmerged_buddies(mine)
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
    if condition == "close":
        return _close(arg, want, values, tol)
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
    return None


def _unmerged_buddies(blocks) -> dict | None:
    """The first pair of free buddies in a free list [[offset, size], ...], or None."""
    if not isinstance(blocks, list) or len(blocks) > 100_000:
        return None
    free = set()
    for block in blocks:
        if (isinstance(block, list) and len(block) == 2 and all(type(x) is int for x in block)
                and block[1] > 0 and block[1] & (block[1] - 1) == 0):
            free.add((block[0], block[1]))
    for offset, size in sorted(free):
        buddy = offset ^ size
        if buddy > offset and (buddy, size) in free:
            return {"a": (offset, size), "b": (buddy, size), "merged": (offset, 2 * size)}
    return None


def _close(arg, want, values, tol) -> dict | None:
    """The student's array is what a known bug computes (`arg["array"]`, NaN where the bug's is
    NaN: a sequence the bug leaves with no token divides 0 by 0), and that differs from the
    expected array (a bug whose output is the right one here tells nothing apart)."""
    _, expected = _array(want)
    _, other = _array((arg or {}).get("array"))
    if expected is None or other is None or other.shape != values.shape or expected.shape != values.shape:
        return None
    bug_nan = np.isnan(other)
    if not np.array_equal(bug_nan, np.isnan(values)):
        return None
    if not bug_nan.any() and _within(expected, other, tol):
        return None
    return {} if _within(values[~bug_nan], other[~bug_nan], float(arg.get("tol", tol))) else None


# Conditions that describe a symptom (NaN, wrong numbers): when the output is what a known bug
# computes (`close`, `equals`), the hint that names that bug says more, and theirs is left out.
_SYMPTOMS = ("unwritten", "computed_nan", "finite")


def shown(want: dict, mine: dict, *, fixed_only: bool = False) -> str:
    """The hint text for one differing observation: its unconditional hint, then every
    conditional one whose condition holds (a known bug's hint replaces a symptom's).
    `fixed_only`: only conditional texts shown as written, never filled with values (a hidden
    check's reason before its scenario is published; a driver's plain hint may quote values)."""
    texts = [want["h"]] if want.get("h") and not fixed_only else []
    symptoms, named = [], False
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
        if fixed_only and (fields or "{" in text):
            continue
        try:
            text = text.format(**fields) if fields else text
        except (KeyError, IndexError, ValueError):
            pass
        if str(item.get("if")) in _SYMPTOMS:
            symptoms.append(text)
            continue
        named = named or str(item.get("if")) in ("close", "equals")
        if text and text not in texts:
            texts.append(text)
    if not named:
        texts += [text for text in symptoms if text and text not in texts]
    return "\n            ".join(texts)
