"""`pagedlab class-report DIR`: merge the per-student results.json of a class into grades.csv,
a log of grader problems, and report.html (scores, pass rates, the real failures ranked, the
tasks left unattempted, similar pairs); the same numbers go to the terminal.

A stub left in place fails every check of its task with "not implemented yet"; counted with the
rest, such rows would bury the bugs worth a lecture. So a task is *not attempted* when each of
its failed checks says so, or when every file it reads is the handed-out stub, byte for byte;
those are counted apart, and only the other failures are ranked, each with its most common
explanation. A file that does not compile or import fails every check of every task it serves
with the same error: that is one cause, ranked once as the file's, not once per check. Every
failure is listed (report.html), or counted ("N more") where the terminal cuts the ranking.

It reads only what is in DIR (grade-class wrote it, or a batch array graded it index by index):
the students of the queue the prepare step wrote (class_queue), results produced in any order.
A grade counts only with the state.json its grading wrote for that very key; so a student being
graded right now, or whose array index was lost, is "not graded yet", one whose files folder holds
no file is empty (0 points, no grade to read), and nothing is silently dropped or shown as graded.
The merge refuses (exit 3, no grades.csv) while any student is not graded yet, or when grades
were made with other options or by another grader version than the rest (out of 18 beside out
of 8), and prints the `sbatch --array=...` line that grades exactly those; `--partial` and
`--allow-mixed` merge anyway, saying so.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .. import loader, track
from ..untrusted import escape, escape_line, inert_cell
from . import class_queue
from .class_folder import STUDENTS, is_empty
from .report import GRADER_PROBLEM, PART_A

PROBLEMS_LOG = "grader_problems.log"
REFUSED = 3  # class-report's exit code when it will not merge (not graded yet, mixed options)
MERGED = ("grades.csv", "report.html", "similarity.json", PROBLEMS_LOG)
GRADER_FAILED = ("The pagedlab autograder itself failed", "No submission to grade", "Grader misconfigured")
_FAILED_LINE = re.compile(r"^  ✗ (.+?)(?:  \(feedback only, no points\))?$")
_NOT_RUN_LINE = re.compile(r"^  - (.+) \(not run\)$")
TOP_FAILURES = 15  # rows of the ranking the terminal shows; report.html lists every row
NOT_ATTEMPTED = "not implemented yet"
DOES_NOT_LOAD = "the file does not compile or import (every task it serves fails)"
# The first line of a check's explanation when the student's file failed while being loaded: a
# syntax error (compile), or an exception raised at module level (import).
_SYNTAX = re.compile(r"^your code raised (?:SyntaxError|IndentationError|TabError): .*\(([^,()]+), line \d+\)")
# The grader's own words for a file that fails to load (drivers.record._load_failure); later
# checks refer to the first one ("…: the same error as under …").
_LOADS = re.compile(r"^([\w.-]+\.(?:py|c|cu)) (does not compile|does not link|failed to load)(?::|$)")
_SAME_AS = re.compile(r": the same error as under .*$")
_AT_IMPORT = re.compile(r"^your code raised .* at ([^\s:]+):\d+ \(<module>\)")
_REFUSED = re.compile(r"^([^\s:]+):\d+: ")  # the student API's refusal names file and line next


@dataclass
class Record:
    key: str
    name: str = ""
    email: str = ""
    status: str = "missing"  # graded | empty | grader problem | missing
    total: float | None = None
    maximum: float = 0.0
    tasks: dict = field(default_factory=dict)  # task id -> (score, max, status)
    failures: list = field(default_factory=list)  # (task id, check, first line of the explanation)
    problems: list = field(default_factory=list)  # grader problems, one line each
    untouched: set = field(default_factory=set)  # submitted files identical to the handed-out stub
    unloadable: dict = field(default_factory=dict)  # file -> the error it fails to load with
    part_a: str = ""  # the file Part A was graded from (memory_manager.py or llm_memory.c)
    state: dict = field(default_factory=dict)  # its state.json: key, options, grader version

    def files_of(self, task: str) -> set[str]:
        """The student files `task` was graded from (Part A's: its track's)."""
        from ..spec.manifest import BY_ID

        files = BY_ID[task].files if task in BY_ID else ()
        return {self.part_a if self.part_a and name == track.PYTHON_FILE else name for name in files}

    def not_attempted(self) -> set[str]:
        """Tasks failed only because the student has not started them."""
        from ..spec.manifest import BY_ID

        failed = defaultdict(list)
        for task, _, why in self.failures:
            failed[task].append(why)
        return {t for t, whys in failed.items()
                if all(w.startswith(NOT_ATTEMPTED) for w in whys)
                or (t in BY_ID and self.files_of(t) <= self.untouched)}


def failed_checks(output: str) -> list[tuple[str, str]]:
    """(check name, first line of its explanation) for each ✗ or not-run check in a task's output."""
    return [(check, why) for check, why, _ in _failed_checks(output)]


