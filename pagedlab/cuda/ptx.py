"""Inline PTX on the CPU executor: each `asm("..." : outputs : inputs)` statement of a kernel is
rewritten into C++ before the compiler sees the source (include/pl_ptx.h holds what it calls).

What runs is the PTX that real kernels put in `asm` statements: register moves, packs and
unpacks (`mov.b32 {%0, %1}, %2`), special registers (`%laneid`, `%tid.x`, `%lanemask_lt`...),
`cvt` between f16, bf16, f32, f64 and the integers in every rounding mode (`.rn .rz .rm .rp`,
`.rni...`, `.sat`, `.relu`, the `x2` packs), f16/bf16/f32/f64 arithmetic (`add sub mul fma min
max neg abs`, `div rcp sqrt rsqrt ex2 lg2 sin cos tanh`), integer arithmetic and bit operations
(`lop3 prmt bfe bfi popc clz brev shl shr setp selp`...), loads and stores (`ld.global.nc`,
`ld.global.ca`, vector forms; checked by the sanitizer as plain accesses), atomics (`atom red`),
`shfl.sync`, `vote.sync`, `activemask`, `bar.sync 0`, fences. Operand constraints are read as
nvcc reads them: "r" "h" "l" "f" "d" "c" "n" "m", with "=" and "+"; `%%` stands for `%`.

Any other instruction (tensor cores, `cp.async`, `ldmatrix`, branches...) becomes a call of a
function declared with GCC's `error` attribute: the build fails, naming the instruction and the
CUDA C to write instead, only when the compiler emits code that calls it. So a dtype header's
PTX helpers that no kernel calls still compile, as before.

The statement is replaced on its own first line and the lines it spanned are kept (empty), so
every line number of the file stays the user's.
"""

from __future__ import annotations

import re

__all__ = ["rewrite", "REFUSED_MARK"]

REFUSED_MARK = "pagedlab-ptx: "

CARRIER = {
    "b8": "uint8_t", "u8": "uint8_t", "s8": "int8_t",
    "b16": "uint16_t", "u16": "uint16_t", "s16": "int16_t", "f16": "uint16_t", "bf16": "uint16_t",
    "b32": "uint32_t", "u32": "uint32_t", "s32": "int32_t", "f32": "float",
    "f16x2": "uint32_t", "bf16x2": "uint32_t",
    "b64": "uint64_t", "u64": "uint64_t", "s64": "int64_t", "f64": "double",
    "pred": "bool", "e4m3x2": "uint16_t", "e5m2x2": "uint16_t", "b128": "unsigned __int128",
}
BITS = {"b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16,
        "b32": 32, "u32": 32, "s32": 32, "f32": 32, "f16x2": 32, "bf16x2": 32, "b64": 64,
        "u64": 64, "s64": 64, "f64": 64, "e4m3x2": 16, "e5m2x2": 16, "b128": 128}
UNSIGNED = {8: "uint8_t", 16: "uint16_t", 32: "uint32_t", 64: "uint64_t"}
SIGNED = {8: "int8_t", 16: "int16_t", 32: "int32_t", 64: "int64_t"}
MODES = {"rn": "pl::rnd::RN", "rz": "pl::rnd::RZ", "rm": "pl::rnd::RM", "rp": "pl::rnd::RP",
         "rni": "pl::rnd::RN", "rzi": "pl::rnd::RZ", "rmi": "pl::rnd::RM", "rpi": "pl::rnd::RP"}
SREG = {
    "%laneid": "pl::ptx::laneid()", "%warpid": "pl::ptx::warpid()",
    "%tid.x": "threadIdx.x", "%tid.y": "threadIdx.y", "%tid.z": "threadIdx.z",
    "%ntid.x": "blockDim.x", "%ntid.y": "blockDim.y", "%ntid.z": "blockDim.z",
    "%ctaid.x": "blockIdx.x", "%ctaid.y": "blockIdx.y", "%ctaid.z": "blockIdx.z",
    "%nctaid.x": "gridDim.x", "%nctaid.y": "gridDim.y", "%nctaid.z": "gridDim.z",
    "%lanemask_eq": "pl::ptx::lanemask(0)", "%lanemask_lt": "pl::ptx::lanemask(1)",
    "%lanemask_le": "pl::ptx::lanemask(2)", "%lanemask_gt": "pl::ptx::lanemask(3)",
    "%lanemask_ge": "pl::ptx::lanemask(4)", "%clock": "(uint32_t)pl::ptx::clock64_()",
    "%clock64": "pl::ptx::clock64_()", "%globaltimer": "pl::ptx::globaltimer()",
    "%smid": "0u", "%nsmid": "1u", "%gridid": "0ull", "%nwarpid": "64u",
    "WARP_SZ": "32u",
}

