// cache_belady: the offline optimum of a cache (Belady's MIN), the bound every replacement
// policy of the expert cache is measured against on a route trace.
//
// A request is a set of items that must all be resident at once (one layer's selections in one
// decode step; duplicates allowed, they cost one copy); a miss is a distinct item of a request
// that is not resident, and it is copied in (demand paging). MIN evicts, for each miss, the
// resident item whose next request lies furthest in the future (never requested again counts as
// infinitely far), among the items the current request does not hold; ties go to the lowest
// slot. On a sequence of such requests this minimises the number of copies (the brute-force
// search of tests/test_moe_cache_belady.c, over every reachable set of resident items, agrees on
// every small case). Counted after a warm-up it is not always the least for the counted part
// alone (a schedule that paid more in the warm-up may enter it holding better items), but it is
// at most `slots` copies above that least: MIN is optimal from whatever it holds at the start of
// the counted part, and from two starting sets the optimum differs by at most the items in which
// they differ.
//
// Plain computation: the caller owns every array; the function allocates its scratch and frees
// it before returning. Thread-safe.
#ifndef FT_MOE_CACHE_BELADY_H
#define FT_MOE_CACHE_BELADY_H

#include "../util/util.h"

// Misses of MIN with `slots` slots over the requests: request r holds items
// items[start[r] .. start[r + 1]) (ids in [0, n_items)), for r in [0, n_requests). Requests from
// count_from on are counted (the earlier ones are served, not counted). When per_request is not
// NULL, per_request[r] receives request r's misses (every request, counted or not). Returns -1
// when a request holds more distinct items than there are slots (no policy can serve it).
int64_t moe_belady_misses(const int32_t *items, const int64_t *start, int64_t n_requests, int n_items, int slots,
                          int64_t count_from, uint32_t *per_request);

#endif