def _failed_checks(output: str) -> list[tuple[str, str, str | None]]:
    """As failed_checks, plus the student file the check failed to load (None if it loaded)."""
    lines = output.splitlines()
    found = []
    for i, line in enumerate(lines):
        m = _FAILED_LINE.match(line) or _NOT_RUN_LINE.match(line)
        if not m:
            continue
        why = "did not run (the process died or hung earlier in the task)" if line.startswith("  -") else ""
        block = []
        for follow in lines[i + 1:]:
            if not follow.startswith("      ") and follow.strip():
                break
            if follow.strip():
                block.append(follow.strip())
        why = block[0] if block else why
        unloadable = _unloadable_file(block)
        if unloadable and _LOADS.match(block[0]):
            why = _load_summary(block)
        found.append((m.group(1), why, unloadable))
    return found


def _load_summary(block: list[str]) -> str:
    """The error of a file that fails to load, as every student with it gets it: the compiler's
    first error line for C, the exception and its line for Python, no file prefix, no referral."""
    first = _SAME_AS.sub("", block[0])
    rest = _LOADS.sub("", first).strip().rstrip(":").strip()
    if not rest:  # C: the compiler's text follows on the next lines
        return next((line for line in block[1:] if "error" in line), block[1] if len(block) > 1 else first)
    return rest.removeprefix("your code raised ")


def _unloadable_file(block: list[str]) -> str | None:
    if not block:
        return None
    found = _LOADS.match(block[0]) or _SYNTAX.match(block[0]) or _AT_IMPORT.match(block[0])
    if found:
        return Path(found.group(1)).name
    if block[0].startswith("your code raised StudentAPIError") and len(block) > 1:
        refused = _REFUSED.match(block[1])
        return Path(refused.group(1)).name if refused else None
    return None


def load_error(why: str) -> str:
    """The error itself, without where in the loader it surfaced (the same for every student)."""
    return re.sub(r" at \S+:\d+ \(\w+\): .*$", "", why.removeprefix("your code raised "))


def _task_id(number: str) -> str:
    return f"task{number}"


