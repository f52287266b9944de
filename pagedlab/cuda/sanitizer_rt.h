// pagedlab CPU executor: the sanitizer (racecheck, memcheck, initcheck) and the memory-access
// profile. Included twice by runtime.cpp:
//   PL_SAN_PART 1, inside runtime.cpp's anonymous namespace (after Worker): state and logic;
//   PL_SAN_PART 2, inside its extern "C" section: the __tsan_* entry points.
//
// How accesses are seen: a checked kernel is compiled with -fsanitize=thread, but linked without
// the ThreadSanitizer runtime. The compiler then calls __tsan_read4(addr) etc. before every
// memory access of the kernel, and this file provides those functions: each call classifies
// the address (shared memory = the kernel library's thread-local block; a launch argument; a
// fiber stack; runtime-owned memory) and checks it. The caller's return address names the
// instruction, which Python maps to a .cu line with addr2line.
//
// Races are judged with CUDA's ordering rules, not with the order this run happened to take:
// within one barrier interval ("epoch") threads of different warps are never ordered; lanes of
// one warp are ordered only by a completed warp operation (__syncwarp, shuffles, votes) that
// both took part in. So whether a race exists does not depend on the schedule; Python re-runs a
// failed launch under one canonical schedule so the report itself does not either.

#if PL_SAN_PART == 1
[[noreturn]] void fail_and_park(Worker* w);

// Back to the block's scheduler, the fiber staying runnable (no barrier, no guard check).
inline void yield_fiber(Worker* w) {
#ifdef PL_FIBER_ASM
    pl_switch(&w->fibers[w->cur].sp, w->sched_sp);
#else
    swapcontext(&w->ucs[w->cur], &w->sched_uc);
#endif
}

