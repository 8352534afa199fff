// expert_cache.cu: the GPU expert cache's device side (see expert_cache_kernels.h): the
// lookup that applies the C reference's policy per layer (src/moe/expert_cache.h: LRU or
// frecency victims, fixed ranges or self-sizing layers) on the device tables, self-sizing's
// rebalance at the end of a token, the copies of the missed experts from mapped host memory
// into their slots, slot invalidation, route-trace replay, and the few runtime calls offload.c
// needs.
#include "cuda_common.cuh"
#include "expert_cache_kernels.h"

#include "../../moe/frecency.h"
#include "../../moe/hybrid.h"

__device__ __forceinline__ uint64_t device_clock_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// ---------------------------------------------------------------------------------------------
// Lookup

#define LOOKUP_THREADS 256
#define LOOKUP_SMEM_MAX (48 * 1024)

// A lookup's shared memory: three int lists of n, with self-sizing the layer's slots (up to
// cap), the stamps of its slots where they fit (always with self-sizing), and with frecency
// victims a rank per slot (0: empty, else 1 + its score: at most 145).
typedef struct lookup_layout {
    size_t own, stamps, ranks, bytes;
    bool staged;
} lookup_layout;

__host__ __device__ static lookup_layout lookup_smem(int n, int cap, bool frecency, bool sizing) {
    lookup_layout l;
    l.own = (size_t)3 * n * sizeof(int);
    l.stamps = (l.own + (sizing ? (size_t)cap * sizeof(int) : 0) + 7) & ~(size_t)7;
    size_t rank_bytes = frecency ? (size_t)cap : 0;
    l.staged = sizing || l.stamps + (size_t)cap * sizeof(uint64_t) + rank_bytes <= LOOKUP_SMEM_MAX;
    l.ranks = l.staged ? l.stamps + (size_t)cap * sizeof(uint64_t) : l.stamps;
    l.bytes = l.ranks + rank_bytes;
    return l;
}

// The layer's slots in slot order: with self-sizing those the pool's owners give it, listed
// into own (room for cap; a layer never owns more); else [first, first + n_own). Returns how
// many. Every thread of the CTA calls it; it ends with a barrier.
__device__ static int layer_slots(const ft_cuda_cache_sizing &z, int first, int n_own, int cap, int *own) {
    if (!z.slot_owner) {
        __syncthreads();
        return n_own;
    }
    __shared__ int s_count[LOOKUP_THREADS];
    const int tid = threadIdx.x, nt = blockDim.x, chunk = (z.pool_slots + nt - 1) / nt;
    const int lo = min(tid * chunk, z.pool_slots), hi = min(lo + chunk, z.pool_slots);
    int c = 0;
    for (int s = lo; s < hi; s++) c += z.slot_owner[s] == z.block;
    s_count[tid] = c;
    __syncthreads();
    if (tid == 0)
        for (int i = 0, sum = 0; i < nt; i++) {
            int ci = s_count[i];
            s_count[i] = sum;
            sum += ci;
        }
    __syncthreads();
    for (int s = lo, at = s_count[tid]; s < hi; s++)
        if (z.slot_owner[s] == z.block && at < cap) own[at++] = s;
    __syncthreads();
    int total = s_count[nt - 1];
    for (int s = (nt - 1) * chunk; s < z.pool_slots; s++) total += z.slot_owner[s] == z.block;
    return min(total, cap);
}

// Each slot's victim rank before (stamp, index), for the layer's slots (i < n: slot at(i)): 0
// for an empty one, 1 + the frecency score of its expert at layer step u for a full one.
__device__ static void frecency_ranks(const ft_cuda_cache_frecency &f, const int32_t *slot_expert, const int *own,
                                      int first, int n, uint64_t u, uint8_t *rank) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int e = slot_expert[own ? own[i] : first + i];
        rank[i] = e < 0 ? 0 : (uint8_t)(1 + moe_frecency_score(u, f.count[e], f.last[e], f.hist[e]));
    }
}

// Whether slot q comes before slot i as a victim: by (rank, stamp, index) ascending.
__device__ __forceinline__ bool victim_before(uint8_t rq, uint64_t bq, int q, uint8_t ri, uint64_t bi, int i) {
    return rq < ri || (rq == ri && (bq < bi || (bq == bi && q < i)));
}

