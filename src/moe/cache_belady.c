// cache_belady.c: Belady's MIN over a sequence of set requests (see cache_belady.h).
#include "cache_belady.h"

#include <stdlib.h>
#include <string.h>

#define NEVER INT64_MAX // the next request of an item requested no more

int64_t moe_belady_misses(const int32_t *items, const int64_t *start, int64_t n_requests, int n_items, int slots,
                          int64_t count_from, uint32_t *per_request) {
    FT_ASSERT(slots >= 1 && n_items >= 1 && n_requests >= 0);
    int64_t n_occ = start[n_requests] - start[0];
    // next[i]: the next request after the one holding occurrence i that holds the same item
    int64_t *next = ft_malloc((size_t)(n_occ ? n_occ : 1) * sizeof(int64_t));
    int64_t *seen = ft_malloc((size_t)n_items * sizeof(int64_t)); // the next request of each item so far
    for (int i = 0; i < n_items; i++) seen[i] = NEVER;
    for (int64_t r = n_requests - 1; r >= 0; r--) {
        for (int64_t i = start[r]; i < start[r + 1]; i++) next[i - start[0]] = seen[items[i]];
        for (int64_t i = start[r]; i < start[r + 1]; i++) seen[items[i]] = r;
    }
    int32_t *slot_of = ft_malloc((size_t)n_items * sizeof(int32_t));
    for (int i = 0; i < n_items; i++) slot_of[i] = -1;
    int32_t *slot_item = ft_malloc((size_t)slots * sizeof(int32_t));
    int64_t *slot_next = ft_malloc((size_t)slots * sizeof(int64_t)); // next request of what it holds
    int64_t *slot_used = ft_malloc((size_t)slots * sizeof(int64_t)); // the last request that held it
    for (int s = 0; s < slots; s++) slot_item[s] = -1, slot_next[s] = NEVER, slot_used[s] = -1;
    int64_t misses = 0;
    int n_held = 0;
    for (int64_t r = 0; r < n_requests && misses >= 0; r++) {
        if (per_request) per_request[r] = 0;
        // the request's resident items are pinned and learn their next request
        for (int64_t i = start[r]; i < start[r + 1]; i++) {
            int s = slot_of[items[i]];
            if (s >= 0) slot_next[s] = next[i - start[0]], slot_used[s] = r;
        }
        for (int64_t i = start[r]; i < start[r + 1]; i++) {
            int e = items[i];
            if (slot_of[e] >= 0) continue; // resident, or copied in by an earlier duplicate
            int victim = -1;
            if (n_held < slots) { // an empty slot: the lowest
                for (int s = 0; s < slots && victim < 0; s++)
                    if (slot_item[s] < 0) victim = s;
                n_held++;
            } else { // the furthest next request among the slots this request does not pin
                for (int s = 0; s < slots; s++)
                    if (slot_used[s] != r && (victim < 0 || slot_next[s] > slot_next[victim])) victim = s;
                if (victim < 0) {
                    misses = -1; // more distinct items than slots
                    break;
                }
                slot_of[slot_item[victim]] = -1;
            }
            slot_item[victim] = e;
            slot_of[e] = victim;
            slot_next[victim] = next[i - start[0]];
            slot_used[victim] = r;
            if (r >= count_from) misses++;
            if (per_request) per_request[r]++;
        }
    }
    free(next);
    free(seen);
    free(slot_of);
    free(slot_item);
    free(slot_next);
    free(slot_used);
    return misses;
}
