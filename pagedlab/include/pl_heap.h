/* pl_heap.h: force-included (gcc -include) by pagedlab when it builds a student's C file.
 *
 * It routes malloc/calloc/realloc/free through pagedlab's tracked heap (pagedlab.cmem), passing
 * the caller's file, line and function, so leaks, double frees and frees of bad pointers are
 * reported at the C line, the way Valgrind would. The libc headers come first: the macros must
 * not rename libc's own prototypes, and later #includes of them are no-ops.
 */
#ifndef PAGEDLAB_PL_HEAP_H
#define PAGEDLAB_PL_HEAP_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h> /* declared now, so a student's own #include <malloc.h> meets no macro */
#endif

void *pl_malloc(size_t size, const char *file, int line, const char *func);
void *pl_calloc(size_t count, size_t size, const char *file, int line, const char *func);
void *pl_realloc(void *ptr, size_t size, const char *file, int line, const char *func);
void pl_free(void *ptr, const char *file, int line, const char *func);

/* exit() would end the Python process (a notebook's kernel): it ends the call instead. Output
 * goes to Python's sys.stdout / sys.stderr, so printf debugging shows up in a notebook. */
#include <stdio.h>
void pl_exit(int code, const char *file, int line, const char *func);
int pl_printf(const char *format, ...);
int pl_fprintf(FILE *stream, const char *format, ...);
int pl_puts(const char *text);
int pl_putchar(int c);

/* A stub's PL_NOT_IMPLEMENTED("Task N: ...") (hw3.h): the call ends there, reported as not
 * implemented yet, like memory_manager.py's raise NotImplementedError. */
void pl_not_implemented(const char *task, const char *file, int line, const char *func);
#define PL_NOT_IMPLEMENTED(task) pl_not_implemented((task), __FILE__, __LINE__, __func__)

#define exit(code) pl_exit((code), __FILE__, __LINE__, __func__)
#define printf(...) pl_printf(__VA_ARGS__)
#define fprintf(...) pl_fprintf(__VA_ARGS__)
#define puts(text) pl_puts(text)
#define putchar(c) pl_putchar(c)
#define malloc(size) pl_malloc((size), __FILE__, __LINE__, __func__)
#define calloc(count, size) pl_calloc((count), (size), __FILE__, __LINE__, __func__)
#define realloc(ptr, size) pl_realloc((ptr), (size), __FILE__, __LINE__, __func__)
#define free(ptr) pl_free((ptr), __FILE__, __LINE__, __func__)

#endif