// The victims' old experts unmapped, in victim order; with self-sizing each becomes a ghost of
// the layer (its eviction count, advanced per eviction, in that order: thread 0 alone).
__device__ static void evict_victims(const ft_cuda_cache_sizing &z, int32_t *map, const int32_t *slot_expert,
                                     const int *victim, int k) {
    if (!z.slot_owner) {
        for (int j = threadIdx.x; j < k; j += blockDim.x) {
            int old = slot_expert[victim[j]];
            if (old >= 0) map[old] = -1;
        }
    } else if (threadIdx.x == 0) {
        uint32_t ev = *z.evictions;
        for (int j = 0; j < k; j++) {
            int old = slot_expert[victim[j]];
            if (old < 0) continue;
            map[old] = -1;
            z.ghost_tag[old] = ++ev;
        }
        *z.evictions = ev;
    }
}

// One CTA, the C reference's step in its order:
//   0. self-sizing: the layer's slots listed; the shadow tags of the step's distinct experts
//      counted on the stamps before the step (a hit's LRU-end position, a miss's ghost depth);
//   1. t = clock + 1; every selection looks its expert up; a hit stamps its slot with t; with
//      frecency victims, u = the layer's steps + 1 and each distinct selected expert records
//      its use at u;
//   2. thread 0 lists the distinct missed experts in order of first appearance (a repeat
//      gets the index of its first appearance);
//   3. victim ranks: each of the layer's slots with stamp < t counts the layer's slots that
//      come before it in (stamp, index) order (frecency: (empty first, score, stamp, index));
//      rank j < k makes it v_j (the k first, in order) - the same choice as the reference's
//      repeated minimum, since no score changes during the step;
//   4. v_j's old expert is unmapped (self-sizing: a ghost), then m_j mapped to v_j, stamped t,
//      and listed as a copy;
//   5. every selection gets its slot; thread 0 writes the clock, counts and statistics.
// Hybrid (p.costs): in step 2 thread 0 also splits the k misses (moe_hybrid_cpu_share): copies
// j < k_copy go to the copy list, the others to the fill list (copied on another stream, behind
// the step), and a selection of a fill's expert gets slot -1 and goes to the CPU (cpu_sel).
// Stamps of the layer's slots are staged in shared memory when they fit.
__global__ void cache_lookup_kernel(ft_cuda_cache_lookup_params p) {
    ft_pdl_begin();
    extern __shared__ __align__(8) uint8_t smem[];
    const ft_cuda_cache_frecency &f = p.frecency;
    const ft_cuda_cache_sizing &z = p.sizing;
    const bool sizing = z.slot_owner != NULL;
    const lookup_layout lay = lookup_smem(p.n, p.n_own, f.steps != NULL, sizing);
    int *res = (int *)smem, *victim = res + p.n, *missed = victim + p.n;
    int *own = sizing ? (int *)(smem + lay.own) : NULL;
    uint64_t *st_sh = (uint64_t *)(smem + lay.stamps);
    uint8_t *rk = smem + lay.ranks;
    __shared__ uint64_t s_t, s_u;
    __shared__ int s_k, s_k_copy;
    const int tid = threadIdx.x, nt = blockDim.x;
    if (tid == 0) {
        s_t = *p.clock + 1;
        s_u = f.steps ? *f.steps + 1 : 0;
    }
    const int n_own = layer_slots(z, p.first, p.n_own, p.n_own, own); // (ends with a barrier)
    const uint64_t t = s_t, u = s_u;
    if (sizing) { // 0. shadow tags, on the stamps before the step
        for (int i = tid; i < n_own; i += nt) st_sh[i] = p.stamp[own[i]];
        __syncthreads();
        const int G = z.ghost_depth;
        const uint32_t ev = *z.evictions;
        for (int i = tid; i < p.n; i += nt) {
            int e = p.sel[i], s = p.map[e];
            bool first = true;
            for (int q = 0; q < i && first; q++) first = p.sel[q] != e;
            if (!first) continue;
            if (s >= 0) {
                const uint64_t a = p.stamp[s];
                int pos = 0;
                for (int q = 0; q < n_own && pos < G; q++) pos += st_sh[q] < a;
                if (pos < G) atomicAdd(&z.tail[pos], 1u);
            } else {
                const uint32_t tag = z.ghost_tag[e];
                if (tag && ev - tag < (uint32_t)G) atomicAdd(&z.ghost[ev - tag], 1u);
            }
        }
        __syncthreads();
    }
    for (int i = tid; i < p.n; i += nt) {
        int e = p.sel[i], s = p.map[e];
        res[i] = s;
        if (s >= 0) p.stamp[s] = t;
        if (!f.steps) continue;
        bool first = true; // record each distinct expert once: at its first selection
        for (int q = 0; q < i && first; q++) first = p.sel[q] != e;
        if (first) moe_frecency_use(u, &f.count[e], &f.last[e], &f.hist[e]);
    }
    if (tid == 0 && f.steps) *f.steps = u;
    __syncthreads();
    if (p.pf_n) { // the prefetch before this step: its copies hit, its guesses selected
        __shared__ int s_used, s_right;
        if (tid == 0) s_used = s_right = 0;
        __syncthreads();
        const int n_pf = *p.pf_n;
        for (int j = tid; j < n_pf; j += nt) {
            bool used = false;
            for (int i = 0; i < p.n && !used; i++) used = res[i] == p.pf_slot[j];
            if (used) atomicAdd(&s_used, 1);
        }
        for (int g = tid; g < p.n_guess; g += nt) {
            bool right = false;
            for (int i = 0; i < p.n && !right; i++) right = p.sel[i] == p.pf_guess[g];
            if (right) atomicAdd(&s_right, 1);
        }
        __syncthreads();
        if (tid == 0) {
            if (p.stats) {
                p.stats[FT_CACHE_STAT_PF_USED] += (uint64_t)s_used;
                p.stats[FT_CACHE_STAT_PF_RIGHT] += (uint64_t)s_right;
            }
            *p.pf_n = 0;
        }
    }
    if (tid == 0) {
        int k = 0;
        for (int i = 0; i < p.n; i++) {
            if (res[i] >= 0) continue;
            int e = p.sel[i], j = 0;
            while (j < k && missed[j] != e) j++;
            if (j == k) missed[k++] = e;
            res[i] = -2 - j;
        }
        s_k = k;
        if (p.costs) {
            const moe_hybrid_costs c = {p.costs[0], p.costs[1], p.costs[2]};
            k -= moe_hybrid_cpu_share(k, &c);
        }
        s_k_copy = k;
    }
    __syncthreads();
    const int k = s_k, k_copy = s_k_copy;
    if (k > 0) {
        const uint64_t *st = p.stamp + p.first;
        if (lay.staged) {
            for (int i = tid; i < n_own; i += nt) st_sh[i] = p.stamp[own ? own[i] : p.first + i];
            st = st_sh;
        }
        if (f.steps) frecency_ranks(f, p.slot_expert, own, p.first, n_own, u, rk);
        __syncthreads();
        for (int i = tid; i < n_own; i += nt) {
            uint64_t a = st[i];
            if (a >= t) continue;
            const uint8_t ra = f.steps ? rk[i] : 0;
            int rank = 0;
            for (int q = 0; q < n_own && rank < k; q++) {
                uint64_t b = st[q];
                rank += b < t && victim_before(f.steps ? rk[q] : 0, b, q, ra, a, i);
            }
            if (rank < k) victim[rank] = own ? own[i] : p.first + i;
        }
        __syncthreads();
        evict_victims(z, p.map, p.slot_expert, victim, k);
        __syncthreads();
        for (int j = tid; j < k; j += nt) {
            int v = victim[j], e = missed[j];
            p.slot_expert[v] = e;
            p.stamp[v] = t;
            p.map[e] = v;
            if (j < k_copy) {
                p.copy_expert[j] = e;
                p.copy_slot[j] = v;
            } else {
                p.fill_expert[j - k_copy] = e;
                p.fill_slot[j - k_copy] = v;
            }
        }
        __syncthreads();
    }
    __shared__ int s_n_cpu;
    if (tid == 0) s_n_cpu = 0;
    __syncthreads();
    for (int i = tid; i < p.n; i += nt) {
        int r = res[i];
        bool cpu = r < 0 && -2 - r >= k_copy;
        p.slots[i] = r >= 0 ? r : cpu ? -1 : victim[-2 - r];
        if (p.cpu_sel) p.cpu_sel[i] = cpu ? p.sel[i] : -1;
        if (cpu) atomicAdd(&s_n_cpu, 1);
    }
    __syncthreads();
    if (tid == 0) {
        *p.clock = t;
        *p.n_copies = k_copy;
        if (p.n_cpu) {
            *p.n_cpu = s_n_cpu;
            *p.n_fill = k - k_copy;
        }
        if (p.stats) { // NULL: telemetry off
            p.stats[FT_CACHE_STAT_SELECTIONS] += (uint64_t)p.n;
            p.stats[FT_CACHE_STAT_HITS] += (uint64_t)(p.n - k);
            p.stats[FT_CACHE_STAT_MISSES] += (uint64_t)k;
            p.stats[FT_CACHE_STAT_CPU] += (uint64_t)(k - k_copy);
            p.stats[FT_CACHE_STAT_BYTES] += (uint64_t)k * p.copy_bytes;
            p.stats[FT_CACHE_STAT_COPY_BYTES_DECODE] += (uint64_t)k * p.copy_bytes;
            p.stats[FT_CACHE_STAT_STEPS] += 1;
        }
        p.copy_span[0] = ~0ull;
        p.copy_span[1] = 0;
        p.copy_span[2] = 0;
    }
}

