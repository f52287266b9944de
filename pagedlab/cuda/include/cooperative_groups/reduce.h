// pagedlab CPU executor: <cooperative_groups/reduce.h>. Every thread of the group gets the same,
// bit-identical result: tiles combine by an xor butterfly (commutative operators give equal
// values in all lanes), coalesced groups fold the members' values in rank order.
#pragma once
#include "../cooperative_groups.h"

namespace cooperative_groups {
template <class T = void> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T = void> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T = void> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T = void> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T = void> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T = void> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };

template <class T, class Op>
T reduce(const thread_group& g, T v, Op op, details::where at = details::where::current()) {
    for (unsigned m = g.size() / 2; m > 0; m /= 2) v = op(v, g.shfl_xor(v, m, at));
    return v;
}
template <class T, class Op>
T reduce(const coalesced_group& g, T v, Op op, details::where at = details::where::current()) {
    T acc = g.shfl(v, 0, at);
    for (unsigned r = 1; r < g.size(); ++r) acc = op(acc, g.shfl(v, (int)r, at));
    return acc;
}
}  // namespace cooperative_groups
