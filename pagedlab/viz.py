"""Pictures for the course: the pool as a block map, block tables, memory bars, heatmaps.

Drawing works on plain snapshots (`EngineView`, `SeqView`) rather than on live ctypes views, so
a picture never dereferences a pointer a buggy student engine left dangling twice, and the
same picture can be drawn from a hand-made example. `snapshot(engine)` reads an engine once.

Colours follow the sequence id (`seq_color`), so a sequence keeps its colour from one picture
to the next; free blocks are grey, shared blocks show their ref count.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from .harness import hw3
from .student.hw3 import KV_PER_BLOCK as RECORDS_PER_BLOCK
from .student.hw3 import L1_PT_SIZE as L1_SLOTS
from .student.hw3 import L2_PT_SIZE as L2_SLOTS

FREE_COLOR = "#e4e4e4"
ERROR_COLOR = "#d62728"
_PALETTE = [  # tab20, saturated shades first
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
    "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2", "#9edae5", "#dbdb8d",
]


_ASSIGNED: dict[int, str] = {}  # sequence id -> its colour, for this process


def seq_color(seq_id: int) -> str:
    """The colour of sequence `seq_id` in every picture of this session.

    Its own palette entry (id mod 16) unless a sequence drawn earlier took it, then the next free
    one: seq 4 and seq 100 (notebook 10's swap) are told apart, and a sequence keeps its colour
    from picture to picture. Past 16 sequences colours repeat; `distinct_colors` keeps one
    picture's apart.
    """
    colour = _ASSIGNED.get(seq_id)
    if colour is None:
        taken = set(_ASSIGNED.values())
        n = len(_PALETTE)
        order = [_PALETTE[(seq_id + k) % n] for k in range(n)]
        colour = _ASSIGNED[seq_id] = next((c for c in order if c not in taken), order[0])
    return colour


def distinct_colors(seq_ids) -> dict[int, str]:
    """{seq id: colour} for one picture: each its `seq_color`, unless another owner in the same
    picture already has it (possible only past 16 sequences in a session)."""
    out: dict[int, str] = {}
    for sid in dict.fromkeys(seq_ids):
        colour = seq_color(sid)
        if colour in out.values():
            colour = next((c for c in _PALETTE if c not in out.values()), colour)
        out[sid] = colour
    return out


def _luminance(colour: str) -> float:
    """WCAG relative luminance of "#rrggbb"."""
    def linear(c):
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (linear(int(colour[i:i + 2], 16) / 255) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two "#rrggbb" colours (1 to 21; 4.5 reads well in small print)."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def ink(face: str) -> str:
    """Black or white text, whichever contrasts more with the colour `face` ("#rrggbb"): at least
    4.5:1 on any colour (white on orange was 2.5:1)."""
    return "#000000" if contrast(face, "#000000") >= contrast(face, "#ffffff") else "#ffffff"


# --------------------------------------------------------------------------------------------
# Snapshots
# --------------------------------------------------------------------------------------------


@dataclass
class SeqView:
    """One sequence as plain data. `l1[i]` is None (NULL) or the 16 entries of an L2 table."""

    seq_id: int
    kv_count: int
    l1: list = field(default_factory=lambda: [None] * L1_SLOTS)
    address: int = 0

    @property
    def mapping(self) -> dict[int, int]:
        """logical block -> physical block, for every mapped entry."""
        out = {}
        for i, l2 in enumerate(self.l1):
            if l2 is None:
                continue
            for j, block in enumerate(l2):
                if block != -1:
                    out[i * L2_SLOTS + j] = block
        return out

    @classmethod
    def from_blocks(cls, seq_id: int, blocks: list[int], kv_count: int | None = None) -> "SeqView":
        """A sequence whose logical blocks 0, 1, ... map to `blocks` (for hand-made examples)."""
        view = cls(seq_id, kv_count if kv_count is not None else len(blocks) * RECORDS_PER_BLOCK)
        for logical, block in enumerate(blocks):
            i, j = divmod(logical, L2_SLOTS)
            if view.l1[i] is None:
                view.l1[i] = [-1] * L2_SLOTS
            view.l1[i][j] = block
        return view


@dataclass
class EngineView:
    total_blocks: int
    free_blocks: int
    ref_count: list[int]
    seqs: list[SeqView]

    def seq(self, seq_id: int) -> SeqView:
        for s in self.seqs:
            if s.seq_id == seq_id:
                return s
        raise KeyError(f"no active sequence {seq_id}; active: {[s.seq_id for s in self.seqs]}")

    def owners(self) -> dict[int, list[tuple[int, int]]]:
        """physical block -> [(seq_id, logical block), ...] over all sequences' tables."""
        out: dict[int, list[tuple[int, int]]] = {}
        for s in self.seqs:
            for logical, block in s.mapping.items():
                out.setdefault(block, []).append((s.seq_id, logical))
        return out


def snapshot_seq(seq) -> SeqView:
    view = SeqView(int(seq.seq_id), int(seq.kv_count), address=ctypes.addressof(seq))
    if seq.block_table:
        for i in range(L1_SLOTS):
            l2 = seq.block_table[i]
            if l2:
                view.l1[i] = [int(l2[j]) for j in range(L2_SLOTS)]
    return view


def snapshot(engine) -> EngineView:
    """Copy what the pictures need out of a live `LLMEngine` view."""
    if engine is None:
        raise ValueError("snapshot(engine): engine is None (did llm_init return NULL?)")
    total = int(engine.total_local_blocks)
    refs = [int(engine.ref_count[i]) for i in range(total)] if engine.ref_count else [0] * total
    seqs = [snapshot_seq(s) for s in hw3.sequences(engine)]  # raises CorruptEngine on a broken list
    return EngineView(total, int(engine.free_local_blocks), refs, seqs)


def _as_view(engine_or_view) -> EngineView:
    return engine_or_view if isinstance(engine_or_view, EngineView) else snapshot(engine_or_view)


# --------------------------------------------------------------------------------------------
# Pool map
# --------------------------------------------------------------------------------------------


def _plt():
    import matplotlib.pyplot as plt

    return plt


def draw_pool(engine, *, ax=None, cols: int = 16, title: str | None = None, legend: bool = True):
    """The pool as a grid of blocks coloured by owning sequence(s).

    A block shared by several sequences is striped in their colours and shows ``×ref``. A block
    whose ref count disagrees with the block tables (a leak or a missed increment) gets a red
    frame: the picture is also a debugging aid.
    """
    from matplotlib.patches import Patch, Rectangle

    view = _as_view(engine)
    plt = _plt()
    total = view.total_blocks
    cols = max(1, min(cols, total))
    rows = -(-total // cols)
    own_figure = ax is None
    if own_figure:
        _, ax = plt.subplots(figsize=(min(0.62 * cols + 1.8, 12), 0.62 * rows + 0.9))
    owners = view.owners()
    colour = distinct_colors([s.seq_id for s in view.seqs] + [sid for who in owners.values() for sid, _ in who])
    for b in range(total):
        r, c = divmod(b, cols)
        x, y = c, rows - 1 - r
        who = owners.get(b, [])
        ref = view.ref_count[b] if b < len(view.ref_count) else 0
        if not who:
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=FREE_COLOR, edgecolor="white", lw=1.5))
        else:
            w = 1 / len(who)
            for k, (sid, _) in enumerate(who):
                ax.add_patch(Rectangle((x + k * w, y), w, 1, facecolor=colour[sid], lw=0))
            ax.add_patch(Rectangle((x, y), 1, 1, fill=False, edgecolor="white", lw=1.5))
        # The number sits on the block's first stripe (grey #555 on a shared brown block was unreadable).
        ax.text(x + 0.06, y + 0.94, str(b), fontsize=6, va="top", ha="left",
                color=ink(colour[who[0][0]] if who else FREE_COLOR))
        if len(who) == 1:
            sid, logical = who[0]
            ax.text(x + 0.5, y + 0.42, f"S{sid}\nL{logical}", fontsize=6.5, ha="center",
                    va="center", color=ink(colour[sid]), linespacing=0.9)
        if ref > 1:
            ax.text(x + 0.5, y + 0.42, f"×{ref}", fontsize=9, fontweight="bold", ha="center",
                    va="center", color="black",
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85))
        if ref != len(who):
            ax.add_patch(Rectangle((x + 0.04, y + 0.04), 0.92, 0.92, fill=False,
                                   edgecolor=ERROR_COLOR, lw=2))
    ax.set_xlim(0, cols)
    ax.set_ylim(0, rows)
    ax.set_aspect("equal")
    ax.axis("off")
    used = sum(1 for r in view.ref_count if r > 0)
    ax.set_title(title or f"pool: {total} blocks, {used} in use, free_local_blocks = "
                 f"{view.free_blocks}", fontsize=9)
    if legend:
        handles = [Patch(color=colour[s.seq_id], label=f"seq {s.seq_id} ({s.kv_count} rec)")
                   for s in view.seqs]
        handles.append(Patch(color=FREE_COLOR, label="free"))
        if any(view.ref_count[b] != len(owners.get(b, [])) for b in range(total)):
            handles.append(Patch(fill=False, edgecolor=ERROR_COLOR, lw=2,
                                 label="ref count ≠ table entries"))
        if own_figure:  # the figure was sized with room on the right
            ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7, frameon=False)
        else:
            # A panel of a larger figure: a legend to its right would run under the next panel
            # ("seq 2 (20" …), so it goes below, in as many columns as the panel's width holds.
            fig = ax.get_figure()
            width = ax.get_position().width * fig.get_figwidth()
            ncol = max(1, min(len(handles), int(width / 1.15)))
            ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=ncol,
                      fontsize=7, frameon=False, columnspacing=1.0, handlelength=1.2)
    return ax


