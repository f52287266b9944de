"""The pictures read the real engine: a snapshot follows the list and the block tables, and the
pool map points at ref counts that disagree with the tables (headless, Agg backend)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from pagedlab import cmem, viz  # noqa: E402
from pagedlab.drivers import scenes  # noqa: E402
from pagedlab.engine.pool import Pool  # noqa: E402
from pagedlab.harness import hw3  # noqa: E402


@pytest.fixture
def engine():
    pool = Pool(32 * hw3.BLOCK_SIZE)
    heap = cmem.snapshot()
    eng = scenes.engine(pool, [(7, 40, [4, 1, 9]),                  # scattered blocks
                               (3, 20 * 16, {0: 2, 17: 11}),        # an L1 hole: slot 1 only
                               (8, 40, [4, 1, 9])])                 # shares seq 7's blocks
    yield eng
    hw3.sweep(heap)
    plt.close("all")


def test_snapshot_follows_list_order_and_both_table_levels(engine):
    view = viz.snapshot(engine)
    assert [s.seq_id for s in view.seqs] == [7, 3, 8]
    assert view.seq(7).mapping == {0: 4, 1: 1, 2: 9}
    assert view.seq(3).mapping == {0: 2, 17: 11}
    assert view.seq(3).l1[1][1] == 11 and view.seq(3).l1[2] is None
    assert view.owners()[4] == [(7, 0), (8, 0)]
    assert view.ref_count[4] == 2 and view.free_blocks == 32 - 5


def test_pool_map_flags_a_ref_count_that_disagrees_with_the_tables(engine):
    ax = viz.draw_pool(engine)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "ref count ≠ table entries" not in labels
    assert "×2" in [t.get_text() for t in ax.texts], "a shared block must show its ref count"
    engine.ref_count[20] = 1                                    # a leaked block
    labels = [t.get_text() for t in viz.draw_pool(engine).get_legend().get_texts()]
    assert "ref count ≠ table entries" in labels


def test_block_table_draws_l2_rows_only_for_non_null_l1_slots(engine):
    ax = viz.draw_block_table(engine, 3, highlight=(1, 1))
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("ptr") == 2 and texts.count("NULL") == 14
    assert "11" in texts and "2" in texts
    compact = [t.get_text() for t in viz.draw_block_table(engine, 3, compact=True).texts]
    assert compact.count("NULL") == 1 and any("L1 slots 3–15" in t for t in compact)


def test_attention_check_refuses_mismatched_shapes():
    import numpy as np

    with pytest.raises(ValueError, match="shapes differ"):
        viz.draw_attention_check(np.ones((2, 4, 8)), np.ones((2, 4, 16)))


@pytest.fixture
def fresh_colours(monkeypatch):
    monkeypatch.setattr(viz, "_ASSIGNED", {})


def test_sequences_drawn_together_never_share_a_colour(fresh_colours):
    """Notebook 10 after swap_out: seq 4 (moved to the CPU) beside seq 100 (16 * 6 + 4) were both
    brown. A picture's owners, and a session's first 16 sequences, each get their own colour."""
    S = viz.SeqView.from_blocks
    gpu = viz.EngineView(16, 8, [1] * 8 + [0] * 8, [S(4, [0, 1, 2]), S(20, [3, 4]), S(1, [5, 6, 7])])
    cpu = viz.EngineView(12, 6, [1] * 6 + [0] * 6, [S(100, [1, 3, 4]), S(4, [0, 2, 5])])
    fig, (a, b) = plt.subplots(1, 2)
    viz.draw_pool(gpu, ax=a)
    viz.draw_pool(cpu, ax=b)
    legend = {}
    for ax in (a, b):
        for handle, text in zip(ax.get_legend().legend_handles, ax.get_legend().get_texts(), strict=True):
            legend.setdefault(text.get_text().split(" (")[0], set()).add(matplotlib.colors.to_hex(handle.get_facecolor()))
    seqs = {name: colours for name, colours in legend.items() if name.startswith("seq")}
    assert all(len(c) == 1 for c in seqs.values()), f"a sequence changed colour between pictures: {seqs}"
    colours = [next(iter(c)) for c in seqs.values()]
    assert len(set(colours)) == len(colours) == 4, seqs
    viz._ASSIGNED.clear()  # a new session: its first 16 sequences, whatever their ids
    assert len({viz.seq_color(i) for i in (0, 16, 32, *range(200, 213))}) == 16
    # Past the palette, one picture still keeps its owners apart.
    many = viz.EngineView(24, 0, [1] * 24, [S(300 + k, [k]) for k in range(16)])
    assert len(set(viz.distinct_colors(s.seq_id for s in many.seqs).values())) == 16


def test_text_on_every_block_colour_reads_at_least_4_5_to_1(fresh_colours):
    """Small block numbers in white on orange (2.5:1) or in grey on a shared brown block (1.3:1)
    were hard to read: each label takes black or white by contrast with what lies under it."""
    for face in [viz.FREE_COLOR, *viz._PALETTE]:
        assert viz.contrast(viz.ink(face), face) >= 4.5, face
    S = viz.SeqView.from_blocks
    view = viz.EngineView(16, 12, [2, 1, 1, 1] + [0] * 12,
                          [S(4, [0, 1]), S(1, [0, 2]), S(3, [3])])  # block 0 shared by brown and orange
    ax = viz.draw_pool(view, cols=16)
    colour = viz.distinct_colors([4, 1, 3])
    owners = view.owners()
    numbers = {t.get_text(): t for t in ax.texts if t.get_position()[1] > 0.9}
    for block in range(4):
        under = colour[owners[block][0][0]]
        text = matplotlib.colors.to_hex(numbers[str(block)].get_color())
        assert viz.contrast(text, under) >= 4.5, (block, text, under)
