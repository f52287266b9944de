"""The judge: compare a student's record with the trusted one and explain the first difference.

Runs only in processes where no student code ran (the grader, a notebook's kernel). The labels,
rules and hints shown come from the trusted record; from the student's record only the values
(and the text describing them) are taken, so a forged record can at best reproduce the
reference's values — which, for scenarios drawn at grading time, takes a working implementation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..drivers.hints import first_row
from ..drivers.hints import shown as shown_hint
from ..drivers.record import Stream, decode_array
from ..engine.pool import MAGIC_TAG
from ..kernels import UNWRITTEN_BITS


@dataclass
class Verdict:
    passed: bool
    message: str = ""
    grader_problem: bool = False  # the trusted record itself is broken: not the student's fault
    # For a hidden check, before its scenarios are published: the rule of the first difference
    # and a sentence that says what went wrong without the scenario's values.
    rule: str = ""
    gist: str = ""
    # A cause other checks may share (a student file that does not compile): the task's report
    # explains it once and refers to it after (`causes.refer_to_causes`).
    cause: str = ""
    # The conditional hints of the first difference, as written (trusted text, never filled with
    # values): a hidden check shows them before publication (`report.hidden_reasons`).
    hint: str = ""


_PATTERNS = (
    (0xCDCDCDCD, "0xCDCDCDCD = uninitialised memory from malloc (did you fill the new table, "
                 "e.g. a new L2 table with -1, before reading it?)"),
    (0xDDDDDDDD, "0xDDDDDDDD = freed memory (a pointer used after cmem.free?)"),
)


def decode_patterns(value, found: list | None = None, depth: int = 0) -> list[str]:
    """Explanations for recognisable memory patterns anywhere in an observed value."""
    found = [] if found is None else found
    if depth > 8 or len(found) >= 3:
        return found
    if isinstance(value, bool):
        return found
    if isinstance(value, int):
        word = value & 0xFFFFFFFF
        for pattern, text in _PATTERNS:
            if word == pattern and text not in found:
                found.append(text)
        if word & 0xFF000000 == MAGIC_TAG and value not in (0, -1):
            text = (f"{word:#010x} is the pool's never-written pattern (block {(word & 0xFFFFFF) // 16}, "
                    f"word {(word & 0xFFFFFF) % 16}): read from pool memory nothing wrote")
            if not any(t.startswith(f"{word:#010x}") for t in found):
                found.append(text)
    elif isinstance(value, list):
        for item in value[:4096]:
            decode_patterns(item, found, depth + 1)
    elif isinstance(value, dict):
        for item in list(value.values())[:4096]:
            decode_patterns(item, found, depth + 1)
    return found


def show(value) -> str:
    """A value as a student reads it: digests and arrays by shape, everything else as data."""
    if isinstance(value, dict) and "__digest__" in value:
        return f"a {value.get('dtype')} tensor of shape {tuple(value.get('shape', ()))}"
    if isinstance(value, dict) and "__array__" in value:
        return f"a {value.get('dtype')} array of shape {tuple(value.get('shape', ()))}"
    text = repr(value)
    return text if len(text) <= 600 else text[:600] + " …"


def _is_digest(value) -> bool:
    return isinstance(value, dict) and "__digest__" in value


def _first_difference(want, mine, depth: int = 0) -> str:
    """Where two plain values part, in a few words: a dict key, a list index, a type."""
    if depth > 6:
        return ""
    if isinstance(want, dict) and isinstance(mine, dict) and not _is_digest(want):
        missing = [k for k in want if k not in mine]
        extra = [k for k in mine if k not in want]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"{len(missing)} key(s) missing ({', '.join(map(str, missing[:4]))})")
            if extra:
                parts.append(f"{len(extra)} key(s) that should not be there ({', '.join(map(str, extra[:4]))})")
            return f"yours has {len(mine)} entries where {len(want)} were expected: " + "; ".join(parts)
        for key in want:
            if want[key] != mine[key]:
                inner = _first_difference(want[key], mine[key], depth + 1)
                return f"at key {key}: expected {show(want[key])}, yours {show(mine[key])}" + (
                    f" ({inner})" if inner and depth < 1 else "")
    if isinstance(want, list) and isinstance(mine, list):
        if len(want) != len(mine):
            return f"yours has {len(mine)} items where {len(want)} were expected"
        for index, (a, b) in enumerate(zip(want, mine)):
            if a != b:
                return f"first difference at position {index}: expected {show(a)}, yours {show(b)}"
    row = first_row(want, mine) if _is_digest(want) else None
    if row is not None:  # a row digest: the trusted record names its rows (tokens of a sequence)
        name = str(want.get("row", "row"))
        yours = "NaN" if mine["rows"][row] == "NaN" else "other values than the reference's"
        return f"first at {name} {row}: yours holds {yours}"
    if _is_digest(want) and _is_digest(mine):
        if (want.get("dtype"), want.get("shape")) == (mine.get("dtype"), mine.get("shape")):
            return "same dtype and shape as expected, but different values"
    if type(want) is not type(mine) and want is not None and mine is not None:
        return f"expected a {type(want).__name__}, yours is a {type(mine).__name__}"
    return ""


def _said(want: dict, mine: dict, expected_text: str, actual_text: str) -> list[str]:
    """The expected/yours lines, or one sentence when those lines would not say what differed:
    a bare True/False, or two lines printed the same."""
    if isinstance(want.get("v"), bool) and isinstance(mine.get("v"), bool) and "x" not in want and \
            not isinstance(mine.get("s"), str):
        held = "held" if want["v"] else "did not hold"
        yours = "held" if mine["v"] else "did not"
        return [f"differs:  for the reference solution this {held}; for your code it {yours}"]
    if want.get("k") == "cond" and mine.get("v") is False and not isinstance(mine.get("s"), str):
        return [f"expected: {expected_text}", "yours:    not so: for your code this did not hold"]
    if expected_text == actual_text:
        where = _first_difference(want.get("v"), mine.get("v")) or "the values differ in a way their text does not show"
        return [f"differs:  {where} (both print as {expected_text})"]
    lines = [f"expected: {expected_text}", f"yours:    {actual_text}"]
    where = _first_difference(want.get("v"), mine.get("v"))
    if where and isinstance(want.get("v"), (dict, list)) and len(expected_text) > 40:  # short: seen at a glance
        lines.append(f"differs:  {where}")
    return lines


def _report(what, rule="", expected=None, actual=None, hint="", extra=()) -> str:
    lines = [what]
    if rule:
        lines.append(f"  rule:     {rule}")
    if expected is not None:
        lines.append(f"  expected: {expected}")
    if actual is not None:
        lines.append(f"  yours:    {actual}")
    for line in extra:
        lines.append(f"  {line}")
    if hint:
        lines.append(f"  hint:     {hint}")
    return "\n".join(lines)


def _compare_arrays(want: dict, got, tol: float, shown=None) -> tuple[bool, list[str]]:
    """Within relative tolerance `tol` of the largest expected magnitude; NaN never matches."""
    try:
        expected = decode_array(want).astype(np.float64)
    except (ValueError, TypeError):
        return False, ["the trusted array could not be read"]
    if not isinstance(got, dict) or "__array__" not in got:
        return False, [f"yours:    {shown if isinstance(shown, str) else show(got)}"]
    try:
        raw = decode_array(got)
        mine = raw.astype(np.float64)
    except (ValueError, TypeError) as exc:
        return False, [f"yours:    an array that could not be read ({exc})"]
    # Outputs are filled with one NaN bit pattern before a launch: that NaN means "never written".
    poison = raw.view(np.uint32) == UNWRITTEN_BITS if raw.dtype == np.float32 else np.zeros(raw.shape, bool)
    if mine.shape != expected.shape:
        return False, [f"expected: shape {expected.shape}", f"yours:    shape {mine.shape}"]
    scale = max(float(np.max(np.abs(expected))) if expected.size else 0.0, 1e-30)
    nan = np.isnan(mine)
    error = np.where(nan, np.inf, np.abs(mine - expected)) / scale
    worst = float(error.max()) if error.size else 0.0
    if worst <= tol:
        return True, []
    index = np.unravel_index(int(np.argmax(error)), error.shape)
    rows = int(np.prod(mine.shape[:-1])) if mine.ndim > 1 else 1
    lines = [f"expected: max relative error <= {tol:g}"]
    if poison.all():
        lines.append("yours:    never written (every element still holds the NaN it was filled with)")
    elif poison.any():
        bad_rows = int(poison.reshape(rows, -1).any(1).sum()) if mine.ndim > 1 else int(poison.sum())
        first = np.unravel_index(int(np.argmax(poison)), poison.shape)
        lines.append(f"yours:    {bad_rows} of {rows} rows were never written (still the NaN they were filled "
                     f"with), first at index {tuple(int(i) for i in first)}")
    elif nan.any():
        bad_rows = int(nan.reshape(rows, -1).any(1).sum()) if mine.ndim > 1 else int(nan.sum())
        first = np.unravel_index(int(np.argmax(nan)), nan.shape)
        lines.append(f"yours:    your code wrote NaN in {bad_rows} of {rows} rows, first at index "
                     f"{tuple(int(i) for i in first)} (computed: from something never written, or 0 / 0)")
    else:
        lines.append(f"yours:    max relative error {worst:.3g} at index {tuple(int(i) for i in index)} "
                     f"(expected {expected[index]:.6g}, yours {mine[index]:.6g})")
    return False, lines


def same_value(want, mine) -> bool:
    """Equal as the contract types them: JSON's int, float, bool, string, list and object are
    distinct (1.0 and true are not 1), at every depth. Iterative; the record's depth is capped."""
    stack = [(want, mine)]
    while stack:
        a, b = stack.pop()
        if type(a) is not type(b):
            return False
        if isinstance(a, list):
            if len(a) != len(b):
                return False
            stack.extend(zip(a, b))
        elif isinstance(a, dict):
            if a.keys() != b.keys():
                return False
            stack.extend((a[k], b[k]) for k in a)
        elif a != b:
            return False
    return True