# First word(s) of an instruction the executor does not run -> the CUDA C to write instead.
INSTEAD = [
    (r"^(?:mma|wmma|wgmma|ldmatrix|stmatrix|movmatrix|tcgen05)", "use nvcuda::wmma fragments "
     "(<mma.h>: load_matrix_sync, mma_sync, store_matrix_sync) or a shared-memory tile product"),
    (r"^cp\.async", "copy global to shared memory with ordinary loads and stores, then "
     "__syncthreads()"),
    (r"^(?:bra|call|ret|brx)", "write the control flow in CUDA C (if, loops, function calls)"),
    (r"^(?:bar|barrier)", "use __syncthreads() (bar.sync 0 is run; named barriers are not)"),
    (r"^(?:tex|tld4|suld|sust|sured|txq)", "pass the array as a `const T*` and read it directly"),
    (r"^(?:ld|st|ldu)\.shared", "read and write the __shared__ array through a pointer"),
    (r"^(?:ld|st)", "load or store through an ordinary pointer (__ldg for read-only data)"),
    (r"^cvt", "convert with the matching intrinsic (__float2half_rn, __float2bfloat16_rn, "
     "__float2int_rn, ...) or a C++ cast"),
    (r"^(?:mov|shfl|vote)", "use the CUDA C form (__shfl_sync, __ballot_sync, std::memcpy of "
     "the bits)"),
]


class Refused(Exception):
    """An instruction (or a piece of the statement) the rewriter does not run."""


