"""Submissions that take points from pagedlab's own code instead of writing it. Each is the
exercises' file with the task's function replaced by a call into the harness or a model; the
student-API guard must turn each into 0 points with a message naming the rule."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

EXERCISES = Path(__file__).resolve().parent.parent.parent / "exercises"

# Task 1 from the harness: new_engine is a correct llm_init.
HARNESS_LLM_INIT = textwrap.dedent('''
    from pagedlab.harness.hw3 import new_engine as _new_engine

    def llm_init(pool_addr, pool_size):
        if not pool_addr or pool_size < BLOCK_SIZE:
            return None
        return _new_engine(pool_addr, pool_size)
''')

# The same, the module reached by name at run time (no import statement naming it).
DYNAMIC_IMPORT_LLM_INIT = textwrap.dedent('''
    def llm_init(pool_addr, pool_size):
        if not pool_addr or pool_size < BLOCK_SIZE:
            return None
        harness = __import__("pagedlab.harness.hw3", fromlist=["new_engine"])
        return harness.new_engine(pool_addr, pool_size)
''')

IMPORTLIB_LLM_INIT = textwrap.dedent('''
    import importlib

    def llm_init(pool_addr, pool_size):
        if not pool_addr or pool_size < BLOCK_SIZE:
            return None
        return importlib.import_module("pagedlab.harness.hw3").new_engine(pool_addr, pool_size)
''')

# The loaded harness module fetched through the C API, past any Python-level import.
PYTHONAPI_LLM_INIT = textwrap.dedent('''
    def llm_init(pool_addr, pool_size):
        if not pool_addr or pool_size < BLOCK_SIZE:
            return None
        get = ctypes.pythonapi.PyImport_ImportModule
        get.restype, get.argtypes = ctypes.py_object, [ctypes.c_char_p]
        return get(b"pagedlab.harness.hw3").new_engine(pool_addr, pool_size)
''')

# Task 12 from the instructor edition's buddy allocator model, adapted to the exercise's interface
# (the student edition does not have the model: see test_student_api's edition test).
MODEL_BUDDY = textwrap.dedent('''
    from pagedlab.grader.answers.buddy import Buddy as _Buddy

    class BuddyAllocator(BuddyAllocator):
        def __init__(self, total_slots):
            super().__init__(total_slots)
            self.model = _Buddy(total_slots)

        def sync(self):
            self.free_lists = [set(self.model.free_lists.get(k, ())) for k in range(self.max_order + 1)]

        def alloc(self, n):
            if not isinstance(n, int) or isinstance(n, bool):
                raise TypeError(f"n must be an int number of slots, got {type(n).__name__}")
            if not 1 <= n <= self.total_slots:
                raise ValueError(f"n must be between 1 and total_slots={self.total_slots}, got {n}")
            offset = self.model.alloc(n)
            if offset is not None:
                self.allocated[offset] = self.model.order(n)
            self.sync()
            return offset

        def free(self, offset):
            if offset not in self.allocated:
                raise ValueError(f"offset {offset!r} is not the start of an allocated block")
            self.model.free(offset, 1 << self.allocated.pop(offset))
            self.sync()
''')

ATTACKS = {
    "harness_import": ("memory_manager.py", HARNESS_LLM_INIT, "task1"),
    "dunder_import": ("memory_manager.py", DYNAMIC_IMPORT_LLM_INIT, "task1"),
    "importlib": ("memory_manager.py", IMPORTLIB_LLM_INIT, "task1"),
    "pythonapi": ("memory_manager.py", PYTHONAPI_LLM_INIT, "task1"),
    "model_buddy": ("buddy.py", MODEL_BUDDY, "task12"),
}


# Each answer model, by its home in the instructor edition and by where it used to live.
MODEL_IMPORTS = {
    "buddy model": ("buddy.py", "from pagedlab.grader.answers.buddy import Buddy"),
    "buddy model, old home": ("buddy.py", "from pagedlab.simulator import Buddy"),
    "swap model": ("swap.py", "from pagedlab.grader.answers.swap import expected_move"),
    "swap model, old home": ("swap.py", "from pagedlab.drivers.swap import expected_move"),
    "prefix-cache model": ("prefix_cache.py", "from pagedlab.grader.answers.prefix_cache import ReferenceCache"),
    "prefix-cache model, old home": ("prefix_cache.py", "from pagedlab.drivers.prefix_cache import ReferenceCache"),
    "models by importlib": ("buddy.py", "import importlib\nimportlib.import_module('pagedlab.grader.answers')"),
}


def make(name: str, folder: Path, exercises: Path = EXERCISES) -> Path:
    """The exercises with attack `name` appended to its file, in `folder`."""
    filename, extra, _task = ATTACKS[name]
    folder.mkdir(parents=True, exist_ok=True)
    for path in exercises.iterdir():
        if path.is_file() and path.suffix in (".py", ".cu", ".c"):
            shutil.copyfile(path, folder / path.name)
    (folder / filename).write_text((exercises / filename).read_text() + extra)
    return folder