def _same(want: dict, got: dict) -> tuple[bool, list[str]]:
    if want.get("k") == "array":
        return _compare_arrays(want.get("v"), got.get("v"), float(want.get("tol", 0.0)), got.get("s"))
    return same_value(want.get("v"), got.get("v")), []


def _failure_text(item: dict) -> str:
    return _report(item.get("w", "?"), item.get("r", ""), item.get("x"), item.get("s"), item.get("h", ""))


def _raised(error: dict, step: dict | None) -> str:
    """An exception from the student's code, with the rule and hint of the step it broke (a
    TypeError from `create_sequence(engine, '7', 5)` is a bad-input rule, not a mystery)."""
    text = str(error["text"])
    if step is None or error.get("type") == "NotImplementedError" or error.get("load"):
        return text  # a file that does not load broke no step's rule: the step never ran
    return _report(text, step.get("r", ""), hint=step.get("h", ""), extra=[f"during:   {step['w']}"])


def _outputs_only(expected: Stream, got: Stream):
    """For checks judged on outputs against trusted numbers: keep the student's outputs in the
    expected order; a check the driver itself failed (wrong shape, ...) is reported as it said."""
    failed = next((o for o in got.obs if o.get("k") == "cond" and o.get("v") is False), None)
    if failed is not None:
        return Verdict(False, _failure_text(failed), gist="an output failed the check of its shape or type")
    labels = {o["w"] for o in expected.obs}
    kept = [o for o in got.obs if o.get("w") in labels]
    return Stream(kept, got.status, got.error)