namespace san {

constexpr int MAX_RANGES = 96;
// R_GUARD: lo/hi are offsets in the TLS block of a C++ guard variable (a __shared__ array of a
// class type gets one); the compiler reads it, no kernel thread does: never uninitialised.
// R_ARG_RO: an argument behind a `const T*`: checked for bounds, not shadowed for races (the
// runner reads it in place; a write through a cast-away const is lost anyway).
enum RangeKind : int32_t { R_ARG = 0, R_IGNORE = 1, R_GUARD = 2, R_ARG_RO = 3 };
enum Report_kind : int32_t { REP_NONE = 0, REP_RACE = 1, REP_OOB_GLOBAL = 2, REP_UNINIT = 3,
                             REP_OOB_SHARED = 4, REP_RACE_GLOBAL = 5 };
enum Hazard : int32_t { HZ_RAW = 1, HZ_WAR = 2, HZ_WAW = 3 };
enum Access : int { A_READ = 0, A_WRITE = 1, A_ATOMIC = 2, A_ATOMIC_LOAD = 3, A_ATOMIC_STORE = 4 };

struct Range { uint64_t lo, hi; int32_t index, kind; };

// Keep the four structs below in sync with pagedlab/cuda/sanitizer.py.
struct Report {
    int32_t kind, hazard;
    int32_t block[3];
    int32_t tid, other_tid, other_warp;  // other_tid -1: some lane of warp other_warp
    int32_t write, other_write, size, atomic;
    uint64_t addr, offset;               // offset: byte in the __shared__ (TLS) block
    uint64_t pc, other_pc;               // return addresses, relative to the kernel library
    int32_t other_block, arg;            // global races: the other thread's block (linear
                                         // index), the argument holding the address
};

struct ProfEntry {
    uint64_t pc;
    int32_t space, access;               // space 1 global, 2 shared; access as enum Access
    uint64_t requests, sectors, ideal, ways, max_ways, lanes;
};

struct ProfHeader { int32_t count, cap, overflow, pad; };

struct Config {
    int32_t race, mem, init, profile;
    int32_t nranges, status;             // status: the Diag status a report sets
    int32_t interleave, pad;             // interleave: switch fibers before global accesses
    Range ranges[MAX_RANGES];
    Report* report;
    ProfHeader* prof;
    ProfEntry* entries;
};

Config* g_cfg = nullptr;  // set by pl_san_configure before a launch; read-only during it

// Shadow of one byte of __shared__ memory. Thread fields hold thread index + 1 (0: none);
// clocks are the warp-operation clocks of the lanes (see warp_sync).
struct Cell {
    uint32_t epoch, init;                // epoch of the fields below; block that wrote it
    uint16_t wt, ra, rb, many;           // last writer; two latest readers; 3+ readers seen
    uint32_t wclk, raclk, rbclk, rwarps; // rwarps: bit per warp that read in this epoch
    uint32_t wpc, rapc, rbpc;
    uint16_t watomic, split;             // the last write was an atomic; word mode: split
};

struct Row { uint64_t addr[32]; uint32_t mask, size; };
struct PcRows {
    uint32_t cnt[32] = {};
    int32_t space = 0, access = 0;
    uint32_t base = 0;                   // rows[0] is request number `base`
    std::vector<Row> rows;
};
constexpr size_t MAX_ROWS = 4096;      // per instruction and warp; older requests are folded in
constexpr uint32_t LEAD = 16;          // how far one lane may run ahead while profiling
struct Agg { uint64_t requests = 0, sectors = 0, ideal = 0, ways = 0, max_ways = 0, lanes = 0; };

struct State {
    Config cfg{};                        // a copy: the launch's settings stay valid here
    uintptr_t sh_lo = 0, sh_size = 0;    // all __shared__ memory of the block (TLS block)
    uintptr_t st_lo = 0, st_size = 0;    // fiber stacks: locals, never checked
    uintptr_t ctx_lo = 0, ctx_size = 0;  // Fiber records: what threadIdx & co. read
    uintptr_t tp = 0;                    // &pl_cur
    uintptr_t lib_base = 0;
    std::vector<std::pair<uintptr_t, uintptr_t>> lib;  // kernel library: __device__ data etc.
    int ndyn = 0;
    uint64_t dyn_off[MAX_DYN] = {}, dyn_cap[MAX_DYN] = {};
    Cell* shadow = nullptr;              // one cell per byte (split words)
    size_t shadow_bytes = 0;
    Cell* words = nullptr;               // one cell per 4-byte word
    size_t words_bytes = 0;
    std::vector<uint32_t> lclk, wclk;
    uint32_t epoch = 0, block = 0;
    uint32_t gblock = 0;                 // linear index + 1 of the running block (global races)
    int last_range = 0;                  // the Config range the last global access fell in
    // The range each instruction hit last: an instruction almost always reads one argument
    // (a kernel alternating between two arrays defeats last_range alone).
    struct RangeHint { uintptr_t pc; uint64_t lo, hi; int32_t range, kind; };  // a copy: one load
    RangeHint hints[256] = {};
    bool fast_hints = false;             // no profile, no interleaving: hints may return early
    uint8_t my_fences = 0;               // __threadfence() calls of the running block (fences_of)
    std::vector<std::pair<uint64_t, uint64_t>> guards;  // TLS offsets [lo, hi) of guard variables
    bool pending = false;                // first read of unwritten shared memory, not yet raised
    Report pend{};
    // A write-after-write not yet judged: compute-sanitizer rates a hazard that cannot change
    // what memory holds (a second write of the value already there, as when all lanes store
    // one cg::reduce result) INFO, "no impact on program execution", not shown by default.
    // The hook runs before the store, so the bytes are compared at the next hook (or barrier,
    // warp operation, block end), when the store has happened and no other thread has run.
    bool waw = false;
    Report waw_report{};
    uint64_t waw_off = 0, waw_size = 0;
    unsigned char waw_old[64];
    uint64_t cur_off = 0, cur_size = 0;  // the shared access being judged
    std::vector<std::vector<std::pair<uint64_t, PcRows>>> warp_pcs;  // per warp: (pc key, rows)
    std::vector<std::pair<uint64_t, Agg>> agg;                       // (pc << 3 | space << 2... )
};

thread_local State* tl_state PL_TLS_FAST = nullptr;
pthread_mutex_t g_prof_lock = PTHREAD_MUTEX_INITIALIZER;

// First report of the launch wins, as with every other error.
void fail(Worker* w, State* s, Report r) {
    w->failed = true;
    g_abort.store(true);
    Diag* d = g_spec->diag;
    int32_t expected = ST_OK;
    if (!d->status.compare_exchange_strong(expected, s->cfg.status)) return;
    r.block[0] = (int32_t)w->bid.x; r.block[1] = (int32_t)w->bid.y; r.block[2] = (int32_t)w->bid.z;
    *s->cfg.report = r;
    d->block[0] = r.block[0]; d->block[1] = r.block[1]; d->block[2] = r.block[2];
    d->thread = r.tid;
    snprintf(d->message, MSG_LEN, "sanitizer report %d", r.kind);
}

// ---- memory-access profile -------------------------------------------------------------------
// A warp-level request is the k-th execution of one instruction by the lanes of a warp: lanes
// are matched by how often each has executed that instruction since the warp last synchronized.
// Requests older than MAX_ROWS executions are counted and dropped (see record).
Agg& agg_for(State* s, uint64_t key) {
    for (auto& e : s->agg) if (e.first == key) return e.second;
    s->agg.emplace_back(key, Agg{});
    return s->agg.back().second;
}

void account(Agg& g, const PcRows& pr, const Row& row) {
    uint64_t ids[128];
    int n = 0, lanes = 0;
    uint64_t size = row.size ? row.size : 1, unit = pr.space == 1 ? 32 : 4;
    uint64_t addrs[32];
    for (int l = 0; l < 32; ++l) {
        if (!(row.mask >> l & 1)) continue;
        addrs[lanes++] = row.addr[l];
        uint64_t first = row.addr[l] / unit, last = (row.addr[l] + size - 1) / unit;
        for (uint64_t u = first; u <= last && n < 128; ++u) ids[n++] = u;
    }
    std::sort(ids, ids + n);
    n = (int)(std::unique(ids, ids + n) - ids);
    std::sort(addrs, addrs + lanes);
    int distinct = (int)(std::unique(addrs, addrs + lanes) - addrs);
    g.requests++;
    g.lanes += (uint64_t)lanes;
    if (pr.space == 1) {  // global: 32-byte sectors
        g.sectors += (uint64_t)n;
        g.ideal += (distinct * size + 31) / 32;
    } else {              // shared: distinct 4-byte words per bank, per word of a lane
        int per_bank[32] = {};
        int most = 0;
        for (int i = 0; i < n; ++i) most = std::max(most, ++per_bank[ids[i] & 31]);
        uint64_t words = (size + 3) / 4;
        uint64_t ways = ((uint64_t)most + words - 1) / words;
        if (ways < 1) ways = 1;
        g.ways += ways;
        g.max_ways = std::max(g.max_ways, ways);
    }
}

Agg& agg_of(State* s, uint64_t key, const PcRows& pr) {
    return agg_for(s, (key >> 1) << 3 | (uint64_t)(pr.space - 1) << 2 | (uint64_t)pr.access);
}

void flush_warp(State* s, int warp) {
    for (auto& e : s->warp_pcs[warp]) {
        PcRows& pr = e.second;
        if (pr.rows.empty()) continue;
        Agg& g = agg_of(s, e.first, pr);
        for (const Row& row : pr.rows)
            if (row.mask) account(g, pr, row);
        pr.rows.clear();
        pr.base = 0;
        memset(pr.cnt, 0, sizeof pr.cnt);
    }
}

void flush_all(State* s) {
    if (!s->cfg.profile) return;
    for (size_t wp = 0; wp < s->warp_pcs.size(); ++wp) flush_warp(s, (int)wp);
}

void record(State* s, int t, uint64_t pc, int space, int how, uint64_t addr, uint64_t size) {
    auto& pcs = s->warp_pcs[t >> 5];
    uint64_t key = pc << 1 | (uint64_t)(space - 1);
    PcRows* pr = nullptr;
    for (auto& e : pcs) if (e.first == key) { pr = &e.second; break; }
    if (!pr) {
        pcs.emplace_back(key, PcRows{});
        pr = &pcs.back().second;
        pr->space = space;
        pr->access = how;
    }
    int lane = t & 31;
    uint32_t k = pr->cnt[lane]++;
    if (k < pr->base) {  // a lane far behind the others: a request of its own
        Row alone{{}, 1u << lane, (uint32_t)size};
        alone.addr[lane] = addr;
        account(agg_of(s, key, *pr), *pr, alone);
        return;
    }
    if (k - pr->base >= MAX_ROWS) {  // a long loop without warp operations: fold the older half
        Agg& g = agg_of(s, key, *pr);
        size_t half = MAX_ROWS / 2;
        for (size_t i = 0; i < half; ++i)
            if (pr->rows[i].mask) account(g, *pr, pr->rows[i]);
        pr->rows.erase(pr->rows.begin(), pr->rows.begin() + (long)half);
        pr->base += (uint32_t)half;
    }
    if (k - pr->base >= pr->rows.size()) pr->rows.resize(k - pr->base + 1, Row{{}, 0, 0});
    Row& row = pr->rows[k - pr->base];
    row.addr[lane] = addr;
    row.mask |= 1u << lane;
    row.size = (uint32_t)size;
    // Keep the lanes of a warp close together, as on a GPU: a lane more than LEAD executions
    // of this instruction ahead of a runnable lane of its warp lets the others run first.
    // Requests then fill up together and a long loop needs no more than a window of rows.
    Worker* w = tl_worker;
    const Fiber* lanes = &w->fibers[t & ~31];
    int n = std::min(32, w->nthreads - (t & ~31));
    uint32_t slowest = UINT32_MAX;
    for (int l = 0; l < n; ++l)
        if (l != lane && lanes[l].state == RUNNABLE) slowest = std::min(slowest, pr->cnt[l]);
    if (slowest != UINT32_MAX && pr->cnt[lane] > slowest + LEAD) yield_fiber(w);
}

// ---- global-memory races -----------------------------------------------------------------------
// One shadow cell per 4-byte word of each argument array, shared by all workers for one launch.
// Threads of different blocks are never ordered within a launch; threads of one block are
// ordered by a barrier between the accesses (their worker's epoch differs), lanes of a warp as
// for shared memory. A write followed by __threadfence() in the writer's block is published:
// other blocks may read it (the last-block reduction pattern; its counter is an atomic).
// Workers update cells without locks: two blocks writing one word at once is a race anyway.
struct GCell {
    uint32_t wblock, wepoch, wclk, wpc;  // last writer: block + 1, its epoch, warp clock, pc
    uint32_t rblock, repoch, rclk, rpc;  // a reader not ordered before the later accesses
    uint16_t wtid, rtid;                 // thread + 1
    uint8_t wmask, rmask, watomic, wfence;  // bytes of the word; an atomic write; fences then
};
struct GShadow { uint64_t lo = 0, hi = 0; GCell* cells = nullptr; size_t bytes = 0; };
GShadow g_gshadow[MAX_RANGES];
uint32_t* g_fences = nullptr;            // per block: __threadfence() calls so far
size_t g_fences_bytes = 0;
constexpr uint32_t MAX_FENCE_BLOCKS = 1u << 24;

void* shadow_map(size_t bytes, bool populate = false);

// Shadow of all argument arrays together at most this much address space (a grading child's
// RLIMIT_AS counts it); arrays past it are not checked for races (first come, first shadowed).
constexpr size_t MAX_GLOBAL_SHADOW = size_t(512) << 20;
// Up to this much of it is mapped with its pages present. Mapped lazily, a cell's first read
// maps the shared zero page and its first write then copies it: a second fault, plus a TLB
// shootdown of the other workers' CPUs. That was most of a checked softmax's time (36 of 41 ms).
constexpr size_t POPULATE_GLOBAL_SHADOW = size_t(64) << 20;

void launch_begin(const Spec* spec) {
    if (!g_cfg || !g_cfg->race) return;
    size_t total = 0;
    for (int i = 0; i < g_cfg->nranges && i < MAX_RANGES; ++i) {
        const Range& r = g_cfg->ranges[i];
        if (r.kind != R_ARG || r.hi <= r.lo) continue;
        GShadow& g = g_gshadow[i];
        g.lo = r.lo & ~3ull;
        g.hi = r.hi;
        g.bytes = ((g.hi - g.lo + 3) / 4) * sizeof(GCell);
        if (total + g.bytes > MAX_GLOBAL_SHADOW) { g = GShadow{}; continue; }
        total += g.bytes;
        g.cells = (GCell*)shadow_map(g.bytes, total <= POPULATE_GLOBAL_SHADOW);
        if (!g.cells) g.bytes = 0;
    }
    uint64_t n = (uint64_t)spec->grid[0] * spec->grid[1] * spec->grid[2];
    if (n > MAX_FENCE_BLOCKS) n = MAX_FENCE_BLOCKS;
    g_fences_bytes = n * sizeof(uint32_t);
    g_fences = (uint32_t*)shadow_map(g_fences_bytes);
}

void launch_end() {
    for (auto& g : g_gshadow) {
        if (g.cells) munmap(g.cells, g.bytes);
        g = GShadow{};
    }
    if (g_fences) munmap(g_fences, g_fences_bytes);
    g_fences = nullptr;
}

inline uint8_t fences_of(uint32_t block) {  // block: linear index + 1
    return g_fences ? (uint8_t)__atomic_load_n(&g_fences[(block - 1) % MAX_FENCE_BLOCKS], __ATOMIC_RELAXED) : 0;
}

void fence(State* s) {
    if (g_fences && s->gblock) {
        __atomic_fetch_add(&g_fences[(s->gblock - 1) % MAX_FENCE_BLOCKS], 1u, __ATOMIC_RELAXED);
        s->my_fences++;  // this block's own count, mirrored: no atomic load per write
    }
}

inline bool ordered(const State* s, int t, int other, uint32_t other_clk);

[[noreturn]] void global_race(Worker* w, State* s, int t, int hazard, uint32_t oblock, int otid,
                              uint32_t opc, int owrite, int ri, uint64_t addr, uint64_t size,
                              int how, uint64_t pc) {
    Report r{};
    r.kind = REP_RACE_GLOBAL; r.hazard = hazard; r.tid = t; r.other_tid = otid;
    r.other_warp = otid >> 5; r.other_block = (int32_t)oblock - 1; r.arg = s->cfg.ranges[ri].index;
    r.write = how == A_WRITE || (how >= A_ATOMIC && how != A_ATOMIC_LOAD); r.atomic = how >= A_ATOMIC;
    r.other_write = owrite; r.size = (int32_t)size; r.addr = addr; r.pc = pc; r.other_pc = opc;
    fail(w, s, r);
    fail_and_park(w);
}

__attribute__((noinline)) void global_access(State* s, int ri, uintptr_t a, uint64_t size, int how, uint64_t pc) {
    GShadow& g = g_gshadow[ri];
    if (!g.cells || a < g.lo || a + size > g.hi + 3) return;
    Worker* w = tl_worker;
    int t = w->cur;
    uint16_t me = (uint16_t)(t + 1);
    uint32_t blk = s->gblock, ep = s->epoch, clk = s->lclk[t];
    bool atomic = how >= A_ATOMIC;
    bool write = how == A_WRITE || (atomic && how != A_ATOMIC_LOAD);
    // Not ordered before this access: another block, or this block in this barrier interval
    // (lanes of one warp after a warp operation both took part in excepted).
    auto unordered = [&](uint32_t oblk, uint16_t otid, uint32_t oep, uint32_t oclk) {
        if (oblk != blk) return true;
        if (otid == me || oep != ep) return false;
        return !ordered(s, t, otid - 1, oclk);
    };
    uint64_t end = a + size;
    for (uint64_t word = (a - g.lo) >> 2, last = (end - 1 - g.lo) >> 2; word <= last; ++word) {
        uint64_t wlo = g.lo + word * 4;
        uint32_t first = a > wlo ? (uint32_t)(a - wlo) : 0u, past = end < wlo + 4 ? (uint32_t)(end - wlo) : 4u;
        uint8_t mask = (uint8_t)(((1u << past) - 1) & ~((1u << first) - 1));
        GCell* c = g.cells + word;
        // This thread wrote the word last, in this interval, with no warp operation since:
        // whoever conflicts with this access conflicts with that write, which is kept. So a
        // read needs no record, and a rewrite (no reader in between) only refreshes the write
        // (`out[i] += v` in a loop: the common case, at a fraction of the cost).
        if (!atomic && c->wblock == blk && c->wtid == me && c->wepoch == ep && c->wclk == clk && !c->watomic) {
            if (!write && (c->wmask & mask) == mask) continue;
            if (write && !c->rblock) {
                c->wmask |= mask; c->wpc = (uint32_t)pc; c->wfence = s->my_fences;
                continue;
            }
        }
        if (c->wblock && (c->wmask & mask) && !(atomic && c->watomic)
            && unordered(c->wblock, c->wtid, c->wepoch, c->wclk)
            && !(c->wblock != blk && fences_of(c->wblock) != c->wfence))
            global_race(w, s, t, write ? HZ_WAW : HZ_RAW, c->wblock, c->wtid - 1, c->wpc,
                        c->watomic ? 2 : 1, ri, a, size, how, pc);
        if (write && c->rblock && (c->rmask & mask) && unordered(c->rblock, c->rtid, c->repoch, c->rclk))
            global_race(w, s, t, HZ_WAR, c->rblock, c->rtid - 1, c->rpc, 0, ri, a, size, how, pc);
        if (write) {
            c->wblock = blk; c->wepoch = ep; c->wclk = clk; c->wpc = (uint32_t)pc;
            c->wtid = me; c->wmask = mask; c->watomic = atomic; c->wfence = s->my_fences;
            c->rblock = 0;
        } else if (how == A_READ) {
            // keep a reader that a later write of a third thread may still race with
            if (!c->rblock || (c->rblock == blk && c->rtid == me)
                || !unordered(c->rblock, c->rtid, c->repoch, c->rclk)) {
                c->rblock = blk; c->repoch = ep; c->rclk = clk; c->rpc = (uint32_t)pc;
                c->rtid = me; c->rmask = mask;
            } else {
                c->rmask |= mask;
            }
        }
    }
}

// ---- checks ---------------------------------------------------------------------------------
// race == 2: lanes of one warp count as ordered (as if a __syncwarp() stood between any two of
// their accesses): what is left is a race a __syncwarp() cannot fix.
inline bool ordered(const State* s, int t, int other, uint32_t other_clk) {
    return (other >> 5) == (t >> 5) && (s->cfg.race == 2 || s->lclk[t] > other_clk);
}

[[noreturn]] void race(Worker* w, State* s, int t, int hazard, int other, uint32_t other_pc,
                       int other_write, int other_warp, uint64_t off, uint64_t size, int how, uint64_t pc) {
    Report r{};
    r.kind = REP_RACE; r.hazard = hazard; r.tid = t; r.other_tid = other; r.other_warp = other_warp;
    r.write = how == A_WRITE || how >= A_ATOMIC; r.atomic = how >= A_ATOMIC;
    r.other_write = other_write; r.size = (int32_t)size;
    r.addr = s->sh_lo + off; r.offset = off; r.pc = pc; r.other_pc = other_pc;
    fail(w, s, r);
    fail_and_park(w);
}

// The write-after-write hazard of the access being judged, deferred until its value is known;
// false when it cannot be deferred (a large access): then it is raised at once.
inline bool defer_waw(State* s, int t, int other, uint32_t other_pc, uint64_t at, uint64_t size,
                      int how, uint64_t pc) {
    if (s->waw) return true;  // another byte of the same access: one judgement covers it
    if (s->cur_size > sizeof s->waw_old) return false;
    Report r{};
    r.kind = REP_RACE; r.hazard = HZ_WAW; r.tid = t; r.other_tid = other; r.other_warp = other >> 5;
    r.write = 1; r.atomic = how >= A_ATOMIC; r.other_write = 1; r.size = (int32_t)size;
    r.addr = s->sh_lo + at; r.offset = at; r.pc = pc; r.other_pc = other_pc;
    s->waw = true;
    s->waw_report = r;
    s->waw_off = s->cur_off;
    s->waw_size = s->cur_size;
    memcpy(s->waw_old, (const void*)(s->sh_lo + s->cur_off), s->cur_size);
    return true;
}

// Judge a deferred write-after-write: the store happened; did it change the bytes? Returns
// false (after fail()) when it did: a real hazard.
__attribute__((noinline)) bool resolve_waw(State* s, Worker* w) {
    s->waw = false;
    if (memcmp(s->waw_old, (const void*)(s->sh_lo + s->waw_off), s->waw_size) == 0) return true;
    fail(w, s, s->waw_report);
    return false;
}

// One shadow cell (a byte, or a whole word in word mode) seen by access `how` of thread t.
__attribute__((always_inline)) inline void visit_cell(State* s, Worker* w, Cell* cell, uint64_t at, uint64_t size, int how,
                       uint64_t pc, int t) {
    const Config* c = &s->cfg;
    uint16_t me = (uint16_t)(t + 1);
    uint32_t clk = s->lclk[t], wbit = 1u << ((t >> 5) & 31);
    if (cell->epoch != s->epoch) {  // last touched before the latest barrier: all ordered
        cell->epoch = s->epoch;
        cell->wt = cell->ra = cell->rb = cell->many = 0;
        cell->rwarps = 0;
    }
    bool written = cell->init == s->block;
    if (how >= A_ATOMIC) {  // atomics never race with each other; they may read garbage
        if (c->race && how != A_ATOMIC_LOAD) {  // but they do with a plain access
            if (cell->wt && cell->wt != me && !cell->watomic && !ordered(s, t, cell->wt - 1, cell->wclk))
                race(w, s, t, HZ_WAW, cell->wt - 1, cell->wpc, 1, (cell->wt - 1) >> 5, at, size, how, pc);
            if (cell->ra && cell->ra != me && !ordered(s, t, cell->ra - 1, cell->raclk))
                race(w, s, t, HZ_WAR, cell->ra - 1, cell->rapc, 0, (cell->ra - 1) >> 5, at, size, how, pc);
            if (cell->rb && cell->rb != me && !ordered(s, t, cell->rb - 1, cell->rbclk))
                race(w, s, t, HZ_WAR, cell->rb - 1, cell->rbpc, 0, (cell->rb - 1) >> 5, at, size, how, pc);
            if (cell->many && (cell->rwarps & ~wbit))
                race(w, s, t, HZ_WAR, -1, 0, 0, __builtin_ctz(cell->rwarps & ~wbit), at, size, how, pc);
            cell->wt = me; cell->wclk = clk; cell->wpc = (uint32_t)pc; cell->watomic = 1;
            cell->ra = cell->rb = cell->many = 0;
            cell->rwarps = 0;
        }
        if (!written && c->init && how != A_ATOMIC_STORE && !s->pending) {
            s->pending = true;
            s->pend = Report{};
            s->pend.kind = REP_UNINIT; s->pend.tid = t; s->pend.atomic = 1;
            s->pend.size = (int32_t)size; s->pend.addr = s->sh_lo + at; s->pend.offset = at;
            s->pend.pc = pc;
        }
        if (how != A_ATOMIC_LOAD) cell->init = s->block;
        return;
    }
    if (how == A_WRITE) {
        if (c->race) {
            if (cell->wt && cell->wt != me && !ordered(s, t, cell->wt - 1, cell->wclk)
                && (cell->watomic || !defer_waw(s, t, cell->wt - 1, cell->wpc, at, size, how, pc)))
                race(w, s, t, HZ_WAW, cell->wt - 1, cell->wpc, 1, (cell->wt - 1) >> 5, at, size, how, pc);
            if (cell->ra && cell->ra != me && !ordered(s, t, cell->ra - 1, cell->raclk))
                race(w, s, t, HZ_WAR, cell->ra - 1, cell->rapc, 0, (cell->ra - 1) >> 5, at, size, how, pc);
            if (cell->rb && cell->rb != me && !ordered(s, t, cell->rb - 1, cell->rbclk))
                race(w, s, t, HZ_WAR, cell->rb - 1, cell->rbpc, 0, (cell->rb - 1) >> 5, at, size, how, pc);
            if (cell->many && (cell->rwarps & ~wbit))  // a reader of another warp: never ordered
                race(w, s, t, HZ_WAR, -1, 0, 0, __builtin_ctz(cell->rwarps & ~wbit), at, size, how, pc);
        }
        cell->wt = me; cell->wclk = clk; cell->wpc = (uint32_t)pc; cell->watomic = 0;
        cell->ra = cell->rb = cell->many = 0;
        cell->rwarps = 0;
        cell->init = s->block;
    } else {
        if (!written && c->init && !s->pending) {
            s->pending = true;
            s->pend = Report{};
            s->pend.kind = REP_UNINIT; s->pend.tid = t; s->pend.size = (int32_t)size;
            s->pend.addr = s->sh_lo + at; s->pend.offset = at; s->pend.pc = pc;
        }
        if (!c->race) return;
        if (cell->wt && cell->wt != me && !ordered(s, t, cell->wt - 1, cell->wclk))
            race(w, s, t, HZ_RAW, cell->wt - 1, cell->wpc, cell->watomic ? 2 : 1, (cell->wt - 1) >> 5, at, size, how, pc);
        if (cell->ra == me) {
            cell->raclk = clk; cell->rapc = (uint32_t)pc;
        } else {
            if (cell->rb == me) {
                cell->rb = 0;
            } else if (cell->rb) {
                cell->many = 1;
            }
            if (cell->ra) { cell->rb = cell->ra; cell->rbclk = cell->raclk; cell->rbpc = cell->rapc; }
            cell->ra = me; cell->raclk = clk; cell->rapc = (uint32_t)pc;
        }
        cell->rwarps |= wbit;
    }
}

// Word mode (the speed of checks on tiled kernels): a 4-byte word accessed only by aligned
// accesses of whole words keeps one cell for its 4 bytes. The first access of part of a word
// (a char, a half, a misaligned float) splits it: its byte cells get a copy of the word's
// state and are used from then on, so judgements stay per byte.
inline Cell* split_word(State* s, uint64_t word) {
    Cell* wc = s->words + word;
    Cell* b = s->shadow + word * 4;
    if (!wc->split) {
        wc->split = 1;
        for (int k = 0; k < 4; ++k) { b[k] = *wc; b[k].split = 0; }
    }
    return b;
}

__attribute__((always_inline)) inline void shadow_access(State* s, Worker* w, uintptr_t off, uint64_t size, int how, uint64_t pc, int t) {
    uint64_t end = off + size;
    s->cur_off = off;
    s->cur_size = size;
    if (((off | size) & 3) == 0) {
        for (uint64_t a = off; a < end; a += 4) {
            Cell* wc = s->words + (a >> 2);
            if (!wc->split) {
                visit_cell(s, w, wc, a, size, how, pc, t);
            } else {
                Cell* b = s->shadow + a;
                for (int k = 0; k < 4; ++k) visit_cell(s, w, b + k, a + k, size, how, pc, t);
            }
        }
        return;
    }
    for (uint64_t a = off; a < end; ++a) visit_cell(s, w, split_word(s, a >> 2) + (a & 3), a, size, how, pc, t);
}

void on_shared(State* s, uintptr_t off, uint64_t size, int how, uintptr_t ret) {
    const Config* c = &s->cfg;
    Worker* w = tl_worker;
    int t = w->cur;
    uint64_t pc = ret - s->lib_base;
    if (c->mem) {
        for (int i = 0; i < s->ndyn; ++i) {
            uint64_t d = off - s->dyn_off[i];
            if (d < s->dyn_cap[i] && d + size > g_spec->shared_mem) {
                Report r{};
                r.kind = REP_OOB_SHARED; r.tid = t; r.write = how == A_WRITE || how == A_ATOMIC_STORE;
                r.atomic = how >= A_ATOMIC; r.size = (int32_t)size; r.addr = s->sh_lo + off;
                r.offset = d; r.other_tid = i; r.pc = pc;
                fail(w, s, r);
                fail_and_park(w);
            }
        }
    }
    if (c->profile) record(s, t, pc, 2, how, s->sh_lo + off, size);
    if (!c->race && !c->init) return;
    if (off + size > s->sh_size) size = s->sh_size - off;
    shadow_access(s, w, off, size, how, pc, t);
}

__attribute__((noinline)) void on_global(State* s, uintptr_t a, uint64_t size, int how, uintptr_t ret) {
    if (a - s->tp < 8 || a - s->ctx_lo < s->ctx_size) return;  // threadIdx & co.
    const Config* c = &s->cfg;
    State::RangeHint& hint = s->hints[(ret >> 2) & 255];
    int i = hint.pc == ret ? hint.range : s->last_range;  // this instruction's range, else the last one
    if (!(i < c->nranges && a >= c->ranges[i].lo && a + size <= c->ranges[i].hi && c->ranges[i].kind != R_GUARD))
        for (i = 0; i < c->nranges; ++i) {
            const Range& r = c->ranges[i];
            if (a >= r.lo && a + size <= r.hi && r.kind != R_GUARD) break;
        }
    if (i < c->nranges) {
        s->last_range = i;
        hint = State::RangeHint{ret, c->ranges[i].lo, c->ranges[i].hi, i, c->ranges[i].kind};
        const Range& r = c->ranges[i];
        // The "interleaved" schedule: other threads run between this thread's load and
        // its store, so a plain `out[i] += v` loses updates as on a GPU.
        bool arg = r.kind == R_ARG || r.kind == R_ARG_RO;
        if (arg && c->interleave) yield_fiber(tl_worker);
        // Sectors are counted from the start of the argument's buffer, as if it were
        // allocated by cudaMalloc (256-byte aligned); the index keeps buffers apart.
        if (arg && c->profile)
            record(s, tl_worker->cur, ret - s->lib_base, 1, how,
                   (a - r.lo) + ((uint64_t)(i + 1) << 44), size);
        if (r.kind == R_ARG && c->race) global_access(s, i, a, size, how, ret - s->lib_base);
        return;
    }
    for (auto& seg : s->lib) {
        if (a >= seg.first && a + size <= seg.second) {  // __device__ / __constant__ data
            if (c->profile) record(s, tl_worker->cur, ret - s->lib_base, 1, how, a, size);
            return;
        }
    }
    if (!c->mem) return;
    Worker* w = tl_worker;
    Report r{};
    r.kind = REP_OOB_GLOBAL; r.tid = w->cur; r.write = how == A_WRITE || how == A_ATOMIC_STORE;
    r.atomic = how >= A_ATOMIC; r.size = (int32_t)size; r.addr = a; r.pc = ret - s->lib_base;
    fail(w, s, r);
    fail_and_park(w);
}

// The cases most accesses take, with no call and no callee-saved register (so the hook
// needs no stack frame): a local variable; an instruction that hit an argument before hitting
// it again (a read-only one then needs nothing but that bounds check); a word of a writable
// argument this thread wrote last. true: handled.
__attribute__((always_inline)) inline bool fast_access(uintptr_t a, uint64_t size, int how, uintptr_t ret) {
    State* s = tl_state;
    if (!s) return true;
    if (s->waw) return false;
    if (a - s->st_lo < s->st_size) return true;  // a local variable on the fiber's stack
    const State::RangeHint& r = s->hints[(ret >> 2) & 255];
    if (r.pc != ret || !s->fast_hints || a < r.lo || a + size > r.hi) return false;
    if (r.kind == R_ARG_RO || r.kind == R_IGNORE || (r.kind == R_ARG && !s->cfg.race)) return true;
    if (r.kind != R_ARG || how > A_WRITE) return false;
    GShadow& g = g_gshadow[r.range];
    uintptr_t rel = a - g.lo;
    if (!g.cells || a < g.lo || (rel & 3) + size > 4) return false;
    GCell* c = g.cells + (rel >> 2);
    int t = tl_worker->cur;
    if (c->wtid != (uint16_t)(t + 1) || c->wblock != s->gblock || c->wepoch != s->epoch
        || c->wclk != s->lclk[t] || c->watomic)
        return false;
    uint8_t mask = (uint8_t)(((1u << size) - 1u) << (rel & 3));
    if (how == A_READ) return (c->wmask & mask) == mask;
    if (c->rblock) return false;
    c->wmask |= mask;
    c->wpc = (uint32_t)(ret - s->lib_base);
    c->wfence = s->my_fences;
    return true;
}

__attribute__((noinline)) void on_access(uintptr_t a, uint64_t size, int how, uintptr_t ret) {
    State* s = tl_state;
    if (!s) return;
    if (s->waw && !resolve_waw(s, tl_worker)) fail_and_park(tl_worker);
    if (a - s->st_lo < s->st_size) return;
    const State::RangeHint& hint = s->hints[(ret >> 2) & 255];
    if (hint.pc == ret && s->fast_hints && a >= hint.lo && a + size <= hint.hi) {
        if (hint.kind == R_ARG_RO || hint.kind == R_IGNORE || (hint.kind == R_ARG && !s->cfg.race)) return;
        if (hint.kind == R_ARG) return global_access(s, hint.range, a, size, how, ret - s->lib_base);
    }
    uintptr_t off = a - s->sh_lo;
    if (off < s->sh_size) return on_shared(s, off, size, how, ret);
    on_global(s, a, size, how, ret);
}

// ---- calls from the runtime -----------------------------------------------------------------
void* shadow_map(size_t bytes, bool populate) {  // zeroed pages
    int flags = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef MAP_NORESERVE
    flags |= MAP_NORESERVE;
#endif
#ifdef MAP_POPULATE
    if (populate) flags |= MAP_POPULATE;
#endif
    void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
    return mem == MAP_FAILED ? nullptr : mem;
}

void worker_setup(Worker* w) {
    if (!g_cfg || !w->tls_base) return;
    State* s = new State();
    s->cfg = *g_cfg;
    s->sh_lo = (uintptr_t)w->tls_base;
    s->sh_size = w->tls_size;
    s->st_lo = (uintptr_t)w->stacks;
    s->st_size = w->stack_stride * w->stack_count;
    s->ctx_lo = (uintptr_t)w->fibers.data();
    s->ctx_size = w->fibers.size() * sizeof(Fiber);
    s->tp = (uintptr_t)&pl_cur;
    Dl_info info;
    if (dladdr((void*)g_spec->entry, &info)) s->lib_base = (uintptr_t)info.dli_fbase;
#if defined(__linux__)
    struct Find { uintptr_t code; std::vector<std::pair<uintptr_t, uintptr_t>>* out; } find{
        (uintptr_t)g_spec->entry, &s->lib};
    dl_iterate_phdr(
        [](struct dl_phdr_info* info, size_t, void* data) -> int {
            Find* fd = (Find*)data;
            bool mine = false;
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const auto& ph = info->dlpi_phdr[i];
                uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
                if (ph.p_type == PT_LOAD && fd->code >= lo && fd->code < lo + ph.p_memsz) mine = true;
            }
            if (!mine) return 0;
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const auto& ph = info->dlpi_phdr[i];
                uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
                if (ph.p_type == PT_LOAD) fd->out->push_back({lo, lo + ph.p_memsz});
            }
            return 1;
        },
        &find);