static bool frecency_valid(const ft_cuda_cache_frecency *f) {
    return f->steps ? f->count && f->last && f->hist : !f->count && !f->last && !f->hist;
}

static bool sizing_valid(const ft_cuda_cache_sizing *z, int first, int n_own) {
    if (!z->slot_owner) return true;
    return first == 0 && n_own <= z->pool_slots && z->ghost_depth >= 1 && z->evictions && z->tail && z->ghost &&
           z->ghost_tag;
}

extern "C" void ft_cuda_cache_lookup(const ft_cuda_cache_lookup_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(p->n >= 1 && p->n <= p->n_own && p->first >= 0 && frecency_valid(&p->frecency) &&
                   sizing_valid(&p->sizing, p->first, p->n_own));
    size_t smem = lookup_smem(p->n, p->n_own, p->frecency.steps != NULL, p->sizing.slot_owner != NULL).bytes;
    FT_CUDA_ASSERT(smem <= LOOKUP_SMEM_MAX);
    ft_launch(cache_lookup_kernel, 1, LOOKUP_THREADS, smem, ft_cuda_stream_handle(s), *p);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Prefetch

// A prefetch's shared memory: the layer's stamps, its missed guesses and their victims, a mark
// and (frecency) a rank per slot, and with self-sizing the layer's slots.
static size_t prefetch_smem(int n, int cap, bool frecency, bool sizing) {
    return (size_t)cap * sizeof(uint64_t) + (size_t)2 * n * sizeof(int) + (size_t)cap * (frecency ? 2 : 1) +
           (sizing ? (size_t)cap * sizeof(int) + 4 : 0);
}

// One CTA, moe_expert_cache_prefetch in its order (see ft_cuda_cache_prefetch_params): the
// layer's slots holding a guess are marked, thread 0 lists the first max_copies distinct
// unmapped guesses, and each eligible slot (stamp < t, unmarked) ranks itself by (stamp, index)
// (frecency: (empty first, score at the layer's step count as it stands, stamp, index)) among
// the eligible ones as the lookup's victims do; the first min(k, eligible) misses take victims
// 0, 1, ... (self-sizing: the victims' experts become ghosts).
__global__ void cache_prefetch_kernel(ft_cuda_cache_prefetch_params p) {
    ft_pdl_begin();
    extern __shared__ __align__(8) uint8_t smem[];
    const ft_cuda_cache_frecency &f = p.frecency;
    const ft_cuda_cache_sizing &z = p.sizing;
    uint64_t *st_sh = (uint64_t *)smem;
    int *missed = (int *)(st_sh + p.n_own), *victim = missed + p.n;
    uint8_t *marked = (uint8_t *)(victim + p.n), *rk = marked + p.n_own;
    int *own = z.slot_owner ? (int *)(((uintptr_t)(rk + (f.steps ? p.n_own : 0)) + 3) & ~(uintptr_t)3) : NULL;
    __shared__ uint64_t s_t;
    __shared__ int s_k, s_eligible;
    const int tid = threadIdx.x, nt = blockDim.x;
    if (tid == 0) {
        s_t = *p.clock + 1;
        s_eligible = 0;
    }
    const int n_own = layer_slots(z, p.first, p.n_own, p.n_own, own); // (ends with a barrier)
    for (int i = tid; i < n_own; i += nt) {
        const int slot = own ? own[i] : p.first + i, e = p.slot_expert[slot];
        bool guessed = false; // a slot holding a guess is never a victim
        for (int g = 0; g < p.n && !guessed && e >= 0; g++) guessed = p.guess[g] == e;
        marked[i] = guessed;
        st_sh[i] = p.stamp[slot];
    }
    __syncthreads();
    const uint64_t t = s_t;
    if (tid == 0) {
        int k = 0;
        for (int i = 0; i < p.n; i++) {
            int e = p.guess[i], j = 0;
            if (p.map[e] >= 0) continue;
            while (j < k && missed[j] != e) j++;
            if (j == k) missed[k++] = e;
            if (k == p.max_copies) break;
        }
        s_k = k;
    }
    __syncthreads();
    const int k = s_k;
    if (k == 0) {
        if (tid == 0) {
            *p.clock = t;
            *p.n_copies = 0;
            if (p.stats) p.stats[FT_CACHE_STAT_PF_GUESSES] += (uint64_t)p.n;
        }
        return;
    }
    if (f.steps) {
        frecency_ranks(f, p.slot_expert, own, p.first, n_own, *f.steps, rk);
        __syncthreads();
    }
    for (int i = tid; i < n_own; i += nt) {
        uint64_t a = st_sh[i];
        if (marked[i] || a >= t) continue;
        atomicAdd(&s_eligible, 1);
        const uint8_t ra = f.steps ? rk[i] : 0;
        int rank = 0;
        for (int q = 0; q < n_own && rank < k; q++) {
            uint64_t b = st_sh[q];
            rank += !marked[q] && b < t && victim_before(f.steps ? rk[q] : 0, b, q, ra, a, i);
        }
        if (rank < k) victim[rank] = own ? own[i] : p.first + i;
    }
    __syncthreads();
    const int kk = min(k, s_eligible);
    evict_victims(z, p.map, p.slot_expert, victim, kk);
    __syncthreads();
    for (int j = tid; j < kk; j += nt) {
        int v = victim[j], e = missed[j];
        p.slot_expert[v] = e;
        p.stamp[v] = t;
        p.map[e] = v;
        p.copy_expert[j] = e;
        p.copy_slot[j] = v;
    }
    __syncthreads();
    if (tid == 0) {
        *p.clock = t;
        *p.n_copies = kk;
        if (p.stats) {
            p.stats[FT_CACHE_STAT_PF_GUESSES] += (uint64_t)p.n;
            p.stats[FT_CACHE_STAT_PF_COPIES] += (uint64_t)kk;
        }
    }
}

extern "C" void ft_cuda_cache_prefetch(const ft_cuda_cache_prefetch_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(p->n >= 1 && p->n <= p->n_own && p->max_copies >= 1 && p->first >= 0 &&
                   frecency_valid(&p->frecency) && sizing_valid(&p->sizing, p->first, p->n_own));
    size_t smem = prefetch_smem(p->n, p->n_own, p->frecency.steps != NULL, p->sizing.slot_owner != NULL);
    FT_CUDA_ASSERT(smem <= LOOKUP_SMEM_MAX);
    ft_launch(cache_prefetch_kernel, 1, LOOKUP_THREADS, smem, ft_cuda_stream_handle(s), *p);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Self-sizing: slots moved between a pool's layers at the end of a token

// One CTA for one pool, moe_expert_cache_end_step's rebalance in its order: thread 0 picks the
// receiver and the donor of each move as the reference does (ties to the lower block), the
// CTA finds the donor's first victim (by (rank, stamp, slot index): its step 2's order), and
// thread 0 moves it; then every counter of the pool's layers is halved.
__global__ void cache_rebalance_kernel(ft_cuda_cache_rebalance_params p) {
    ft_pdl_begin();
    __shared__ int given[FT_CUDA_CACHE_POOL_LAYERS_MAX], taken[FT_CUDA_CACHE_POOL_LAYERS_MAX];
    __shared__ int s_go, s_R, s_D, s_jR, s_jD;
    __shared__ uint32_t b_rank[LOOKUP_THREADS];
    __shared__ uint64_t b_stamp[LOOKUP_THREADS];
    __shared__ int b_slot[LOOKUP_THREADS];
    const int tid = threadIdx.x, nt = blockDim.x, G = p.ghost_depth;
    const ft_cuda_cache_frecency &f = p.frecency;
    if (tid == 0) s_go = ++*p.tokens % (uint64_t)p.period == 0;
    for (int j = tid; j < p.n_layers; j += nt) given[j] = taken[j] = 0;
    __syncthreads();
    if (!s_go) return;
    for (int m = 0; m < p.max_moves; m++) {
        if (tid == 0) {
            int jR = -1, jD = -1;
            for (int j = 0; j < p.n_layers; j++) {
                const int L = p.layers[j];
                if (given[j] < G && taken[j] == 0 && p.own_n[L] < p.n_expert[L] &&
                    (jR < 0 || p.ghost[L * G + given[j]] > p.ghost[p.layers[jR] * G + given[jR]]))
                    jR = j;
            }
            for (int j = 0; j < p.n_layers && jR >= 0; j++) {
                const int L = p.layers[j];
                if (j != jR && taken[j] < G && given[j] == 0 && p.own_n[L] > p.floor &&
                    (jD < 0 || p.tail[L * G + taken[j]] < p.tail[p.layers[jD] * G + taken[jD]]))
                    jD = j;
            }
            bool move = jR >= 0 && jD >= 0;
            if (move) {
                uint64_t gain = p.ghost[p.layers[jR] * G + given[jR]], loss = p.tail[p.layers[jD] * G + taken[jD]];
                move = gain > loss + (uint64_t)p.min_gain;
            }
            s_jR = jR, s_jD = jD;
            s_R = move ? p.layers[jR] : -1;
            s_D = move ? p.layers[jD] : -1;
        }
        __syncthreads();
        const int R = s_R, D = s_D;
        if (R < 0) break;
        // the donor's first victim: each thread's best among its slots, then thread 0's pick
        const uint64_t u = f.steps ? f.steps[D] : 0;
        uint32_t best_rank = 0;
        uint64_t best_stamp = 0;
        int best = -1;
        for (int s = tid; s < p.n_slots; s += nt) {
            if (p.slot_owner[s] != D) continue;
            const int e = p.slot_expert[s];
            uint32_t r = 0;
            if (f.steps && e >= 0) {
                const size_t at = (size_t)p.map_base[D] + (size_t)e;
                r = 1 + moe_frecency_score(u, f.count[at], f.last[at], f.hist[at]);
            }
            const uint64_t st = p.stamp[s];
            if (best < 0 || r < best_rank || (r == best_rank && st < best_stamp)) best = s, best_rank = r, best_stamp = st;
        }
        b_slot[tid] = best;
        b_rank[tid] = best_rank;
        b_stamp[tid] = best_stamp;
        __syncthreads();
        if (tid == 0) {
            int s = -1;
            uint32_t r = 0;
            uint64_t st = 0;
            for (int i = 0; i < nt; i++) {
                const int c = b_slot[i];
                if (c < 0) continue;
                if (s < 0 || b_rank[i] < r || (b_rank[i] == r && (b_stamp[i] < st || (b_stamp[i] == st && c < s))))
                    s = c, r = b_rank[i], st = b_stamp[i];
            }
            // (the floor keeps the donor slots: s >= 0)
            const int old = p.slot_expert[s];
            if (old >= 0) {
                const size_t at = (size_t)p.map_base[D] + (size_t)old;
                p.map[at] = -1;
                p.ghost_tag[at] = ++p.evictions[D];
            }
            p.slot_expert[s] = -1;
            p.stamp[s] = 0;
            p.slot_owner[s] = R;
            p.slot_map_base[s] = p.map_base[R];
            p.own_n[D]--;
            p.own_n[R]++;
            taken[s_jD]++;
            given[s_jR]++;
            ++*p.moves;
        }
        __syncthreads();
    }
    for (int i = tid; i < p.n_layers * G; i += nt) {
        const int L = p.layers[i / G], d = i % G;
        p.tail[L * G + d] >>= 1;
        p.ghost[L * G + d] >>= 1;
    }
}

extern "C" void ft_cuda_cache_rebalance(const ft_cuda_cache_rebalance_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(p->n_layers >= 1 && p->n_layers <= FT_CUDA_CACHE_POOL_LAYERS_MAX && p->ghost_depth >= 1 &&
                   p->period >= 1 && p->max_moves >= 0 && p->min_gain >= 0);
    ft_launch(cache_rebalance_kernel, 1, LOOKUP_THREADS, 0, ft_cuda_stream_handle(s), *p);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Copies

#define COPY_THREADS 512
#define COPY_UNROLL 4

// A fixed grid over the step's copies (count read on the device): the payload of copy j is
// its three banks' bytes one after another, cut in W-byte units; thread units are
// COPY_UNROLL apart by blockDim so each thread has COPY_UNROLL loads in flight (PCIe reads of
// mapped host memory have a long latency: throughput needs many outstanding loads). No
// device temporary: each unit goes from its host row (with a map: its slot) straight to its
// destination row.
template <typename W>
__global__ void __launch_bounds__(COPY_THREADS) cache_copy_kernel(ft_cuda_cache_copy_params p) {
    ft_pdl_begin();
    __shared__ int s_k;
    if (threadIdx.x == 0) {
        if (p.copy_ns) atomicMin((unsigned long long *)&p.copy_span[0], (unsigned long long)device_clock_ns());
        s_k = p.n_copies ? *p.n_copies : p.n_fixed;
    }
    __syncthreads();
    const int k = s_k;
    const uint64_t u0 = p.bytes[0] / sizeof(W), u1 = p.bytes[1] / sizeof(W), u2 = p.bytes[2] / sizeof(W);
    const uint64_t U = u0 + u1 + u2, total = (uint64_t)k * U;
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x * COPY_UNROLL;
    for (uint64_t base = (uint64_t)blockIdx.x * blockDim.x * COPY_UNROLL + threadIdx.x; base < total; base += step) {
        W v[COPY_UNROLL];
        W *dst[COPY_UNROLL];
#pragma unroll
        for (int r = 0; r < COPY_UNROLL; r++) {
            uint64_t idx = base + (uint64_t)r * blockDim.x;
            dst[r] = NULL;
            if (idx >= total) continue;
            uint64_t j = idx / U, u = idx - j * U;
            int b = u < u0 ? 0 : u < u0 + u1 ? 1 : 2;
            u -= b == 0 ? 0 : b == 1 ? u0 : u0 + u1;
            const int64_t e = p.copy_expert ? p.copy_expert[j] : (int64_t)j;
            const W *src;
            if (p.map) { // only the experts the map holds, from their slots
                const int64_t slot = p.map[e];
                if (slot < 0) continue;
                src = (const W *)(p.slot_src[b] + (uint64_t)slot * p.slot_stride[b]) + u;
            } else {
                src = (const W *)(p.src[b] + (uint64_t)e * p.bytes[b]) + u;
            }
            dst[r] = (W *)(p.dst[b] + (uint64_t)(p.copy_slot ? p.copy_slot[j] : (int64_t)j) * p.stride[b]) + u;
            v[r] = *src;
        }
#pragma unroll
        for (int r = 0; r < COPY_UNROLL; r++)
            if (dst[r]) *dst[r] = v[r];
    }
    if (!p.copy_ns) return; // telemetry off: no timing
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicMax((unsigned long long *)&p.copy_span[1], (unsigned long long)device_clock_ns());
        __threadfence();
        unsigned long long done = atomicAdd((unsigned long long *)&p.copy_span[2], 1ull);
        if (done == gridDim.x - 1 && k > 0) {
            uint64_t a = atomicAdd((unsigned long long *)&p.copy_span[0], 0ull);
            uint64_t b = atomicAdd((unsigned long long *)&p.copy_span[1], 0ull);
            *p.copy_ns += b - a;
        }
    }
}

// Whether every bank's addresses, expert bytes and stride allow 16-byte units.
static bool banks_wide(const uint8_t *const src[3], uint8_t *const dst[3], const uint64_t bytes[3],
                       const uint64_t stride[3]) {
    bool wide = true;
    for (int b = 0; b < 3; b++)
        wide = wide && (uintptr_t)src[b] % 16 == 0 && (uintptr_t)dst[b] % 16 == 0 && bytes[b] % 16 == 0 &&
               stride[b] % 16 == 0;
    return wide;
}

extern "C" void ft_cuda_cache_copy(const ft_cuda_cache_copy_params *p, int n_ctas, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(p->n_copies || (!p->copy_expert && !p->copy_slot && p->n_fixed >= 0));
    if (n_ctas <= 0) {
        int dev = 0, sms = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        n_ctas = 2 * sms;
    }
    // 16-byte units where every address and size allows it, else bytes
    bool wide = banks_wide(p->src, p->dst, p->bytes, p->stride);
    for (int b = 0; b < 3 && p->map; b++)
        wide = wide && (uintptr_t)p->slot_src[b] % 16 == 0 && p->slot_stride[b] % 16 == 0;
    if (wide) ft_launch(cache_copy_kernel<uint4>, n_ctas, COPY_THREADS, 0, ft_cuda_stream_handle(s), *p);
    else ft_launch(cache_copy_kernel<uint8_t>, n_ctas, COPY_THREADS, 0, ft_cuda_stream_handle(s), *p);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// A prefill's fills from the overlay (device to device)

enum { FILL_THREADS = 256 };

template <typename W>
__global__ void __launch_bounds__(FILL_THREADS) cache_fill_kernel(const ft_cuda_cache_fill_params p) {
    const int j = blockIdx.x, e = p.expert[j], slot = p.slot[j];
    for (int b = 0; b < 3; b++) {
        const W *src = (const W *)(p.src[b] + (uint64_t)e * p.bytes[b]);
        W *dst = (W *)(p.dst[b] + (uint64_t)slot * p.stride[b]);
        for (uint64_t u = threadIdx.x; u < p.bytes[b] / sizeof(W); u += FILL_THREADS) dst[u] = src[u];
    }
    if (j == 0 && threadIdx.x == 0) {
        const uint64_t t = ++*p.clock;
        for (int i = 0; i < p.n; i++) {
            p.map[p.expert[i]] = p.slot[i];
            p.slot_expert[p.slot[i]] = p.expert[i];
            p.stamp[p.slot[i]] = t;
        }
    }
}

extern "C" void ft_cuda_cache_fill(const ft_cuda_cache_fill_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(p->n >= 1 && p->n <= FT_CUDA_CACHE_FILL_MAX);
    if (banks_wide(p->src, p->dst, p->bytes, p->stride)) cache_fill_kernel<uint4><<<p->n, FILL_THREADS, 0, ft_cuda_stream_handle(s)>>>(*p);
    else cache_fill_kernel<uint8_t><<<p->n, FILL_THREADS, 0, ft_cuda_stream_handle(s)>>>(*p);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Invalidation, trace replay, timers

__global__ void cache_invalidate_kernel(int32_t *slot_expert, uint64_t *stamp, const int32_t *slot_map_base,
                                        int32_t *map, int first, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int s = first + i, e = slot_expert[s];
        stamp[s] = 0;
        if (e >= 0) {
            map[slot_map_base[s] + e] = -1;
            slot_expert[s] = -1;
        }
    }
}

extern "C" void ft_cuda_cache_invalidate(int32_t *slot_expert, uint64_t *stamp, const int32_t *slot_map_base,
                                         int32_t *map, int first, int n, ft_cuda_stream *s) {
    if (n <= 0) return;
    int blocks = (n + 255) / 256;
    cache_invalidate_kernel<<<blocks, 256, 0, ft_cuda_stream_handle(s)>>>(slot_expert, stamp, slot_map_base, map,
                                                                          first, n);
    CUDA_CHECK_LAUNCH();
}

__global__ void cache_trace_kernel(ft_cuda_cache_trace_params p) {
    ft_pdl_begin();
    const int64_t step = *p.step;
    const uint16_t *at = p.trace + ((uint64_t)step * p.n_layers + p.li) * (uint64_t)p.n_seq * p.k;
    for (int i = threadIdx.x; i < p.n_tok * p.k; i += blockDim.x) {
        int t = i / p.k, j = i - t * p.k;
        p.sel[i] = at[(t % p.n_seq) * p.k + j];
    }
    __syncthreads();
    if (threadIdx.x == 0 && p.last) *p.step = (step + 1) % p.n_steps;
}

extern "C" void ft_cuda_cache_trace(const ft_cuda_cache_trace_params *p, ft_cuda_stream *s) {
    ft_launch(cache_trace_kernel, 1, 256, 0, ft_cuda_stream_handle(s), *p);
    CUDA_CHECK_LAUNCH();
}

__global__ void cache_timer_kernel(uint64_t *t0, const uint64_t *t0_in, uint64_t *acc, uint64_t add) {
    uint64_t now = device_clock_ns();
    if (t0) *t0 = now;
    if (t0_in) *acc += now - *t0_in;
    else if (acc) *acc += add;
}

extern "C" void ft_cuda_cache_timer_start(uint64_t *t0, ft_cuda_stream *s) {
    cache_timer_kernel<<<1, 1, 0, ft_cuda_stream_handle(s)>>>(t0, NULL, NULL, 0);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_cache_timer_stop(const uint64_t *t0, uint64_t *acc, ft_cuda_stream *s) {
    cache_timer_kernel<<<1, 1, 0, ft_cuda_stream_handle(s)>>>(NULL, t0, acc, 0);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_cache_add(uint64_t *acc, uint64_t v, ft_cuda_stream *s) {
    cache_timer_kernel<<<1, 1, 0, ft_cuda_stream_handle(s)>>>(NULL, NULL, acc, v);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Runtime calls of offload.c

extern "C" void *ft_cuda_host_alloc_mapped(size_t n, void **dev) {
    void *p = NULL;
    cudaError_t err = cudaHostAlloc(&p, n ? n : 1, cudaHostAllocMapped | cudaHostAllocPortable);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    CUDA_CHECK(cudaHostGetDevicePointer(dev, p, 0));
    return p;
}

extern "C" bool ft_cuda_host_register_mapped(void *p, size_t n) {
    if (cudaHostRegister(p, n, cudaHostRegisterMapped | cudaHostRegisterPortable) == cudaSuccess) return true;
    (void)cudaGetLastError();
    return false;
}

extern "C" bool ft_cuda_host_unregister(void *p) {
    if (cudaHostUnregister(p) == cudaSuccess) return true;
    (void)cudaGetLastError();
    return false;
}

extern "C" void *ft_cuda_host_device_pointer(void *host) {
    void *dev = NULL;
    CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
    return dev;
}

extern "C" void ft_cuda_memcpy_2d_h2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                      size_t height, ft_cuda_stream *s) {
    CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyHostToDevice,
                                 ft_cuda_stream_handle(s)));
}

extern "C" void ft_cuda_stream_wait_event(ft_cuda_stream *s, ft_cuda_event *e) {
    CUDA_CHECK(cudaStreamWaitEvent(ft_cuda_stream_handle(s), (cudaEvent_t)e, 0));
}

extern "C" ft_cuda_event *ft_cuda_event_init_sync_only(void) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return (ft_cuda_event *)e;
}
