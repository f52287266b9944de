"""The student-API rules read off a file's source with `ast`, before any of it runs.

Each finding names file:line, what was used and the rule, so the refusal can be the task's
feedback. The rules: imports only from `pagedlab.student.allowed`; no name that reaches the
interpreter's machinery (`__import__`, `eval`, `exec`, `open`, ...); no attribute that loads C
libraries, starts processes or walks frames and modules (`pythonapi`, `CDLL`, `system`,
`modules`, `_getframe`, `__globals__`, ...); no private attribute of an imported module.
"""

from __future__ import annotations

import ast
import functools
import sys
import threading
import types
from pathlib import Path

from .. import student

# Builtins that run text as code, open files or expose namespaces.
BANNED_NAMES = frozenset({
    "__import__", "__builtins__", "eval", "exec", "compile", "open", "globals", "locals", "vars",
    "breakpoint", "input", "__loader__", "__spec__",
})

# Attributes that load C libraries, start processes, or reach modules, frames and code.
BANNED_ATTRIBUTES = frozenset({
    "pythonapi", "CDLL", "PyDLL", "cdll", "pydll", "LibraryLoader", "dlopen", "WinDLL", "windll",
    "oledll", "system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv",
    "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe", "spawnl", "spawnv",
    "spawnlp", "spawnvp", "sys", "os", "subprocess", "importlib", "builtins", "modules",
    "_getframe", "f_globals", "f_locals", "f_back", "f_builtins", "gi_frame", "cr_frame",
    "tb_frame", "__globals__", "__builtins__", "__subclasses__", "__import__", "__code__",
    "__dict__", "__loader__", "__spec__", "__bases__", "__base__", "__mro__",
    # Unpickling calls whatever the bytes name (torch.load, numpy.load): code by another door.
    "load", "loads", "Unpickler", "load_library", "load_inline", "cpp_extension", "ctypeslib",
    # Namespaces by another name: inspect's walks (reached through a module that imported inspect).
    "getmembers", "getmembers_static", "getattr_static", "currentframe",
})

# ctypes' ways to load a library, refused as bare names too (after `from ctypes import *`).
LIBRARY_LOADERS = frozenset({"pythonapi", "CDLL", "PyDLL", "cdll", "pydll", "LibraryLoader", "WinDLL",
                             "windll", "oledll"})

# Reach an attribute by a computed name, which no reading of the source can vet.
ATTRIBUTE_FUNCTIONS = frozenset({"getattr", "setattr", "hasattr", "delattr", "attrgetter", "methodcaller"})

# The dunder attributes a student file may use; every other one reaches the interpreter.
ALLOWED_DUNDERS = frozenset({"__name__", "__qualname__", "__doc__", "__init__", "__class__"})

_REACH = "student files may not load C libraries, start processes or reach modules, frames and code objects"


# CPython 3.11's parser keeps its recursion depth in state shared by threads (gh-106905): two
# threads parsing at once (grade-class jobs, a threaded test) can raise SystemError. One at a time.
_PARSE_LOCK = threading.Lock()


def _rule() -> str:
    return f"a student file may import only {student.listing()} (see pagedlab.student)"


