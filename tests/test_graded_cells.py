"""A graded cell never hangs or kills the Jupyter kernel, and says where the student's code was.

Through a real Jupyter kernel: for each student module of Parts A, B and D, a submission whose
first graded function hangs, segfaults, raises SystemExit or allocates 20 GB. (os._exit and a
recursion bomb need `import os` / `import sys`, which the student API refuses before they run:
tests/test_student_api.py.) The graded cell must report a failed check naming the student's file
and a line of the planted code (not one the child reached before it, such as `import torch` when
the limit ran out first) within the task's time limit + 5 s, and the next cell in the same kernel
must still run. For the torch module (each of its cases starts a task process importing torch) only
the attacks torch can change are run: its threads under a hang or a segfault, its address space
under the memory limit; SystemExit ends a process the same way with or without it.
"""

from __future__ import annotations

import re
import shutil
import textwrap
import time
from pathlib import Path

import pytest

from pagedlab.sandbox.policy import WALL_FACTOR
from pagedlab.spec import manifest

jupyter_client = pytest.importorskip("jupyter_client")

ROOT = Path(__file__).resolve().parent.parent
SCALE = 0.1  # limits of 30/60 s become 3/6 s
# A torch task process spends seconds importing torch before the planted code runs: at 6 s it
# ran out of time there on a busy machine and its attack was never reached.
TORCH_SCALE = 0.25
# Its hang sleeps: a busy loop would burn those 15 s of CPU and show nothing more (the child is
# killed on the wall-clock limit either way).
TORCH_HANG = "import time\nwhile True:\n    time.sleep(1)"

# (student file, task, the code that replaces the function its first check calls)
TARGETS = {
    "memory_manager.py": ("task2", "def create_sequence(engine, seq_id, initial_kv_len):\n{body}\n"),
    "paged_attention.py": ("task6", "def slot_mapping(block_table, positions, block_size):\n{body}\n"),
    "prefix_cache.py": ("task11", "def _broken(*args, **kwargs):\n{body}\n"
                                  "hash_block_tokens = _broken\nPrefixCacheManager.__init__ = _broken\n"),
    "buddy.py": ("task12", "def _broken(*args, **kwargs):\n{body}\nBuddyAllocator.__init__ = _broken\n"),
}
ATTACKS = {
    "infinite loop": "while True:\n    pass",
    "segfault": "import ctypes\nctypes.string_at(0)",
    "SystemExit": "raise SystemExit(2)",  # sys.exit without sys, which a student file may not import
    "20 GB allocation": "return bytearray(20 * 2**30)",
}


@pytest.fixture(scope="module")
def kernel():
    manager = jupyter_client.KernelManager(kernel_name="python3")
    manager.start_kernel(env={**__import__("os").environ, "PAGEDLAB_GRADE_TIME_SCALE": str(SCALE)},
                         cwd=str(ROOT))
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    yield client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def execute(client, code: str, timeout: float) -> tuple[str, str]:
    """(status, everything the cell printed) of one cell."""
    out = []

    def collect(msg):
        content = msg["content"]
        if msg["msg_type"] == "stream":
            out.append(content["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(content["traceback"]))
    reply = client.execute_interactive(code, timeout=timeout, output_hook=collect)
    return reply["content"]["status"], "".join(out)


def planted(tmp_path: Path, filename: str, attack: str) -> tuple[Path, str, range]:
    """The submission folder, the task, and the line numbers of the planted code."""
    task, template = TARGETS[filename]
    folder = tmp_path / f"{Path(filename).stem}-{attack.replace(' ', '_')}"
    folder.mkdir()
    for name in manifest.SUBMISSION_FILES:
        shutil.copy(ROOT / "solutions" / name, folder / name)
    text = (folder / filename).read_text()
    first = text.count("\n") + 2
    body = TORCH_HANG if (filename, attack) == ("paged_attention.py", "infinite loop") else ATTACKS[attack]
    code = template.format(body=textwrap.indent(body, "    "))
    (folder / filename).write_text(text + "\n" + code)
    return folder, task, range(first, first + code.count("\n"))


SAME_WITH_TORCH = {"SystemExit"}
CASES = [(filename, attack) for filename in sorted(TARGETS) for attack in sorted(ATTACKS)
         if not (filename == "paged_attention.py" and attack in SAME_WITH_TORCH)]


@pytest.mark.slow
@pytest.mark.parametrize("filename, attack", CASES, ids=[f"{f}-{a}" for f, a in CASES])
def test_a_broken_submission_fails_the_graded_cell_and_the_kernel_lives(kernel, tmp_path, filename, attack):
    folder, task, lines = planted(tmp_path, filename, attack)
    scale = TORCH_SCALE if filename == "paged_attention.py" else SCALE
    limit = manifest.task(task).time_limit * scale
    began = time.monotonic()
    status, text = execute(kernel, f"import os, pagedlab\nos.environ['PAGEDLAB_GRADE_TIME_SCALE'] = '{scale}'\n"
                                   f"pagedlab.graded.run({task!r}, impl={str(folder)!r})",
                           timeout=limit + 60)
    elapsed = time.monotonic() - began
    assert status == "error" and "✗" in text, text
    # The limit is CPU time; a loaded machine may stretch it on the clock, WALL_FACTOR times.
    assert elapsed < (limit + 5) * WALL_FACTOR, f"the graded cell took {elapsed:.1f} s (limit {limit:.0f} s of CPU + 5)"
    assert filename in text, f"the failure does not name {filename}:\n{text}"
    named = {int(n) for n in re.findall(rf'{re.escape(filename)}(?::|", line )(\d+)', text)}
    assert named & set(lines), f"no line of the planted code ({lines.start}-{lines.stop - 1}) named:\n{text}"
    status, text = execute(kernel, "print(6 * 7)", timeout=30)
    assert (status, text.strip()) == ("ok", "42"), "the kernel did not survive the graded cell"
