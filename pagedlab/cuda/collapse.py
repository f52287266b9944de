"""Hierarchical collapsing (COX, "Exposing CUDA Warp-Level Functions to CPUs with Hierarchical
Collapsing"): a kernel's body cut at its barriers and warp operations, each piece between two
cuts run for every thread of the block as a loop over thread ids, instead of one fiber per CUDA
thread switching at every cut.

The transformation is source to source and applies to a restricted, conservatively detected
class of kernels; `collapse(code, kernel)` returns a `Collapsed` (C++ that `apply` puts into the
kernel itself, behind `if (pl_cur->collapsed)`) or the reason (a str) why not, and a kernel
outside the class runs on fibers exactly as before. The class:

* the kernel is not a template, not inside a namespace; no #include beyond the math and fp16
  headers, no preprocessor lines inside the kernel or the functions it calls;
* no atomics, printf, assert/__trap, volatile, inline asm, __syncwarp, cooperative groups,
  __activemask, legacy (mask-less) warp intrinsics, clock(), goto, lambdas in what the kernel
  reaches (its body, the functions it calls, the macros it names); parameters never assigned;
  `__shared__` declared at the kernel's top level only (moved to its front);
* `threadIdx`, `__syncthreads` and warp operations (`__shfl*_sync`, `__ballot_sync`,
  `__any_sync`, `__all_sync`, with a full mask) appear only in the kernel's body or in
  `__device__` functions ("warp functions", inlined) that take their parameters by value and
  return once at their end;
* every barrier and warp operation is under control flow (if conditions, loop conditions) that
  is the same for every thread of the block by construction: built from kernel parameters,
  elements of `const T*` parameters, blockIdx/blockDim/gridDim, literals and variables computed
  from those only (no other memory reads), so no thread can skip a barrier another one reaches
  (a divergent barrier cannot happen in a collapsed kernel); none sits in a condition;
* `return` only in the last piece, or as `if (such a condition) return;` at the top level;
* a `break`/`continue` never leaves a loop that contains a cut.

Order of execution: between two cuts, thread 0 runs its whole piece, then thread 1, ...: the
order the fiber runtime's default (round_robin) schedule gives (a statement holding a warp
operation finishes for every thread in a loop of its own), so results are the same bit for bit,
and a missing barrier shows as under round_robin. Variables live across a cut become per-thread
arrays (`x[__t]`), variables declared inside a piece stay ordinary locals. One exception,
chosen by a cost heuristic (`_interchangeable`), only when the rest of its piece touches no
memory: a loop over a thread's elements (`for (d = tid; ...)`) whose inner loop reads through
a per-thread pointer with a stride runs all threads' iteration k before anyone's k + 1 (the
decode kernel's V loop: consecutive threads then read consecutive floats), and one whose inner
loop is a chain of dependent adds runs groups of TILE threads interleaved (its q.k loop). A
race inside such a loop may then come out differently from the fibers (check="race" reports it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .signature import _KERNEL_RE, kernel_scopes, strip_comments

_TOKEN = re.compile(r"""
 (?P<ws>\s+)