class _Reader(ast.NodeVisitor):
    def __init__(self, filename: str):
        self.filename = filename
        self.findings: list[str] = []
        self.module_names: set[str] = set()
        self.modules: dict[str, str] = {}   # name bound in the file -> the module it is
        self.called: set[int] = set()       # ids of Name nodes that are a call's function

    def refuse(self, node: ast.AST, what: str, rule: str) -> None:
        self.findings.append(f"{self.filename}:{node.lineno}: {what} ({rule})")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not student.allowed(alias.name):
                self.refuse(node, f"imports {alias.name}", _rule())
            elif alias.name.startswith("pagedlab") and alias.asname is None:
                # `import pagedlab.cmem` binds `pagedlab`, and through it the whole library.
                self.refuse(node, f"`import {alias.name}` binds the name pagedlab",
                            f"write `from {alias.name.rpartition('.')[0]} import {alias.name.rpartition('.')[2]}`; {_rule()}")
            self.module_names.add(alias.asname or alias.name.split(".")[0])
            self.modules[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.refuse(node, "a relative import", _rule())
            return
        module = node.module or ""
        for alias in node.names:
            if alias.name == "*":
                # A star import hides which names arrive; only the HW3 header may be taken whole.
                ok = module in student.PAGEDLAB and module != "pagedlab.student"
            else:
                full = f"{module}.{alias.name}"
                ok = student.allowed(full) if full.startswith("pagedlab.") and not student.allowed(module) \
                    else student.allowed(module) and module != "pagedlab"
            if alias.name in BANNED_ATTRIBUTES:
                self.refuse(node, f"imports {module}.{alias.name}", _REACH)
            elif alias.name in ATTRIBUTE_FUNCTIONS:
                self.refuse(node, f"imports {module}.{alias.name}", "student files may not reach attributes by computed names")
            elif not ok:
                if alias.name == "*":
                    self.refuse(node, f"imports {module}.*", f"a star import is allowed only from the HW3 header and cmem; {_rule()}")
                else:
                    self.refuse(node, f"imports {module}.{alias.name}", _rule())
            elif student.allowed(f"{module}.{alias.name}"):
                self.module_names.add(alias.asname or alias.name)
                self.modules[alias.asname or alias.name] = f"{module}.{alias.name}"

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in ATTRIBUTE_FUNCTIONS and id(node) not in self.called:
            # `g = getattr` would let `g(x, computed)` past the call check below.
            self.refuse(node, f"uses {node.id} other than in a call", "student files may not reach attributes by computed names")
        if node.id in BANNED_NAMES:
            self.refuse(node, f"uses {node.id}", "student files may not run text as code, open files or reach the interpreter's namespaces")
        elif node.id in LIBRARY_LOADERS:
            self.refuse(node, f"uses {node.id}", _REACH)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dunder = node.attr.startswith("__") and node.attr.endswith("__")
        if node.attr in BANNED_ATTRIBUTES or (dunder and node.attr not in ALLOWED_DUNDERS):
            self.refuse(node, f"uses .{node.attr}", _REACH)
        elif node.attr in ATTRIBUTE_FUNCTIONS:
            self.refuse(node, f"uses .{node.attr}", "student files may not reach attributes by computed names")
        elif node.attr.startswith("_") and isinstance(node.value, ast.Name) and node.value.id in self.module_names:
            self.refuse(node, f"uses {node.value.id}.{node.attr}", "student files may not use a module's private names")
        elif isinstance(node.value, ast.Name) and node.value.id in self.modules:
            reached = _module_attribute(self.modules[node.value.id], node.attr)
            if reached is not None and not student.allowed(reached):
                # dataclasses.inspect, typing.sys: another module reached through an allowed one.
                self.refuse(node, f"uses {node.value.id}.{node.attr} (the module {reached})", _rule())
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            self.called.add(id(func))
        if isinstance(func, ast.Name) and func.id in ATTRIBUTE_FUNCTIONS:
            name = node.args[1] if len(node.args) >= 2 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self.refuse(node, f"{func.id}(...) with a computed attribute name", "student files may not reach attributes by computed names")
            elif name.value in BANNED_ATTRIBUTES or (name.value.startswith("__") and name.value not in ALLOWED_DUNDERS):
                self.refuse(node, f"{func.id}(..., {name.value!r})", _REACH)
        self.generic_visit(node)


def _module_attribute(module: str, attr: str) -> str | None:
    """The name of the module `module.attr` is, when it is one (read off the loaded module's
    namespace, so nothing is imported or run to find out); else None."""
    found = sys.modules.get(module)
    value = getattr(found, "__dict__", {}).get(attr) if found is not None else None
    return value.__name__ if isinstance(value, types.ModuleType) else None


def check_source(text: str, filename: str) -> list[str]:
    """Every student-API violation in `text` (the source of `filename`), one line each."""
    return list(_findings(text, filename))


# A check process loads the student's file again for every check (each load is checked): the
# same text is parsed once.
@functools.lru_cache(maxsize=16)
def _findings(text: str, filename: str) -> tuple[str, ...]:
    try:
        with _PARSE_LOCK:
            tree = ast.parse(text, filename=filename)
    except SyntaxError:
        return ()  # a syntax error is reported when the file is loaded, with its own message
    except (RecursionError, MemoryError, ValueError, SystemError):
        # Nesting deep enough to exhaust the parser is no student's code: refuse it, never crash.
        return (f"{filename}: nested too deeply to be checked (the student API refuses it)",)
    reader = _Reader(filename)
    try:
        reader.visit(tree)
    except RecursionError:
        return (f"{filename}: nested too deeply to be checked (the student API refuses it)",)
    return tuple(reader.findings)


def check_file(path: Path) -> list[str]:
    return check_source(Path(path).read_text(encoding="utf-8", errors="replace"), Path(path).name)


def check_folder(folder: Path) -> list[str]:
    """Findings for every .py file directly in `folder` (a submission)."""
    out = []
    for path in sorted(Path(folder).glob("*.py")):
        if path.is_file() and not path.is_symlink():
            out += check_file(path)
    return out