def read_student(folder: Path) -> Record:
    rec = Record(folder.name)
    try:
        meta = json.loads((folder / "student.json").read_text(encoding="utf-8"))
        rec.name, rec.email = meta.get("name", ""), meta.get("email", "")
    except (OSError, ValueError):
        pass
    state = {}
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    rec.state = state if isinstance(state, dict) else {}
    if rec.state.get("status") == "grader problem":
        rec.status = "grader problem"
        rec.problems.append(str(rec.state.get("problem", "grader problem")))
        return rec
    if is_empty(folder / "files"):  # no file to grade: 0 points, and no grade to read
        rec.status, rec.total = "empty", 0.0
        return rec
    if rec.state.get("status") != "graded":
        # Not graded yet: never started, being graded now (a grading removes the old state and
        # results first), or its job died before it wrote the state that vouches for results.json.
        return rec
    try:
        results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    except OSError:
        return rec
    except ValueError as exc:
        rec.status = "grader problem"
        rec.problems.append(f"results.json is not JSON: {exc}")
        return rec
    if str(results.get("output", "")).startswith(GRADER_FAILED):
        rec.status = "grader problem"
        rec.problems.append(str(results["output"]).splitlines()[0])
        return rec
    rec.status = "graded"
    rec.untouched = untouched_files(folder / "files")
    rec.total = float(results.get("score", 0.0))
    for test in results.get("tests", []):
        number, output = str(test.get("number", "")), str(test.get("output", ""))
        hidden = number.endswith("h")
        task = _task_id(number[:-1] if hidden else number)
        if not number.startswith("nb") and not hidden:
            rec.tasks[task] = (float(test.get("score", 0)), float(test.get("max_score", 0)), test.get("status"))
            rec.maximum += float(test.get("max_score", 0))
        # Only the grader's own flag: the output quotes the submission, which can write anything.
        extra = test.get("extra_data")
        if isinstance(extra, dict) and extra.get(GRADER_PROBLEM):
            rec.problems.append(f"{task}: autograder problem: {str(extra[GRADER_PROBLEM])[:500]}")
        if isinstance(extra, dict) and extra.get(PART_A) in track.FILES.values():
            rec.part_a = extra[PART_A]
        for check, why, unloadable in _failed_checks(output):
            if unloadable:
                rec.unloadable.setdefault(unloadable, load_error(why))
            else:
                rec.failures.append((task, f"(hidden) {check}" if hidden else check, why))
    return rec


def untouched_files(files: Path) -> set[str]:
    """Names of the student's files that are the handed-out exercises/ file unchanged (the Part A
    files: any stub the course shipped, whitespace and comments aside, as the track rule says)."""
    stubs = loader.ROOT / "exercises"
    same = set()
    if files.is_dir():
        for path in files.iterdir():
            stub = stubs / path.name
            if path.is_file() and stub.is_file() and path.read_bytes() == stub.read_bytes():
                same.add(path.name)
            elif path.name in track.FILES.values() and path.is_file() and track.is_shipped_stub(path):
                same.add(path.name)
    return same


def collect(out: Path, prepared: class_queue.Prepared | None = None) -> list[Record]:
    """Every student of the queue the prepare step wrote, in its order (QueueError when there is
    none, or it is not the one it wrote). Folders under students/ it does not list are not read."""
    prepared = prepared or class_queue.read(out)
    return [read_student(out / STUDENTS / key) for key in prepared.keys]


def unlisted(out: Path, prepared: class_queue.Prepared) -> list[str]:
    """Folders under students/ that the queue does not list (an earlier class, a hand-made folder)."""
    base, listed = out / STUDENTS, set(prepared.keys)
    return sorted(p.name for p in base.iterdir() if p.is_dir() and p.name not in listed) if base.is_dir() else []


@dataclass
class Completeness:
    """What stops a merge: students not graded yet, and grades that do not belong with the rest."""
    waiting: list[Record]  # no grade yet (missing)
    foreign: list[tuple[Record, str]]  # graded, but not as this folder prepared them: (record, how)

    def refused(self, partial: bool, allow_mixed: bool) -> bool:
        return bool(self.waiting and not partial) or bool(self.foreign and not allow_mixed)


