"""Rehearse the README's add-a-task recipe: prove that a new task needs its four places and nothing else.

    .venv/bin/python tools/rehearse_new_task.py [--whole-suite] [--keep DIR] [pytest args]

In a temporary copy of this checkout (a git repository of its own), it adds a toy Task 99
(notebook 09, `exercises/toy.py`) by the recipe, step by step; checks that only the four places
and the files `pagedlab assign` and `notebook sync` write changed; commits that; grades Task 99
on the solutions; then runs

  - by default, the task-wide tests (`-m "task_wide and not integration"`, and of the tests with
    one case per task or per file only the toy's case): about a minute;
  - with pytest args, `pytest ARGS` in the copy instead;
  - with --whole-suite, the copy's `./course test [ARGS]`: every test and notebook, as CI runs
    them, in a venv of the copy's own (about 8 minutes on two cores; the instructor's proof before
    publishing a new task, not something to run on every change).

--keep DIR puts the copy in DIR (which must not exist) and leaves it there (`git show --stat`
lists what the recipe changed). Exit status: pytest's (or `./course test`'s), 1 when a step of
the recipe did not do what the README says.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import new_task_recipe as recipe  # noqa: E402  (tests/ is on the path only from here on)


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def parse(argv: list[str]) -> tuple[bool, Path | None, list[str]]:
    """(--whole-suite, --keep DIR, the pytest args); the tool's flags may come anywhere."""
    whole, keep, rest = False, None, []
    args = iter(argv)
    for arg in args:
        if arg in ("-h", "--help"):
            print(__doc__.strip())
            sys.exit(0)
        elif arg == "--whole-suite":
            whole = True
        elif arg == "--keep":
            keep = Path(next(args, "")).resolve()
        else:
            rest.append(arg)
    return whole, keep, rest


def whole_suite_env() -> dict[str, str]:
    """The copy's `./course test` builds and uses the copy's own venv: nothing of this checkout's
    venv or this shell's course settings may leak in."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PAGEDLAB_COURSE", "PAGEDLAB_IMPL", "PAGEDLAB_VENV",
                 recipe.manifest.MANIFEST_ENV):
        env.pop(name, None)
    return env


# --whole-suite without pytest args: the `course` script's own default run, less the rehearsal
# itself, which cannot add Task 99 to a copy that already has it (this run is that rehearsal).
WHOLE_SUITE = ["-n", "auto", "--durations=30", "tests", "notebooks",
               *(a for test in ("test_adding_a_task_touches_the_four_places_and_the_task_wide_tests_pass",
                                "test_every_test_whose_cases_change_with_a_new_task_is_marked_task_wide")
                 for a in ("--deselect", f"tests/test_manifest.py::{test}"))]


def rehearse(course: Path, whole: bool, pytest_args: list[str]) -> int:
    say(f"copying the checkout to {course}")
    recipe.copy_course(course)
    say("adding Task 99 by the README's four steps")
    recipe.apply_recipe(course)
    recipe.check_only_the_four_places_changed(course)
    recipe.commit_recipe(course)
    say(f"only the four places changed: {', '.join(sorted(recipe.BY_HAND))}")
    say(f"and the generated files: {', '.join(sorted(recipe.GENERATED))}")
    print(recipe.grade_toy(course).rstrip(), flush=True)
    if whole:
        args = pytest_args or WHOLE_SUITE
        say("the whole suite on the copy: ./course test " + " ".join(args))
        return subprocess.run(["./course", "test", *args], cwd=course, env=whole_suite_env()).returncode
    if pytest_args:
        say("pytest " + " ".join(pytest_args))
        return recipe.run_in(course, *recipe.pytest_in_copy(pytest_args), env=recipe.plugin_env(course),
                             capture=False, timeout=None).returncode
    say("the task-wide tests on the copy")
    suite = recipe.run_in(course, *recipe.pytest_in_copy(recipe.TASK_WIDE_RUN), env=recipe.plugin_env(course),
                          timeout=None)
    print(suite.stdout[-6000:] + suite.stderr[-3000:], flush=True)
    if suite.returncode == 0:
        recipe.check_toy_cases_ran(suite.stdout)
        say("the task-wide tests pass with Task 99, its own cases included")
    return suite.returncode


def main(argv: list[str]) -> int:
    whole, keep, pytest_args = parse(argv)
    course = keep if keep else Path(tempfile.mkdtemp(prefix="rehearse-new-task-")) / "course"
    if not keep:
        # mkdtemp's folder is root's 0700: the suite's sandbox users (nobody, the red team's) must
        # reach the copy's venv and pagedlab, as they reach a checkout.
        course.parent.chmod(0o755)
    if keep:
        course.mkdir(parents=True)  # refuses an existing folder: the copy must start clean
    try:
        return rehearse(course, whole, pytest_args)
    except recipe.RecipeError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if not keep:
            shutil.rmtree(course.parent, ignore_errors=True)
        else:
            say(f"the copy is kept in {course}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