def _array_gist(mine: dict) -> str:
    """What went wrong with one output, without the scenario's values."""
    if isinstance(mine.get("v"), dict):
        return "an output differs from the trusted result beyond the tolerance"
    text = mine.get("s") if isinstance(mine.get("s"), str) else ""
    failed = re.search(r"the kernel failed to run: (\w+)", text)
    if failed:
        return f"the kernel failed to run ({failed.group(1)})"
    if text.startswith("not launched"):
        return "the kernel was not launched: it hung earlier"
    return "an output was not produced"


def _masked_difference(want, mine) -> str:
    """Where two values part, without either's value (a hidden check before its scenario is
    published): the dict key that differs and which way, None or not, more or fewer items."""
    if isinstance(want, dict) and isinstance(mine, dict) and not _is_digest(want):
        if set(want) != set(mine):
            return "your value has other fields than the reference solution's"
        key = next((k for k in want if not same_value(want[k], mine[k])), None)
        if key is not None and not any(ch.isdigit() for ch in str(key)):
            return f"{key}: {_masked_difference(want[key], mine[key])}"
    if mine is None and want is not None:
        return "yours is None where the reference solution's is not"
    if want is None and mine is not None:
        return "yours is not None where the reference solution's is"
    if isinstance(want, bool) and isinstance(mine, bool):
        return f"yours is {mine} where the reference solution's is {want}"
    if isinstance(want, int) and isinstance(mine, int):
        return "yours is " + ("smaller" if mine < want else "larger") + " than the reference solution's"
    if isinstance(want, list) and isinstance(mine, list) and len(want) != len(mine):
        return "yours has " + ("fewer" if len(mine) < len(want) else "more") + " items than the reference solution's"
    return "your value differs from the reference solution's"