def completeness(records: list[Record], prepared: class_queue.Prepared) -> Completeness:
    expected = prepared.options
    graded = [r for r in records if r.status == "graded"]
    # The grader version most of the grades made as prepared share (each version names its options too).
    versions = Counter(str(r.state.get("grader")) for r in graded
                       if r.state.get("key") == r.key and r.state.get("options") == expected)
    common = versions.most_common(1)[0][0] if versions else None
    foreign = []
    for r in graded:
        if r.state.get("key") != r.key:
            foreign.append((r, "its grade was written for another key"))
        elif r.state.get("options") != expected:
            foreign.append((r, "graded with " + class_queue.describe(r.state.get("options") or {})))
        elif set(r.tasks) != set(expected.get("tasks", [])):
            foreign.append((r, f"its results hold tasks {', '.join(sorted(r.tasks, key=_task_number)) or 'none'}"))
        elif r.state.get("grader") != common:
            foreign.append((r, f"graded by another grader version ({r.state.get('grader')}, most by {common}: "
                               "the checks, solutions or package changed in between)"))
    return Completeness([r for r in records if r.status == "missing"], foreign)


def _task_number(task: str) -> int:
    return int(task[4:]) if task[4:].isdigit() else 10**6


def _who(records: list[Record], prepared: class_queue.Prepared, limit: int = 20) -> str:
    shown = [f"{r.key} ({prepared.index_of(r.key)})" for r in records[:limit]]
    return escape_line(", ".join(shown) + (f" and {len(records) - limit} more" if len(records) > limit else ""))


def completeness_text(out: Path, done: Completeness, records: list[Record], prepared: class_queue.Prepared,
                      partial: bool, allow_mixed: bool) -> list[str]:
    """The lines saying what is not graded yet or does not belong, and how to grade exactly those."""
    lines = []
    if done.waiting:
        indices = [prepared.index_of(r.key) for r in done.waiting]
        lines.append(f"incomplete: {len(done.waiting)} not graded yet (array indices {class_queue.array_spec(indices)}): "
                     + _who(done.waiting, prepared) + ("; merged as missing (--partial)" if partial else ""))
        lines.append(f"  grade them: {class_queue.sbatch_line(out, indices)}")
        lines.append("  (or run the same grade-class command again: it grades only what is not graded yet)")
    if done.foreign:
        indices = [prepared.index_of(r.key) for r, _ in done.foreign]
        lines.append(f"mixed: {len(done.foreign)} graded otherwise than this folder's options "
                     f"({class_queue.describe(prepared.options)}), array indices {class_queue.array_spec(indices)}"
                     + ("; merged anyway (--allow-mixed)" if allow_mixed else ""))
        lines += [escape_line(f"  {r.key} ({prepared.index_of(r.key)}): {how}") for r, how in done.foreign[:20]]
        if len(done.foreign) > 20:
            lines.append(f"  ... and {len(done.foreign) - 20} more")
        lines.append(f"  grade them again: {class_queue.sbatch_line(out, indices)}")
    if done.refused(partial, allow_mixed):
        lines.append("refused: grades.csv and report.html were not written (class-report --partial merges students "
                     "not graded yet as missing; --allow-mixed merges grades made otherwise)")
    problems = [r for r in records if r.status == "grader problem"]
    if problems:
        indices = [prepared.index_of(r.key) for r in problems]
        lines.append(f"grader problems: {len(problems)} (array indices {class_queue.array_spec(indices)}), "
                     f"{PROBLEMS_LOG} says why; once fixed, grade them again: {class_queue.sbatch_line(out, indices)}")
        lines += [escape_line(f"  {r.key}: {r.problems[0][:300]}") for r in problems[:3] if r.problems]
    return lines


def task_ids(records: list[Record]) -> list[str]:
    ids = {t for r in records for t in r.tasks}
    return sorted(ids, key=lambda t: int(t[4:]) if t[4:].isdigit() else 10**6)


def _number(value: float | None) -> str:
    """A score column's cell: the grader's own number, left a number for the spreadsheet."""
    return "" if value is None else f"{float(value):g}"


