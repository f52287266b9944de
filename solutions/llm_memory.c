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
    // BEGIN SOLUTION Task 1: llm_init | (void)pool_addr; (void)pool_size; return NULL;
    if (pool_addr == NULL || pool_size < BLOCK_SIZE)
        return NULL;
    LLMEngine *engine = malloc(sizeof *engine);
    if (engine == NULL)
        return NULL;
    engine->pool_base_ptr = pool_addr;
    engine->total_local_blocks = (int)(pool_size / BLOCK_SIZE);
    engine->free_local_blocks = engine->total_local_blocks;
    engine->ref_count = calloc((size_t)engine->total_local_blocks, sizeof *engine->ref_count);
    if (engine->ref_count == NULL) {
        free(engine);
        return NULL;
    }
    list_init(&engine->active_seqs);
    return engine;
    // END SOLUTION
}

/* ---------------------------------------------------------------------------------------------
 * Task 2: creating and freeing sequences (plus the helpers Tasks 3-5 reuse)
 * ------------------------------------------------------------------------------------------- */

/* First-fit: claim the lowest block with ref_count 0 at or after `start` (ref 1, one fewer free
 * block). Callers check free_local_blocks first. A caller taking several blocks in a row may pass
 * the block it just took + 1: nothing below it became free in between. */
int take_block(LLMEngine *engine, int start)
{
    // BEGIN SOLUTION Task 2: take_block (first-fit) | (void)engine; (void)start; return -1;
    for (int block = start; block < engine->total_local_blocks; block++) {
        if (engine->ref_count[block] == 0) {
            engine->ref_count[block] = 1;
            engine->free_local_blocks--;
            return block;
        }
    }
    return -1;
    // END SOLUTION
}

/* One owner fewer for `block`; when the last owner goes, the block is free again. */
void drop_block(LLMEngine *engine, int block)
{
    // BEGIN SOLUTION Task 2: drop_block | (void)engine; (void)block; return;
    engine->ref_count[block]--;
    if (engine->ref_count[block] == 0)
        engine->free_local_blocks++;
    // END SOLUTION
}

/* A fresh L2 table: 16 ints, all -1 (malloc'd memory is garbage until written), or NULL. */
int *new_l2_table(void)
{
    // BEGIN SOLUTION Task 2: new_l2_table | return NULL;
    int *table = malloc(L2_PT_SIZE * sizeof *table);
    if (table == NULL)
        return NULL;
    for (int i = 0; i < L2_PT_SIZE; i++)
        table[i] = UNMAPPED;
    return table;
    // END SOLUTION
}

/* Prefill: a new sequence holding initial_kv_len records, all blocks mapped at once.
 * Check before allocate: NULL (nothing changed) if engine is NULL, initial_kv_len <= 0, seq_id is
 * active, or ceil(len / 16) blocks exceed 256 or free_local_blocks. Never write the pool here. */
Sequence *create_sequence(LLMEngine *engine, int seq_id, int initial_kv_len)
{
    // BEGIN SOLUTION Task 2: create_sequence | (void)engine; (void)seq_id; (void)initial_kv_len; return NULL;
    if (engine == NULL)
        return NULL;
    if (initial_kv_len <= 0 || find_sequence(engine, seq_id) != NULL)
        return NULL;
    /* ceil(len / 16) without len + 15, which overflows an int near INT_MAX */
    int needed = initial_kv_len / KV_PER_BLOCK + (initial_kv_len % KV_PER_BLOCK != 0);
    if (needed > MAX_LOGICAL_BLOCKS || needed > engine->free_local_blocks)
        return NULL;

    Sequence *seq = malloc(sizeof *seq);
    int **l1 = calloc(L1_PT_SIZE, sizeof *l1); /* 16 NULL L2 pointers */
    if (seq == NULL || l1 == NULL) {
        free(seq);
        free(l1);
        return NULL;
    }
    seq->seq_id = seq_id;
    seq->kv_count = initial_kv_len;
    seq->block_table = l1;
    int block = -1;
    for (int logical = 0; logical < needed; logical++) {
        int i = logical / L2_PT_SIZE, j = logical % L2_PT_SIZE;
        if (l1[i] == NULL)
            l1[i] = new_l2_table(); /* tiny: the tracked heap does not fail it */
        block = take_block(engine, block + 1);
        l1[i][j] = block;
    }
    list_add_tail(&seq->node, &engine->active_seqs);
    return seq;
    // END SOLUTION
}

/* Unlink seq, drop every block it maps, free each L2 table, the L1 table and seq. Visit all 16
 * L1 slots: a NULL slot may come before a mapped one. */
void destroy_sequence(LLMEngine *engine, Sequence *seq)
{
    // BEGIN SOLUTION Task 2: destroy_sequence | (void)engine; (void)seq; return;
    list_del(&seq->node);
    for (int i = 0; i < L1_PT_SIZE; i++) { /* never break at a NULL slot */
        int *l2 = seq->block_table[i];
        if (l2 == NULL)
            continue;
        for (int j = 0; j < L2_PT_SIZE; j++)
            if (l2[j] != UNMAPPED)
                drop_block(engine, l2[j]);
        free(l2);
    }
    free(seq->block_table);
    free(seq);
    // END SOLUTION
}

