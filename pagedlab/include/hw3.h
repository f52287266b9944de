/* hw3.h: the HW3 memory manager's constants, structs and API (C11).
 *
 * The same layout as pagedlab.hw3 (the ctypes "header"), so the graded checks, the pictures and
 * the explorer read a C engine byte for byte like a Python one. On a 64-bit target:
 *   sizeof(struct list_node) == 16, sizeof(Sequence) == 40 with node at 24,
 *   sizeof(LLMEngine) == 40.
 * Nothing here depends on pagedlab: a student's llm_memory.c builds against this header with
 * plain gcc (and runs under Valgrind) as well as under `pagedlab grade`.
 */
#ifndef PAGEDLAB_HW3_H
#define PAGEDLAB_HW3_H

#include <stddef.h>

#define BLOCK_SIZE 64                              /* bytes per physical block */
#define KV_PER_BLOCK 16                            /* int KV records per block */
#define L1_PT_SIZE 16                              /* L2 pointers in an L1 table */
#define L2_PT_SIZE 16                              /* block ids in an L2 table */
#define MAX_LOGICAL_BLOCKS (L1_PT_SIZE * L2_PT_SIZE)  /* 256 per sequence */
#define UNMAPPED (-1)                              /* an L2 entry that maps no block */

struct list_node {
    struct list_node *prev;
    struct list_node *next;
};

typedef struct Sequence {
    int seq_id;
    int **block_table;      /* L1: L1_PT_SIZE pointers to L2 tables (NULL: none yet) */
    int kv_count;
    struct list_node node;  /* intrusive link on engine->active_seqs */
} Sequence;

typedef struct {
    void *pool_base_ptr;    /* owned by the caller, never freed here */
    int total_local_blocks;
    int free_local_blocks;
    int *ref_count;         /* total_local_blocks counters (calloc) */
    struct list_node active_seqs;  /* dummy head of a circular list */
} LLMEngine;

/* The exercise's stubs call this before they return: under pagedlab the call stops there and the
 * checks say "not implemented yet: Task N" (pl_heap.h defines it); built on its own it does
 * nothing, and the stub returns its NULL / -1. Delete the line when you write the task. */
#ifndef PL_NOT_IMPLEMENTED
#define PL_NOT_IMPLEMENTED(task) ((void)(task))
#endif

/* From a list node back to the struct that embeds it. */
#define container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))

LLMEngine *llm_init(void *pool_addr, size_t pool_size);                   /* Task 1 */
Sequence *create_sequence(LLMEngine *engine, int seq_id, int initial_kv_len);  /* Task 2 */
int free_sequence(LLMEngine *engine, int seq_id);                          /* Task 2 */
Sequence *fork_sequence(LLMEngine *engine, int parent_seq_id, int new_seq_id); /* Task 3 */
int append_kv(LLMEngine *engine, int seq_id, int kv_data);                 /* Task 4 */
int llm_destroy(LLMEngine *engine);                                        /* Task 5 */

#endif
