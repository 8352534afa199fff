// test_moe_cache_belady.c: Belady's MIN over set requests (src/moe/cache_belady.c) against a
// brute-force search of every schedule on small cases: equal counted from the start, within
// the slot count after a warm-up (the bound cache_belady.h states).
#include "test.h"
#include "../src/moe/cache_belady.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>

// The fewest copies any demand schedule needs: dynamic programming over the set of resident
// items (a bitmask). Serving request D from X may end in any Y with D <= Y <= X | D, |Y| <= slots
// (an item leaves only by eviction, enters only when requested), at |D \ X| copies, counted from
// request count_from on.
static int64_t brute_force(const int32_t *items, const int64_t *start, int n_req, int n_items, int slots,
                           int count_from) {
    int n_states = 1 << n_items;
    int64_t *cost = malloc((size_t)n_states * sizeof(int64_t)), *next = malloc((size_t)n_states * sizeof(int64_t));
    for (int x = 0; x < n_states; x++) cost[x] = INT64_MAX;
    cost[0] = 0;
    for (int r = 0; r < n_req; r++) {
        unsigned d = 0;
        for (int64_t i = start[r]; i < start[r + 1]; i++) d |= 1u << items[i];
        for (int y = 0; y < n_states; y++) next[y] = INT64_MAX;
        for (int x = 0; x < n_states; x++) {
            if (cost[x] == INT64_MAX) continue;
            int64_t c = cost[x] + (r >= count_from ? __builtin_popcount(d & ~(unsigned)x) : 0);
            unsigned keep = (unsigned)x & ~d; // what may stay beside the request: any subset
            for (unsigned z = keep;; z = (z - 1) & keep) {
                unsigned y = d | z;
                if (__builtin_popcount(y) <= slots && c < next[y]) next[y] = c;
                if (!z) break;
            }
        }
        memcpy(cost, next, (size_t)n_states * sizeof(int64_t));
    }
    int64_t best = INT64_MAX;
    for (int x = 0; x < n_states; x++) best = cost[x] < best ? cost[x] : best;
    free(cost);
    free(next);
    return best;
}

TEST(moe_belady_equals_brute_force_on_small_cases) {
    ft_rng rng = ft_rng_init(23);
    int32_t items[64];
    int64_t start[17];
    int cases = 0, beaten_lru = 0;
    for (int c = 0; c < 3000; c++) {
        int n_items = 2 + (int)(ft_rng_next(&rng) % 7), slots = 1 + (int)(ft_rng_next(&rng) % (uint64_t)n_items);
        int n_req = 1 + (int)(ft_rng_next(&rng) % 16), max_set = slots < 3 ? slots : 3;
        start[0] = 0;
        for (int r = 0; r < n_req; r++) {
            int n = 1 + (int)(ft_rng_next(&rng) % (uint64_t)max_set);
            unsigned used = 0;
            int64_t at = start[r];
            for (int j = 0; j < n;) { // n distinct items, sometimes one repeated
                int e = (int)(ft_rng_next(&rng) % (uint64_t)n_items);
                if (used >> e & 1) continue;
                used |= 1u << e;
                items[at++] = e;
                j++;
            }
            if (ft_rng_next(&rng) % 4 == 0) items[at] = items[start[r]], at++;
            start[r + 1] = at;
        }
        int from = (int)(ft_rng_next(&rng) % (uint64_t)n_req);
        for (int w = 0; w < 2; w++) {
            int count_from = w ? from : 0;
            int64_t got = moe_belady_misses(items, start, n_req, n_items, slots, count_from, NULL);
            int64_t want = brute_force(items, start, n_req, n_items, slots, count_from);
            // from the start MIN is the optimum; after a warm-up it may enter the counted part
            // holding other items than the best schedule would, so at most `slots` copies more
            bool ok = w ? got >= want && got <= want + slots : got == want;
            CHECK(ok, "case %d (items %d, slots %d, requests %d, counted from %d): MIN %lld, optimum %lld", c,
                  n_items, slots, n_req, count_from, (long long)got, (long long)want);
            if (!ok) return;
        }
        cases++;
        // an LRU on the same requests (oldest last use evicted) never does better
        int64_t last[16], lru = 0;
        int slot_item[16], held = 0;
        for (int i = 0; i < n_items; i++) last[i] = -1;
        for (int r = 0; r < n_req; r++) {
            for (int64_t i = start[r]; i < start[r + 1]; i++) {
                int e = items[i], s = -1;
                for (int k = 0; k < held; k++)
                    if (slot_item[k] == e) s = k;
                if (s < 0) {
                    lru++;
                    if (held < slots) s = held++;
                    else
                        for (int k = 0; k < held; k++)
                            if (last[slot_item[k]] < r && (s < 0 || last[slot_item[k]] < last[slot_item[s]])) s = k;
                    slot_item[s] = e;
                }
                last[e] = r;
            }
        }
        int64_t min = moe_belady_misses(items, start, n_req, n_items, slots, 0, NULL);
        CHECK(min <= lru, "case %d: MIN %lld, LRU %lld", c, (long long)min, (long long)lru);
        beaten_lru += min < lru;
    }
    CHECK(cases == 3000 && beaten_lru > 300, "MIN did better than LRU in only %d of %d cases", beaten_lru, cases);
    // a request of more distinct items than slots cannot be served
    int32_t three[3] = {0, 1, 2};
    int64_t one[2] = {0, 3};
    CHECK(moe_belady_misses(three, one, 1, 3, 2, 0, NULL) == -1);
    CHECK(moe_belady_misses(three, one, 1, 3, 3, 0, NULL) == 3);
}
