"""The C memory model under the HW3 engine: struct layouts, the tracked heap, the pool and the
block-table bridge (spec §4.1, §4.4)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from pagedlab import block_tables, cmem
from pagedlab.engine.pool import GUARD_BYTES, Pool, magic_word
from pagedlab.harness import hw3
from pagedlab.loader import load


# -- §4.1 layouts ------------------------------------------------------------------------------
@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="layout figures are for 64-bit")
def test_struct_layouts_match_the_c_header():
    assert (hw3.ListNode.prev.offset, hw3.ListNode.next.offset, ctypes.sizeof(hw3.ListNode)) == (0, 8, 16)
    assert [(n, getattr(hw3.Sequence, n).offset) for n, _ in hw3.Sequence._fields_] == [
        ("seq_id", 0), ("block_table", 8), ("kv_count", 16), ("node", 24)]
    assert ctypes.sizeof(hw3.Sequence) == 40
    assert [n for n, _ in hw3.LLMEngine._fields_] == [
        "pool_base_ptr", "total_local_blocks", "free_local_blocks", "ref_count", "active_seqs"]
    assert [getattr(hw3.LLMEngine, n).offset for n, _ in hw3.LLMEngine._fields_] == [0, 8, 12, 16, 24]
    assert ctypes.sizeof(hw3.LLMEngine) == 40
    assert hw3.offsetof(hw3.Sequence, "node") == 24


def test_constants():
    assert (hw3.BLOCK_SIZE, hw3.KV_PER_BLOCK, hw3.L1_PT_SIZE, hw3.L2_PT_SIZE, hw3.MAX_LOGICAL_BLOCKS) == (64, 16, 16, 16, 256)
    assert hw3.KV_PER_BLOCK * ctypes.sizeof(ctypes.c_int32) == hw3.BLOCK_SIZE


def test_pointer_fields_read_like_c():
    seq = cmem.new(hw3.Sequence)
    try:
        seq.block_table = cmem.calloc_array(hw3.L1_PT_SIZE, hw3.IntPtr)
        assert not seq.block_table[3]                     # NULL L2 pointer is falsy
        l2 = cmem.malloc_array(hw3.L2_PT_SIZE, ctypes.c_int)
        for i in range(16):
            l2[i] = -1
        seq.block_table[3] = l2
        seq.block_table[3][7] = 42
        assert seq.block_table[3] and seq.block_table[3][7] == 42 and seq.block_table[3][6] == -1
        cmem.free(seq.block_table[3])
        cmem.free(seq.block_table)
    finally:
        cmem.free(seq)


# -- the tracked heap --------------------------------------------------------------------------
def test_live_allocations_say_where_and_how_much():
    snap = cmem.snapshot()
    a = cmem.malloc(24)
    b = cmem.calloc(4, 8)
    live = {x.address: x for x in cmem.changes_since(snap).allocated}
    assert live[a].size == 24 and live[b].size == 32
    assert "test_engine_memory.py" in live[a].where and "test_live_allocations" in live[a].where
    assert cmem.live_bytes() >= 56
    assert "56 bytes in 2 blocks are definitely lost" in cmem.leak_report(snap)
    cmem.free(a)
    cmem.free(b)
    assert not cmem.changes_since(snap).allocated
    assert "0 bytes lost" in cmem.leak_report(snap)


def test_malloc_is_uninitialised_and_calloc_zeroed():
    a, b = cmem.malloc(16), cmem.calloc(2, 8)
    assert ctypes.string_at(a, 16) == b"\xcd" * 16
    assert ctypes.string_at(b, 16) == b"\x00" * 16
    cmem.free(a)
    cmem.free(b)


def test_double_free_and_unknown_free_are_reported():
    a = cmem.malloc(8)
    cmem.free(a)
    with pytest.raises(cmem.DoubleFree, match="already freed"):
        cmem.free(a)
    with pytest.raises(cmem.InvalidFree, match="never returned"):
        cmem.free(12345678)
    b = cmem.malloc(40)
    with pytest.raises(cmem.InvalidFree, match="interior pointer"):
        cmem.free(b + 24)
    cmem.free(b)
    cmem.free(None)       # free(NULL) is a no-op, as in C
    cmem.free(0)


def test_freed_memory_is_poisoned_and_use_after_free_is_reported():
    refs = cmem.calloc_array(8, ctypes.c_int)
    refs[2] = 5
    addr = cmem.address(refs)
    cmem.free(refs)
    assert ctypes.string_at(addr, 32) == b"\xdd" * 32
    with pytest.raises(cmem.UseAfterFree, match="freed at"):
        refs[2]
    with pytest.raises(cmem.UseAfterFree):
        refs[2] = 1


def test_checked_pointers_refuse_null_out_of_bounds_and_garbage():
    table = cmem.calloc_array(16, hw3.IntPtr)
    with pytest.raises(cmem.NullPointer):
        table[0][0]
    with pytest.raises(cmem.InvalidAccess, match="out of bounds"):
        table[16]
    with pytest.raises(cmem.InvalidAccess, match="out of bounds"):
        table[-1]
    junk = cmem.malloc_array(16, hw3.IntPtr)               # never initialised: 0xcd...
    with pytest.raises(cmem.InvalidAccess, match="uninitialised"):
        junk[0][0]
    cmem.free(junk)
    cmem.free(table)


def test_view_checks_the_memory_is_live():
    seq = cmem.new(hw3.Sequence)
    addr = ctypes.addressof(seq)
    assert ctypes.addressof(cmem.view(hw3.Sequence, addr)) == addr
    with pytest.raises(cmem.InvalidAccess):
        cmem.view(hw3.Sequence, addr + 8)                  # runs past the 40-byte block
    cmem.free(seq)
    with pytest.raises(cmem.UseAfterFree):
        cmem.view(hw3.Sequence, addr)


def test_heap_changes_count_calls_even_when_freed_again():
    snap = cmem.snapshot()
    cmem.free(cmem.malloc(64))
    changes = cmem.changes_since(snap)
    assert changes.mallocs == 1 and changes.frees == 1 and not changes.allocated and changes


@pytest.mark.parametrize("bad", [-1, 2.5, "8", None])
def test_malloc_validates_size(bad):
    with pytest.raises((TypeError, ValueError), match="size"):
        cmem.malloc(bad)


# -- the pool ----------------------------------------------------------------------------------
def test_pool_is_prefilled_with_a_per_word_magic_pattern():
    pool = Pool(64 * 5 + 10)
    assert pool.num_blocks == 5 and pool.size == 330
    assert pool.words(3) == [magic_word(3, w) for w in range(16)]
    assert len({w for b in range(5) for w in pool.words(b)}) == 80   # every word distinct
    assert pool.addr % 16 == 0 and pool.guard_intact()


def test_pool_diff_names_blocks_words_and_guard_damage():
    pool = Pool(64 * 4)
    before = pool.snapshot()
    ctypes.c_int32.from_address(pool.addr + 2 * 64 + 5 * 4).value = 613
    diff = pool.diff(before)
    assert diff.blocks == [2] and diff.words == ((2, 5, magic_word(2, 5), 613),)
    assert "block 2 word 5" in str(diff)
    ctypes.c_uint8.from_address(pool.addr + pool.size).value = 0
    assert pool.diff(before).guard_damaged and not pool.guard_intact()
    assert GUARD_BYTES >= 64


def test_pool_rejects_bad_sizes():
    with pytest.raises(ValueError):
        Pool(-64)
    with pytest.raises(TypeError):
        Pool(64.0)


# -- §4.4 bridge -------------------------------------------------------------------------------
@pytest.fixture
def engine_with_sequences():
    mm = load("memory_manager", "solutions")
    pool = Pool(64 * 64)
    engine = mm.llm_init(pool.addr, pool.size)
    assert mm.create_sequence(engine, 10, 40) is not None     # blocks 0-2
    assert mm.create_sequence(engine, 20, 300) is not None    # blocks 3-21
    assert mm.fork_sequence(engine, 10, 30) is not None
    assert mm.append_kv(engine, 30, 7) == 0                   # CoW: block 2 -> 22
    yield mm, engine
    assert mm.llm_destroy(engine) == 0


def test_block_table_rows_in_list_order_padded(engine_with_sequences):
    _, engine = engine_with_sequences
    rows = block_tables.block_table_rows(engine)
    assert rows.dtype == np.int32 and rows.shape == (3, 19)
    assert rows[0].tolist() == [0, 1, 2] + [-1] * 16
    assert rows[1].tolist() == list(range(3, 22))
    assert rows[2].tolist() == [0, 1, 22] + [-1] * 16
    assert block_tables.seq_lens(engine).tolist() == [40, 300, 41]
    assert [s.seq_id for s in block_tables.sequences(engine)] == [10, 20, 30]


def test_block_table_rows_in_the_order_asked(engine_with_sequences):
    _, engine = engine_with_sequences
    rows = block_tables.block_table_rows(engine, seq_ids=[30, 10], max_blocks_per_seq=5)
    assert rows.tolist() == [[0, 1, 22, -1, -1], [0, 1, 2, -1, -1]]
    assert block_tables.seq_lens(engine, [30, 10]).tolist() == [41, 40]


def test_block_table_rows_validate(engine_with_sequences):
    _, engine = engine_with_sequences
    with pytest.raises(ValueError, match="no active sequence with id 99"):
        block_tables.block_table_rows(engine, seq_ids=[99])
    with pytest.raises(ValueError, match="max_blocks_per_seq=4"):
        block_tables.block_table_rows(engine, max_blocks_per_seq=4)
    with pytest.raises(ValueError, match=">= 1"):
        block_tables.block_table_rows(engine, max_blocks_per_seq=0)
    with pytest.raises(TypeError):
        block_tables.block_table_rows(engine, max_blocks_per_seq=2.0)


def test_block_table_rows_drive_a_gather_of_the_pool(engine_with_sequences):
    """The rows address the pool exactly as append_kv wrote it."""
    mm, engine = engine_with_sequences
    for k in range(30):
        assert mm.append_kv(engine, 20, 1000 + k) == 0
    row = block_tables.block_table_rows(engine, [20])[0]
    words = np.ctypeslib.as_array((ctypes.c_int32 * (64 * 16)).from_address(engine.pool_base_ptr))
    got = [int(words[row[p // 16] * 16 + p % 16]) for p in range(300, 330)]
    assert got == [1000 + k for k in range(30)]


def test_container_of_and_the_naive_cast(engine_with_sequences):
    _, engine = engine_with_sequences
    first = engine.active_seqs.next.contents
    seq = hw3.container_of(first)
    assert seq.seq_id == 10 and ctypes.addressof(seq) == ctypes.addressof(first) - 24
    wrong = hw3.naive_cast(first)
    prev = cmem.address(first.prev)
    assert wrong.seq_id == ctypes.c_int32(prev & 0xFFFFFFFF).value     # low half of node.prev
    assert cmem.address(wrong.block_table) == cmem.address(first.next)  # node.next as int**


@pytest.mark.parametrize("call, bad", [
    ("create_sequence", ("7", 5)), ("create_sequence", (1, 2.5)), ("create_sequence", (2**40, 5)),
    ("create_sequence", (True, 5)), ("fork_sequence", (1, "2")), ("append_kv", (1, 2**31)),
    ("append_kv", (1, 1.0)),
])
def test_reference_rejects_what_a_c_int_cannot_hold(call, bad):
    """HW3 functions return None / -1 on bad input and change nothing (no TypeError)."""
    mm = load("memory_manager", "solutions")
    pool = Pool(64 * 8)
    engine = mm.llm_init(pool.addr, pool.size)
    assert mm.create_sequence(engine, 1, 20) is not None
    before, heap = hw3.state(engine), cmem.snapshot()
    got = getattr(mm, call)(engine, *bad)
    assert got is None or got == -1
    assert hw3.state(engine) == before and not cmem.changes_since(heap)
    assert mm.llm_destroy(engine) == 0


def test_reference_llm_init_rejects_non_integers():
    mm = load("memory_manager", "solutions")
    pool = Pool(64 * 8)
    assert mm.llm_init(str(pool.addr), pool.size) is None
    assert mm.llm_init(pool.addr, float(pool.size)) is None


def test_reading_through_a_freed_sequence_is_a_use_after_free():
    mm = load("memory_manager", "solutions")
    pool = Pool(64 * 8)
    engine = mm.llm_init(pool.addr, pool.size)
    seq = mm.create_sequence(engine, 1, 20)
    assert mm.free_sequence(engine, 1) == 0
    assert seq.kv_count == cmem.FREED_INT                  # the poison shows in plain fields
    with pytest.raises(cmem.UseAfterFree):
        seq.block_table[0]                                 # following its pointer is reported
    assert mm.llm_destroy(engine) == 0