#endif
    s->ndyn = w->ndyn;
    for (int i = 0; i < w->ndyn; ++i) {
        s->dyn_off[i] = (uintptr_t)w->dyn[i] - s->sh_lo;
        s->dyn_cap[i] = w->dyn_cap[i];
    }
    if (s->cfg.race || s->cfg.init) {
        s->shadow_bytes = (w->tls_size * sizeof(Cell) + w->page - 1) & ~(w->page - 1);
        s->words_bytes = (((w->tls_size + 3) / 4) * sizeof(Cell) + w->page - 1) & ~(w->page - 1);
        s->shadow = (Cell*)shadow_map(s->shadow_bytes);
        s->words = (Cell*)shadow_map(s->words_bytes);
        if (!s->shadow || !s->words) { delete s; return; }
    }
    for (int i = 0; i < s->cfg.nranges; ++i)
        if (s->cfg.ranges[i].kind == R_GUARD && s->cfg.ranges[i].hi <= s->sh_size)
            s->guards.push_back({s->cfg.ranges[i].lo, s->cfg.ranges[i].hi});
    s->fast_hints = !s->cfg.profile && !s->cfg.interleave;
    s->lclk.assign(w->nthreads, 0);
    s->wclk.assign(w->nwarps, 0);
    s->warp_pcs.resize(w->nwarps);
    tl_state = s;
}

