"""A kernel's parameter types, and launch arguments checked against them.

CuPy hands raw pointers and raw scalars to the GPU without knowing the parameter types, so a
float64 array behind a `float*`, or a Python float (sent as a 64-bit double) for a `float`
parameter, silently computes garbage. Reading the signature lets both backends refuse those
before launch, with a message that says what to pass instead.

On the CPU the types come from the compiler: the build exports, per kernel, what each parameter
is after typedefs, macros and -D options (`pl::describe` in prelude.h), so `uint`, `floatX` or
a struct by value are understood exactly. The source-text parser below remains for the CuPy
backend (no C++ compiler needed there) and for parameter names in messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

# C type (qualifiers removed, spaces normalised) -> numpy dtype. LP64 (Linux, macOS).
_SCALARS = {
    "float": np.float32, "double": np.float64,
    "char": np.int8, "signed char": np.int8, "unsigned char": np.uint8,
    "short": np.int16, "short int": np.int16, "signed short": np.int16,
    "unsigned short": np.uint16, "unsigned short int": np.uint16,
    "int": np.int32, "signed": np.int32, "signed int": np.int32,
    "unsigned": np.uint32, "unsigned int": np.uint32,
    "long": np.int64, "long int": np.int64, "unsigned long": np.uint64,
    "long long": np.int64, "long long int": np.int64, "signed long long": np.int64,
    "unsigned long long": np.uint64, "unsigned long long int": np.uint64,
    "bool": np.bool_, "size_t": np.uint64, "ptrdiff_t": np.int64,
    "int8_t": np.int8, "uint8_t": np.uint8, "int16_t": np.int16, "uint16_t": np.uint16,
    "int32_t": np.int32, "uint32_t": np.uint32, "int64_t": np.int64, "uint64_t": np.uint64,
}
# Vector element types: a float4* is fed from a float32 array, as with CuPy.
_VECTORS = {f"{b}{n}": _SCALARS[b if b != "uint" else "unsigned int"]
            for b in ("float", "int", "uint", "double") for n in (2, 3, 4)}
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "__grid_constant__"}


@dataclass(frozen=True)
class Param:
    index: int
    name: str
    ctype: str          # as written, e.g. "const float* __restrict__"
    base: str           # "float"
    pointer: bool
    const: bool         # pointee is const (read-only argument)
    dtype: np.dtype | None  # None: void* (any array), or a struct (checked by `size`)
    size: int = 0           # bytes of the value, or of one pointee (0: unknown or void)
    lanes: int = 0          # vector types: float4 -> 4 (dtype is then the element's)
    is_class: bool = False  # a struct/class type (vector types included)
    raw16: bool = False     # __nv_bfloat16: numpy has no such dtype, pass uint16 bits

    def describe(self) -> str:
        return f"argument {self.index} (`{self.name}`, {self.ctype.strip()})"


def strip_comments(code: str) -> str:
    """Comments blanked out (newlines kept, so offsets and line numbers still match)."""
    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r"//[^\n]*|/\*.*?\*/", blank, code, flags=re.S)


# Storage specifiers may stand on either side of __global__: `static __global__ void k`,
# `__global__ static void k`, `static void __global__ k`; they change nothing here.
_SPECIFIERS = r"(?:(?:static|inline|__forceinline__|__noinline__)\s+)*"
# `void __global__ k(...)` (return type first) is valid CUDA too, common in textbooks.
_LAUNCH_BOUNDS = r"(?:__launch_bounds__\s*\([^)]*\)\s*)?"
_KERNEL_RE = re.compile(
    r"(?:__global__\s+" + _SPECIFIERS + _LAUNCH_BOUNDS + r"void|void\s+" + _SPECIFIERS
    + r"__global__)\s+" + _LAUNCH_BOUNDS + r"([A-Za-z_]\w*)\s*\(")


def kernel_names(code: str) -> list[str]:
    """Names of the non-template `__global__` functions, in source order."""
    text = strip_comments(code)
    names = []
    for m in _KERNEL_RE.finditer(text):
        if is_template_head(text, m.start()):
            continue
        if m.group(1) not in names:
            names.append(m.group(1))
    return names


def is_template_head(text: str, pos: int) -> bool:
    """Does the declaration that reaches `pos` start with `template <...>`? It runs back to the
    previous `;`, `{` or `}` (template parameter lists hold none of them), whatever its length:
    GEMM kernels' lists of tile sizes run past 300 characters. Preprocessor lines in between
    (an #include or #define before the template) are not part of it."""
    start = max(text.rfind(";", 0, pos), text.rfind("{", 0, pos), text.rfind("}", 0, pos)) + 1
    head = "\n".join(ln for ln in text[start:pos].splitlines() if not ln.lstrip().startswith("#"))
    return re.match(r"\s*template\s*<", head) is not None


def parse_params(code: str, name: str) -> list[Param]:
    text = strip_comments(code)
    for m in _KERNEL_RE.finditer(text):
        if m.group(1) == name:
            break
    else:
        found = ", ".join(kernel_names(code)) or "none"
        raise ValueError(f"no `__global__ void {name}(...)` in the kernel source (kernels found: {found})")
    depth, i, start = 1, m.end(), m.end()
    while depth and i < len(text):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    inner = text[start:i - 1].strip()
    if not inner or inner == "void":
        return []
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [_param(k, p) for k, p in enumerate(parts)]


def _param(index: int, decl: str) -> Param:
    decl = " ".join(decl.split())
    m = re.match(r"^(.*?)([A-Za-z_]\w*)\s*$", decl)
    head, pname = (m.group(1), m.group(2)) if m else (decl, f"arg{index}")
    if not head.strip() or head.strip().endswith("::"):  # unnamed parameter: decl is all type
        head, pname = decl, f"arg{index}"
    pointer = "*" in head
    before_star = head.split("*")[0]
    const = pointer and "const" in before_star.split()
    words = [w for w in re.split(r"[\s*&]+", before_star) if w and w not in _QUALIFIERS]
    base = " ".join(words)
    if base == "void" and pointer:
        dtype = None
    elif base in _SCALARS:
        dtype = np.dtype(_SCALARS[base])
    elif pointer and base in _VECTORS:
        dtype = np.dtype(_VECTORS[base])
    else:
        raise ValueError(
            f"parameter {index} `{decl}`: type {base!r} is not supported by the CPU executor's "
            "argument checks (use float, double, int, unsigned, long long, bool or pointers to them)"
        )
    return Param(index, pname, head, base, pointer, const, dtype)


def param_names(code: str, name: str) -> list[str] | None:
    """Parameter names as written (for messages); None when the list cannot be read as text."""
    try:
        return [p.name for p in parse_params(code, name)]
    except ValueError:
        pass
    text = strip_comments(code)
    for m in _KERNEL_RE.finditer(text):
        if m.group(1) == name:
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            inner = text[m.end():i - 1]
            out, depth, cur = [], 0, ""
            for ch in inner + ",":
                depth += 1 if ch in "(<[" else -1 if ch in ")>]" else 0
                if ch == "," and depth == 0:
                    ident = re.findall(r"[A-Za-z_]\w*", cur)
                    out.append(ident[-1] if ident else "")
                    cur = ""
                else:
                    cur += ch
            return out if out != [""] else []
    return None


_CODES = {"b1": np.bool_, "f2": np.float16, "f4": np.float32, "f8": np.float64,
          "i1": np.int8, "i2": np.int16, "i4": np.int32, "i8": np.int64,
          "u1": np.uint8, "u2": np.uint16, "u4": np.uint32, "u8": np.uint64}


def from_compiler(index: int, name: str | None, pointer: bool, const: bool, size: int,
                  lanes: int, is_class: bool, code: str, type_name: str) -> Param:
    """A Param from the compiler's description of one parameter (pl::ParamInfo)."""
    ctype = re.sub(r"\s+([*&])", r"\1", type_name) if type_name else "?"  # clang: "float *"
    base = ctype.replace("const ", "").replace("volatile ", "").rstrip("*& ").strip()
    if pointer and "*" in base:
        base = base[:base.rindex("*")].strip()
    dtype = np.dtype(_CODES[code]) if code in _CODES else None
    return Param(index, name or f"arg{index}", ctype, base, pointer, const, dtype, size=size,
                 lanes=lanes, is_class=is_class, raw16=code == "bf16")


def _c_name(dtype: np.dtype) -> str:
    for c, d in _SCALARS.items():
        if np.dtype(d) == dtype:
            return c
    return str(dtype)


def check_args(params: list[Param], args, kernel: str, *, array_module: str = "numpy") -> None:
    """Raise TypeError/ValueError unless `args` fit `params` the way the kernel reads them."""
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple of kernel arguments, not {type(args).__name__}")
    if len(args) != len(params):
        sig = ", ".join(f"{p.ctype.strip()} {p.name}" for p in params)
        raise TypeError(f"{kernel}({sig}) takes {len(params)} arguments, got {len(args)}")
    for p, a in zip(params, args, strict=True):
        if p.pointer:
            _check_pointer(p, a, array_module)
        else:
            _check_scalar(p, a)


def _check_pointer(p: Param, a, array_module: str) -> None:
    mod = type(a).__module__.split(".")[0]
    if array_module == "numpy" and not isinstance(a, np.ndarray):
        hint = {"cupy": " (a CuPy array: the CPU executor runs on numpy arrays; use .get())",
                "torch": " (a torch tensor: pass t.numpy() or t.detach().cpu().numpy())"}.get(mod, "")
        raise TypeError(f"{p.describe()} needs a numpy array, got {type(a).__name__}{hint}")
    dtype = getattr(a, "dtype", None)
    if dtype is None or not hasattr(a, "flags"):
        raise TypeError(f"{p.describe()} needs a {array_module} array, got {type(a).__name__}")
    if p.raw16 or (p.dtype is None and p.size and p.is_class):
        _check_struct_array(p, a)
    elif p.dtype is not None and np.dtype(str(dtype)) != p.dtype and not (
            p.lanes and dtype.kind == "V" and dtype.itemsize == p.size):
        # Same size: the kernel may mean to read the bits (vLLM keeps halves in uint16_t).
        same = np.dtype(str(dtype)).itemsize == p.dtype.itemsize
        fix = (f"Pass x.view(numpy.{p.dtype.name}) if the kernel reads the bits (halves kept in "
               f"uint16_t, as vLLM does), else x.astype(numpy.{p.dtype.name})" if same
               else f"Pass x.astype(numpy.{p.dtype.name})")
        raise TypeError(
            f"{p.describe()} points to {p.base} ({p.dtype.name}) but the array is {dtype}: "
            f"the kernel would reinterpret its bytes. {fix}.")
    if not (a.flags.c_contiguous or a.flags.f_contiguous):
        raise TypeError(
            f"{p.describe()}: the array is not contiguous (strides {a.strides}); the kernel "
            f"indexes it as one dense block. Pass {array_module}.ascontiguousarray(x).")
    if not p.const and not a.flags.writeable:
        raise ValueError(f"{p.describe()}: the kernel may write through this pointer but the "
                         "array is read-only; pass a writeable copy")


def _check_struct_array(p: Param, a) -> None:
    """Arrays behind a pointer to a struct (or bfloat16): whole elements of the right size."""
    dtype = a.dtype
    if p.raw16:
        if dtype.itemsize != 2 or dtype.kind not in "uV" and "bfloat16" not in str(dtype):
            raise TypeError(f"{p.describe()} points to bfloat16, which numpy lacks: pass the raw "
                            f"bits as a uint16 array (got {dtype})")
        return
    # CuPy passes any array as a pointer (its custom_struct example feeds float32 arrays to a
    # `const Matrix<float>*`): accept any dtype whose bytes are whole structs.
    if a.nbytes % p.size == 0:
        return
    raise TypeError(
        f"{p.describe()} points to {p.size}-byte structs, but the array's {a.nbytes} bytes "
        f"({a.size} x {dtype}) are not a whole number of them: pass a structured array of "
        f"itemsize {p.size}, or any array whose size in bytes is a multiple of {p.size}")


def _check_by_value(p: Param, a) -> None:
    """A struct or vector type by value: a structured numpy scalar, bytes, or an array holding
    exactly its bytes (a float3 as numpy.float32 array of 3)."""
    if isinstance(a, (bytes, bytearray)):
        n, what = len(a), "bytes"
    elif isinstance(a, (np.generic, np.ndarray)):
        a = np.asarray(a)
        if p.lanes and p.dtype is not None and a.dtype != p.dtype and a.dtype.kind != "V":
            raise TypeError(f"{p.describe()} is a vector of {p.lanes} {p.dtype.name}: pass "
                            f"numpy.array([...], dtype=numpy.{p.dtype.name}), got {a.dtype}")
        n, what = a.nbytes, f"a {a.dtype} value"
    else:
        raise TypeError(f"{p.describe()} is a {p.size}-byte struct passed by value: pass a numpy "
                        f"structured scalar, an array of its fields' bytes or `bytes`, got "
                        f"{type(a).__name__}")
    if n != p.size:
        raise TypeError(f"{p.describe()} is {p.size} bytes by value, but {what} of {n} bytes "
                        "was given (check the field types and the struct's padding)")


def _check_scalar(p: Param, a) -> None:
    if p.is_class or p.dtype is None:
        return _check_by_value(p, a)
    want = p.dtype
    if isinstance(a, bool) or isinstance(a, (int, float)) and not isinstance(a, np.generic):
        kind = type(a).__name__
        width = "64-bit double" if isinstance(a, float) else "64-bit integer"
        raise TypeError(
            f"{p.describe()} got a bare Python {kind}; CuPy would send it as a {width}, "
            f"not a {p.base}. Pass numpy.{want.name}({a!r}).")
    if isinstance(a, np.ndarray) and a.ndim == 0:
        a = a[()]
    if not isinstance(a, np.generic):
        raise TypeError(f"{p.describe()} needs a numpy scalar numpy.{want.name}(...), "
                        f"got {type(a).__name__}")
    if a.dtype != want:
        raise TypeError(
            f"{p.describe()} needs numpy.{want.name} ({_c_name(want)}), got numpy.{a.dtype.name}. "
            f"Pass numpy.{want.name}(value).")


# A kernel's namespaces: the compiler's glue and the collapsing pass both name it by them.
_NAMESPACE_HEAD = re.compile(r"\bnamespace\s*([A-Za-z_][\w:]*)?\s*$")


def _namespaces_at(text: str, pos: int) -> tuple[str, ...]:
    """The namespaces enclosing offset `pos`, outermost first (`namespace a::b` gives a, b)."""
    stack: list[tuple[str, ...] | None] = []
    for i in range(pos):
        ch = text[i]
        if ch == "{":
            m = _NAMESPACE_HEAD.search(text, max(0, i - 80), i)
            stack.append(tuple((m.group(1) or "").split("::")) if m else None)
        elif ch == "}" and stack:
            stack.pop()
    return tuple(n for entry in stack if entry for n in entry)


def kernel_scopes(code: str, kernels: list[str]) -> dict[str, str]:
    """Kernel name -> how the glue names it: `::lab::k` for a kernel inside `namespace lab`."""
    text = strip_comments(code)
    out = {}
    for m in _KERNEL_RE.finditer(text):
        name = m.group(1)
        if name in kernels and name not in out:
            spaces = [n for n in _namespaces_at(text, m.start()) if n]
            if spaces:
                out[name] = "::" + "::".join([*spaces, name])
    return out
