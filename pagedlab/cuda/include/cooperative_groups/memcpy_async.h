// pagedlab CPU executor: <cooperative_groups/memcpy_async.h> is not supported (no asynchronous
// copies on the CPU); copy with plain loads and stores and a block.sync().
#pragma once
#error "cooperative_groups/memcpy_async.h is not supported by pagedlab's CPU executor: copy with a loop and block.sync()"