void block_begin(Worker* w) {
    State* s = tl_state;
    if (!s) return;
    s->block++;
    s->epoch++;
    if (s->shadow)
        for (auto& g : s->guards)
            for (uint64_t o = g.first; o < g.second; ++o) split_word(s, o >> 2)[o & 3].init = s->block;
    std::fill(s->lclk.begin(), s->lclk.end(), 0);
    std::fill(s->wclk.begin(), s->wclk.end(), 0);
    s->pending = false;
    s->waw = false;
    s->my_fences = 0;
    s->gblock = (uint32_t)(((uint64_t)w->bid.z * g_spec->grid[1] + w->bid.y) * g_spec->grid[0] + w->bid.x) + 1;
}

// A barrier opens: everything before it is ordered before everything after it. A read of
// unwritten memory seen in the closing interval is an error now (no race explained it).
bool barrier(Worker* w) {
    State* s = tl_state;
    if (!s) return true;
    if (s->waw && !resolve_waw(s, w)) return false;
    if (s->pending) { fail(w, s, s->pend); return false; }
    s->epoch++;
    flush_all(s);
    return true;
}

// A warp operation completed for the lanes in eff: each lane's clock jumps past every access
// made before it by any lane in eff.
void warp_sync(Worker* w, int warp, unsigned eff) {
    State* s = tl_state;
    if (!s) return;
    if (s->waw) resolve_waw(s, w);  // a failure stops the block when the warp operation returns
    uint32_t c = ++s->wclk[warp];
    for (int l = 0; l < 32; ++l)
        if (eff >> l & 1) s->lclk[warp * 32 + l] = c;
    if (s->cfg.profile) flush_warp(s, warp);
}

