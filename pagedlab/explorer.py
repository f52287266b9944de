"""An interactive explorer of the memory manager, for instructor demos.

Buttons call the HW3 API one step at a time (create / fork / append / free) and the picture
updates live: the pool as a block map (owners, ref counts) above the block table of the
sequence just touched. Every call is logged with its return value, so a failing call (None or
-1) is as visible as a successful one.

The buttons only call plain methods (`create`, `fork`, `append`, `free`, `reset`), so the
explorer is scriptable and testable without a browser:

    ex = Explorer()  # the memory_manager PAGEDLAB_IMPL names (exercises/ unless set)
    ex.create(1, 40); ex.fork(1, 2); ex.append(2, 7)
    print(ex.history_text())
    ex  # in Jupyter: the widget
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from .student.hw3 import BLOCK_SIZE


@dataclass
class Step:
    """One logged call: what was asked, what came back, the free count afterwards."""

    number: int
    call: str
    result: object  # what the student's function returned (or the exception it raised)
    shown: str  # the result as text: "Sequence(seq_id=1, kv_count=40)", "None", "-1", "0", ...
    ok: bool
    free_blocks: int | None

    def __str__(self) -> str:
        mark = "✓" if self.ok else "✗"
        free = "" if self.free_blocks is None else f"   [free blocks: {self.free_blocks}]"
        return f"{self.number:3d} {mark} {self.call} -> {self.shown}{free}"


def _describe(result) -> str:
    if isinstance(result, BaseException):
        return f"raised {type(result).__name__}: {result}"
    if isinstance(result, str):
        return result
    if result is None or isinstance(result, int):
        return repr(result)
    if hasattr(result, "seq_id") and hasattr(result, "kv_count"):
        return f"Sequence(seq_id={result.seq_id}, kv_count={result.kv_count})"
    return type(result).__name__


class Explorer:
    """Drive one engine over a fresh pool of `pool_blocks` blocks, step by step.

    `mm` is a memory_manager module; without one, `pagedlab.load("memory_manager", impl)` is
    used (impl None: the PAGEDLAB_IMPL environment variable, else exercises/).
    """

    def __init__(self, mm=None, pool_blocks: int = 64, impl=None):
        if isinstance(pool_blocks, bool) or not isinstance(pool_blocks, int):
            raise TypeError(f"pool_blocks must be an int, not {type(pool_blocks).__name__}")
        if not 1 <= pool_blocks <= 1024:
            raise ValueError(f"pool_blocks must be in 1..1024 (a picture has to fit), got {pool_blocks}")
        # A module the explorer loads itself is the student's: its functions run in this kernel,
        # so each one is first checked in a child process (a segfault there cannot hurt).
        self._guard_impl = impl if mm is None else False
        if mm is None:
            from .loader import load

            mm = load("memory_manager", impl)
        from .engine.pool import Pool

        self.mm = mm
        self.pool_blocks = pool_blocks
        self.pool = Pool(pool_blocks * BLOCK_SIZE)
        self.history: list[Step] = []
        self.focus: int | None = None  # the sequence whose block table is drawn
        self.engine = None
        self._widget = None
        self._init_engine()

    # ---------------------------------------------------------------------------- engine calls
    def _init_engine(self) -> None:
        if not self._checked(f"llm_init(pool, {self.pool.size})"):
            self.engine = None
            return
        from . import cmem

        self._heap = cmem.snapshot()  # before llm_init: what the harness frees without llm_destroy
        try:
            engine = self.mm.llm_init(self.pool.addr, self.pool.size)
        except Exception as exc:  # noqa: BLE001 - a student's bug is shown, not raised
            engine = None
            self._log(f"llm_init(pool, {self.pool.size})", exc, ok=False)
        else:
            self._log(f"llm_init(pool, {self.pool.size})", engine, ok=engine is not None)
        self.engine = engine

    def _free_blocks(self) -> int | None:
        try:
            return None if self.engine is None else int(self.engine.free_local_blocks)
        except Exception:  # noqa: BLE001
            return None

    def _log(self, call: str, result, *, ok: bool) -> Step:
        step = Step(len(self.history) + 1, call, result, _describe(result), ok, self._free_blocks())
        self.history.append(step)
        return step

    _TASK_OF = {"llm_init": "task1", "create_sequence": "task2", "free_sequence": "task2",
                "fork_sequence": "task3", "append_kv": "task4", "llm_destroy": "task5"}

    def _checked(self, call: str) -> bool:
        """False (and the reason logged) when the student's function is not safe to run here."""
        if self._guard_impl is False:
            return True
        from . import graded
        from .spec.catalog import CheckFailure

        task = self._TASK_OF.get(call.split("(", 1)[0])
        try:
            graded.require(*(t for t in ("task1", task) if t), impl=self._guard_impl)
        except CheckFailure as exc:
            self._log(call, str(exc), ok=False)
            return False
        return True

    def _call(self, call: str, fn, *args, failed=(None, -1)):
        if not self._checked(call):
            self.refresh()
            return None
        if self.engine is None:
            self._log(call, "no engine (llm_init returned None)", ok=False)
            self.refresh()
            return None
        try:
            result = fn(self.engine, *args)
        except Exception as exc:  # noqa: BLE001 - show the student's exception in the log
            self._log(call, exc, ok=False)
            self.refresh()
            return None
        self._log(call, result, ok=not any(result is f or (f is not None and result == f)
                                          for f in failed))
        self.refresh()
        return result

    def create(self, seq_id: int, n: int):
        """create_sequence(engine, seq_id, n): prefill `n` records."""
        self.focus = seq_id
        return self._call(f"create_sequence(engine, {seq_id}, {n})", self.mm.create_sequence,
                          seq_id, n)

    def fork(self, parent: int, child: int):
        """fork_sequence(engine, parent, child): the child shares every block of the parent."""
        self.focus = child
        return self._call(f"fork_sequence(engine, {parent}, {child})", self.mm.fork_sequence,
                          parent, child)

    def append(self, seq_id: int, value: int):
        """append_kv(engine, seq_id, value): one decode step (may take a block or copy one)."""
        self.focus = seq_id
        return self._call(f"append_kv(engine, {seq_id}, {value})", self.mm.append_kv,
                          seq_id, value)

    def free(self, seq_id: int):
        """free_sequence(engine, seq_id)."""
        return self._call(f"free_sequence(engine, {seq_id})", self.mm.free_sequence, seq_id)

    def reset(self) -> None:
        """Tear the engine down (llm_destroy), refill the pool and start a new engine."""
        self.history.clear()
        self._destroy()
        self.pool.reset()
        self.focus = None
        self._init_engine()
        self.refresh()

    def close(self) -> None:
        """llm_destroy the engine (the pool stays the explorer's)."""
        self._destroy()
        self.refresh()

    def _destroy(self) -> None:
        if self.engine is None:
            return
        if not self._checked("llm_destroy(engine)"):
            from .harness import hw3

            hw3.sweep(self._heap)  # the harness frees what this engine's calls allocated instead
            self.engine = None
            return
        try:
            result = self.mm.llm_destroy(self.engine)
        except Exception as exc:  # noqa: BLE001
            result = exc
        self.engine = None
        self._log("llm_destroy(engine)", result, ok=result == 0)

    # ---------------------------------------------------------------------------- inspection
    def history_text(self, last: int | None = None) -> str:
        steps = self.history if last is None else self.history[-last:]
        return "\n".join(str(s) for s in steps)

    def view(self):
        """A `pagedlab.viz.EngineView` snapshot of the engine (None without an engine)."""
        from . import viz

        return None if self.engine is None else viz.snapshot(self.engine)

    def figure(self):
        """The block map, and the block table of the focused sequence if it is active."""
        import matplotlib.pyplot as plt

        from . import viz

        view = self.view()
        if view is None:
            fig, ax = plt.subplots(figsize=(8, 1))
            ax.axis("off")
            ax.text(0, 0.5, "no engine: llm_init returned None or the engine was destroyed",
                    fontsize=10, va="center")
            return fig
        active = [s.seq_id for s in view.seqs]
        focus = self.focus if self.focus in active else (active[-1] if active else None)
        rows = -(-view.total_blocks // 16)
        heights = [0.62 * rows + 0.9] + ([6.5] if focus is not None else [])
        fig, axes = plt.subplots(len(heights), 1, figsize=(10, sum(heights)),
                                 gridspec_kw={"height_ratios": heights}, squeeze=False)
        viz.draw_pool(view, ax=axes[0][0])
        if focus is not None:
            viz.draw_block_table(view, focus, ax=axes[1][0])
        fig.tight_layout()
        return fig

    # ---------------------------------------------------------------------------- widget
    @property
    def widget(self):
        if self._widget is None:
            self._widget = self._build_widget()
            self.refresh()
        return self._widget

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    def _build_widget(self):
        import ipywidgets as w

        style = {"description_width": "initial"}
        self._seq_box = w.BoundedIntText(value=1, min=-(2**31), max=2**31 - 1,
                                         description="seq id", style=style,
                                         layout=w.Layout(width="140px"))
        self._num_box = w.BoundedIntText(value=20, min=-(2**31), max=2**31 - 1,
                                         description="length / value", style=style,
                                         layout=w.Layout(width="190px"))
        self._parent_box = w.BoundedIntText(value=1, min=-(2**31), max=2**31 - 1,
                                            description="fork from", style=style,
                                            layout=w.Layout(width="150px"))
        buttons = {
            "create": lambda _: self.create(self._seq_box.value, self._num_box.value),
            "fork": lambda _: self.fork(self._parent_box.value, self._seq_box.value),
            "append": lambda _: self.append(self._seq_box.value, self._num_box.value),
            "free": lambda _: self.free(self._seq_box.value),
            "reset": lambda _: self.reset(),
        }
        tips = {
            "create": "create_sequence(engine, seq id, length)",
            "fork": "fork_sequence(engine, fork from, seq id)",
            "append": "append_kv(engine, seq id, value)",
            "free": "free_sequence(engine, seq id)",
            "reset": "llm_destroy, then a fresh engine on a refilled pool",
        }
        row = []
        for name, action in buttons.items():
            b = w.Button(description=name, tooltip=tips[name],
                         button_style="warning" if name == "reset" else "",
                         layout=w.Layout(width="80px"))
            b.on_click(action)
            row.append(b)
        self._log_html = w.HTML()
        self._picture = w.Output()
        return w.VBox([w.HBox([self._seq_box, self._num_box, self._parent_box]), w.HBox(row),
                       self._log_html, self._picture])

    def refresh(self) -> None:
        """Redraw the picture and the log (only once the widget exists)."""
        if self._widget is None:
            return
        import matplotlib.pyplot as plt
        from IPython.display import display

        text = html.escape(self.history_text(last=12)) or "(no calls yet)"
        self._log_html.value = (f"<pre style='font-size:11px;line-height:1.25;margin:2px'>"
                                f"{text}</pre>")
        with self._picture:
            self._picture.clear_output(wait=True)
            fig = self.figure()
            display(fig)
            plt.close(fig)