|(?P<num>(?:0[xX][0-9a-fA-F']+|\d[\d']*\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)[uUlLfF]*)
|(?P<id>[A-Za-z_]\w*)
|(?P<str>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
|(?P<op>->\*|<<=|>>=|\.\.\.|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||\+=|-=|\*=|/=|%=|&=|\|=|\^=|::
   |[{}()\[\];,.?:~!%^&*+\-=<>|/#\\])
""", re.X)

WARP_OPS = {"__shfl_sync": "SHFL_IDX", "__shfl_up_sync": "SHFL_UP", "__shfl_down_sync": "SHFL_DOWN",
            "__shfl_xor_sync": "SHFL_XOR", "__ballot_sync": "BALLOT", "__any_sync": "ANY",
            "__all_sync": "ALL"}
# Anywhere in the file: the kernel stays on fibers.
_REFUSED = re.compile(
    r"\b(atomic\w*|printf|assert|__trap|__brkpt|volatile|asm|__asm__|__syncwarp|cooperative_groups"
    r"|__activemask|__shfl|__shfl_up|__shfl_down|__shfl_xor|__ballot|__any|__all|__syncthreads_count"
    r"|__syncthreads_and|__syncthreads_or|__match_any_sync|__match_all_sync|__reduce_\w+_sync"
    r"|clock|clock64|__nanosleep|goto|setjmp|longjmp|__launch_bounds__|laneid|warpid|this_thread_block"
    r"|tiled_partition|coalesced_threads|thread_block|grid_group)\b")
_ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}
_FULL_MASKS = {"0xffffffff", "0xffffffffu", "0xffffffffU", "0xFFFFFFFF", "0xFFFFFFFFu", "0xFFFFFFFFU",
               "-1", "~0", "~0u", "~0U", "4294967295u", "4294967295U", "0xffffffffUL", "0xffffffffull"}
_STRUCTURAL_REFUSED_TYPES = {"auto", "static", "constexpr", "typedef", "using", "struct", "class",
                             "union", "enum", "register", "extern", "template", "decltype"}


class Refused(Exception):
    """The kernel is outside the collapsible class (the reason says why)."""


@dataclass
class Tok:
    text: str
    line: int
    pos: int = 0  # offset in the source
    var: Var | None = None


@dataclass(eq=False)
class Var:
    name: str
    uid: int
    decl_depth: int
    type_toks: list = field(default_factory=list)   # element type (base + pointer tokens)
    dims: list = field(default_factory=list)        # array dims tokens ([] for a scalar)
    param: bool = False
    varying: bool = False
    strict: bool = True      # uniform without reading memory
    structural: bool = False  # lives across cuts: one copy per thread in the frame
    single: bool = False      # assigned once, by its declaration
    readonly: bool = False    # a `const T*` kernel parameter

    @property
    def cname(self) -> str:
        return f"{self.name}__c{self.uid}"


@dataclass
class Site:
    var: Var
    expr: list  # tokens whose value decides the assigned value (conservative: the statement)
    controls: tuple
    decl: bool = False  # the declaration's initialiser


@dataclass(eq=False)
class Stmt:
    kind: str            # block, decl, shared, expr, if, for, barrier, empty, break, continue
    start: int = 0       # token span [start, end) in the body's token list
    end: int = 0
    children: list = field(default_factory=list)   # block: statements; if: [then, else?]; for: [init?, body]
    cond: tuple = (0, 0)  # token span of the condition (if, for, while)
    step: tuple = (0, 0)
    init: Stmt | None = None
    body: Stmt | None = None
    els: Stmt | None = None
    items: list = field(default_factory=list)  # decl: (var, init span or None)
    loop: Stmt | None = None  # break/continue: the loop or switch it leaves
    varying: bool = False     # if/for: the condition differs between threads
    strict: bool = True


def tokenize(text: str, offset_line: int = 1) -> list[Tok]:
    out, line, pos = [], offset_line, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise Refused(f"cannot tokenize {text[pos:pos + 20]!r}")
        s = m.group(0)
        if m.lastgroup != "ws":
            out.append(Tok(s, line, pos))
        line += s.count("\n")
        pos = m.end()
    return out


def _match(toks, i, open_="(", close=")") -> int:
    """Index of the bracket closing toks[i]."""
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j].text
        if t == open_:
            depth += 1
        elif t == close:
            depth -= 1
            if depth == 0:
                return j
    raise Refused("unbalanced brackets")


def _split_commas(toks, lo, hi) -> list[tuple[int, int]]:
    parts, depth, start = [], 0, lo
    for j in range(lo, hi):
        t = toks[j].text
        if t in "([{":
            depth += 1
        elif t in ")]}":
            depth -= 1
        elif t == "," and depth == 0:
            parts.append((start, j))
            start = j + 1
    parts.append((start, hi))
    return parts


@dataclass
class Func:
    name: str
    ret: list
    params: list  # [(type tokens, name)]
    body: list    # tokens inside the braces


class Parser:
    """Statements of one function body, with every local variable resolved (scopes honoured)
    and every assignment recorded for the uniformity analysis."""

    def __init__(self, toks: list[Tok], funcs: dict[str, Func], counter: list[int]):
        self.t = toks
        self.funcs = funcs
        self.counter = counter
        self.scopes: list[dict[str, Var]] = [{}]
        self.controls: list[Stmt] = []
        self.sites: list[Site] = []
        self.vars: list[Var] = []
        self.loops: list[Stmt] = []
        self.jumps: list[Stmt] = []
        self.returns: list[Stmt] = []
        self.all_controls: list[Stmt] = []

    def new_var(self, name, type_toks, dims, param=False) -> Var:
        self.counter[0] += 1
        v = Var(name, self.counter[0], len(self.controls), type_toks, dims, param)
        self.scopes[-1][name] = v
        self.vars.append(v)
        return v

    def lookup(self, name):
        for s in reversed(self.scopes):
            if name in s:
                return s[name]
        return None

    def text(self, i) -> str:
        return self.t[i].text if i < len(self.t) else ""

    # -- expressions: resolve names, record assignments --
    def expr(self, lo, hi, site_expr=None):
        toks = self.t
        for j in range(lo, hi):
            tk = toks[j]
            if not re.match(r"[A-Za-z_]", tk.text):
                continue
            prev = toks[j - 1].text if j > 0 else ""
            if prev in (".", "->", "::"):
                continue
            v = self.lookup(tk.text)
            if v is None:
                continue
            tk.var = v
            nxt = self.text(j + 1)
            assigned = nxt in _ASSIGN or nxt in ("++", "--") or prev in ("++", "--")
            if nxt == "[" and not assigned and v.dims:  # element of a local array: a[i] = ..., a[i]++
                k = _match(toks, j + 1, "[", "]")
                assigned = self.text(k + 1) in _ASSIGN or self.text(k + 1) in ("++", "--")
            if prev == "&" and (j < 2 or toks[j - 2].text in _OPERATOR_BEFORE_UNARY):
                assigned = True  # address taken: anything may write it
            if assigned:
                self.sites.append(Site(v, site_expr if site_expr is not None else toks[lo:hi],
                                       tuple(self.controls)))

    # -- statements --
    def block(self, lo, hi) -> Stmt:
        st = Stmt("block", lo, hi)
        self.scopes.append({})
        i = lo
        while i < hi:
            s = self.statement(i)
            st.children.append(s)
            i = s.end
        self.scopes.pop()
        return st

    def statement(self, i) -> Stmt:
        t = self.text(i)
        if t == "{":
            j = _match(self.t, i, "{", "}")
            s = self.block(i + 1, j)
            s.start, s.end = i, j + 1
            return s
        if t == ";":
            return Stmt("empty", i, i + 1)
        if t == "if":
            if self.text(i + 1) != "(":
                raise Refused("if without (")  # `if constexpr`
            j = _match(self.t, i + 1)
            st = Stmt("if", i, 0, cond=(i + 2, j))
            self.all_controls.append(st)
            self.expr(i + 2, j)
            self.controls.append(st)
            self.scopes.append({})
            st.body = self.statement(j + 1)
            self.scopes.pop()
            k = st.body.end
            if self.text(k) == "else":
                self.scopes.append({})
                st.els = self.statement(k + 1)
                self.scopes.pop()
                k = st.els.end
            self.controls.pop()
            st.end = k
            return st
        if t in ("for", "while"):
            j = _match(self.t, i + 1)
            st = Stmt("for", i, 0)
            self.all_controls.append(st)
            self.scopes.append({})
            if t == "for":
                semis = [k for k in range(i + 2, j) if self.t[k].text == ";"
                         and _depth(self.t, i + 2, k) == 0]
                if len(semis) != 2:
                    raise Refused("range-based for")
                a, b = semis
                if a > i + 2:
                    st.init = self.simple(i + 2, a + 1)
                st.cond, st.step = (a + 1, b), (b + 1, j)
            else:
                st.cond = (i + 2, j)
            self.controls.append(st)
            self.expr(*st.cond)
            self.expr(*st.step)
            self.loops.append(st)
            st.body = self.statement(j + 1)
            self.loops.pop()
            self.controls.pop()
            self.scopes.pop()
            st.end = st.body.end
            return st
        if t in ("break", "continue"):
            st = Stmt(t, i, i + 2, loop=self.loops[-1] if self.loops else None)
            self.jumps.append(st)
            return st
        if t == "return":
            k = self._semi(i)
            st = Stmt("return", i, k + 1)
            self.expr(i + 1, k)
            self.returns.append(st)
            return st
        if t == "switch":
            # a switch body is one thread's plain C++: allowed, but a break inside leaves it
            j = _match(self.t, i + 1)
            self.expr(i + 2, j)
            st = Stmt("switch", i, 0, cond=(i + 2, j))
            self.all_controls.append(st)
            self.controls.append(st)
            self.loops.append(st)
            st.body = self.statement(j + 1)
            self.loops.pop()
            self.controls.pop()
            st.end = st.body.end
            return st
        if t in ("do", "goto", "case", "default", "try", "throw", "else"):
            raise Refused(f"`{t}` statement")
        if t == "__syncthreads" and self.text(i + 1) == "(" and self.text(i + 2) == ")":
            if self.text(i + 3) != ";":
                raise Refused("__syncthreads() inside an expression")
            return Stmt("barrier", i, i + 4)
        return self.simple(i, self._semi(i) + 1)

    def _semi(self, i) -> int:
        depth = 0
        for k in range(i, len(self.t)):
            x = self.t[k].text
            if x in "([{":
                depth += 1
            elif x in ")]}":
                depth -= 1
                if depth < 0:
                    break
            elif x == ";" and depth == 0:
                return k
        raise Refused("statement without ;")

    def simple(self, lo, hi) -> Stmt:
        """A declaration or an expression statement, toks[lo:hi] ending with `;`."""
        toks = self.t
        words = [x.text for x in toks[lo:hi - 1]]
        if "__shared__" in words:
            return Stmt("shared", lo, hi)
        # declaration: type words then a name, before the first = , [ ( ; at depth 0
        k = lo
        while k < hi - 1 and toks[k].text not in ("=", ",", "[", "(", ";", "{"):
            k += 1
        head = [x.text for x in toks[lo:k]]
        is_decl = (len(head) >= 2 and re.match(r"[A-Za-z_]\w*$", head[-1])
                   and re.match(r"[A-Za-z_]", head[0]) and self.lookup(head[0]) is None
                   and head[0] not in self.funcs and head[0] not in WARP_OPS
                   and all(re.match(r"[A-Za-z_]\w*$", w) or w in ("*", "::", "<", ">", ",")
                           for w in head) and head[0] not in ("return", "delete", "new"))
        if not is_decl:
            self.expr(lo, hi - 1)
            return Stmt("expr", lo, hi)
        if any(w in ("&", "&&") for w in head):
            raise Refused("reference variable")
        st = Stmt("decl", lo, hi)
        # base type: the head up to the first declarator (its pointer stars belong to it)
        base_end = lo
        while base_end < k - 1 and toks[base_end].text != "*":
            base_end += 1
        base = toks[lo:base_end]
        for a, b in _split_commas(toks, base_end, hi - 1):
            # declarator: * ... name [dims] [= init]
            p = a
            while p < b and toks[p].text in ("*", "const", "__restrict__", "__restrict"):
                p += 1
            if p >= b or not re.match(r"[A-Za-z_]\w*$", toks[p].text):
                raise Refused("unusual declarator")
            ptr = toks[a:p]
            name = toks[p].text
            q, dims = p + 1, []
            while q < b and toks[q].text == "[":
                e = _match(toks, q, "[", "]")
                dims.append((q, e + 1))
                q = e + 1
            init = None
            if q < b:
                if toks[q].text != "=":
                    raise Refused("constructor-style initialisation")
                init = (q + 1, b)
                self.expr(q + 1, b)  # before the name is in scope (shadowing)
            for d in dims:
                self.expr(*d)
            v = self.new_var(name, [x.text for x in base + ptr], [toks[x:y] for x, y in dims])
            toks[p].var = v
            if init is not None:
                self.sites.append(Site(v, toks[init[0]:init[1]], tuple(self.controls), decl=True))
            st.items.append((v, init, p))
        return st


_OPERATOR_BEFORE_UNARY = {"(", ",", "=", "return", "?", ":", "&&", "||", "!", "[", "{", ";",
                          *_ASSIGN, "+", "-", "*", "/", "%", "<", ">", "<=", ">=", "==", "!="}


def _depth(toks, lo, k) -> int:
    d = 0
    for j in range(lo, k):
        if toks[j].text in "([{":
            d += 1
        elif toks[j].text in ")]}":
            d -= 1
    return d


# ---- uniformity --------------------------------------------------------------------------------

def _varying_expr(toks, funcs, effects=True) -> tuple[bool, bool]:
    """(varying, strict-uniform) of an expression's tokens (effects: an assignment or ++ in
    it makes it varying; off for an assignment's own operator)."""
    varying, strict = False, True
    for j, tk in enumerate(toks):
        x = tk.text
        nxt = toks[j + 1].text if j + 1 < len(toks) else ""
        prev = toks[j - 1].text if j else "("
        if tk.var is not None:
            varying |= tk.var.varying
            strict &= tk.var.strict
        elif x == "threadIdx" or x in WARP_OPS or (x in funcs and nxt == "("):
            varying = True
        elif effects and (x in ("++", "--") or x in _ASSIGN):
            varying = True
        if x == "[" and j and toks[j - 1].var is not None and toks[j - 1].var.readonly:
            pass  # an element of a `const T*` parameter: read-only memory, the same for all
        elif x in ("[", "->") or (x == "*" and prev in _OPERATOR_BEFORE_UNARY) or (
                re.match(r"[A-Za-z_]", x) and nxt == "(" and x not in _PURE):
            strict = False
    return varying, strict and not varying


# Calls a barrier's condition may contain (no memory reads, no side effects).
_PURE = {"min", "max", "fminf", "fmaxf", "abs", "sizeof", "static_cast", "int", "unsigned",
         "float", "double", "long", "size_t"}


def analyse(p: Parser, funcs) -> None:
    """Least fixpoint: a variable varies when an assignment to it has a varying value or sits
    under a varying condition between its declaration and the assignment."""
    controls = {id(c): c for c in p.all_controls}
    changed = True
    while changed:
        changed = False
        for c in controls.values():
            v, s = _varying_expr(p.t[c.cond[0]:c.cond[1]], funcs)
            if c.kind == "switch":
                v, s = True, False
            if (v, s) != (c.varying, c.strict):
                c.varying, c.strict = v, s
                changed = True
        for site in p.sites:
            var = site.var
            v, s = _varying_expr(site.expr, funcs, effects=False)
            for c in site.controls[var.decl_depth:]:
                v |= c.varying
                s &= c.strict
            if v and not var.varying:
                var.varying = True
                changed = True
            if not s and var.strict:
                var.strict = False
                changed = True


def _mark_single(p: Parser) -> None:
    count: dict = {}
    for site in p.sites:
        count[site.var] = count.get(site.var, 0) + (1 if site.decl else 2)
    for v in p.vars:
        v.single = count.get(v, 0) == 1 and not v.dims


def _stmt_cond_flags(p: Parser, st: Stmt, funcs):
    v, s = _varying_expr(p.t[st.cond[0]:st.cond[1]], funcs)
    return v, s


# ---- emission ----------------------------------------------------------------------------------

class Emitter:
    def __init__(self, filename, funcs, macros):
        self.filename = filename
        self.funcs = funcs
        self.macros = macros
        self.frame: list[Var] = []
        self.out: list[str] = []
        self.n = 0
        self.counter = [0]
        self.interchanged = 0
        self.in_lockstep: set = set()  # made per-thread inside an interchanged loop
        self.trange = ("0", "__pl_nt")  # the threads a thread loop runs
        self.depth = 0  # of inlined warp functions
        self.lockstep_depth = 0

    def fresh(self, what) -> str:
        self.n += 1
        return f"__pl_{what}{self.n}"

    def line(self, text, tok_line=None):
        if tok_line is not None:
            self.out.append(f'#line {tok_line} "{self.filename}"')
        self.out.append(text)

    # expression text with per-thread copies (thread: the thread index expression, or None
    # where no thread is selected: then a structural variable's copy of thread 0)
    def text(self, p: Parser, lo, hi, thread="__t") -> str:
        toks, parts, j = p.t, [], lo
        while j < hi:
            tk = toks[j]
            if tk.text == "threadIdx":
                if j + 2 >= len(toks) or toks[j + 1].text != "." or \
                        toks[j + 2].text not in ("x", "y", "z"):
                    raise Refused("threadIdx used other than as threadIdx.x/.y/.z")
                if thread is None:
                    raise Refused("threadIdx where no thread is selected")
                parts.append(f"__pl_ti{toks[j + 2].text}[{thread}]")
                j += 3
                continue
            v = tk.var
            if v is not None and v.structural:
                # a variable set once, the same in every thread without reading memory: thread
                # 0's copy (set before any other thread's, in every order) is a loop invariant
                same = v.strict and not v.varying and v.single and v not in self.in_lockstep
                parts.append(f"{v.cname}[{0 if same or thread is None else thread}]")
            elif v is not None and not v.param:
                parts.append(v.cname)
            else:
                parts.append(tk.text)
            j += 1
        return " ".join(parts)

    def thread_loop(self, body: list[str], mask=None):
        lo, hi = self.trange
        if mask:  # every thread active (the common case): a loop without the test
            self.out.append(f"if ({mask}_all) for (int __t = {lo}; __t < {hi}; ++__t) {{")
            self.out.extend(body)
            self.out.append("} else")
        self.out.append(f"for (int __t = {lo}; __t < {hi}; ++__t) {{" +
                        (f" if (!{mask}[__t]) continue;" if mask else ""))
        self.out.extend(body)
        self.out.append("}")

    # -- statement lists (structural) --
    def has_cut(self, p: Parser, st: Stmt) -> bool:
        """A barrier or a warp operation anywhere in the statement (conditions included)."""
        return self.cut_in(p, st.start, st.end)

    def cut_in(self, p: Parser, lo, hi) -> bool:
        return any(tk.text == "__syncthreads" or tk.text in WARP_OPS or
                   (tk.text in self.funcs and self.funcs[tk.text].warp) for tk in p.t[lo:hi])

    def structural(self, p: Parser, stmts: list[Stmt], ret_target=None, top=False, end_line=0):
        """end_line: the cut a thread reaches after the last piece of `stmts` (0: the kernel's
        end), for the dynamic shared memory check's report."""
        region: list[Stmt] = []
        for st in stmts:
            if st.kind == "return":
                if st is not stmts[-1] or ret_target is None:
                    raise Refused("return")
                self.flush(p, region, line=end_line)
                region = []
                self.warp_stmt(p, st, ret_target=ret_target)
                continue
            if st.kind == "decl":
                for v, _, _ in st.items:
                    self.make_structural(v)
            if st.kind == "shared":
                if not top:
                    raise Refused("__shared__ declared inside a block")
                continue
            if top and st.kind == "if" and st.els is None and _as_list(st.body) and \
                    len(_as_list(st.body)) == 1 and _as_list(st.body)[0].kind == "return" and \
                    not st.varying and st.strict and not self.cut_in(p, *st.cond):
                # every thread of the block leaves here or none does: the block ends
                self.flush(p, region, line=p.t[st.start].line)
                region = []
                self.line(f"if ({self.text(p, *st.cond, thread=None)}) goto __pl_fail;", p.t[st.start].line)
                continue
            if not self.has_cut(p, st):
                region.append(st)
                continue
            self.flush(p, region, line=self.first_cut_line(p, st))
            region = []
            self.cut(p, st)
        self.flush(p, region, final=top, line=0 if top else end_line)

    @staticmethod
    def first_line(p: Parser, st: Stmt) -> int:
        return p.t[st.start].line

    def first_cut_line(self, p: Parser, st: Stmt) -> int:
        if st.kind in ("barrier", "expr", "decl", "return"):
            return p.t[st.start].line
        for c in (st.children if st.kind == "block" else
                  [x for x in (st.init, *_as_list(st.body)) if x is not None] if st.body else []):
            if self.has_cut(p, c):
                return self.first_cut_line(p, c)
        return p.t[st.start].line

    def make_structural(self, v: Var):
        if not v.structural:
            if v.dims and any(tk.var is not None and not tk.var.param for d in v.dims for tk in d):
                raise Refused("array sized by a local")
            if set(v.type_toks) & _STRUCTURAL_REFUSED_TYPES:
                raise Refused("declaration kind")
            v.structural = True
            self.frame.append(v)
            if self.lockstep_depth:
                self.in_lockstep.add(v)

    def cut(self, p: Parser, st: Stmt):
        if st.kind == "barrier":
            self.line("if (pl_cox_smem(__LINE__, -1)) goto __pl_fail;  /* __syncthreads() */",
                      p.t[st.start].line)
            return
        if st.kind == "block":
            self.out.append("{")
            self.structural(p, st.children)
            self.out.append("}")
            return
        if st.kind in ("expr", "decl"):
            self.warp_stmt(p, st)
            return
        if st.kind not in ("if", "for"):
            raise Refused(f"a barrier or warp operation inside `{st.kind}`")
        if self.cut_in(p, *st.cond) or self.cut_in(p, *st.step) or (
                st.init is not None and self.cut_in(p, st.init.start, st.init.end)):
            raise Refused("a barrier or warp operation in a condition")
        if st.varying or not st.strict:
            raise Refused("a barrier or warp operation under a condition that may differ between threads")
        if st.kind == "if":
            self.line(f"if ({self.text(p, *st.cond, thread=None)}) {{", p.t[st.start].line)
            self.structural(p, _as_list(st.body))
            self.out.append("} else {")
            if st.els:
                self.structural(p, _as_list(st.els))
            self.out.append("}")
            return
        if st.kind == "for":
            if any(j.loop is st for j in p.jumps):
                raise Refused("break/continue in a loop with a barrier")
            self.out.append("{")
            if st.init is not None:
                if st.init.kind == "decl":
                    for v, _, _ in st.init.items:
                        self.make_structural(v)
                self.flush(p, [st.init])
            cond = self.text(p, *st.cond, thread=None) if st.cond[1] > st.cond[0] else "true"
            self.line(f"while ({cond}) {{", p.t[st.start].line)
            self.structural(p, _as_list(st.body), end_line=self.first_cut_line(p, st.body))
            if st.step[1] > st.step[0]:
                self.thread_loop([self.text(p, *st.step) + ";"])
            self.out.append("}}")
            return
        raise Refused(f"a barrier or warp operation inside `{st.kind}`")

    def flush(self, p: Parser, region: list[Stmt], final=False, line=0):
        if not region:
            return
        has_return = any(st.start <= r.start < st.end for st in region for r in p.returns)
        k = None if has_return else self._interchange_at(p, region)
        if k is not None:
            k, tile = k
            self.interchanged += 1
            self.flush(p, region[:k], line=self.first_line(p, region[k]))
            if tile:  # groups of `tile` threads, each group's iterations interleaved
                self.out.append(f"for (int __pl_tb = 0; __pl_tb < __pl_nt; __pl_tb += {tile}) {{")
                self.trange = ("__pl_tb", f"__pl_tb + {tile}")
                self.lockstep_loop(p, region[k])
                self.trange = ("0", "__pl_nt")
                self.out.append("}")
            else:
                self.lockstep_loop(p, region[k])
            rest = region[k + 1:]
            after = line if not rest else self.first_line(p, rest[0])
            self.out.append(f"for (int __t = 0; __t < __pl_nt; ++__t) if (!pl::cox_guard_ok(__pl_g) && "
                            f"pl_cox_smem({after}, __t)) goto __pl_fail;")
            self.flush(p, rest, final=final, line=line)
            return
        body = []
        for st in region:
            body.extend(self.thread_text(p, st))
        if any(st.start <= r.start < st.end for st in region for r in p.returns):
            if not final:
                raise Refused("return before a barrier or warp operation")
            body = ["[&]() {", *body, "}();"]  # a thread's `return` ends its piece only
        if not all(_local_only(p, st) for st in region):  # as at a fiber's switch
            body.append(f"if (!pl::cox_guard_ok(__pl_g) && pl_cox_smem({line}, __t)) goto __pl_fail;")
        self.thread_loop(body)

    def thread_text(self, p: Parser, st: Stmt, thread="__t") -> list[str]:
        """A statement as one thread runs it (structural declarations become assignments)."""
        out = [f'#line {p.t[st.start].line} "{self.filename}"']
        for j in p.jumps:
            if j.loop is None and st.start <= j.start < st.end:
                raise Refused("break outside a loop")
        if st.kind == "decl" and st.items and st.items[0][0].structural:
            for v, init, _ in st.items:
                if init is not None:
                    if p.t[init[0]].text == "{":
                        raise Refused("braced initialiser of a variable live across a cut")
                    if v.dims:
                        raise Refused("initialised array live across a cut")
                    out.append(f"{v.cname}[{thread}] = {self.text(p, *init, thread)};")
            return out
        if st.kind == "for" and st.init is not None and st.init.kind == "decl" and \
                st.init.items[0][0].structural:
            raise Refused("internal: structural loop variable in a thread loop")
        out.append(self.text(p, st.start, st.end, thread))
        return out

    # -- warp operations --
    def warp_stmt(self, p: Parser, st: Stmt, ret_target=None):
        toks = p.t
        lo, hi = st.start, st.end - 1  # without the ;
        line = toks[lo].line
        if st.kind == "return":
            lo += 1
        target = ret_target
        if st.kind == "decl":
            if len(st.items) != 1 or st.items[0][1] is None:
                raise Refused("warp operation in a declaration of several variables")
            v, (a, b), _ = st.items[0]
            target, lo, hi = f"{v.cname}[__t]", a, b
        # a warp function call as the whole right-hand side
        call = None
        if st.kind == "expr" and toks[lo].var is not None and toks[lo + 1].text == "=":
            target, lo = self.text(p, lo, lo + 1), lo + 2
        elif st.kind == "expr":
            target = None
        if toks[lo].text in self.funcs and self.funcs[toks[lo].text].warp:
            e = _match(toks, lo + 1)
            if e != hi - 1:
                raise Refused("warp function call inside an expression")
            call = (toks[lo].text, lo + 2, e)
        if call is not None:
            if target is None and self.funcs[call[0]].ret != ["void"]:
                raise Refused("warp function result unused")
            self.inline(p, call, target, line)
            return
        # calls of warp functions inside the expression: each inlined into a per-thread
        # temporary first; then the plain warp operations: each one's value hoisted; then the rest
        pieces, j, sub = [], lo, {}
        while j < hi:
            tk = toks[j]
            if tk.text in self.funcs and self.funcs[tk.text].warp and toks[j + 1].text == "(" and \
                    (j == 0 or toks[j - 1].text not in (".", "->", "::")):
                f = self.funcs[tk.text]
                e = _match(toks, j + 1)
                if self.cut_in(p, j + 2, e):
                    raise Refused("nested warp operations")
                if f.ret == ["void"] or not f.ret:
                    raise Refused("void warp function inside an expression")
                self.counter[0] += 1
                tmp = Var("ret", self.counter[0], 0, list(f.ret), [])
                self.make_structural(tmp)
                self.inline(p, (tk.text, j + 2, e), f"{tmp.cname}[__t]", line)
                sub[j] = (e + 1, f"{tmp.cname}[__t]")
                j = e + 1
                continue
            j += 1
        j = lo
        while j < hi:
            tk = toks[j]
            if j in sub:
                j = sub[j][0]
                continue
            if tk.text in WARP_OPS:
                e = _match(toks, j + 1)
                args = _split_commas(toks, j + 2, e)
                kind = WARP_OPS[tk.text]
                if not self.full_mask(toks[args[0][0]:args[0][1]]):
                    raise Refused("warp operation with a mask that is not the full warp")
                if any(t.text in WARP_OPS for t in toks[j + 1:e]):
                    raise Refused("nested warp operations")
                buf = self.fresh("wv")
                if kind in ("BALLOT", "ANY", "ALL"):
                    if len(args) != 2:
                        raise Refused("vote arity")
                    value = f"(unsigned)(({self.text(p, *args[1])}) ? 1 : 0)"
                    cast = "unsigned" if kind == "BALLOT" else "int"
                    pieces.append((buf, value, f"(({cast})pl::cox_vote(pl::{kind}, {buf}, __t))", "unsigned"))
                else:
                    if len(args) not in (3, 4):
                        raise Refused("shuffle arity")
                    width = "32"
                    if len(args) == 4:
                        width = self.const_int(toks[args[3][0]:args[3][1]])
                    value = self.text(p, *args[1])
                    src = f"pl::cox_src(pl::{kind}, __t, (int)({self.text(p, *args[2])}), {width})"
                    pieces.append((buf, value, f"{buf}[{src}]", None))
                sub[j] = (e + 1, pieces[-1][2])
                j = e + 1
                continue
            j += 1
        decls = []
        for buf, value, _, typ in pieces:
            t = typ or f"std::remove_cvref_t<decltype({value})>"
            decls.append(f"using {buf}_T = {t}; static_assert(sizeof({buf}_T) <= 64); "
                         f"alignas(64) {buf}_T {buf}[1024];")
        self.out.append("{ const int __t = 0; (void)__t;")
        self.out.extend(decls)
        for buf, value, _, _ in pieces:
            self.line(f"for (int __t = 0; __t < __pl_nt; ++__t) {buf}[__t] = {value};", line)
        rest, j = [], lo
        for start in sorted(sub):
            rest.append(self.text(p, j, start))
            j, repl = sub[start]
            rest.append(repl)
        rest.append(self.text(p, j, hi))
        expr = " ".join(rest)
        if target is not None:
            stmt = f"{target} = {expr};"
        else:
            stmt = f"{expr};"
        self.line(f"for (int __t = 0; __t < __pl_nt; ++__t) {{ {stmt} }}", line)
        self.out.append("}")

    def inline(self, p: Parser, call, target, line):
        name, lo, hi = call
        f = self.funcs[name]
        args = _split_commas(p.t, lo, hi) if hi > lo else []
        if len(args) != len(f.params):
            raise Refused("warp function called with default arguments")
        fp = Parser([Tok(t.text, t.line) for t in f.body], self.funcs, self.counter)
        pvars = []
        for ptype, pname in f.params:
            v = fp.new_var(pname, ptype, [])
            v.varying, v.strict = True, False
            pvars.append(v)
        body = fp.block(0, len(fp.t))
        if fp.jumps and any(j.loop is None for j in fp.jumps):
            raise Refused("break outside a loop")
        if target is None and not fp.returns:
            pass  # a void function without return
        elif len(fp.returns) != 1 or not body.children or body.children[-1] is not fp.returns[0] \
                or target is None:
            raise Refused("warp function must return once, at its end")
        self.depth += 1
        if self.depth > 8:
            raise Refused("warp functions nested too deep (recursion?)")
        analyse(fp, self.funcs)
        _mark_single(fp)
        for v in fp.vars:
            if v.name in self.macro_names:
                raise Refused(f"a macro names the local variable {v.name}")
        for v in pvars:
            self.make_structural(v)
        self.out.append("{")
        assigns = [f"{v.cname}[__t] = {self.text(p, a, b)};" for v, (a, b) in zip(pvars, args)]
        self.line("for (int __t = 0; __t < __pl_nt; ++__t) { " + " ".join(assigns) + " }", line)
        self.structural(fp, body.children, ret_target=target)
        self.out.append("}")
        self.depth -= 1

    def resolved(self, toks) -> str:
        """The tokens' text with object-like macros expanded and parentheses stripped (a few
        levels: enough for a mask or a width written through a #define)."""
        text = "".join(t.text for t in toks)
        for _ in range(5):
            if text in self.macros:
                text = self.macros[text].replace(" ", "")
            text = text.strip("()")
        return text

    def full_mask(self, toks) -> bool:
        return self.resolved(toks) in _FULL_MASKS

    def const_int(self, toks) -> str:
        text = self.resolved(toks)
        if text == "warpSize":
            text = "32"
        if text not in ("1", "2", "4", "8", "16", "32"):
            raise Refused("shuffle width that is not a literal power of two")
        return text

    # -- the interchanged loop (thread loop inside) --
    def _interchange_at(self, p: Parser, region: list[Stmt]):
        """(index, tile) of a loop of the region worth running with the thread loop inside
        (tile 0: all threads together, else groups of that many), or None."""
        cands = [(k, _interchangeable(p, st)) for k, st in enumerate(region) if st.kind == "for"]
        cands = [(k, how) for k, how in cands if how is not None]
        if len(cands) != 1:
            return None
        k, how = cands[0]
        others = region[:k] + region[k + 1:]
        if not all(_local_only(p, st) for st in others):
            return None
        return k, (0 if how == "strided" else TILE)

    def lockstep_loop(self, p: Parser, st: Stmt, mask=None):
        """for (init; cond; step) body, all threads' iteration k before anyone's k + 1."""
        self.lockstep_depth += 1
        m = self.fresh("m")
        self.out.append("{")
        self.out.append(f"alignas(64) unsigned char {m}[1024]; bool {m}_all;")
        if st.init is not None:
            if st.init.kind == "decl":
                for v, _, _ in st.init.items:
                    self.make_structural(v)
            self.thread_loop(self.thread_text(p, st.init), mask)
        self.line("for (;;) {", p.t[st.start].line)
        self.out.append("int __pl_on = 0;")
        cond = self.text(p, *st.cond)
        outer = f"{mask}[__t] && " if mask else ""
        lo, hi = self.trange
        self.out.append(f"for (int __t = {lo}; __t < {hi}; ++__t) {{ {m}[__t] = {outer}({cond}); "
                        f"__pl_on += {m}[__t] != 0; }}")
        self.out.append(f"if (!__pl_on) break; {m}_all = __pl_on == ({hi}) - ({lo});")
        self.masked(p, _as_list(st.body), m)
        if st.step[1] > st.step[0]:
            self.thread_loop([self.text(p, *st.step) + ";"], m)
        self.out.append("}}")
        self.lockstep_depth -= 1

    def masked(self, p: Parser, stmts: list[Stmt], m: str):
        """The body of an interchanged loop: uniform loops stay loops (their variables plain),
        everything else one thread loop per statement under the mask."""
        for st in stmts:
            if st.kind == "block":
                self.masked(p, st.children, m)
            elif st.kind == "for" and not st.varying and _uniform_for(p, st):
                if st.init is not None:
                    for v, _, _ in st.init.items:
                        v.structural = False
                init = self.text(p, st.init.start, st.init.end, None) if st.init else ";"
                self.line(f"for ({init} {self.text(p, *st.cond, None)}; {self.text(p, *st.step, None)}) {{",
                          p.t[st.start].line)
                self.masked(p, _as_list(st.body), m)
                self.out.append("}")
            elif st.kind == "decl" and all(not v.varying for v, _, _ in st.items) and \
                    _uniform_decl(p, st):
                for v, _, _ in st.items:
                    v.structural = False
                self.line(self.text(p, st.start, st.end, None), p.t[st.start].line)
            else:
                if st.kind == "decl":
                    for v, _, _ in st.items:
                        self.make_structural(v)
                if st.kind == "expr":  # the same for every thread: computed once, before the loop
                    pre, text = self.hoisted(p, st.start, st.end)
                    self.out.extend(pre)
                    self.thread_loop([f'#line {p.t[st.start].line} "{self.filename}"', text], m)
                else:
                    self.thread_loop(self.thread_text(p, st), m)

    def _uniform_span(self, p: Parser, lo, hi) -> bool:
        for j in range(lo, hi):
            tk = p.t[j]
            if tk.var is not None and (tk.var.varying or tk.var in self.in_lockstep):
                return False
            if tk.text == "threadIdx" or tk.text in WARP_OPS or tk.text in ("++", "--") or \
                    tk.text in _ASSIGN or (tk.text in self.funcs and j + 1 < hi and p.t[j + 1].text == "("):
                return False
        return True

    def hoisted(self, p: Parser, lo, hi):
        """A statement of an interchanged loop's body with its uniform subscripts (and uniform
        loads `a[uniform]` it does not write) computed before the thread loop: GCC does not
        see through the frame's arrays that they cannot alias them."""
        toks, pre, parts, j, start = p.t, [], [], lo, lo
        while j < hi:
            if toks[j].text != "[":
                j += 1
                continue
            e = _match(toks, j, "[", "]")
            if not self._uniform_span(p, j + 1, e):
                j += 1
                continue
            idx = self.fresh("h")
            pre.append(f"const auto {idx} = ({self.text(p, j + 1, e, None)});")
            b = j - 1
            base = toks[b] if b >= lo else None
            whole = (base is not None and re.match(r"[A-Za-z_]\w*$", base.text) and base.text != "threadIdx"
                     and (b == lo or toks[b - 1].text not in (".", "->", "::", "&", "++", "--", "]"))
                     and self._uniform_span(p, b, b + 1) and e + 1 < hi
                     and toks[e + 1].text not in (*_ASSIGN, "++", "--", "[", "."))
            if whole:
                load = self.fresh("h")
                pre.append(f"const auto {load} = {self.text(p, b, b + 1, None)}[{idx}];")
                parts.append(self.text(p, start, b))
                parts.append(load)
            else:
                parts.append(self.text(p, start, j))
                parts.append(f"[{idx}]")
            start = j = e + 1
        parts.append(self.text(p, start, hi))
        return pre, " ".join(parts)


def _as_list(st: Stmt) -> list[Stmt]:
    return st.children if st.kind == "block" else [st]


def _local_only(p: Parser, st: Stmt) -> bool:
    """No memory access and no call: reordering it against other threads changes nothing."""
    toks = p.t[st.start:st.end]
    for j, tk in enumerate(toks):
        prev = toks[j - 1].text if j else ";"
        if tk.text in ("[", "->") or (tk.text == "*" and prev in _OPERATOR_BEFORE_UNARY
                                      and not (j and re.match(r"[A-Za-z_]", prev))):
            return False
        if re.match(r"[A-Za-z_]", tk.text) and j + 1 < len(toks) and toks[j + 1].text == "(" \
                and tk.text not in _PURE:
            return False
    return st.kind in ("decl", "expr", "empty")


def _uniform_decl(p: Parser, st: Stmt) -> bool:
    return all(init is None or not _any_varying_tok(p, *init) for _, init, _ in st.items) and \
        not any(set(v.type_toks) & _STRUCTURAL_REFUSED_TYPES or v.dims for v, _, _ in st.items)


def _any_varying_tok(p: Parser, lo, hi) -> bool:
    for tk in p.t[lo:hi]:
        if tk.text == "threadIdx" or tk.text in ("++", "--") or tk.text in _ASSIGN:
            return True
        if tk.var is not None and (tk.var.varying or tk.var.param is False and tk.var.structural
                                   and tk.var.varying):
            return True
    return False


def _uniform_for(p: Parser, st: Stmt) -> bool:
    if any(j.loop is st for j in p.jumps):
        return False
    if st.init is not None and (st.init.kind != "decl" or not _uniform_decl(p, st.init)
                                or any(v.varying for v, _, _ in st.init.items)):
        return False
    return not _any_varying_tok(p, *st.cond) and not any(
        tk.var is not None and tk.var.varying for tk in p.t[st.step[0]:st.step[1]])


TILE = 8  # threads interleaved when a loop's inner loop is a chain of dependent adds


def _interchangeable(p: Parser, st: Stmt):
    """How a loop over a thread's elements (varying condition) is better run with the thread
    loop inside: "strided" when its innermost uniform loop reads memory through a varying
    pointer with a stride other than 1 per iteration (all threads together: consecutive
    threads then read consecutive addresses), "chain" when that loop reads with unit stride
    but accumulates into a variable (groups of TILE threads: independent add chains side by
    side); None to keep one thread's whole loop at a time."""
    if not st.varying or any(j.loop is st for j in p.jumps) or st.init is None or \
            st.init.kind != "decl":
        return None
    inner = _innermost_uniform(p, st.body)
    if inner is None:
        return None
    loopvars = {v for v, _, _ in inner.init.items}
    toks = p.t
    # writes inside the inner loop other than to plain local accumulators: keep the order
    for j in range(inner.body.start, inner.body.end):
        if toks[j].text in _ASSIGN and toks[j - 1].text == "]":
            return None
    unit = strided = chain = False
    for j in range(inner.body.start, inner.body.end):
        tk = toks[j]
        if tk.var is not None and tk.var.varying and j + 1 < len(toks) and toks[j + 1].text in ("+=", "-=", "*="):
            chain = True
        if tk.var is not None and tk.var.varying and j + 1 < len(toks) and toks[j + 1].text == "[":
            e = _match(toks, j + 1, "[", "]")
            idx = toks[j + 2:e]
            if not any(x.var in loopvars for x in idx):
                continue
            if len(idx) == 1 or (len(idx) == 3 and idx[1].text in "+-" and
                                 (idx[0].var in loopvars or idx[2].var in loopvars)):
                unit = True  # the thread's own loop already reads contiguously
            else:
                strided = True
    if strided and not unit:
        return "strided"
    if unit and chain and not strided:
        return "chain"
    return None


def _innermost_uniform(p: Parser, st: Stmt):
    found = None
    for c in _as_list(st):
        if c.kind == "for" and not c.varying and c.init is not None and c.init.kind == "decl" \
                and _uniform_for(p, c):
            deeper = _innermost_uniform(p, c.body)
            found = deeper or c
        elif c.kind == "block":
            found = _innermost_uniform(p, c) or found
    return found


# ---- the file ----------------------------------------------------------------------------------

def _functions(toks: list[Tok], skip: tuple[int, int]) -> dict[str, Func]:
    """__device__ functions defined at file scope (name -> Func)."""
    funcs, depth, i = {}, 0, 0
    while i < len(toks):
        if skip[0] <= i < skip[1]:
            i = skip[1]
            continue
        x = toks[i].text
        if x == "{":
            depth += 1
        elif x == "}":
            depth -= 1
        elif depth == 0 and re.match(r"[A-Za-z_]\w*$", x) and i + 1 < len(toks) and toks[i + 1].text == "(":
            e = _match(toks, i + 1)
            if e + 1 < len(toks) and toks[e + 1].text in ("{", "const"):
                b = e + 1 if toks[e + 1].text == "{" else e + 2
                if toks[b].text != "{":
                    i += 1
                    continue
                end = _match(toks, b, "{", "}")
                k = i - 1
                while k >= 0 and toks[k].text not in (";", "}", ">") and not toks[k].text.startswith("#"):
                    k -= 1
                ret = [t.text for t in toks[k + 1:i] if t.text not in
                       ("__device__", "__forceinline__", "inline", "static", "__host__", "__noinline__")]
                templated = k >= 0 and toks[k].text == ">"
                params = []
                for a, b2 in (_split_commas(toks, i + 2, e) if e > i + 2 else []):
                    words = [t.text for t in toks[a:b2]]
                    if words == ["void"]:
                        continue
                    params.append((words[:-1], words[-1]))
                f = Func(x, ret, params, toks[b + 1:end])
                f.span = (b, end + 1)
                f.templated = templated
                f.warp = any(t.text in WARP_OPS for t in f.body)
                funcs[x] = f
                i = end + 1
                continue
        i += 1
    return funcs


def _macros(text: str) -> dict[str, str]:
    out = {}
    for m in re.finditer(r"^\s*#\s*define\s+([A-Za-z_]\w*)(\([^)]*\))?\s*(.*)$", text, re.M):
        out[m.group(1)] = m.group(3).strip()
    return out


@dataclass
class Collapsed:
    """The kernel's collapsed version: `code` goes right after the `{` of the kernel's body
    (offset `at`), behind `if (pl_cur->collapsed)`; the body's `__shared__` declarations move
    to its front (`blanks`: their old places, blanked), so both versions use the same
    variables, laid out as before. Line numbers stay those of the file (#line)."""
    kernel: str
    code: str
    interchanged: int = 0
    at: int = 0
    blanks: list = field(default_factory=list)


def apply(code: str, done: list[Collapsed]) -> str:
    """The source with every collapsed kernel put in (see Collapsed)."""
    for c in sorted(done, key=lambda c: c.at, reverse=True):
        for a, b in sorted(c.blanks, reverse=True):
            code = code[:a] + re.sub(r"[^\n]", " ", code[a:b]) + code[b:]
        code = code[:c.at] + c.code + code[c.at:]
    return code


def collapse(code: str, kernel: str, filename: str = "kernel.cu") -> Collapsed | str:
    """The collapsed version of `kernel` (C++ to append to the glue), or the reason (a str)
    why it runs on fibers."""
    try:
        return _collapse(code, kernel, filename)
    except Refused as e:
        return str(e) or "outside the collapsible class"
    except (IndexError, KeyError, ValueError, AttributeError, RecursionError) as e:  # unusual code
        return f"not understood ({type(e).__name__})"


_INCLUDES_OK = {"cuda_fp16.h", "cuda_bf16.h", "cuda_runtime.h", "cuda.h", "stdint.h", "cstdint",
                "math.h", "cmath", "float.h", "cfloat", "limits.h", "climits", "stddef.h", "cstddef",
                "vector_types.h", "device_launch_parameters.h", "math_constants.h", "cuComplex.h"}
_MACRO_BAD = re.compile(r"\b(threadIdx|__syncthreads|__shfl\w*|__ballot_sync|__any_sync|__all_sync"
                        r"|return|break|continue|goto)\b|[{};]")


def _collapse(code: str, kernel: str, filename: str) -> Collapsed:
    text = strip_comments(code)
    for inc in re.findall(r"^\s*#\s*include\s*[<\"]([^>\"]+)[>\"]", text, re.M):
        if inc not in _INCLUDES_OK:
            raise Refused(f"includes {inc}")
    if kernel_scopes(code, [kernel]):
        raise Refused("kernel inside a namespace")
    macros = _macros(text)
    text = re.sub(r"^[ \t]*#.*$", lambda m: " " * len(m.group(0)), text, flags=re.M)
    kernels = [k for k in _KERNEL_RE.finditer(text) if k.group(1) == kernel]
    if len(kernels) != 1:
        raise Refused("kernel defined more than once (or not found)")
    toks = tokenize(text)
    # locate the kernel's name token: the one following the regex match
    line = text.count("\n", 0, kernels[0].end()) + 1
    ki = next(i for i, t in enumerate(toks) if t.text == kernel and t.line == line
              and i + 1 < len(toks) and toks[i + 1].text == "(")
    pe = _match(toks, ki + 1)
    if pe + 1 >= len(toks) or toks[pe + 1].text != "{":
        raise Refused("kernel declaration without a body")
    be = _match(toks, pe + 1, "{", "}")
    head_start = ki
    while head_start > 0 and toks[head_start - 1].text not in (";", "}"):
        head_start -= 1
    if any(t.text == "template" or t.text == ">" for t in toks[head_start:ki]):
        raise Refused("template kernel")
    funcs = _functions(toks, (head_start, be + 1))
    # threadIdx, barriers and warp operations outside every function at file scope (a struct's
    # method, a namespace's function): no telling who calls them
    covered = [False] * len(toks)
    for lo, hi in [f.span for f in funcs.values()] + [(pe + 1, be + 1)]:
        covered[lo:hi] = [True] * (hi - lo)
    for i, t in enumerate(toks):
        if not covered[i] and (t.text in ("threadIdx", "__syncthreads") or t.text in WARP_OPS):
            raise Refused(f"{t.text} outside the file's functions")
    # what the kernel reaches: its body, the functions it calls and the macros it names
    body_toks = toks[pe + 2:be]
    reached_f, reached_m, todo = set(), set(), [body_toks]
    while todo:
        for t in todo.pop():
            if t.text in funcs and t.text not in reached_f:
                reached_f.add(t.text)
                todo.append(funcs[t.text].body)
            elif t.text in macros and t.text not in reached_m:
                reached_m.add(t.text)
                todo.append(tokenize(macros[t.text]))
    for name in reached_m:
        if _MACRO_BAD.search(macros[name]):
            raise Refused(f"macro {name} hides control flow or thread indices")
    reached_text = " ".join([t.text for t in body_toks] + [t.text for f in reached_f for t in funcs[f].body]
                            + [macros[m] for m in reached_m])
    m = _REFUSED.search(reached_text)
    if m:
        raise Refused(f"uses {m.group(0).strip()}")
    # functions with a barrier or a warp operation, or calling one: inlined ("warp functions")
    changed = True
    while changed:
        changed = False
        for f in funcs.values():
            if not f.warp and any(t.text == "__syncthreads" or (t.text in funcs and funcs[t.text].warp)
                                  for t in f.body):
                f.warp = changed = True
    for name in reached_f:
        f = funcs[name]
        if f.warp:
            if f.templated or any("&" in ty or "&&" in ty for ty, _ in f.params) or \
                    any(x in ("[", "]") for ty, _ in f.params for x in ty):
                raise Refused(f"function {f.name} with a barrier or warp operation (template, "
                              f"reference or array parameter)")
        elif any(t.text == "threadIdx" for t in f.body):
            raise Refused(f"{name} reads threadIdx")
        if any("&" in ty for ty, _ in f.params):
            raise Refused(f"function {f.name} takes a reference")
    funcs = {k: f for k, f in funcs.items() if k in reached_f}
    body = [Tok(t.text, t.line, t.pos) for t in toks[pe + 2:be]]
    # preprocessor lines inside the kernel or a function it calls: the parse would not see them
    spans = [(toks[pe + 1].pos, toks[be].pos)] + [(toks[funcs[f].span[0]].pos, toks[funcs[f].span[1] - 1].pos)
                                                  for f in reached_f]
    for m in re.finditer(r"^[ \t]*#", strip_comments(code), re.M):
        if any(a <= m.start() < b for a, b in spans):
            raise Refused("preprocessor directive inside the kernel or a function it calls")
    if any(t.text == "[" and i and body[i - 1].text in ("(", ",", "=") and
           i + 1 < len(body) and body[i + 1].text in ("&", "=", "]") for i, t in enumerate(body)):
        raise Refused("lambda")
    em = Emitter(filename, funcs, macros)
    em.shared = []
    em.macro_names = {t.text for value in macros.values() for t in tokenize(value)
                      if re.match(r"[A-Za-z_]", t.text)}
    p = Parser(body, funcs, em.counter)
    # kernel parameters: plain names unless assigned (then a per-thread copy)
    ptoks = toks[ki + 2:pe]
    params = []
    for a, b in (_split_commas(ptoks, 0, len(ptoks)) if ptoks else []):
        words = [t.text for t in ptoks[a:b]]
        if words == ["void"] or not words:
            continue
        if any(w in ("&", "[", "]") for w in words):
            raise Refused("kernel parameter by reference or array")
        v = p.new_var(words[-1], [w for w in words[:-1]], [], param=True)
        stars = [i for i, w in enumerate(words[:-1]) if w == "*"]
        v.readonly = len(stars) == 1 and "const" in words[:stars[0]]
        params.append(v)
    p.scopes.append({})
    root = p.block(0, len(body))
    if any(p.t[r.start + 1].text != ";" for r in p.returns):
        raise Refused("return with a value")
    analyse(p, funcs)
    for v in params:
        if any(s.var is v for s in p.sites):
            raise Refused(f"kernel parameter {v.name} assigned in the kernel")
    _mark_single(p)
    macro_names = {t.text for value in macros.values() for t in tokenize(value)
                   if re.match(r"[A-Za-z_]", t.text)}
    for v in p.vars:
        if not v.param and v.name in macro_names:
            raise Refused(f"a macro names the local variable {v.name}")
    shared = [st for st in root.children if st.kind == "shared"]
    if sum(t.text == "__shared__" for t in body) != len(shared):
        raise Refused("__shared__ declared inside a block")
    blanks, hoisted = [], []
    for st in shared:
        words = [t.text for t in body[st.start:st.end]]
        cut = words.index("[") if "[" in words else len(words) - 1
        name = next((w for w in reversed(words[:cut]) if re.match(r"[A-Za-z_]\w*$", w)), None)
        if name is None or any(t.text == name for t in body[:st.start]):
            raise Refused("a __shared__ variable's name used before its declaration")
        a, b = body[st.start].pos, body[st.end - 1].pos + len(body[st.end - 1].text)
        blanks.append((a, b))
        hoisted.append(code[a:b].replace("\n", " "))
    em.structural(p, root.children, top=True)
    # the frame: one array of each structural variable, one element per thread
    lines = ["if (pl_cur->collapsed) {"]
    lines.append("const int __pl_nt = (int)(blockDim.x * blockDim.y * blockDim.z);")
    lines.append("const pl::CoxGuard* const __pl_g = pl_cox_guard();")
    lines.append("const unsigned __pl_bx = blockDim.x, __pl_by = blockDim.y;")
    sizes = ["3 * sizeof(unsigned)"]
    for k, v in enumerate(em.frame):
        ty = " ".join(v.type_toks)
        dims = "".join("[" + " ".join(t.text if t.var is None else t.var.name for t in d) + "]"
                       for d in v.dims)
        lines.append(f"using __pl_T{k} = std::remove_const_t<{ty}>{dims};")
        sizes.append(f"sizeof(__pl_T{k})")
    lines.append(f"const size_t __pl_sizes[] = {{{', '.join(sizes)}}};")
    lines.append(f"char* __pl_fb = pl::cox_frame(__pl_nt, {len(sizes)}, __pl_sizes);")
    lines.append("size_t __pl_off = 0;")
    lines.append("unsigned* __pl_tix = (unsigned*)__pl_fb; unsigned* __pl_tiy = __pl_tix + __pl_nt; "
                 "unsigned* __pl_tiz = __pl_tiy + __pl_nt;")
    lines.append("__pl_off += pl::cox_round(3 * sizeof(unsigned) * __pl_nt);")
    lines.append("for (int __t = 0; __t < __pl_nt; ++__t) { __pl_tix[__t] = __t % __pl_bx; "
                 "__pl_tiy[__t] = (__t / __pl_bx) % __pl_by; __pl_tiz[__t] = __t / (__pl_bx * __pl_by); }")
    for k, v in enumerate(em.frame):
        lines.append(f"__pl_T{k}* __restrict {v.cname} = (__pl_T{k}*)(__pl_fb + __pl_off); "
                     f"__pl_off += pl::cox_round(sizeof(__pl_T{k}) * __pl_nt);")
    lines.extend(em.out)
    lines.append("__pl_fail:")
    lines.append("pl::cox_free(__pl_fb);")
    lines.append("return;")
    lines.append("}")
    brace = toks[pe + 1]
    text = (" " + " ".join(hoisted) + "\n" + "\n".join(lines) + f'\n#line {brace.line} "{filename}"\n')
    return Collapsed(kernel, text, em.interchanged, brace.pos + 1, blanks)