void block_end(Worker* w) {
    State* s = tl_state;
    if (!s) return;
    if (s->waw && !w->failed) resolve_waw(s, w);
    if (s->pending && !w->failed) fail(w, s, s->pend);
    flush_all(s);
}

void worker_end(Worker*) {
    State* s = tl_state;
    if (!s) return;
    if (s->cfg.profile && s->cfg.prof) {
        pthread_mutex_lock(&g_prof_lock);
        ProfHeader* h = s->cfg.prof;
        for (auto& e : s->agg) {
            uint64_t pc = e.first >> 3;
            int32_t space = (int32_t)((e.first >> 2) & 1) + 1, access = (int32_t)(e.first & 3);
            ProfEntry* hit = nullptr;
            for (int i = 0; i < h->count; ++i) {
                ProfEntry& p = s->cfg.entries[i];
                if (p.pc == pc && p.space == space && p.access == access) { hit = &p; break; }
            }
            if (!hit) {
                if (h->count >= h->cap) { h->overflow = 1; continue; }
                hit = &s->cfg.entries[h->count++];
                *hit = ProfEntry{};
                hit->pc = pc; hit->space = space; hit->access = access;
            }
            const Agg& g = e.second;
            hit->requests += g.requests; hit->sectors += g.sectors; hit->ideal += g.ideal;
            hit->ways += g.ways; hit->lanes += g.lanes;
            hit->max_ways = std::max(hit->max_ways, g.max_ways);
        }
        pthread_mutex_unlock(&g_prof_lock);
    }
    if (s->shadow) munmap(s->shadow, s->shadow_bytes);
    if (s->words) munmap(s->words, s->words_bytes);
    delete s;
    tl_state = nullptr;
}

}  // namespace san

