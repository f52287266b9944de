"""The pictures read the real engine: a snapshot follows the list and the block tables, and the
pool map points at ref counts that disagree with the tables (headless, Agg backend)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from pagedlab import viz  # noqa: E402
from pagedlab.checks import scenes  # noqa: E402
from pagedlab.harness import hw3  # noqa: E402
from pagedlab.pool import Pool  # noqa: E402


@pytest.fixture
def engine():
    pool = Pool(32 * hw3.BLOCK_SIZE)
    eng = scenes.engine(pool, [(7, 40, [4, 1, 9]),                  # scattered blocks
                               (3, 20 * 16, {0: 2, 17: 11}),        # an L1 hole: slot 1 only
                               (8, 40, [4, 1, 9])])                 # shares seq 7's blocks
    yield eng
    hw3.release(eng)
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
