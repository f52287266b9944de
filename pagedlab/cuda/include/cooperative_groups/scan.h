// pagedlab CPU executor: <cooperative_groups/scan.h> for tiles (at most a warp): inclusive and
// exclusive scans by shfl_up steps (Hillis-Steele), the same sequence of operations in every
// schedule. exclusive_scan's first thread gets T() (0 for numbers).
#pragma once
#include "reduce.h"

namespace cooperative_groups {
template <class T, class Op = plus<T>>
T inclusive_scan(const thread_group& g, T v, Op op = Op(), details::where at = details::where::current()) {
    unsigned r = g.thread_rank();
    for (unsigned d = 1; d < g.size(); d *= 2) {
        T other = g.shfl_up(v, d, at);
        if (r >= d) v = op(other, v);
    }
    return v;
}
template <class T, class Op = plus<T>>
T exclusive_scan(const thread_group& g, T v, Op op = Op(), details::where at = details::where::current()) {
    T inc = inclusive_scan(g, v, op, at);
    T prev = g.shfl_up(inc, 1, at);
    return g.thread_rank() == 0 ? T() : prev;
}
}  // namespace cooperative_groups