def write_csv(records: list[Record], path: Path) -> None:
    """grades.csv. Keys, names and e-mails come from the class (folder names, Gradescope's
    metadata): each goes through inert_cell, so a spreadsheet opening the file evaluates none of
    them; the score columns are numbers the grader formatted."""
    tasks = task_ids(records)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([inert_cell(h) for h in ("key", "name", "email", "status", "total", "max", "part_a", *tasks)])
        for r in records:
            text = [inert_cell(str(cell)) for cell in (r.key, r.name, r.email, r.status)]
            numbers = [_number(r.total), _number(r.maximum if r.status == "graded" else None)]
            scores = [_number(r.tasks[t][0] if t in r.tasks else None) for t in tasks]
            w.writerow(text + numbers + [inert_cell(r.part_a)] + scores)


@dataclass
class Summary:
    graded: list[Record]
    pass_rate: dict  # task -> share of graded students with every check passed
    failures: list  # [(task or file, check, students, most common explanation)], most students first
    not_attempted: dict  # task -> keys of the students who have not started it


def summarize(records: list[Record]) -> Summary:
    graded = [r for r in records if r.status == "graded"]
    rates = {}
    for t in task_ids(records):
        had = [r for r in graded if t in r.tasks]
        rates[t] = sum(1 for r in had if r.tasks[t][2] == "passed") / len(had) if had else 0.0
    counts: Counter = Counter()
    whys: dict[tuple, Counter] = defaultdict(Counter)
    for r in graded:  # one cause per file that does not load, whatever it cost
        for name, error in r.unloadable.items():
            counts[name, DOES_NOT_LOAD] += 1
            whys[name, DOES_NOT_LOAD][error] += 1
    skipped: dict[str, list] = defaultdict(list)
    order = {t: i for i, t in enumerate(task_ids(records))}
    for r in graded:
        idle = r.not_attempted()
        for t in sorted(idle, key=lambda t: order.get(t, len(order))):
            skipped[t].append(r.key)
        for task, check, why in set(r.failures):  # a student counts once per check
            if task in idle:
                continue
            counts[task, check] += 1
            whys[task, check][why] += 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], order.get(item[0][0], len(order)), item[0][1]))
    rows = [(t, c, n, _most_common(whys[t, c])) for (t, c), n in ranked]
    return Summary(graded, rates, rows, dict(sorted(skipped.items(), key=lambda kv: order.get(kv[0], 0))))


