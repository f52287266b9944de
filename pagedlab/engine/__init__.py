"""The C memory model the HW3 structs live in, and the C track's engine.

    pool       the harness's pool of raw bytes (magic-filled, guard zones)
    carena     the arena shared with the C runner process, mapped at one address in both
    ctrack     load a student's llm_memory.c as the memory_manager module (the facade), built on
    cbuild       compiling it and the tracked-heap runtime (the system C compiler)
    heap         the tracked heap: malloc/free hooks, guard bytes, use-after-free
    wire         the runner process's wire format (the student's library runs there, no Python)
    cframes      C frames and faults at the student's file and line
    cnative    the same file on the real allocator under Valgrind or ASan (a second opinion)
"""
