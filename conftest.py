"""How the suite shares the machine when `./course test` spreads it over every core (pytest-xdist,
`--dist loadgroup`; docs/testing.md).

Tests run on any free worker, in any order, unless they carry an xdist group: all tests of one
group run on one worker, one after another. A test that needs something the whole machine
shares declares it with one of the groups below, and never more than one (xdist would join two
names into a third group that serialises nothing):

    @pytest.mark.xdist_group("users")      # or pytestmark = [...] for a whole module

"users"        runs a grade whose child switches to a sandbox user (PAGEDLAB_GRADE_USER: the
               red team's created users, `nobody`) or makes the checkout's solutions/ private
               for one: the grader kills every process of its sandbox uid between tasks, so two
               such tests at once would kill each other's work.
"installed-venv" builds or uses tests/installed_env.py's venv (test_installed, the JupyterHub),
               built once per worker that asks for it; each test there creates its own student
               users, none a sandbox user, so it runs beside "users".
"course-venv"  runs tools/bootstrap.py or `./course open` on the checkout's own .venv (the
               browser test too): bootstrap rewrites the venv's JupyterLab settings.
"slurm"        tests/test_slurm.py: a one-node Slurm cluster (munged, slurmctld, slurmd) started
               once for its module; it grades with a pool of its own users, named for it, whose
               locks and processes no other test touches, so it runs beside "users".

A module whose module-scoped fixture is expensive (a release clone, a class graded) takes a
group of its own name, so one worker builds it once instead of every worker that gets one of
its tests. Notebooks under nbval are grouped here, one group per notebook: its cells share one
kernel and must run in order on one worker.

Free ports come from bind(("127.0.0.1", 0)), temporary files from tmp_path: neither needs a group.
"""

from __future__ import annotations

import pytest

USERS = "users"
INSTALLED_VENV = "installed-venv"
COURSE_VENV = "course-venv"

# Started first, longest first (each group's wall time in the 4 Dec fresh-clone run, 2 workers:
# users several minutes of one worker (the red team, the sealed image, the hostile class, all
# serialised), new-task-rehearsal 103 s, release-clone about 85, pip-fallback, slurm and
# graded-class 40-70 each, notebook-cuts 40 (the hang and crash copies), installed-venv and
# course-venv 30-40), so the short tests fill the other workers around them instead of a long
# group starting last.
LONGEST_FIRST = (USERS, "new-task-rehearsal", "release-clone", "pip-fallback", "slurm", "graded-class",
                 "notebook-cuts", INSTALLED_VENV, COURSE_VENV, "nbval-08_cuda_kernel", "nbval-10_swap_and_v2",
                 "nbval-09_prefix_caching_and_utilization")


def _group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def _is_notebook_cell(item: pytest.Item) -> bool:
    return item.nodeid.split("::")[0].endswith(".ipynb")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_notebook_cell(item) and _group(item) is None:
            stem = item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".ipynb")
            item.add_marker(pytest.mark.xdist_group(f"nbval-{stem}"))
    if not hasattr(config, "workerinput"):
        return  # a serial run keeps the collection order
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # sorted() is stable: inside a group, and among ungrouped tests, the order stays as collected.
    items.sort(key=lambda item: rank.get(_group(item) or "", len(rank)))