# --------------------------------------------------------------------------------------------
# Two-level block table
# --------------------------------------------------------------------------------------------


def draw_block_table(engine, seq_id: int, *, ax=None, highlight: tuple[int, int] | None = None,
                     ref_count: list[int] | None = None, title: str | None = None,
                     compact: bool = False):
    """One sequence's L1 table (a column of 16 pointers) and its L2 tables (rows of 16 ids).

    `highlight=(l1, l2)` frames one translation path; `engine` may be an engine, an
    `EngineView` or a bare `SeqView` (then pass `ref_count` to mark shared blocks).
    `compact=True` stops after the last non-NULL L1 slot (plus one) and says how many NULL
    slots it left out.
    """
    from matplotlib.patches import FancyArrowPatch, Rectangle

    if isinstance(engine, SeqView):
        seq, refs = engine, ref_count or []
    else:
        view = _as_view(engine)
        seq, refs = view.seq(seq_id), view.ref_count
    plt = _plt()
    shown = L1_SLOTS
    if compact:
        used = [i for i, t in enumerate(seq.l1) if t is not None]
        shown = min(L1_SLOTS, (used[-1] + 2) if used else 1)
        if highlight is not None:
            shown = max(shown, min(L1_SLOTS, highlight[0] + 1))
    if ax is None:
        _, ax = plt.subplots(figsize=(8.5, 0.42 * shown + 0.5))
    cw, ch = 0.9, 1.0  # L2 cell width, row height
    x0 = 3.2  # where L2 rows start
    for i in range(shown):
        y = shown - 1 - i
        l2 = seq.l1[i]
        hit_row = highlight is not None and highlight[0] == i
        ax.add_patch(Rectangle((0, y), 1.6, ch * 0.9, facecolor="#f7f7f7" if l2 is None else
                               "#fff4d6", edgecolor=ERROR_COLOR if hit_row else "#999999",
                               lw=2 if hit_row else 0.8))
        ax.text(-0.15, y + 0.45, str(i), ha="right", va="center", fontsize=7, color="#555555")
        ax.text(0.8, y + 0.45, "NULL" if l2 is None else "ptr", ha="center", va="center",
                fontsize=7, color="#999999" if l2 is None else "black")
        if l2 is None:
            continue
        ax.add_patch(FancyArrowPatch((1.6, y + 0.45), (x0 - 0.05, y + 0.45),
                                     arrowstyle="-|>", mutation_scale=8, color="#777777"))
        for j, block in enumerate(l2):
            x = x0 + j * cw
            hit = hit_row and highlight[1] == j
            shared = block != -1 and block < len(refs) and refs[block] > 1
            face = FREE_COLOR if block == -1 else seq_color(seq.seq_id)
            ax.add_patch(Rectangle((x, y), cw * 0.95, ch * 0.9, facecolor=face,
                                   edgecolor=ERROR_COLOR if hit else "white", lw=2.2 if hit else 1))
            label = "-1" if block == -1 else str(block)
            ax.text(x + cw * 0.47, y + (0.6 if shared else 0.45), label, ha="center",
                    va="center", fontsize=7.5,
                    color="#999999" if block == -1 else ink(face),
                    fontweight="bold" if shared else "normal")
            if shared:
                ax.text(x + cw * 0.47, y + 0.2, f"×{refs[block]}", ha="center", va="center",
                        fontsize=5.5, color=ink(face))
    for j in range(L2_SLOTS):
        ax.text(x0 + j * cw + cw * 0.47, shown + 0.15, str(j), ha="center", va="bottom",
                fontsize=6.5, color="#555555")
    ax.text(0.8, shown + 0.15, "L1", ha="center", va="bottom", fontsize=8, fontweight="bold")
    ax.text(x0 - 0.3, shown + 0.15, "L2 →", ha="right", va="bottom", fontsize=8,
            fontweight="bold")
    bottom = -0.2
    if shown < L1_SLOTS:
        ax.text(0.8, -0.35, f"… L1 slots {shown}–{L1_SLOTS - 1}: NULL", ha="left", va="center",
                fontsize=7, color="#777777")
        bottom = -0.9
    ax.set_xlim(-0.8, x0 + L2_SLOTS * cw + 0.2)
    ax.set_ylim(bottom, shown + 1)
    ax.set_aspect("equal")
    ax.axis("off")
    n_l2 = sum(1 for t in seq.l1 if t is not None)
    ax.set_title(title or f"seq {seq.seq_id}: kv_count = {seq.kv_count}, {len(seq.mapping)} "
                 f"blocks mapped through {n_l2} L2 table(s)", fontsize=9)
    return ax