/* 0, or -1 (nothing changed) if engine is NULL or there is no sequence seq_id. */
int free_sequence(LLMEngine *engine, int seq_id)
{
    // BEGIN SOLUTION Task 2: free_sequence | (void)engine; (void)seq_id; return -1;
    if (engine == NULL)
        return -1;
    Sequence *seq = find_sequence(engine, seq_id);
    if (seq == NULL)
        return -1;
    destroy_sequence(engine, seq);
    return 0;
    // END SOLUTION
}

/* ---------------------------------------------------------------------------------------------
 * Task 3: fork (share every block, count the new owner)
 * ------------------------------------------------------------------------------------------- */

/* NULL (nothing changed) unless the parent exists and new_seq_id is unused. The child gets its
 * own Sequence and L1, and a new L2 (all -1, then the mapped entries copied) per non-NULL parent
 * L2; each inherited block gains one ref. Same kv_count; the child goes at the list tail. */
Sequence *fork_sequence(LLMEngine *engine, int parent_seq_id, int new_seq_id)
{
    // BEGIN SOLUTION Task 3: fork_sequence | (void)engine; (void)parent_seq_id; (void)new_seq_id; return NULL;
    if (engine == NULL)
        return NULL;
    Sequence *parent = find_sequence(engine, parent_seq_id);
    if (parent == NULL || find_sequence(engine, new_seq_id) != NULL)
        return NULL;

    Sequence *child = malloc(sizeof *child);
    int **l1 = calloc(L1_PT_SIZE, sizeof *l1);
    if (child == NULL || l1 == NULL) {
        free(child);
        free(l1);
        return NULL;
    }
    child->seq_id = new_seq_id;
    child->kv_count = parent->kv_count;
    child->block_table = l1;
    for (int i = 0; i < L1_PT_SIZE; i++) {
        int *from = parent->block_table[i];
        if (from == NULL)
            continue;
        int *to = new_l2_table();
        for (int j = 0; j < L2_PT_SIZE; j++) {
            if (from[j] != UNMAPPED) {
                to[j] = from[j];
                engine->ref_count[from[j]]++;
            }
        }
        l1[i] = to;
    }
    list_add_tail(&child->node, &engine->active_seqs);
    return child;
    // END SOLUTION
}

/* ---------------------------------------------------------------------------------------------
 * Task 4: append one KV record (address translation, new pages, copy-on-write)
 * ------------------------------------------------------------------------------------------- */

/* Store kv_data as record number kv_count. -1 if the sequence is missing or logical >= 256; -1
 * with nothing changed (no L2 either) if a block is needed and none is free. Copy-on-write copies
 * exactly BLOCK_SIZE bytes into a first-fit block and moves this sequence's reference there. */
int append_kv(LLMEngine *engine, int seq_id, int kv_data)
{
    // BEGIN SOLUTION Task 4: append_kv | (void)engine; (void)seq_id; (void)kv_data; return -1;
    if (engine == NULL)
        return -1;
    Sequence *seq = find_sequence(engine, seq_id);
    if (seq == NULL)
        return -1;
    int logical = seq->kv_count / KV_PER_BLOCK, offset = seq->kv_count % KV_PER_BLOCK;
    if (logical >= MAX_LOGICAL_BLOCKS)
        return -1;
    int i = logical / L2_PT_SIZE, j = logical % L2_PT_SIZE;

    /* Probe before touching anything: does this record need a block we do not have? */
    int *l2 = seq->block_table[i];
    int block = l2 ? l2[j] : UNMAPPED;
    int new_page = block == UNMAPPED;
    int copy_on_write = !new_page && engine->ref_count[block] > 1;
    if ((new_page || copy_on_write) && engine->free_local_blocks == 0)
        return -1;

    if (l2 == NULL) {
        l2 = new_l2_table();
        if (l2 == NULL)
            return -1;
        seq->block_table[i] = l2;
    }
    if (new_page) {
        block = take_block(engine, 0);
        l2[j] = block;
    } else if (copy_on_write) {
        int shared = block;
        block = take_block(engine, 0);
        memcpy(block_address(engine, block), block_address(engine, shared), BLOCK_SIZE);
        engine->ref_count[shared]--; /* still >= 1: the other owners keep it */
        l2[j] = block;
    }
    block_address(engine, block)[offset] = kv_data;
    seq->kv_count++;
    return 0;
    // END SOLUTION
}

/* ---------------------------------------------------------------------------------------------
 * Task 5: tear the engine down (the pool belongs to the caller)
 * ------------------------------------------------------------------------------------------- */

/* Free every remaining sequence, the ref-count array and the engine: 0 (-1 for NULL). Never free
 * the dummy head (it lives inside the engine) or the pool. */
int llm_destroy(LLMEngine *engine)
{
    // BEGIN SOLUTION Task 5: llm_destroy | (void)engine; return -1;
    if (engine == NULL)
        return -1;
    struct list_node *head = &engine->active_seqs;
    while (head->next != head)
        destroy_sequence(engine, container_of(head->next, Sequence, node));
    free(engine->ref_count);
    free(engine);
    return 0;
    // END SOLUTION
}
