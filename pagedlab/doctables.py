"""The docs' task tables and totals, written from the task manifest (`pagedlab assign` runs it).

A block of a Markdown file between `<!-- tasks: NAME -->` and `<!-- /tasks -->` is generated:
adding a task to tasks.toml and running `pagedlab assign` brings the points table of
grading/README.md and the points sentence of README.md up to date, so no total is typed by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

from . import manifest

# The markers' indentation is kept on every generated line (a block inside a list item).
BLOCK = re.compile(r"^([ \t]*)<!-- tasks: (\w[\w-]*) -->\n.*?^[ \t]*<!-- /tasks -->", re.S | re.M)
FILES = ("README.md", "grading/README.md")


def _part_totals() -> dict[str, float]:
    totals: dict[str, float] = {}
    for row in manifest.TABLE:
        totals[row.part] = totals.get(row.part, 0) + row.points
    return totals


def _span(numbers: list[int]) -> str:
    return f"Task {numbers[0]}" if len(numbers) == 1 else f"Tasks {numbers[0]}–{numbers[-1]}"


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


RENDER = {"points-table": points_table, "points-sentence": points_sentence}


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
