/* llm_memory.c: HW3, a vLLM-style paged KV-cache memory manager, in C.
 *
 * The C twin of memory_manager.py: same structs (hw3.h), same rules, same graded checks.
 * `pagedlab.load("memory_manager", impl=FOLDER)` compiles this file when FOLDER has no
 * memory_manager.py; malloc/calloc/free then go through pagedlab's tracked heap, so a leak, a
 * double free or a crash is reported at the line of this file. It also builds on its own:
 *     gcc -std=c11 -Wall -Wextra -g -c llm_memory.c -I $(python -c "import pagedlab.engine.ctrack as c; print(c.INCLUDE)")
 *
 * The registry of live sequences is a Linux-style intrusive list: each Sequence embeds a
 * list_node, and container_of (hw3.h) turns a node back into its Sequence. The list helpers and
 * the lookup are given; Tasks 1-5 are yours.
 */
#include <stdlib.h>
#include <string.h>

#include "hw3.h"

/* ---------------------------------------------------------------------------------------------
 * Given: an intrusive circular doubly linked list through a dummy head (Linux list.h).
 * ------------------------------------------------------------------------------------------- */

void list_init(struct list_node *head)
{
    head->prev = head;
    head->next = head;
}

/* Insert `node` just before `head`, i.e. at the tail. */
void list_add_tail(struct list_node *node, struct list_node *head)
{
    struct list_node *last = head->prev;
    node->prev = last;
    node->next = head;
    last->next = node;
    head->prev = node;
}

void list_del(struct list_node *node)
{
    node->prev->next = node->next;
    node->next->prev = node->prev;
    node->prev = node->next = NULL;
}

/* The active Sequence with `seq_id`, or NULL. */
Sequence *find_sequence(LLMEngine *engine, int seq_id)
{
    struct list_node *head = &engine->active_seqs;
    for (struct list_node *node = head->next; node != head; node = node->next) {
        Sequence *seq = container_of(node, Sequence, node);
        if (seq->seq_id == seq_id)
            return seq;
    }
    return NULL;
}

/* Address of physical block `block` inside the pool. */
int *block_address(LLMEngine *engine, int block)
{
    return (int *)((char *)engine->pool_base_ptr + (size_t)block * BLOCK_SIZE);
}

/* ---------------------------------------------------------------------------------------------
 * Task 1: engine initialization
 * ------------------------------------------------------------------------------------------- */

/* NULL if pool_addr is NULL or pool_size < BLOCK_SIZE. total = free = pool_size / BLOCK_SIZE;
 * ref_count is a zeroed (calloc) array of total ints; active_seqs an empty circular list. */
LLMEngine *llm_init(void *pool_addr, size_t pool_size)
{
    // YOUR CODE HERE (Task 1: llm_init)
    PL_NOT_IMPLEMENTED("Task 1: llm_init");
    (void)pool_addr; (void)pool_size; return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Task 2: creating and freeing sequences (plus the helpers Tasks 3-5 reuse)
 * ------------------------------------------------------------------------------------------- */

/* First-fit: claim the lowest block with ref_count 0 at or after `start` (ref 1, one fewer free
 * block). Callers check free_local_blocks first. A caller taking several blocks in a row may pass
 * the block it just took + 1: nothing below it became free in between. */
int take_block(LLMEngine *engine, int start)
{
    // YOUR CODE HERE (Task 2: take_block (first-fit))
    PL_NOT_IMPLEMENTED("Task 2: take_block (first-fit)");
    (void)engine; (void)start; return -1;
}

/* One owner fewer for `block`; when the last owner goes, the block is free again. */
void drop_block(LLMEngine *engine, int block)
{
    // YOUR CODE HERE (Task 2: drop_block)
    PL_NOT_IMPLEMENTED("Task 2: drop_block");
    (void)engine; (void)block; return;
}

/* A fresh L2 table: 16 ints, all -1 (malloc'd memory is garbage until written), or NULL. */
int *new_l2_table(void)
{
    // YOUR CODE HERE (Task 2: new_l2_table)
    PL_NOT_IMPLEMENTED("Task 2: new_l2_table");
    return NULL;
}

/* Prefill: a new sequence holding initial_kv_len records, all blocks mapped at once.
 * Check before allocate: NULL (nothing changed) if engine is NULL, initial_kv_len <= 0, seq_id is
 * active, or ceil(len / 16) blocks exceed 256 or free_local_blocks. Never write the pool here. */
Sequence *create_sequence(LLMEngine *engine, int seq_id, int initial_kv_len)
{
    // YOUR CODE HERE (Task 2: create_sequence)
    PL_NOT_IMPLEMENTED("Task 2: create_sequence");
    (void)engine; (void)seq_id; (void)initial_kv_len; return NULL;
}

/* Unlink seq, drop every block it maps, free each L2 table, the L1 table and seq. Visit all 16
 * L1 slots: a NULL slot may come before a mapped one. */
void destroy_sequence(LLMEngine *engine, Sequence *seq)
{
    // YOUR CODE HERE (Task 2: destroy_sequence)
    PL_NOT_IMPLEMENTED("Task 2: destroy_sequence");
    (void)engine; (void)seq; return;
}

/* 0, or -1 (nothing changed) if engine is NULL or there is no sequence seq_id. */
int free_sequence(LLMEngine *engine, int seq_id)
{
    // YOUR CODE HERE (Task 2: free_sequence)
    PL_NOT_IMPLEMENTED("Task 2: free_sequence");
    (void)engine; (void)seq_id; return -1;
}

/* ---------------------------------------------------------------------------------------------
 * Task 3: fork (share every block, count the new owner)
 * ------------------------------------------------------------------------------------------- */

/* NULL (nothing changed) unless the parent exists and new_seq_id is unused. The child gets its
 * own Sequence and L1, and a new L2 (all -1, then the mapped entries copied) per non-NULL parent
 * L2; each inherited block gains one ref. Same kv_count; the child goes at the list tail. */
Sequence *fork_sequence(LLMEngine *engine, int parent_seq_id, int new_seq_id)
{
    // YOUR CODE HERE (Task 3: fork_sequence)
    PL_NOT_IMPLEMENTED("Task 3: fork_sequence");
    (void)engine; (void)parent_seq_id; (void)new_seq_id; return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Task 4: append one KV record (address translation, new pages, copy-on-write)
 * ------------------------------------------------------------------------------------------- */

/* Store kv_data as record number kv_count. -1 if the sequence is missing or logical >= 256; -1
 * with nothing changed (no L2 either) if a block is needed and none is free. Copy-on-write copies
 * exactly BLOCK_SIZE bytes into a first-fit block and moves this sequence's reference there. */
int append_kv(LLMEngine *engine, int seq_id, int kv_data)
{
    // YOUR CODE HERE (Task 4: append_kv)
    PL_NOT_IMPLEMENTED("Task 4: append_kv");
    (void)engine; (void)seq_id; (void)kv_data; return -1;
}

/* ---------------------------------------------------------------------------------------------
 * Task 5: tear the engine down (the pool belongs to the caller)
 * ------------------------------------------------------------------------------------------- */

/* Free every remaining sequence, the ref-count array and the engine: 0 (-1 for NULL). Never free
 * the dummy head (it lives inside the engine) or the pool. */
int llm_destroy(LLMEngine *engine)
{
    // YOUR CODE HERE (Task 5: llm_destroy)
    PL_NOT_IMPLEMENTED("Task 5: llm_destroy");
    (void)engine; return -1;
}