def draw_engine(engine, seq_ids=None, *, title: str | None = None):
    """The pool map above the block tables of `seq_ids` (default: every active sequence)."""
    view = _as_view(engine)
    plt = _plt()
    ids = [s.seq_id for s in view.seqs] if seq_ids is None else list(seq_ids)
    rows = -(-view.total_blocks // 16)

    def table_rows(sid):
        used = [i for i, t in enumerate(view.seq(sid).l1) if t is not None]
        return min(L1_SLOTS, (used[-1] + 2) if used else 1)

    heights = [0.62 * rows + 0.9] + [0.3 * table_rows(sid) + 0.9 for sid in ids]
    fig, axes = plt.subplots(len(heights), 1, figsize=(10, sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    draw_pool(view, ax=axes[0][0], title=title)
    for ax, sid in zip(axes[1:], ids):
        draw_block_table(view, sid, ax=ax[0], compact=True)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# Memory bars, struct layouts, heatmaps
# --------------------------------------------------------------------------------------------

BAR_COLORS = {
    "tokens": "#2ca02c",
    "reserved for later tokens": "#9ecae1",
    "reserved, never used": "#ff7f0e",
    "last block, partly used": "#ffbb78",
    "free gaps": "#c7c7c7",
}


def draw_memory_bars(rows: dict[str, dict[str, float]], *, ax=None, unit: str = "slots",
                     title: str | None = None):
    """Stacked horizontal bars: where each policy's KV memory goes.

    `rows` maps a policy name to {category: amount}; categories named in `BAR_COLORS` get
    their course colours. Each bar is annotated with the share holding real tokens.
    """
    plt = _plt()
    own = ax is None
    if own:
        _, ax = plt.subplots(figsize=(8, 0.55 * len(rows) + 1.2))
    names = list(rows)
    cats = []
    for parts in rows.values():
        cats += [c for c in parts if c not in cats]
    for k, name in enumerate(names):
        left = 0.0
        for c in cats:
            v = rows[name].get(c, 0)
            ax.barh(k, v, left=left, color=BAR_COLORS.get(c), edgecolor="white",
                    label=c if k == 0 or c not in [cc for n in names[:k] for cc in rows[n]] else None)
            left += v
        used = rows[name].get("tokens", 0)
        share = used / left if left else 0
        ax.text(left, k, f"  {share:.0%} tokens", va="center", fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(unit, fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.spines[["top", "right"]].set_visible(False)
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    ax.legend(seen.values(), seen.keys(), fontsize=7, frameon=False, loc="lower right",
              bbox_to_anchor=(1, 1), ncol=len(seen))
    ax.margins(x=0.15)
    if title:
        ax.set_title(title, fontsize=9, loc="left", pad=18)
    if own:
        ax.figure.tight_layout()
    return ax


def draw_struct(ctype, *, ax=None, base: int | None = None, title: str | None = None):
    """A ctypes Structure as a byte ruler: fields coloured, padding hatched, offsets marked.

    Nested structures are drawn field by field (``node.prev``, ``node.next``) so the reader
    sees where the embedded list node really starts. `base` labels offsets as addresses.
    """
    from matplotlib.patches import Rectangle

    def leaves(t, offset=0, prefix=""):
        for fname, ftype, *_ in t._fields_:
            off = offset + getattr(t, fname).offset
            if isinstance(ftype, type) and issubclass(ftype, ctypes.Structure):
                yield from leaves(ftype, off, f"{prefix}{fname}.")
            else:
                yield f"{prefix}{fname}", off, ctypes.sizeof(ftype)

    plt = _plt()
    size = ctypes.sizeof(ctype)
    if ax is None:
        _, ax = plt.subplots(figsize=(min(0.26 * size + 1, 12), 1.6))
    fields = list(leaves(ctype))
    covered = set()
    for k, (name, off, n) in enumerate(fields):
        color = _PALETTE[k % 8]
        ax.add_patch(Rectangle((off, 0), n, 1, facecolor=color, edgecolor="white", lw=1.5))
        ax.text(off + n / 2, 0.5, f"{name}\n{n} B", ha="center", va="center", fontsize=7,
                color="white")
        covered.update(range(off, off + n))
    for b in range(size):
        if b not in covered:
            ax.add_patch(Rectangle((b, 0), 1, 1, facecolor="white", edgecolor="#bbbbbb",
                                   hatch="////", lw=0.5))
    marks = sorted({off for _, off, _ in fields} | {size})
    for off in marks:
        label = f"+{off}" if base is None else f"{base + off:#x}"
        ax.plot([off, off], [0, -0.06], color="#555555", lw=0.8)
        if base is None:
            ax.text(off, -0.1, label, ha="center", va="top", fontsize=6.5)
        else:  # long addresses: slant them, anchored at their tick
            ax.text(off, -0.1, label, ha="right", va="top", fontsize=6.5, rotation=30,
                    rotation_mode="anchor")
    ax.set_xlim(-0.5, size + 0.5)
    ax.set_ylim(-0.8 if base is None else -1.5, 1.3)
    ax.axis("off")
    ax.set_title(title or f"{ctype.__name__}: sizeof = {size} bytes (hatched = padding)",
                 fontsize=9, loc="left")
    return ax


def draw_heatmaps(panels: dict[str, object], *, cmap: str = "viridis", title: str | None = None):
    """Side-by-side heatmaps of 2-D arrays with one colour scale (except panels named '|…|')."""
    import numpy as np

    plt = _plt()
    arrays = {k: np.asarray(v, dtype=float) for k, v in panels.items()}
    shared = [a for k, a in arrays.items() if not k.startswith("|")]
    lo = min(float(a.min()) for a in shared) if shared else None
    hi = max(float(a.max()) for a in shared) if shared else None
    fig, axes = plt.subplots(1, len(arrays), figsize=(3.4 * len(arrays), 3.0), squeeze=False)
    for ax, (name, a) in zip(axes[0], arrays.items()):
        if name.startswith("|"):
            im = ax.imshow(a, aspect="auto", cmap="magma")
        else:
            im = ax.imshow(a, aspect="auto", cmap=cmap, vmin=lo, vmax=hi)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
        # "%.1e" labels: a small |difference| scale would otherwise put its "1e-7" offset text
        # on top of the panel title.
        fmt = "%.1e" if name.startswith("|") else None
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, format=fmt).ax.tick_params(labelsize=6)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def draw_attention_check(actual, expected, *, name: str = "kernel", ref_name: str = "reference",
                         ylabel: str = "(sequence, head)", xlabel: str = "head dim"):
    """Kernel output next to the reference and their absolute difference.

    `actual` / `expected` are [num_seqs, num_heads, head_size]; rows of the heatmaps are
    (sequence, head) pairs, so a wrong head mapping or a missing sequence shows as a stripe.
    """
    import numpy as np

    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        raise ValueError(f"shapes differ: {name} {a.shape} vs {ref_name} {e.shape}")
    a2, e2 = a.reshape(-1, a.shape[-1]), e.reshape(-1, e.shape[-1])
    diff = np.abs(a2 - e2)
    fig = draw_heatmaps({name: a2, ref_name: e2, f"|{name} − {ref_name}|": diff},
                        title=f"max |difference| = {np.nanmax(diff):.2e}")
    for ax in fig.axes[:3]:
        ax.set_xlabel(xlabel, fontsize=7)
    fig.axes[0].set_ylabel(ylabel, fontsize=7)
    return fig