# ---- scanning C++ text ------------------------------------------------------------------------
def code_mask(code: str) -> str:
    """`code` with comments blanked (newlines kept) and string/char literals left as they are:
    offsets match the original, and an `asm(` inside a comment or a string is not code."""
    out, i, n = [], 0, len(code)
    while i < n:
        c = code[i]
        if c == "/" and code.startswith("//", i):
            j = code.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and code.startswith("/*", i):
            j = code.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", code[i:j]))
            i = j
        elif c in "\"'":
            j = _literal_end(code, i)
            out.append(code[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _literal_end(text: str, i: int) -> int:
    q, j = text[i], i + 1
    while j < len(text) and text[j] != q:
        if text[j] == "\\":
            j += 1
        elif text[j] == "\n":  # an unterminated literal: stop at the line's end
            return j
        j += 1
    return min(j + 1, len(text))


def _close(text: str, i: int) -> int | None:
    """Index of the bracket closing the one at text[i], skipping literals."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = [pairs[text[i]]]
    j = i + 1
    while j < len(text):
        c = text[j]
        if c in "\"'":
            j = _literal_end(text, j)
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if c != stack.pop():
                return None
            if not stack:
                return j
        j += 1
    return None


def _split_top(text: str, sep: str) -> list[str]:
    parts, depth, cur, j = [], 0, [], 0
    while j < len(text):
        c = text[j]
        if c in "\"'":
            k = _literal_end(text, j)
            cur.append(text[j:k])
            j = k
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        j += 1
    parts.append("".join(cur))
    return parts


_ESC = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "\r", "0": "\0", "a": "\a"}


def _string_value(text: str) -> str | None:
    """The value of a sequence of adjacent C string literals, or None when it is not one."""
    out, j, text = [], 0, text.strip()
    if not text:
        return None
    while j < len(text):
        if text[j].isspace():
            j += 1
            continue
        if text[j] != '"':
            return None
        k = _literal_end(text, j)
        raw, m = text[j + 1:k - 1], 0
        while m < len(raw):
            if raw[m] == "\\" and m + 1 < len(raw):
                e = raw[m + 1]
                if e == "x":
                    hx = re.match(r"[0-9a-fA-F]+", raw[m + 2:])
                    out.append(chr(int(hx.group(0), 16)) if hx else "x")
                    m += 2 + (len(hx.group(0)) if hx else 0)
                    continue
                out.append(_ESC.get(e, e))
                m += 2
            else:
                out.append(raw[m])
                m += 1
        j = k
    return "".join(out)


# ---- the rewrite ----------------------------------------------------------------------------------
_ASM = re.compile(r"\b(?:asm|__asm__|__asm)\b(\s*(?:\b(?:volatile|__volatile__|inline)\b\s*)*)\(")


def rewrite(code: str) -> str:
    """The source with every asm statement whose template is a string literal replaced by the
    C++ it runs as (or by a refusal call); line numbers unchanged."""
    if not re.search(r"\b(?:asm|__asm__|__asm)\b", code):
        return code
    mask = code_mask(code)
    out, pos, count = [], 0, 0
    for m in _ASM.finditer(mask):
        if m.start() < pos:
            continue
        end = _close(mask, m.end() - 1)
        if end is None:
            continue
        line = mask.count("\n", 0, m.start()) + 1
        try:
            stmt = Statement(mask[m.end():end], line, count).cxx()
        except Refused as why:
            stmt = _refusal(str(why), line, count)
        except _NotPtx:
            continue
        count += 1
        span = code[m.start():end + 1]
        keep = "".join("\\\n" if nl.startswith("\\") else "\n"
                       for nl in re.findall(r"\\?[ \t]*\r?\n", span))
        out.append(code[pos:m.start()])
        out.append(stmt + keep)
        pos = end + 1
    out.append(code[pos:])
    return "".join(out)


class _NotPtx(Exception):
    """Not an asm statement this rewriter can read (the template is not a literal)."""


def _refusal(instr: str, line: int, k: int) -> str:
    first = instr.split()[0] if instr.split() else instr
    instead = next((t for p, t in INSTEAD if re.search(p, first)),
                   "write in CUDA C the intrinsic or arithmetic the instruction computes")
    msg = (f"{REFUSED_MARK}inline PTX `{instr}` is not supported by pagedlab's CPU executor. "
           f"Instead, {instead}. (On a GPU, backend='cupy' runs it.)")
    msg = msg.replace("\\", "\\\\").replace('"', '\\"')
    name = f"__pl_ptx_refused_{line}_{k}"
    return (f'{{ extern void {name}() __attribute__((error("{msg}"))); {name}(); }}')


class Operand:
    def __init__(self, index: int, constraint: str, expr: str, output: bool):
        self.index, self.expr, self.output = index, expr, output
        self.inout = "+" in constraint
        self.letter = constraint.lstrip("=+&").strip() or "r"
        self.var = f"__pl_o{index}"


_OP_MARK = "\x01"


class Statement:
    def __init__(self, inner: str, line: int, k: int):
        inner = re.sub(r"\\[ \t]*\r?\n", " ", inner)  # a statement inside a #define: its continuations
        sections = _split_top(inner, ":")
        template = _string_value(sections[0])
        if template is None:
            raise _NotPtx
        self.line, self.k = line, k
        self.ops: list[Operand] = []
        names: dict[str, int] = {}
        for sec_i, sec in enumerate(sections[1:3]):
            for part in _split_top(sec, ","):
                part = part.strip()
                if not part:
                    continue
                m = re.match(r'(?:\[\s*(\w+)\s*\]\s*)?("(?:[^"\\]|\\.)*")\s*\((.*)\)\s*$', part, re.S)
                if not m:
                    raise _NotPtx
                if m.group(1):
                    names[m.group(1)] = len(self.ops)
                self.ops.append(Operand(len(self.ops), _string_value(m.group(2)) or "r",
                                        m.group(3), sec_i == 0))
        extended = len(sections) > 1
        if extended:
            def sub(mm):
                if mm.group(0) == "%%":
                    return "%"
                key = mm.group(1) or mm.group(2)
                idx = names[key] if mm.group(2) else int(key)
                if idx >= len(self.ops):
                    raise Refused(f"operand %{key} (the statement has {len(self.ops)})")
                return f"{_OP_MARK}{idx}{_OP_MARK}"
            try:
                template = re.sub(r"%%|%(\d+)|%\[(\w+)\]", sub, template)
            except KeyError as e:
                raise Refused(f"operand %[{e.args[0]}]") from None
        self.template = template
        self.regs: dict[str, tuple[str, str]] = {}  # ptx name -> (c++ variable, ptx type)

    # ---- the whole statement
    def cxx(self) -> str:
        body = []
        text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", self.template, flags=re.S)
        for raw in text.split(";"):
            st = raw.strip()
            while st and st[0] in "{}":
                st = st[1:].strip()
            while st and st[-1] in "{}" and not re.search(r"\{[^{}]*\}$", st):
                st = st[:-1].strip()
            if not st:
                continue
            body.append(self.instruction(" ".join(st.split())))
        pre = []
        for op in self.ops:
            if op.output or op.letter == "m":
                pre.append(f"auto& {op.var} = ({op.expr});")
            else:
                pre.append(f"const auto {op.var} = ({op.expr});")
        decls = [f"{CARRIER[t]} {v}{{}};" for v, t in self.regs.values()]
        if not body and not pre:
            return "std::atomic_signal_fence(std::memory_order_seq_cst);"  # asm("" ::: "memory")
        return "{ " + " ".join(pre + decls + body) + " }"

    def shown(self, instr: str) -> str:
        return re.sub(_OP_MARK + r"(\d+)" + _OP_MARK, r"%\1", instr)

    # ---- operands
    def _reg_name(self, name: str) -> str:
        return "__pl_r_" + re.sub(r"\W", "_", name.lstrip("%"))

    def declare(self, st: str) -> None:
        m = re.match(r"\.reg\s+(?:\.v\d\s+)?\.(\w+)\s+(.*)$", st)
        if not m or m.group(1) not in CARRIER:
            raise Refused(st)
        t = m.group(1)
        for name in m.group(2).split(","):
            name = name.strip()
            rng = re.match(r"(.+)<(\d+)>$", name)
            for nm in ([f"{rng.group(1)}{i}" for i in range(int(rng.group(2)))] if rng else [name]):
                self.regs[nm] = (self._reg_name(nm), t)

    def operand(self, tok: str) -> Operand | None:
        m = re.fullmatch(_OP_MARK + r"(\d+)" + _OP_MARK, tok.strip())
        return self.ops[int(m.group(1))] if m else None

    def read(self, tok: str, t: str) -> str:
        tok = tok.strip()
        c = CARRIER[t]
        op = self.operand(tok)
        if op is not None:
            return f"pl::ptx::in<{c}>({op.var})"
        if tok in self.regs:
            return f"pl::ptx::in<{c}>({self.regs[tok][0]})"
        if tok in SREG:
            return f"pl::ptx::in<{c}>({SREG[tok]})"
        neg = tok.startswith("-")
        lit = tok[1:] if neg else tok
        m = re.fullmatch(r"0[fF]([0-9a-fA-F]{8})", lit)
        if m:
            v = f"std::bit_cast<float>(0x{m.group(1)}u)"
            return f"pl::ptx::in<{c}>({'-' if neg else ''}{v})"
        m = re.fullmatch(r"0[dD]([0-9a-fA-F]{16})", lit)
        if m:
            v = f"std::bit_cast<double>(0x{m.group(1)}ull)"
            return f"pl::ptx::in<{c}>({'-' if neg else ''}{v})"
        if re.fullmatch(r"(?:0[xX][0-9a-fA-F]+|0[0-7]*|[1-9]\d*)[uU]?", lit):
            v = lit.rstrip("uU")
            return f"(({c})({'-' if neg else ''}{v}ll))" if not t.startswith("f") else f"(({c})({'-' if neg else ''}{v}))"
        if re.fullmatch(r"\d+\.\d*(?:[eE][-+]?\d+)?", lit):
            return f"(({c})({tok}))"
        raise Refused(f"operand `{self.shown(tok)}`")

    def write(self, tok: str, expr: str) -> str:
        tok = tok.strip()
        if tok == "_":
            return f"(void)({expr});"
        op = self.operand(tok)
        if op is not None:
            if not op.output:
                raise Refused(f"a write to input operand %{op.index}")
            return f"pl::ptx::out({op.var}, {expr});"
        if tok in self.regs:
            return f"pl::ptx::out({self.regs[tok][0]}, {expr});"
        raise Refused(f"destination `{self.shown(tok)}`")

    def vector(self, tok: str) -> list[str] | None:
        tok = tok.strip()
        if tok.startswith("{") and tok.endswith("}"):
            return [p.strip() for p in tok[1:-1].split(",")]
        return None

    def address(self, tok: str) -> str:
        m = re.fullmatch(r"\[\s*([^\]+\-]+?)\s*(?:([+-])\s*(\w+)\s*)?\]", tok.strip())
        base = m.group(1) if m else tok.strip()
        op = self.operand(base)
        if op is not None and op.letter == "m":
            addr = f"pl::ptx::addr_of(&{op.var})"
        elif op is not None or base in self.regs:
            if op is not None and op.letter in ("r", "h", "c"):
                raise Refused("a 32-bit address operand (a shared-memory window address); pass "
                              "a pointer with the \"l\" constraint")
            addr = self.read(base, "u64")
        elif m and re.fullmatch(r"\d+|0x[0-9a-fA-F]+", base):
            addr = f"{base}ull"
        else:
            raise Refused(f"address `{self.shown(tok)}`")
        if m and m.group(2):
            addr = f"({addr} {m.group(2)} (uint64_t){self.read(m.group(3), 'u64')})"
        return addr

    # ---- one instruction
    def instruction(self, st: str) -> str:
        if st.startswith(".reg"):
            self.declare(st)
            return ""
        if re.match(r"\.(?:pragma|loc|file)\b", st):
            return ""
        guard = ""
        g = re.match(r"@(!?)(\S+)\s+(.*)$", st)
        if g:
            guard = f"if ({'!' if g.group(1) else ''}{self.read(g.group(2), 'pred')}) "
            st = g.group(3)
        parts = st.split(None, 1)
        opcode, args = parts[0], (parts[1] if len(parts) > 1 else "")
        ops = [a.strip() for a in _split_top(args, ",")] if args.strip() else []
        q = opcode.split(".")
        try:
            code = self.op(q[0], q[1:], ops, st)
        except Refused:
            raise
        except (KeyError, IndexError, ValueError):
            raise Refused(self.shown(st)) from None
        if code is None:
            raise Refused(self.shown(st))
        return guard + "{ " + code + " }" if guard else code

    def op(self, name: str, q: list[str], a: list[str], st: str) -> str | None:
        fn = getattr(self, "op_" + name, None)
        if fn is None:
            return None
        return fn(q, a)

    @staticmethod
    def mode(q: list[str], default: str = "rn") -> str:
        return MODES[next((x for x in q if x in MODES), default)]

    # mov: scalar, special register, pack and unpack
    def op_mov(self, q, a):
        t = q[-1]
        dv, sv = self.vector(a[0]), self.vector(a[1])
        if dv:
            w = BITS[t] // len(dv)
            src = self.read(a[1], t)
            return " ".join(self.write(e, f"({UNSIGNED[w]})({src} >> {w * i})")
                            for i, e in enumerate(dv) if e != "_")
        if sv:
            w = BITS[t] // len(sv)
            parts = [f"((uint64_t){self.read(e, 'b' + str(w))} << {w * i})" for i, e in enumerate(sv)]
            return self.write(a[0], f"({CARRIER[t]})({' | '.join(parts)})")
        return self.write(a[0], self.read(a[1], t))

    def op_cvta(self, q, a):
        return self.write(a[0], self.read(a[1], q[-1]))

    # cvt
    def op_cvt(self, q, a):
        mods = [x for x in q if x not in CARRIER]
        d, s = [x for x in q if x in CARRIER][-2:]
        sat = "sat" in mods or "satfinite" in mods
        relu = "relu" in mods
        mode = self.mode(mods)
        if d in ("f16x2", "bf16x2"):
            if s != "f32" or len(a) != 3:
                return None
            k = 1 if d == "bf16x2" else 0
            hi, lo = self.read(a[1], "f32"), self.read(a[2], "f32")
            if relu:
                hi, lo = f"pl::ptx::relu({hi})", f"pl::ptx::relu({lo})"
            return self.write(a[0], f"(uint32_t)((uint32_t)pl::ptx::f2h<{k}>({hi}, {mode}) << 16 | "
                                    f"pl::ptx::f2h<{k}>({lo}, {mode}))")
        if d in ("e4m3x2", "e5m2x2") or s in ("e4m3x2", "e5m2x2"):
            return self.fp8(d, s, a, relu)
        src = self.read(a[1], s)
        is_f = {"f16": 1, "bf16": 1, "f32": 1, "f64": 1}
        if s in ("f16", "bf16"):
            src = f"pl::ptx::h2f<{1 if s == 'bf16' else 0}>({src})"
        if d in ("f16", "bf16"):
            x = f"(double){src}"
            if sat:
                x = f"(double)pl::ptx::sat01((float)({x}))"
            if relu:
                x = f"pl::ptx::relu({x})"
            return self.write(a[0], f"pl::ptx::f2h<{1 if d == 'bf16' else 0}>({x}, {mode})")
        if d == "f32" and s in is_f:
            if s == "f64":
                v = f"pl::rnd::to_float({src}, {mode})"
            elif any(x in ("rni", "rzi", "rmi", "rpi") for x in mods):
                v = f"pl::ptx::round_integral((float){src}, {mode})"
            else:
                v = f"(float){src}"
            return self.write(a[0], f"pl::ptx::f_sat({v}, {'true' if sat else 'false'})")
        if d == "f64" and s in is_f:
            v = f"(double){src}"
            if any(x in ("rni", "rzi", "rmi", "rpi") for x in mods):
                v = f"pl::ptx::round_integral({v}, {mode})"
            return self.write(a[0], f"pl::ptx::f_sat({v}, {'true' if sat else 'false'})")
        if d in ("f32", "f64"):  # integer -> float
            return self.write(a[0], f"pl::ptx::i2f<{CARRIER[d]}, {CARRIER[s]}>({src}, {mode})")
        if s in is_f:  # float -> integer, saturating
            return self.write(a[0], f"pl::ptx::f2i<{CARRIER[d]}>((double){src}, {mode})")
        if sat:
            return self.write(a[0], f"pl::ptx::sat_int<{CARRIER[d]}>((long double){src})")
        return self.write(a[0], f"({CARRIER[d]}){src}")

    def fp8(self, d, s, a, relu):
        if d in ("e4m3x2", "e5m2x2") and s in ("f32", "f16x2", "bf16x2"):
            k = 0 if d == "e4m3x2" else 1
            if s == "f32":
                hi, lo = self.read(a[1], "f32"), self.read(a[2], "f32")
            else:
                kk = 1 if s == "bf16x2" else 0
                v = self.read(a[1], s)
                hi, lo = f"pl::ptx::h2f<{kk}>((uint16_t)({v} >> 16))", f"pl::ptx::h2f<{kk}>((uint16_t){v})"
            if relu:
                hi, lo = f"pl::ptx::relu({hi})", f"pl::ptx::relu({lo})"
            return self.write(a[0], f"(uint16_t)((uint16_t)pl::fp8::encode<{k}>({hi}, true) << 8 | "
                                    f"pl::fp8::encode<{k}>({lo}, true))")
        if s in ("e4m3x2", "e5m2x2") and d == "f16x2":
            k = 0 if s == "e4m3x2" else 1
            v = self.read(a[1], s)
            return self.write(a[0], f"(uint32_t)((uint32_t)pl::rnd::to_half(pl::fp8::decode<{k}>((uint8_t)({v} >> 8))) << 16 | "
                                    f"pl::rnd::to_half(pl::fp8::decode<{k}>((uint8_t){v})))")
        return None

    # float and integer arithmetic
    def _arith(self, name, q, a):
        t = q[-1]
        mods = q[:-1]
        sat = "true" if "sat" in mods else "false"
        if t in ("f16", "bf16", "f16x2", "bf16x2"):
            k = 1 if t.startswith("bf") else 0
            pre = "h2" if t.endswith("x2") else "h"
            hop = {"add": "H_ADD", "sub": "H_SUB", "mul": "H_MUL", "min": "H_MIN", "max": "H_MAX"}
            if name in hop:
                op = hop[name] + ("_NAN" if "NaN" in mods and name in ("min", "max") else "")
                return self.write(a[0], f"pl::ptx::{pre}_bin<{k}>(pl::ptx::{op}, {self.read(a[1], t)}, "
                                        f"{self.read(a[2], t)}, {sat})")
            if name in ("fma", "mad"):
                relu = "true" if "relu" in mods else "false"
                return self.write(a[0], f"pl::ptx::{pre}_fma<{k}>({self.read(a[1], t)}, {self.read(a[2], t)}, "
                                        f"{self.read(a[3], t)}, {sat}, {relu})")
            if name in ("neg", "abs"):
                m = "0x80008000u" if pre == "h2" else "0x8000u"
                v = self.read(a[1], t)
                e = f"({v} ^ {m})" if name == "neg" else f"({v} & ~{m})"
                return self.write(a[0], f"({CARRIER[t]}){e}")
            return None
        if t in ("f32", "f64"):
            c = CARRIER[t]
            mode = self.mode(mods)
            r = lambda i: self.read(a[i], t)  # noqa: E731
            exprs = {
                "add": lambda: f"pl::ptx::f_add<{c}>({r(1)}, {r(2)}, {mode})",
                "sub": lambda: f"pl::ptx::f_sub<{c}>({r(1)}, {r(2)}, {mode})",
                "mul": lambda: f"pl::ptx::f_mul<{c}>({r(1)}, {r(2)}, {mode})",
                "fma": lambda: f"pl::ptx::f_fma<{c}>({r(1)}, {r(2)}, {r(3)}, {mode})",
                "mad": lambda: f"pl::ptx::f_fma<{c}>({r(1)}, {r(2)}, {r(3)}, {mode})",
                "div": lambda: f"pl::ptx::f_div<{c}>({r(1)}, {r(2)}, {mode})",
                "min": lambda: f"pl::ptx::f_min<{c}>({r(1)}, {r(2)})",
                "max": lambda: f"pl::ptx::f_max<{c}>({r(1)}, {r(2)})",
                "neg": lambda: f"(-{r(1)})",
                "abs": lambda: f"std::fabs({r(1)})",
                "sqrt": lambda: f"pl::ptx::f_sqrt<{c}>({r(1)}, {mode})",
                "rsqrt": lambda: f"(({c})1 / std::sqrt({r(1)}))",
                "rcp": lambda: f"pl::ptx::f_div<{c}>(({c})1, {r(1)}, {mode})",
                "ex2": lambda: f"std::exp2({r(1)})",
                "lg2": lambda: f"std::log2({r(1)})",
                "sin": lambda: f"std::sin({r(1)})",
                "cos": lambda: f"std::cos({r(1)})",
                "tanh": lambda: f"std::tanh({r(1)})",
                "copysign": lambda: f"std::copysign({r(2)}, {r(1)})",
            }
            if name not in exprs:
                return None
            return self.write(a[0], f"pl::ptx::f_sat<{c}>({exprs[name]()}, {sat})")
        bits = BITS[t]
        c, u = CARRIER[t], UNSIGNED.get(bits)
        signed = t.startswith("s")
        r = lambda i, tt=t: self.read(a[i], tt)  # noqa: E731
        if name in ("add", "sub"):
            sign = "+" if name == "add" else "-"
            if sat == "true" and t == "s32":
                return self.write(a[0], f"pl::ptx::sat_int<int32_t>((long double)((int64_t){r(1)} {sign} (int64_t){r(2)}))")
            return self.write(a[0], f"({c})(({u}){r(1)} {sign} ({u}){r(2)})")
        if name in ("mul", "mad"):
            add = (lambda tt: f" + ({UNSIGNED[BITS[tt]]}){self.read(a[3], tt)}") if name == "mad" else (lambda tt: "")
            if "wide" in mods:
                wt = ("s" if signed else "u") + str(bits * 2)
                wc = CARRIER[wt]
                return self.write(a[0], f"({wc})((({UNSIGNED[bits * 2]})(({wc}){r(1)} * ({wc}){r(2)})){add(wt)})")
            if "hi" in mods:
                if bits == 64:
                    w = "__int128" if signed else "unsigned __int128"
                else:
                    w = CARRIER[("s" if signed else "u") + str(bits * 2)]
                return self.write(a[0], f"({c})((({u})((({w}){r(1)} * ({w}){r(2)}) >> {bits})){add(t)})")
            return self.write(a[0], f"({c})((({u})(({u}){r(1)} * ({u}){r(2)})){add(t)})")
        simple = {
            "div": lambda: f"({c})({r(1)} / {r(2)})", "rem": lambda: f"({c})({r(1)} % {r(2)})",
            "min": lambda: f"({c})({r(2)} < {r(1)} ? {r(2)} : {r(1)})",
            "max": lambda: f"({c})({r(1)} < {r(2)} ? {r(2)} : {r(1)})",
            "neg": lambda: f"({c})(0 - ({u}){r(1)})",
            "abs": lambda: f"({c})({r(1)} < 0 ? ({c})(0 - ({u}){r(1)}) : {r(1)})",
        }
        if name in simple:
            return self.write(a[0], simple[name]())
        return None

    def op_add(self, q, a): return self._arith("add", q, a)
    def op_sub(self, q, a): return self._arith("sub", q, a)
    def op_mul(self, q, a): return self._arith("mul", q, a)
    def op_mad(self, q, a): return self._arith("mad", q, a)
    def op_fma(self, q, a): return self._arith("fma", q, a)
    def op_div(self, q, a): return self._arith("div", q, a)
    def op_rem(self, q, a): return self._arith("rem", q, a)
    def op_min(self, q, a): return self._arith("min", q, a)
    def op_max(self, q, a): return self._arith("max", q, a)
    def op_neg(self, q, a): return self._arith("neg", q, a)
    def op_abs(self, q, a): return self._arith("abs", q, a)
    def op_sqrt(self, q, a): return self._arith("sqrt", q, a)
    def op_rsqrt(self, q, a): return self._arith("rsqrt", q, a)
    def op_rcp(self, q, a): return self._arith("rcp", q, a)
    def op_ex2(self, q, a): return self._arith("ex2", q, a)
    def op_lg2(self, q, a): return self._arith("lg2", q, a)
    def op_sin(self, q, a): return self._arith("sin", q, a)
    def op_cos(self, q, a): return self._arith("cos", q, a)
    def op_tanh(self, q, a): return self._arith("tanh", q, a)
    def op_copysign(self, q, a): return self._arith("copysign", q, a)

    # bit operations
    def _bitwise(self, sym, q, a):
        t = q[-1]
        if t == "pred":
            if sym == "~":
                return self.write(a[0], f"(!{self.read(a[1], t)})")
            return self.write(a[0], f"({self.read(a[1], t)} {sym}{sym} {self.read(a[2], t)})")
        c = CARRIER[t]
        if sym == "~":
            return self.write(a[0], f"({c})~{self.read(a[1], t)}")
        return self.write(a[0], f"({c})({self.read(a[1], t)} {sym} {self.read(a[2], t)})")

    def op_and(self, q, a): return self._bitwise("&", q, a)
    def op_or(self, q, a): return self._bitwise("|", q, a)
    def op_xor(self, q, a): return self._bitwise("^", q, a)
    def op_not(self, q, a): return self._bitwise("~", q, a)

    def op_cnot(self, q, a):
        return self.write(a[0], f"({CARRIER[q[-1]]})({self.read(a[1], q[-1])} == 0)")

    def op_shl(self, q, a):
        t = q[-1]
        bits, u = BITS[t], UNSIGNED[BITS[t]]
        n = self.read(a[2], "u32")
        return self.write(a[0], f"({CARRIER[t]})({n} >= {bits} ? ({u})0 : ({u})(({u}){self.read(a[1], t)} << {n}))")

    def op_shr(self, q, a):
        t = q[-1]
        bits = BITS[t]
        n, v = self.read(a[2], "u32"), self.read(a[1], t)
        if t.startswith("s"):
            return self.write(a[0], f"({CARRIER[t]})({v} >> ({n} >= {bits} ? {bits - 1} : {n}))")
        return self.write(a[0], f"({CARRIER[t]})({n} >= {bits} ? 0 : {v} >> {n})")

    def op_lop3(self, q, a):
        return self.write(a[0], f"pl::ptx::lop3({self.read(a[1], 'b32')}, {self.read(a[2], 'b32')}, "
                                f"{self.read(a[3], 'b32')}, {self.read(a[4], 'b32')})")

    def op_prmt(self, q, a):
        if len(q) > 1 and q[0] != "b32":
            return None  # .f4e, .b4e, .rc8 ... modes
        return self.write(a[0], f"pl::ptx::prmt({self.read(a[1], 'b32')}, {self.read(a[2], 'b32')}, "
                                f"{self.read(a[3], 'b32')})")

    def op_popc(self, q, a):
        return self.write(a[0], f"(uint32_t)std::popcount(({UNSIGNED[BITS[q[-1]]]}){self.read(a[1], q[-1])})")

    def op_clz(self, q, a):
        return self.write(a[0], f"(uint32_t)std::countl_zero(({UNSIGNED[BITS[q[-1]]]}){self.read(a[1], q[-1])})")

    def op_brev(self, q, a):
        t = q[-1]
        u = UNSIGNED[BITS[t]]
        return self.write(a[0], f"({CARRIER[t]})pl::ptx::bit_reverse(({u}){self.read(a[1], t)})")

    def op_bfind(self, q, a):
        return self.write(a[0], f"pl::ptx::bfind({self.read(a[1], q[-1])})")

    def op_bfe(self, q, a):
        t = q[-1]
        return self.write(a[0], f"pl::ptx::bfe<{CARRIER[t]}>({self.read(a[1], t)}, {self.read(a[2], 'u32')}, "
                                f"{self.read(a[3], 'u32')})")

    def op_bfi(self, q, a):
        t = q[-1]
        return self.write(a[0], f"pl::ptx::bfi<{CARRIER[t]}>({self.read(a[1], t)}, {self.read(a[2], t)}, "
                                f"{self.read(a[3], 'u32')}, {self.read(a[4], 'u32')})")

    # comparisons and selects
    CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "lo": "<",
           "ls": "<=", "hi": ">", "hs": ">="}

    def op_setp(self, q, a):
        cmp, t = q[0], q[-1]
        if len([x for x in q[1:-1] if x in ("and", "or", "xor")]):
            return None
        x, y = self.read(a[1], t), self.read(a[2], t)
        if t in ("f16", "bf16"):
            k = 1 if t == "bf16" else 0
            x, y = f"pl::ptx::h2f<{k}>({x})", f"pl::ptx::h2f<{k}>({y})"
        if cmp in ("lo", "ls", "hi", "hs"):
            u = UNSIGNED[BITS[t]]
            x, y = f"({u}){x}", f"({u}){y}"
        unordered = cmp.endswith("u") and cmp[:-1] in self.CMP
        base = cmp[:-1] if unordered else cmp
        if base == "num":
            e = f"(!std::isnan({x}) && !std::isnan({y}))"
        elif base == "nan":
            e = f"(std::isnan({x}) || std::isnan({y}))"
        else:
            e = f"({x} {self.CMP[base]} {y})"
            if unordered:
                e = f"({e} || std::isnan({x}) || std::isnan({y}))"
        dst = a[0].split("|")
        code = self.write(dst[0], e)
        if len(dst) > 1:
            code += " " + self.write(dst[1], f"!{e}")
        return code

    def op_selp(self, q, a):
        t = q[-1]
        return self.write(a[0], f"({self.read(a[3], 'pred')} ? {self.read(a[1], t)} : {self.read(a[2], t)})")

    # warp operations
    def op_shfl(self, q, a):
        if "sync" not in q:
            return None
        kind = {"idx": "pl::SHFL_IDX", "up": "pl::SHFL_UP", "down": "pl::SHFL_DOWN",
                "bfly": "pl::SHFL_XOR"}[q[q.index("sync") + 1]]
        dst = a[0].split("|")
        valid = "&__pl_valid" if len(dst) > 1 else "nullptr"
        call = (f"pl::ptx::shfl({self.line}, {kind}, {self.read(a[1], 'b32')}, {self.read(a[2], 'b32')}, "
                f"{self.read(a[3], 'b32')}, {self.read(a[4], 'b32')}, {valid})")
        if len(dst) > 1:
            return f"bool __pl_valid = false; {self.write(dst[0], call)} {self.write(dst[1], '__pl_valid')}"
        return self.write(dst[0], call)

    def op_vote(self, q, a):
        if "sync" not in q:
            return None
        mode = q[q.index("sync") + 1]
        p, mask = self.read(a[1], "pred"), self.read(a[2], "b32")
        kinds = {"ballot": "pl::BALLOT", "any": "pl::ANY", "all": "pl::ALL"}
        if mode == "uni":
            b = f"(uint32_t)pl_warp_op({self.line}, pl::BALLOT, {mask}, {p} ? 1 : 0, 0, 32)"
            return self.write(a[0], f"({b} == 0u || {b} == ({mask} & pl_activemask()))")
        res = f"pl_warp_op({self.line}, {kinds[mode]}, {mask}, {p} ? 1 : 0, 0, 32)"
        return self.write(a[0], f"(uint32_t){res}" if mode == "ballot" else f"({res} != 0)")

    def op_activemask(self, q, a):
        return self.write(a[0], "pl_activemask()")

    def op_bar(self, q, a):
        if "warp" in q:
            return f"(void)pl_warp_op({self.line}, pl::WARP_SYNC, {self.read(a[0], 'b32')}, 0, 0, 32);"
        if len(a) == 1 and a[0].strip() == "0" and (not q or q[-1] in ("sync", "cta", "aligned")):
            return f"pl_syncthreads({self.line});"
        return None

    def op_barrier(self, q, a):
        return self.op_bar(q, a)

    def op_membar(self, q, a):
        return "std::atomic_thread_fence(std::memory_order_seq_cst);"

    def op_fence(self, q, a):
        if any(x.startswith("proxy") for x in q):
            return None
        return "std::atomic_thread_fence(std::memory_order_seq_cst);"

    def op_trap(self, q, a):
        return f'pl_trap({self.line}, "trap (inline PTX)");'

    def op_nanosleep(self, q, a):
        return ""

    # memory
    def op_ld(self, q, a):
        t = q[-1]
        vec = next((int(x[1:]) for x in q if re.fullmatch(r"v\d", x)), 1)
        if "shared" in q or "param" in q or "local" in q and False:
            pass
        addr = self.address(a[1])
        c = CARRIER[t]
        fence = "std::atomic_thread_fence(std::memory_order_seq_cst); " if "acquire" in q else ""
        dv = self.vector(a[0])
        if vec > 1:
            if not dv or len(dv) != vec:
                return None
            return "{ " + f"const uint64_t __pl_a = {addr}; " + " ".join(
                self.write(e, f"pl::ptx::ld<{c}>(__pl_a + {i * BITS[t] // 8})")
                for i, e in enumerate(dv) if e != "_") + " " + fence + "}"
        return self.write(a[0], f"pl::ptx::ld<{c}>({addr})") + (" " + fence if fence else "")

    def op_ldu(self, q, a):
        return self.op_ld(q, a)

    def op_st(self, q, a):
        t = q[-1]
        vec = next((int(x[1:]) for x in q if re.fullmatch(r"v\d", x)), 1)
        addr = self.address(a[0])
        c = CARRIER[t]
        fence = "std::atomic_thread_fence(std::memory_order_seq_cst); " if "release" in q else ""
        sv = self.vector(a[1])
        if vec > 1:
            if not sv or len(sv) != vec:
                return None
            return "{ " + fence + f"const uint64_t __pl_a = {addr}; " + " ".join(
                f"pl::ptx::st<{c}>(__pl_a + {i * BITS[t] // 8}, {self.read(e, t)});"
                for i, e in enumerate(sv)) + " }"
        return fence + f"pl::ptx::st<{c}>({addr}, {self.read(a[1], t)});"

    ATOMIC = {"add": "atomicAdd", "min": "atomicMin", "max": "atomicMax", "exch": "atomicExch",
              "and": "atomicAnd", "or": "atomicOr", "xor": "atomicXor", "inc": "atomicInc",
              "dec": "atomicDec"}

    def _atomic(self, q, addr_tok, vals):
        t = q[-1]
        op = next((x for x in q if x in self.ATOMIC or x == "cas"), None)
        if op is None or t not in ("u32", "s32", "u64", "s64", "f32", "f64", "b32", "b64"):
            return None
        c = CARRIER[t]
        if t in ("b32", "b64"):
            c = UNSIGNED[BITS[t]]
        p = f"reinterpret_cast<{c}*>((uintptr_t){self.address(addr_tok)})"
        if op == "cas":
            return f"atomicCAS({p}, {self.read(vals[0], t)}, {self.read(vals[1], t)})"
        return f"{self.ATOMIC[op]}({p}, {self.read(vals[0], t)})"

    def op_atom(self, q, a):
        call = self._atomic(q, a[1], a[2:])
        return None if call is None else self.write(a[0], call)

    def op_red(self, q, a):
        call = self._atomic(q, a[0], a[1:])
        return None if call is None else f"(void){call};"
