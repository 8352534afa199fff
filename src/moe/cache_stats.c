// cache_stats.c: the expert cache's counters and their arithmetic (see cache_stats.h).
#include "cache_stats.h"
#include "../util/util.h"

#include <stdlib.h>
#include <string.h>

void ft_moe_stats_free(ft_moe_stats *s) {
    free(s->layer_block);
    free(s->layer_pool);
    free(s->layer_slots);
    free(s->layers);
    free(s->pool_slots);
    free(s->pool_layers);
    free(s->pools);
    memset(s, 0, sizeof(*s));
}

static void *dup_array(const void *p, size_t n) {
    if (!p || n == 0) return NULL;
    void *q = ft_malloc(n);
    memcpy(q, p, n);
    return q;
}

void ft_moe_stats_copy(ft_moe_stats *dst, const ft_moe_stats *src) {
    ft_moe_stats_free(dst);
    *dst = *src;
    size_t nl = (size_t)src->n_layers, np = (size_t)src->n_pools;
    dst->layer_block = dup_array(src->layer_block, nl * sizeof(int));
    dst->layer_pool = dup_array(src->layer_pool, nl * sizeof(int));
    dst->layer_slots = dup_array(src->layer_slots, nl * sizeof(int));
    dst->layers = dup_array(src->layers, nl * sizeof(ft_moe_counts));
    dst->pool_slots = dup_array(src->pool_slots, np * sizeof(int));
    dst->pool_layers = dup_array(src->pool_layers, np * sizeof(int));
    dst->pools = dup_array(src->pools, np * sizeof(ft_moe_counts));
}

static void counts_sub(ft_moe_counts *a, const ft_moe_counts *b) {
    a->selections -= b->selections;
    a->hits -= b->hits;
    a->misses -= b->misses;
    a->cpu_computed -= b->cpu_computed;
    a->bytes_copied -= b->bytes_copied;
    a->copy_ns -= b->copy_ns;
    a->guesses -= b->guesses;
    a->guesses_right -= b->guesses_right;
    a->prefetched -= b->prefetched;
    a->prefetch_used -= b->prefetch_used;
    a->prefetch_bytes -= b->prefetch_bytes;
}

void ft_moe_stats_sub(ft_moe_stats *a, const ft_moe_stats *b) {
    // a rebuild in between may change the pools (not the layers): then only layers and total
    if (b->n_layers == a->n_layers)
        for (int i = 0; i < a->n_layers; i++) counts_sub(&a->layers[i], &b->layers[i]);
    if (b->n_pools == a->n_pools)
        for (int i = 0; i < a->n_pools; i++) counts_sub(&a->pools[i], &b->pools[i]);
    counts_sub(&a->total, &b->total);
}

static void counts_add(ft_moe_counts *a, const ft_moe_counts *b) {
    a->selections += b->selections;
    a->hits += b->hits;
    a->misses += b->misses;
    a->cpu_computed += b->cpu_computed;
    a->bytes_copied += b->bytes_copied;
    a->copy_ns += b->copy_ns;
    a->guesses += b->guesses;
    a->guesses_right += b->guesses_right;
    a->prefetched += b->prefetched;
    a->prefetch_used += b->prefetch_used;
    a->prefetch_bytes += b->prefetch_bytes;
}

void ft_moe_stats_add(ft_moe_stats *a, const ft_moe_stats *b) {
    if (b->n_layers == a->n_layers)
        for (int i = 0; i < a->n_layers; i++) counts_add(&a->layers[i], &b->layers[i]);
    if (b->n_pools == a->n_pools)
        for (int i = 0; i < a->n_pools; i++) counts_add(&a->pools[i], &b->pools[i]);
    counts_add(&a->total, &b->total);
}

double ft_moe_hit_rate(const ft_moe_counts *c) {
    return c->selections ? (double)c->hits / (double)c->selections : 0.0;
}

double ft_moe_copy_gbps(const ft_moe_counts *c) {
    return c->copy_ns ? (double)c->bytes_copied / (double)c->copy_ns : 0.0; // bytes per ns = GB/s
}

double ft_moe_predict_accuracy(const ft_moe_counts *c) {
    return c->guesses ? (double)c->guesses_right / (double)c->guesses : 0.0;
}

double ft_moe_prefetch_used(const ft_moe_counts *c) {
    return c->prefetched ? (double)c->prefetch_used / (double)c->prefetched : 0.0;
}

uint64_t ft_moe_prefetch_wasted_bytes(const ft_moe_counts *c) {
    if (!c->prefetched || c->prefetch_used >= c->prefetched) return 0;
    return (uint64_t)((double)c->prefetch_bytes * (double)(c->prefetched - c->prefetch_used) / (double)c->prefetched);
}

static void print_counts(FILE *out, const char *what, const ft_moe_counts *c, int n_tokens) {
    fprintf(out, "%-24s hit %5.1f%%  misses %9llu  H2D %9.1f MiB", what, 100 * ft_moe_hit_rate(c),
            (unsigned long long)c->misses, (double)c->bytes_copied / 1048576.0);
    if (n_tokens > 0) fprintf(out, " (%.2f MiB/token)", (double)c->bytes_copied / 1048576.0 / n_tokens);
    fprintf(out, "  %6.1f GB/s", ft_moe_copy_gbps(c));
    if (c->cpu_computed) fprintf(out, "  on the CPU %llu", (unsigned long long)c->cpu_computed);
    if (c->guesses)
        fprintf(out, "  prefetch: accuracy %.1f%%, %llu copies (%.1f MiB), %.1f%% used",
                100 * ft_moe_predict_accuracy(c), (unsigned long long)c->prefetched,
                (double)c->prefetch_bytes / 1048576.0, 100 * ft_moe_prefetch_used(c));
    fputc('\n', out);
}

void ft_moe_stats_print(const ft_moe_stats *s, int n_tokens, FILE *out) {
    fprintf(out, "expert cache: %d slots (%s layout), %.1f MiB, %d pool%s over %d MoE layers\n", s->n_slots,
            s->uniform ? "uniform" : "exact", (double)s->cache_bytes / 1048576.0, s->n_pools, s->n_pools == 1 ? "" : "s",
            s->n_layers);
    char what[64];
    for (int p = 0; p < s->n_pools; p++) {
        snprintf(what, sizeof(what), "  pool %d (%d layers, %d slots)", p, s->pool_layers[p], s->pool_slots[p]);
        print_counts(out, what, &s->pools[p], n_tokens);
    }
    print_counts(out, "  all pools", &s->total, n_tokens);
}