#elif PL_SAN_PART == 2

PL_EXPORT void pl_san_configure(void* cfg) { san::g_cfg = (san::Config*)cfg; }
PL_EXPORT size_t pl_san_sizes(int which) {
    switch (which) {
        case 0: return sizeof(san::Config);
        case 1: return sizeof(san::Report);
        case 2: return sizeof(san::ProfEntry);
        default: return sizeof(san::ProfHeader);
    }
}

#define PL_SAN_RET ((uintptr_t)__builtin_return_address(0))
#define PL_SAN_HOOK(p, N, HOW)                                                                       \
    do {                                                                                             \
        uintptr_t ret_ = PL_SAN_RET;                                                                 \
        if (!san::fast_access((uintptr_t)(p), N, HOW, ret_)) san::on_access((uintptr_t)(p), N, HOW, ret_); \
    } while (0)
#define PL_SAN_RW(N)                                                                                 \
    PL_EXPORT void __tsan_read##N(void* p) { PL_SAN_HOOK(p, N, san::A_READ); }                       \
    PL_EXPORT void __tsan_write##N(void* p) { PL_SAN_HOOK(p, N, san::A_WRITE); }                     \
    PL_EXPORT void __tsan_unaligned_read##N(void* p) {                                               \
        san::on_access((uintptr_t)p, N, san::A_READ, PL_SAN_RET);                                     \
    }                                                                                                \
    PL_EXPORT void __tsan_unaligned_write##N(void* p) {                                              \
        san::on_access((uintptr_t)p, N, san::A_WRITE, PL_SAN_RET);                                    \
    }                                                                                                \
    PL_EXPORT void __tsan_volatile_read##N(void* p) {                                                \
        san::on_access((uintptr_t)p, N, san::A_READ, PL_SAN_RET);                                     \
    }                                                                                                \
    PL_EXPORT void __tsan_volatile_write##N(void* p) {                                               \
        san::on_access((uintptr_t)p, N, san::A_WRITE, PL_SAN_RET);                                    \
    }