def _most_common(whys: Counter) -> str:
    """The explanation most students got (ties: the first in text order, so runs agree)."""
    return sorted(whys.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def terminal_text(records: list[Record], summary: Summary, pairs) -> str:
    graded = summary.graded
    lines = [f"{len(records)} students: {len(graded)} graded, "
             f"{sum(r.status == 'empty' for r in records)} empty (no file submitted, 0 points), "
             f"{sum(r.status == 'grader problem' for r in records)} grader problems, "
             f"{sum(r.status == 'missing' for r in records)} not graded yet"]
    if graded:
        totals = [r.total for r in graded]
        lines.append(f"score: mean {statistics.mean(totals):.1f}, median {statistics.median(totals):g}, "
                     f"max {max(totals):g} of {max(r.maximum for r in graded):g}")
    lines.append("pass rate per task (every check passed):")
    for t, rate in summary.pass_rate.items():
        lines.append(f"  {t:<7} {rate * 100:5.1f}%  {'#' * round(rate * 20)}")
    if summary.failures:
        lines.append("real failures, most students first (tasks not attempted left out):")
    for t, check, n, why in summary.failures[:TOP_FAILURES]:
        lines.append(f"  {t:<7} {n:>3}  {check}" + (f"\n               {why[:150]}" if why else ""))
    if len(summary.failures) > TOP_FAILURES:
        lines.append(f"  ... {len(summary.failures) - TOP_FAILURES} more failing checks (report.html lists every one)")
    if summary.not_attempted:
        lines.append("not attempted (the stub still in place), students per task: "
                     + ", ".join(f"{t} {len(keys)}" for t, keys in summary.not_attempted.items()))
    flagged = [p for p in pairs if p.flagged]
    lines.append(f"similar pairs worth a human look: {len(flagged)}"
                 + "".join(f"\n  {p.score * 100:5.1f}%  {p.a} ~ {p.b}" for p in flagged[:10]))
    return escape("\n".join(lines))  # names, check names and explanations came from the class


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def charts(summary: Summary) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images = []
    if summary.graded:
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.hist([r.total for r in summary.graded], bins=min(20, max(5, len(summary.graded))),
                range=(0, max(r.maximum for r in summary.graded) or 1), color="#4a7ab5")
        ax.set_xlabel("total score")
        ax.set_ylabel("students")
        ax.set_title("score histogram")
        images.append(_png(fig))
    if summary.pass_rate:
        fig, ax = plt.subplots(figsize=(6, 3))
        tasks = list(summary.pass_rate)
        ax.bar(tasks, [summary.pass_rate[t] * 100 for t in tasks], color="#5a9e6f")
        ax.set_ylim(0, 100)
        ax.set_ylabel("% of students passing")
        ax.set_title("pass rate per task")
        ax.tick_params(axis="x", rotation=45)
        images.append(_png(fig))
    return images


STYLE = """body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
.pair{display:flex;gap:8px;margin-bottom:12px}.code{flex:1;min-width:0}
.code pre{background:#f6f6f6;font-size:11px;overflow-x:auto;padding:4px}.who{font-weight:bold}
mark{background:#ffd966}.note{background:#fff4d6;border:1px solid #e0b84c;padding:8px}
.problem{color:#a00}"""


def _table(header, rows) -> str:
    esc = lambda v: html.escape(escape_line(str(v)))  # noqa: E731
    return ("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
            + "</table>")


def write_html(path: Path, records: list[Record], summary: Summary, pairs, fps, text: str) -> None:
    names = {r.key: escape_line(f"{r.name} ({r.key})" if r.name else r.key) for r in records}
    body = ["<h1>pagedlab class report</h1>", f"<pre>{html.escape(chr(10).join(text.splitlines()[:2]))}</pre>"]
    body += [f"<img src='{src}'>" for src in charts(summary)]
    body.append("<h2>Pass rate per task</h2>")
    body.append(_table(["task", "passed"], [(t, f"{r * 100:.1f}%") for t, r in summary.pass_rate.items()]))
    body.append("<h2>Real failures, most students first</h2><p>Students failing each check in a "
                "task they attempted; the explanation is the most common first line of the check's "
                "message. Tasks not attempted are counted below, apart.</p>")
    body.append(_table(["task", "students", "check", "explanation"],
                       [(t, n, c, why) for t, c, n, why in summary.failures]))
    body.append("<h2>Not attempted</h2><p>Every failed check said \"not implemented yet\", or every "
                "file of the task was the handed-out stub.</p>")
    body.append(_table(["task", "students", "who"], [(t, len(keys), ", ".join(keys))
                                                     for t, keys in summary.not_attempted.items()])
                if summary.not_attempted else "<p>none</p>")
    problems = [(r.key, p) for r in records for p in r.problems]
    missing = [r.key for r in records if r.status == "missing"]
    empty = [r.key for r in records if r.status == "empty"]
    body.append("<h2>Grader problems</h2><p>Failures of the grader, not of the student's code "
                "(a student's crash or hang is an ordinary failed task above). Fix and rerun.</p>")
    body.append(_table(["student", "problem"], problems) if problems else "<p>none</p>")
    if missing:
        body.append(f"<p class='problem'>Not graded yet (merged with --partial): {html.escape(escape_line(', '.join(missing)))}</p>")
    if empty:
        body.append(f"<p>Empty submissions (no file to grade, 0 points): {html.escape(escape_line(', '.join(empty)))}</p>")
    tasks = task_ids(records)
    body.append("<h2>Students</h2>")
    body.append(_table(["student", "email", "status", "total", *tasks], [
        (names[r.key], r.email, r.status, "" if r.total is None else f"{r.total:g}",
         *[f"{r.tasks[t][0]:g}" if t in r.tasks else "" for t in tasks]) for r in records]))
    body.append("<h2>Similar submissions</h2><div class='note'><b>Similarity is evidence for a "
                "person to review, never a verdict.</b> The handed-out skeleton (exercises/) is "
                "left out; what remains is code the students wrote. Students who followed the same "
                "notebook can write alike: read the code, and talk to the students, before "
                "concluding anything.</div>")
    body.append(_table(["pair", "share of A in B", "share of B in A", "mean", "worth a look"],
                       [(f"{names[p.a]} ~ {names[p.b]}", f"{p.sim_a * 100:.0f}%", f"{p.sim_b * 100:.0f}%",
                         f"{p.score * 100:.0f}%", "yes" if p.flagged else "") for p in pairs[:25]]))
    from .similarity import side_by_side

    for p in [p for p in pairs if p.flagged][:10]:
        body.append(f"<h3>{html.escape(names[p.a])} ~ {html.escape(names[p.b])} "
                    f"({p.score * 100:.0f}%)</h3>")
        body.append(side_by_side(p, fps, names))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>pagedlab class report</title>"
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>")
    path.write_text(page, encoding="utf-8")


def build(out: Path, echo=print, *, partial: bool = False, allow_mixed: bool = False) -> int:
    """Merge DIR's results into grades.csv, grader_problems.log and report.html; refuse (REFUSED,
    writing none of them) while a student is not graded yet or grades are mixed."""
    out = Path(out)
    try:
        prepared = class_queue.read(out)
    except class_queue.QueueError as exc:
        echo(f"error: {exc}")
        return 2
    records = collect(out, prepared)
    if not records:
        echo(f"error: the queue of {out} lists no student")
        return 2
    extra = unlisted(out, prepared)
    if extra:
        echo(escape_line(f"not merged: {len(extra)} folder{'s' if len(extra) != 1 else ''} under {out / STUDENTS} "
                         f"that {out / class_queue.QUEUE} does not list: {', '.join(extra[:20])}"))
    done = completeness(records, prepared)
    notes = completeness_text(out, done, records, prepared, partial, allow_mixed)
    if done.refused(partial, allow_mixed):
        for name in MERGED:  # an earlier merge's files would now read as this folder's grades
            (out / name).unlink(missing_ok=True)
        echo("\n".join(notes))
        return REFUSED
    write_csv(records, out / "grades.csv")
    problems = [escape_line(f"{r.key}: {p}") for r in records for p in r.problems]
    problems += [f"{r.key}: not graded yet (no grade of its own in {STUDENTS}/{r.key})"
                 for r in records if r.status == "missing"]
    (out / PROBLEMS_LOG).write_text("".join(line + "\n" for line in problems), encoding="utf-8")
    summary = summarize(records)
    from . import similarity

    fps = similarity.fingerprints({r.key: out / STUDENTS / r.key / "files" for r in records},
                                  loader.ROOT / "exercises")
    pairs = similarity.compare(fps)
    text = terminal_text(records, summary, pairs)
    write_html(out / "report.html", records, summary, pairs, fps, text)
    (out / "similarity.json").write_text(json.dumps(
        [{"a": p.a, "b": p.b, "sim_a": round(p.sim_a, 4), "sim_b": round(p.sim_b, 4),
          "score": round(p.score, 4), "flagged": p.flagged} for p in pairs], indent=1) + "\n")
    echo(text)
    if notes:
        echo("\n".join(notes))
    echo(f"wrote {out / 'grades.csv'}, {out / 'report.html'}, {out / PROBLEMS_LOG} "
         f"({len(problems)} grader problem{'s' if len(problems) != 1 else ''})")
    return 0


def main(args) -> int:
    return build(Path(args.dir), partial=getattr(args, "partial", False), allow_mixed=getattr(args, "allow_mixed", False))
