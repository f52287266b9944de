"""The docs' task tables and totals, written from the task manifest (`pagedlab assign` runs it).

A block of a Markdown file between `<!-- tasks: NAME -->` and `<!-- /tasks -->` is generated:
adding a task to tasks.toml and running `pagedlab assign` brings the points table of
grading/README.md, the points sentence of both READMEs, the total without the last part and the
worst-case grading time up to date, so no total is typed by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

from .spec import manifest

# The markers' indentation is kept on every generated line (a block inside a list item).
BLOCK = re.compile(r"^([ \t]*)<!-- tasks: (\w[\w-]*) -->\n.*?^[ \t]*<!-- /tasks -->", re.S | re.M)
FILES = ("README.md", "grading/README.md")


def _part_totals() -> dict[str, float]:
    totals: dict[str, float] = {}
    for row in manifest.TABLE:
        totals[row.part] = totals.get(row.part, 0) + row.points
    return totals


def _span(numbers: list[int]) -> str:
    """"Task 10", "Tasks 1–5", "Tasks 11–12, 99": runs of consecutive numbers, never a range
    that takes in tasks of another part or none at all."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    text = ", ".join(f"{r[0]}" if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs)
    return f"Task {text}" if len(numbers) == 1 else f"Tasks {text}"


def points_table() -> str:
    lines = ["| task | title | points | time limit | reads |", "|---|---|---:|---:|---|"]
    lines += [f"| {r.id} | {r.label} | {r.points:g} | {r.time_limit:g} s | {', '.join(r.files)} |"
              for r in manifest.TABLE]
    lines.append(f"| | **total** | **{manifest.MAX_SCORE:g}** | | |")
    return "\n".join(lines) + "\n"


def points_sentence() -> str:
    parts = []
    for part, total in _part_totals().items():
        numbers = [r.number for r in manifest.TABLE if r.part == part]
        parts.append(f"Part {part}, {manifest.PARTS.get(part, '')} ({_span(numbers)}) = {total:g}")
    return f"{manifest.MAX_SCORE:g} points: " + "; ".join(parts) + ".\n"


def without_last_part() -> str:
    """What a course that skips the last part grades out of, and the --tasks that does it."""
    last = max(r.part for r in manifest.TABLE)
    kept = [r for r in manifest.TABLE if r.part != last]
    total = sum(r.points for r in kept)
    return (f"A course that skips Part {last} grades out of {total:g} with "
            f"`--tasks {','.join(str(r.number) for r in kept)}`.\n")


def worst_case_seconds() -> float:
    """A submission whose every task hangs: each task's limit, plus the grace after it."""
    from .grader.pipeline import GRACE

    return sum(r.time_limit + GRACE for r in manifest.TABLE)


def gradescope_timeout_minutes() -> int:
    """The worst case with a quarter to spare (image start, a slow machine), in whole 5 minutes."""
    return -(-int(worst_case_seconds() * 1.25) // 300) * 5


def worst_case_sentence() -> str:
    from .grader.pipeline import GRACE

    seconds = worst_case_seconds()
    return (f"If every task of a submission hung, the run would take the sum of the limits plus "
            f"{GRACE:g} s per task ({len(manifest.TABLE)} tasks): {seconds:g} s, about {seconds / 60:.1f} "
            f"minutes. Set Gradescope's autograder timeout to {gradescope_timeout_minutes()} minutes.\n")


RENDER = {"points-table": points_table, "points-sentence": points_sentence,
          "without-last-part": without_last_part, "worst-case-time": worst_case_sentence}


def render(text: str, where: str = "") -> str:
    def block(m: re.Match) -> str:
        if m.group(2) not in RENDER:
            raise ValueError(f"{where}: unknown generated block {m.group(2)!r}; known: {', '.join(RENDER)}")
        indent, body = m.group(1), RENDER[m.group(2)]()
        lines = [f"<!-- tasks: {m.group(2)} -->", *body.splitlines(), "<!-- /tasks -->"]
        return "\n".join(indent + line for line in lines)

    return BLOCK.sub(block, text)


def stale(root: Path) -> list[Path]:
    """The files whose generated blocks differ from what the manifest gives."""
    return [root / name for name in FILES if (root / name).is_file()
            and render((root / name).read_text(encoding="utf-8"), name) != (root / name).read_text(encoding="utf-8")]


def write(root: Path) -> list[Path]:
    """Rewrite the stale files' generated blocks; returns what was written."""
    done = stale(root)
    for path in done:
        path.write_text(render(path.read_text(encoding="utf-8"), path.name), encoding="utf-8")
    return done
