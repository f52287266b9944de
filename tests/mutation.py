"""Planting bugs in a copy of a solution and grading the copy like a submission.

A mutant is one text substitution in a solutions/ file. It must apply exactly once (so a mutant
that silently stops matching the solution fails loudly instead of testing nothing), and the
mutated copy is graded through `pagedlab.checks.results` as a submission folder.
"""

from __future__ import annotations

from pathlib import Path

from pagedlab import graded as checks


def apply(text: str, old: str, new: str, name: str) -> str:
    """`text` with `old` replaced by `new`; `old` must occur exactly once."""
    count = text.count(old)
    if count != 1:
        raise ValueError(f"mutant {name}: the text to replace occurs {count} times in the solution (expected 1)")
    return text.replace(old, new)


def grade(folder: Path, filename: str, text: str, task: str) -> dict:
    """Write `text` as `folder/filename` and run `task`'s checks on it: {check name: Result}."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / filename).write_text(text)
    return {r.name: r for r in checks.results(task, str(folder))}


def assert_caught(folder: Path, filename: str, solution: str, task: str, name: str, old: str,
                  new: str, must_fail: str, message_markers: tuple[str, ...]) -> None:
    """The mutant fails a check whose name contains `must_fail`, with an explaining message."""
    graded = grade(folder, filename, apply(solution, old, new, name), task)
    failed = [n for n, r in graded.items() if not r.passed]
    assert any(must_fail in n for n in failed), f"{name}: failed checks were {failed}"
    first = next(r for n, r in graded.items() if must_fail in n and not r.passed)
    assert any(marker in first.message for marker in message_markers), first.message


def assert_all_pass(folder: Path, filename: str, solution: str, task: str) -> None:
    """The unmutated copy passes everything: a mutant's failure is the mutant's doing."""
    graded = grade(folder, filename, solution, task)
    assert all(r.passed for r in graded.values()), [r.message for r in graded.values() if not r.passed]