def _unvalued(label: str) -> str:
    """A label with its numbers hidden: names the step of a hidden check, not its scenario."""
    return re.sub(r"-?\d+", "…", label)


_LOAD_VERBS = ("does not compile", "does not link", "failed to load")


def _digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode(errors="replace")).hexdigest()[:16]


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def judge(expected: Stream, got: Stream | None, *, problem: str = "", rule: str = "") -> Verdict:
    """Pass when `got` recorded exactly the trusted values, in order, and finished normally.

    `problem` describes how the student's process ended when it did not finish the check
    (a crash, a timeout, an unreadable record): that is then the explanation. `rule`: the
    check's own rule, cited for observations that name none.
    """
    if rule and expected.obs:
        expected = Stream([o if o.get("r") else {**o, "r": rule} for o in expected.obs], expected.status,
                          expected.error)
    verdict = _judge(expected, got, problem=problem)
    if not verdict.passed and not verdict.rule and not verdict.cause.startswith("load:"):
        verdict.rule = rule
    return verdict


def _judge(expected: Stream, got: Stream | None, *, problem: str = "") -> Verdict:
    if expected.status != "completed":
        why = (expected.error or {}).get("text") or (expected.obs[-1]["w"] if expected.obs else expected.status)
        return Verdict(False, f"the reference solution does not pass this check ({why}); tell your instructor",
                       grader_problem=True, gist="the reference solution does not pass this check (the autograder's problem)")
    if got is None:
        return Verdict(False, problem or "the check produced no record",
                       gist=_first_line(problem) or "the check produced no record")
    if expected.obs and all(o.get("k") == "array" for o in expected.obs):
        got = _outputs_only(expected, got)
        if isinstance(got, Verdict):
            return got
    failures = []
    gist, cited, first_hint = "", "", ""
    for index, want in enumerate(expected.obs):
        if index >= len(got.obs):
            break
        mine = got.obs[index]
        if mine.get("w") != want["w"]:
            gist, cited = "your code's results sent the check down another branch than the reference's", want.get("r", "")
            failures.append(_report(
                "your code's results sent the check down another path than the reference's",
                want.get("r", ""), extra=[f"the reference's next step: {want['w']}",
                                          f"yours:                    {mine.get('w')}"]))
            break
        ok, lines = _same(want, mine)
        if ok:
            continue
        if want.get("k") == "array":
            if not failures:
                gist, cited, first_hint = _array_gist(mine), want.get("r", ""), shown_hint(want, mine, fixed_only=True)
            failures.append(_report(want["w"], want.get("r", ""), hint=shown_hint(want, mine), extra=lines))
            continue  # arrays do not change the path: report every one that differs
        expected_text = want.get("x", show(want.get("v")))
        if want.get("k") == "cond" and "x" not in want and isinstance(mine.get("s"), str):
            expected_text = "what the line above says"  # never a bare True
        actual_text = mine.get("s") if isinstance(mine.get("s"), str) else show(mine.get("v"))
        decoded = decode_patterns(mine.get("v"))
        extra = _said(want, mine, expected_text, actual_text) + [f"decoded:  {d}" for d in decoded]
        if isinstance(mine.get("n"), str) and mine["n"]:  # the driver's note on how this run got there
            extra.append(f"note:     {mine['n'][:600]}")
        following = got.obs[index + 1] if index + 1 < len(got.obs) else None
        if following and following.get("k") == "cond" and following.get("v") is False and following.get("s"):
            extra.append(f"detail:   {following['w']}: {following['s']}")
            if following.get("h"):
                extra.append(f"          {following['h']}")
        what = want["w"]
        gist, cited = f"{_unvalued(what)}: {_masked_difference(want.get('v'), mine.get('v'))}", want.get("r", "")
        if want.get("su"):
            gist = "the state the check's earlier calls built already differed from the reference's"
        if want.get("su"):  # the calls before the step went wrong first: blame them, not the step
            what = f"the set-up already differed from the reference's, before the step this check is about: {what}"
        first_hint = shown_hint(want, mine, fixed_only=True)
        failures.append(_report(what, want.get("r", ""), hint=shown_hint(want, mine), extra=extra))
        break
    if failures:
        first, rest = failures[0], failures[1:]
        if rest:
            others = "; ".join(f.splitlines()[0] for f in rest[:3]) + (" …" if len(rest) > 3 else "")
            first += f"\n  also wrong ({len(rest)} more): {others}"
        arrays = [o["w"] for o in expected.obs if o.get("k") == "array"]
        if len(arrays) > 1:
            wrong = {f.splitlines()[0] for f in failures}
            right = [w for w in arrays[:len(got.obs)] if w not in wrong]
            first += f"\n  right: {len(right)} of {len(arrays)} outputs" + (
                f" ({'; '.join(right[:4])}{' …' if len(right) > 4 else ''})" if right else "")
        return Verdict(False, first, rule=cited, gist=gist, hint=first_hint)
    extra = got.obs[len(expected.obs):]
    if extra and extra[0].get("k") == "cond" and extra[0].get("v") is False:
        return Verdict(False, _failure_text(extra[0]), rule=extra[0].get("r", ""),  # the driver found more wrong
                       gist="your code failed a step the reference solution passes")
    if len(got.obs) < len(expected.obs) or got.status != "completed":
        step_obs = expected.obs[len(got.obs)] if len(got.obs) < len(expected.obs) else None
        cited = (step_obs or {}).get("r", "")
        if problem:
            return Verdict(False, problem, rule=cited, gist=_first_line(problem))
        error = got.error or {}
        if error.get("text") and error.get("load"):
            filename, text = str(error["load"])[:100], str(error["text"])
            verb = next((v for v in _LOAD_VERBS if text.startswith(f"{filename} {v}")), _LOAD_VERBS[-1])
            return Verdict(False, _raised(error, step_obs), gist=f"{filename} {verb}",
                           cause=f"load:{filename}:{_digest(text)}")
        if error.get("text"):
            kind = error.get("type") or "an exception"
            gist = ("not implemented yet" if kind == "NotImplementedError" else f"your code raised {kind}"
                    + (f" at {error['where']}" if error.get("where") else ""))
            return Verdict(False, _raised(error, step_obs), rule=cited, gist=gist)
        step = step_obs["w"] if step_obs else "the end of the check"
        return Verdict(False, f"the check stopped before {step!r} ({got.status})", rule=cited,
                       gist=f"the check stopped before its end ({got.status})")
    if len(got.obs) > len(expected.obs):
        return Verdict(False, f"the check recorded {len(got.obs) - len(expected.obs)} more observations "
                              "than the reference: your code sent it down another path",
                       gist="your code's results sent the check down another path than the reference's")
    return Verdict(True)