PL_SAN_RW(1)
PL_SAN_RW(2)
PL_SAN_RW(4)
PL_SAN_RW(8)
PL_SAN_RW(16)
PL_EXPORT void __tsan_read_range(void* p, unsigned long n) {
    if (n) san::on_access((uintptr_t)p, n, san::A_READ, PL_SAN_RET);
}
PL_EXPORT void __tsan_write_range(void* p, unsigned long n) {
    if (n) san::on_access((uintptr_t)p, n, san::A_WRITE, PL_SAN_RET);
}
PL_EXPORT void* __tsan_memcpy(void* d, const void* s, size_t n) {
    if (n) { san::on_access((uintptr_t)s, n, san::A_READ, PL_SAN_RET); san::on_access((uintptr_t)d, n, san::A_WRITE, PL_SAN_RET); }
    return memcpy(d, s, n);
}
PL_EXPORT void* __tsan_memmove(void* d, const void* s, size_t n) {
    if (n) { san::on_access((uintptr_t)s, n, san::A_READ, PL_SAN_RET); san::on_access((uintptr_t)d, n, san::A_WRITE, PL_SAN_RET); }
    return memmove(d, s, n);
}
PL_EXPORT void* __tsan_memset(void* d, int c, size_t n) {
    if (n) san::on_access((uintptr_t)d, n, san::A_WRITE, PL_SAN_RET);
    return memset(d, c, n);
}
// -fsanitize=bounds (checked builds): an index past a fixed-size array, e.g. a thread's
// `float acc[4]` written at acc[4] by a `j <= N` loop, which would silently overwrite a
// neighbouring variable. The handlers' data layout is UBSan's (GCC and Clang agree).
struct PlUbsanType { uint16_t kind, info; char name[1]; };
struct PlUbsanOob { const char* file; uint32_t line, column; const PlUbsanType* array; const PlUbsanType* index; };
[[noreturn]] static void pl_out_of_bounds(void* data, void* index) {
    const PlUbsanOob* d = (const PlUbsanOob*)data;
    int bits = d->index ? 1 << (d->index->info >> 1) : 64;
    bool is_signed = d->index && (d->index->info & 1);
    uint64_t raw = (uint64_t)(uintptr_t)index;  // integers up to 64 bits are passed inline
    if (bits < 64) raw &= (1ull << bits) - 1;
    long long v = is_signed && bits < 64 && (raw >> (bits - 1) & 1) ? (long long)(raw | ~((1ull << bits) - 1))
                                                                   : (long long)raw;
    char what[256];
    snprintf(what, sizeof what, "out-of-bounds array index: index %lld into an array of type %s",
             v, d->array ? d->array->name : "?");
    pl_trap((int)d->line, what);
}
PL_EXPORT void __ubsan_handle_out_of_bounds_abort(void* data, void* index) { pl_out_of_bounds(data, index); }
PL_EXPORT void __ubsan_handle_out_of_bounds(void* data, void* index) { pl_out_of_bounds(data, index); }
PL_EXPORT void __tsan_init(void) {}
PL_EXPORT void __tsan_func_entry(void*) {}
PL_EXPORT void __tsan_func_exit(void) {}
PL_EXPORT void __tsan_vptr_update(void**, void*) {}
PL_EXPORT void __tsan_vptr_read(void**) {}
PL_EXPORT void __tsan_atomic_thread_fence(int) {
    if (san::tl_state) san::fence(san::tl_state);  // __threadfence(): publishes the block's writes
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
PL_EXPORT void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// The atomics the instrumented code calls instead of the __atomic builtins: check, then do it.
#define PL_SAN_AT(N, T)                                                                              \
    PL_EXPORT T __tsan_atomic##N##_load(const volatile T* a, int) {                                   \
        san::on_access((uintptr_t)a, sizeof(T), san::A_ATOMIC_LOAD, PL_SAN_RET);                      \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                 \
    }                                                                                                \
    PL_EXPORT void __tsan_atomic##N##_store(volatile T* a, T v, int) {                                \
        san::on_access((uintptr_t)a, sizeof(T), san::A_ATOMIC_STORE, PL_SAN_RET);                     \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                    \
    }                                                                                                \
    PL_EXPORT T __tsan_atomic##N##_exchange(volatile T* a, T v, int) {                                \
        san::on_access((uintptr_t)a, sizeof(T), san::A_ATOMIC_STORE, PL_SAN_RET);                     \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                          \
    }                                                                                                \
    PL_SAN_AT_RMW(N, T, fetch_add, __atomic_fetch_add)                                               \
    PL_SAN_AT_RMW(N, T, fetch_sub, __atomic_fetch_sub)                                               \
    PL_SAN_AT_RMW(N, T, fetch_and, __atomic_fetch_and)                                               \
    PL_SAN_AT_RMW(N, T, fetch_or, __atomic_fetch_or)                                                 \
    PL_SAN_AT_RMW(N, T, fetch_xor, __atomic_fetch_xor)                                               \
    PL_SAN_AT_RMW(N, T, fetch_nand, __atomic_fetch_nand)                                             \
    PL_EXPORT int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {    \
        san::on_access((uintptr_t)a, sizeof(T), san::A_ATOMIC, PL_SAN_RET);                           \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);      \
    }                                                                                                \
    PL_EXPORT int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {      \
        san::on_access((uintptr_t)a, sizeof(T), san::A_ATOMIC, PL_SAN_RET);                           \
        return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
    }                                                                                                \
    PL_EXPORT T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) {          \
        san::on_access((uintptr_t)a, sizeof(T), san::A_ATOMIC, PL_SAN_RET);                           \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
        return c;                                                                                    \
    }
#define PL_SAN_AT_RMW(N, T, OP, BUILTIN)                                                             \
    PL_EXPORT T __tsan_atomic##N##_##OP(volatile T* a, T v, int) {                                    \
        san::on_access((uintptr_t)a, sizeof(T), san::A_ATOMIC, PL_SAN_RET);                           \
        return BUILTIN(a, v, __ATOMIC_SEQ_CST);                                                      \
    }
PL_SAN_AT(8, uint8_t)
PL_SAN_AT(16, uint16_t)
PL_SAN_AT(32, uint32_t)
PL_SAN_AT(64, uint64_t)

#endif
