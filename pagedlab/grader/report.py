"""What the grader says: per-task text, the score table and Gradescope's results.json."""

from __future__ import annotations

from .notebooks import NotebookOutcome
from .pipeline import TaskOutcome

MAX_MESSAGE_CHARS = 2500
GRADER_PROBLEM = "grader_problem"  # results.json: tests[].extra_data key set only by the grader
GRADER_PREFIX = "autograder problem, not your code (tell your instructor): "
PART_A = "part_a"  # results.json: tests[].extra_data key, the file a Part A task was graded from


def _fmt(points: float) -> str:
    return f"{points:g}"


def indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line.strip() else "" for line in text.splitlines())


def _clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


def status(outcome: TaskOutcome) -> str:
    return "passed" if outcome.passed else "failed"


def _check_lines(checks) -> list[str]:
    lines = []
    for c in checks:
        if c.passed is None:
            lines.append(f"  - {c.name} (not run)")
        else:
            lines.append(f"  {'✓' if c.passed else '✗'} {c.name}" + ("" if c.scored else "  (feedback only, no points)"))
        if not c.passed and c.message:
            lines.append(indent(_clip(c.message, 1500), "      "))
    return lines


def task_output(outcome: TaskOutcome, *, track: bool = True) -> str:
    """What a student reads for one task: each public check ✓/✗ with its explanation, and the
    hidden checks as a count (their names and scenarios stay the instructor's). A Part A task
    starts with the file it was graded from (`track`: False where the grade's first lines said it)."""
    row = outcome.row
    lines = [outcome.part_a.line()] if track and outcome.part_a is not None else []
    lines += [f"{_fmt(outcome.score)}/{_fmt(row.points)} points · "
             + ("all-or-nothing: every check must pass" if not row.partial
                else "partial credit: points × passed checks / all checks")]
    public = [c for c in outcome.checks if not c.hidden]
    hidden = [c for c in outcome.checks if c.hidden]
    if public:
        scored = [c for c in public if c.scored]
        unscored = len(public) - len(scored)
        lines.append(f"{sum(1 for c in scored if c.passed)} of {len(scored)} checks passed"
                     + (f" (+{unscored} feedback-only)" if unscored else "") + f" · rules: {row.cite()}")
        lines += _check_lines(public)
    if hidden:
        ok = sum(1 for c in hidden if c.passed)
        lines.append(f"hidden checks: {ok} of {len(hidden)} passed"
                     + ("" if ok == len(hidden) else " (new scenarios drawn at grading time; their values "
                        "are released with the grades)"))
        lines += hidden_reasons(hidden)
    if outcome.problem:
        lines.append("")
        lines.append(outcome.problem)
    if outcome.note:
        lines.append("")
        lines.append(outcome.note)
    return "\n".join(lines)


def hidden_reasons(hidden) -> list[str]:
    """Each failed hidden check with what went wrong and the rule it broke, as a public check
    says them, but without its name or its scenario's values (those wait for publication)."""
    lines = []
    for number, c in enumerate(hidden, start=1):
        if c.passed:
            continue
        reason = c.gist or ("did not finish: the run ended before this check" if c.passed is None
                            else "failed")
        # Indented deeper than a public ✗: the class report counts it once, under the hidden entry.
        lines.append(f"   ✗ hidden check {number}: {reason}")
        if c.rule:
            lines.append(f"       rule:     {c.rule}")
        hint = getattr(c, "hint", "")  # conditional hints as written: no value of the scenario in them
        if hint:
            lines.append("       hint:     " + "\n                 ".join(line.strip() for line in hint.splitlines()))
    return lines


def hidden_output(outcome: TaskOutcome) -> str:
    """The hidden checks in full, for Gradescope to show once grades are published."""
    hidden = [c for c in outcome.checks if c.hidden]
    return "\n".join([f"{outcome.row.label}: hidden checks"] + _check_lines(hidden))


def score_table(outcomes: list[TaskOutcome], notebooks: list[NotebookOutcome] = ()) -> str:
    rows = [("task", "score", "checks", "time", "")]
    for o in outcomes:
        checks = f"{o.passed_checks}/{len(o.scored_checks)}" if o.checks else "-"
        mark = "✓" if o.passed else "✗"
        rows.append((o.task, f"{_fmt(o.score)}/{_fmt(o.row.points)}", checks, f"{o.seconds:.1f}s",
                     f"{mark} {o.row.label}"))
    total = sum(o.score for o in outcomes)
    maximum = sum(o.row.points for o in outcomes)
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
    rule = "-" * max(len(line) for line in lines)
    lines.insert(1, rule)
    lines.append(rule)
    lines.append(f"{'total'.ljust(widths[0])}  {_fmt(round(total, 2))}/{_fmt(maximum)}")
    for nb in notebooks:
        lines.append(f"notebook {nb.name}: {'✓ ran clean' if nb.passed else '✗ failed'} ({nb.seconds:.0f}s)"
                     + (f": {nb.reason}" if nb.reason else ""))
    return "\n".join(lines)


def results_json(outcomes: list[TaskOutcome], notebooks: list[NotebookOutcome], *,
                 execution_time: float, output: str) -> dict:
    """Gradescope's results.json: https://gradescope-autograders.readthedocs.io/en/latest/specs/"""
    tests = []
    for o in outcomes:
        tests.append({
            "name": o.row.label,
            "number": str(o.row.number),
            "score": o.score,
            "max_score": float(o.row.points),
            "status": status(o),
            "output": task_output(o),
            "visibility": o.row.visibility,
        })
        if o.grader_error:  # the class report's grader_problems.log reads this flag, not the text
            first = (o.problem.splitlines() or ["autograder problem"])[0]
            tests[-1]["extra_data"] = {GRADER_PROBLEM: first.removeprefix(GRADER_PREFIX) or first}
        if o.part_a is not None:  # the class report's Part A column and "not attempted" read this
            tests[-1].setdefault("extra_data", {})[PART_A] = o.part_a.file
        if any(c.hidden for c in o.checks):
            tests.append({
                "name": f"{o.row.label} · hidden checks (details)",
                "number": f"{o.row.number}h",
                "score": 0.0,
                "max_score": 0.0,
                "status": "passed" if all(c.passed for c in o.checks if c.hidden) else "failed",
                "output": _clip(hidden_output(o), 6000),
                "visibility": "after_published",
            })
    for index, nb in enumerate(notebooks, start=1):
        tests.append({
            "name": f"Notebook {nb.name} runs top to bottom (nbval)",
            "number": f"nb{index}",
            "score": nb.score,
            "max_score": float(nb.max_score),
            "status": "passed" if nb.passed else "failed",
            "output": _clip(nb.output, 6000),
            "visibility": "visible",
        })
    return {
        "score": round(sum(t["score"] for t in tests), 2),
        "execution_time": int(round(execution_time)),
        "output": output,
        "output_format": "text",
        "test_output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "visible",
        "tests": tests,
    }