_KERNEL_FAILED = "the kernel failed to run: "
_KIND = re.compile(r"(\w+): ")
_AT_LINE = re.compile(r" at (\S+\.cu:\d+)")


def _kernel_error(line: str):
    """(kind, file:line, start) of a kernel error in `line`, or None. Linear in the line: the
    message may carry the submission's text (one regex with a lazy `.*?` was quadratic)."""
    start = line.find(_KERNEL_FAILED)
    if start < 0:
        return None
    kind = _KIND.match(line, start + len(_KERNEL_FAILED))
    if kind is None:
        return None
    where = _AT_LINE.search(line, kind.end())
    return None if where is None else (kind.group(1), where.group(1), start)


def refer_to_first_report(outcomes) -> None:
    """One kernel error (its kind and line) under several checks of a task: shown in full under
    the first check it broke, the later ones refer to it. Outcomes have .name, .message, .hidden."""
    first: dict[tuple, str] = {}
    for outcome in outcomes:
        lines = outcome.message.split("\n")  # not splitlines: a \r is the submission's, shown escaped later
        for index, line in enumerate(lines):
            found = _kernel_error(line)
            if found is None:
                continue
            kind, where, start = found
            if (kind, where) in first:
                lines[index] = (line[:start] + f"the kernel failed to run: the same {kind} at {where} "
                                f"as under \u2717 {first[kind, where]} (the report is shown there)")
            elif not outcome.hidden:  # a hidden check's name is not shown, so never referred to
                first[kind, where] = outcome.name
        outcome.message = "\n".join(lines)
