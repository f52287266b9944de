"""What the grader says: per-task text, the score table and Gradescope's results.json."""

from __future__ import annotations

from .notebooks import NotebookOutcome
from .runner import TaskOutcome

MAX_MESSAGE_CHARS = 2500


def _fmt(points: float) -> str:
    return f"{points:g}"


def indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line.strip() else "" for line in text.splitlines())


def _clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


def status(outcome: TaskOutcome) -> str:
    return "passed" if outcome.passed else "failed"


def task_output(outcome: TaskOutcome) -> str:
    """What a student reads for one task: each check ✓/✗, then why the first failure failed."""
    row = outcome.row
    lines = [f"{_fmt(outcome.score)}/{_fmt(row.points)} points · "
             + ("all-or-nothing: every check must pass" if not row.partial
                else "partial credit: points × passed checks / all checks")]
    if outcome.checks:
        unscored = len(outcome.checks) - len(outcome.scored_checks)
        lines.append(f"{outcome.passed_checks} of {len(outcome.scored_checks)} checks passed"
                     + (f" (+{unscored} feedback-only)" if unscored else "") + ":")
        for c in outcome.checks:
            if c.passed is None:  # the process died or hung in this check, or never reached it
                reached = not c.message.startswith("not run")
                lines.append(f"  {'✗' if reached else '-'} {c.name} ({'stopped here' if reached else 'not run'})")
            else:
                lines.append(f"  {'✓' if c.passed else '✗'} {c.name}"
                             + ("" if c.scored else "  (feedback only, no points)"))
    if outcome.problem:
        lines.append("")
        lines.append(outcome.problem)
    failed = [c for c in outcome.checks if c.passed is False and c.scored]
    failed += [c for c in outcome.checks if c.passed is False and not c.scored]
    if failed:
        first = failed[0]
        lines.append("")
        lines.append(f"First failure: {first.name}" + ("" if first.scored else " (feedback only, no points)"))
        lines.append(indent(_clip(first.message)))
        for other in failed[1:]:
            lines.append(f"Also failed: {other.name}: {_clip(other.message.splitlines()[0] if other.message else '', 300)}")
    if outcome.note:
        lines.append("")
        lines.append(outcome.note)
    return "\n".join(lines)


def score_table(outcomes: list[TaskOutcome], notebooks: list[NotebookOutcome] = ()) -> str:
    rows = [("task", "score", "checks", "time", "")]
    for o in outcomes:
        checks = f"{o.passed_checks}/{len(o.scored_checks)}" if o.checks else "-"
        mark = "✓" if o.passed else "✗"
        rows.append((o.task, f"{_fmt(o.score)}/{_fmt(o.row.points)}", checks, f"{o.seconds:.1f}s",
                     f"{mark} {o.row.title}"))
    total = sum(o.score for o in outcomes)
    maximum = sum(o.row.points for o in outcomes)
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
    rule = "-" * max(len(line) for line in lines)
    lines.insert(1, rule)
    lines.append(rule)
    lines.append(f"{'total'.ljust(widths[0])}  {_fmt(round(total, 2))}/{_fmt(maximum)}")
    for nb in notebooks:
        lines.append(f"notebook {nb.name}: {'✓ ran clean' if nb.passed else '✗ failed'} ({nb.seconds:.0f}s)")
    return "\n".join(lines)


def results_json(outcomes: list[TaskOutcome], notebooks: list[NotebookOutcome], *,
                 execution_time: float, output: str) -> dict:
    """Gradescope's results.json: https://gradescope-autograders.readthedocs.io/en/latest/specs/"""
    tests = []
    for o in outcomes:
        tests.append({
            "name": o.row.title,
            "number": str(o.row.number),
            "score": o.score,
            "max_score": float(o.row.points),
            "status": status(o),
            "output": task_output(o),
            "visibility": o.row.visibility,
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
