// mapping.c: see mapping.h.
#include "mapping.h"
#include "util.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

static uintptr_t align_up(uintptr_t a, size_t to) { return (a + to - 1) & ~(uintptr_t)(to - 1); }
static uintptr_t align_down(uintptr_t a, size_t to) { return a & ~(uintptr_t)(to - 1); }

// n bytes of fresh memory at an FT_HUGE_PAGE-aligned address (over-reserve, then trim), or NULL.
static void *map_aligned(size_t n, int prot, int flags, int fd) {
    size_t span = n + FT_HUGE_PAGE;
    uint8_t *raw = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uint8_t *p = (uint8_t *)align_up((uintptr_t)raw, FT_HUGE_PAGE);
    void *got = mmap(p, n, prot, flags | MAP_FIXED, fd, 0);
    if (got == MAP_FAILED) {
        munmap(raw, span);
        return NULL;
    }
    size_t end = align_up((uintptr_t)p + n, 4096) - (uintptr_t)raw;
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (end < span) munmap(raw + end, span - end);
    return p;
}

void *ft_mapping_open(int fd, size_t size) { return map_aligned(size, PROT_READ, MAP_PRIVATE, fd); }

void ft_mapping_close(void *p, size_t size) {
    if (p) munmap(p, size);
}

void *ft_huge_alloc(size_t n) {
    void *p = map_aligned(n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
    if (p) madvise(p, n ? n : 1, MADV_HUGEPAGE); // a hint: small pages (THP off) hold the same bytes
    return p;
}

void ft_huge_free(void *p, size_t n) {
    if (p) munmap(p, n ? n : 1);
}

size_t ft_mapping_movable(const void *p, size_t n) {
    uintptr_t a = align_up((uintptr_t)p, FT_HUGE_PAGE), b = align_down((uintptr_t)p + n, FT_HUGE_PAGE);
    return b > a ? (size_t)(b - a) : 0;
}

// Reads len bytes of fd at off into dst; false on an error or end of file.
static bool read_full(int fd, uint8_t *dst, size_t len, off_t off) {
    while (len) {
        ssize_t k = pread(fd, dst, len, off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        dst += k;
        len -= (size_t)k;
        off += k;
    }
    return true;
}

size_t ft_mapping_to_anonymous(const void *base, int fd, void *p, size_t n) {
    uintptr_t a = align_up((uintptr_t)p, FT_HUGE_PAGE), b = align_down((uintptr_t)p + n, FT_HUGE_PAGE);
    if (b <= a) return 0;
    size_t len = (size_t)(b - a);
    uint8_t *t = map_aligned(len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
    if (!t) return 0;
    madvise(t, len, MADV_HUGEPAGE); // a hint: without it (THP off) the pages are small, the bytes the same
    bool got = true;
    if (fd >= 0) got = read_full(fd, t, len, (off_t)(a - (uintptr_t)base));
    else memcpy(t, (const void *)a, len);
    // read-only, as the file's mapping was, then onto its addresses (unmapping the file's pages)
    if (!got || mprotect(t, len, PROT_READ) != 0) {
        munmap(t, len);
        return 0;
    }
    if (mremap(t, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)a) == MAP_FAILED) {
        // the kernel unmaps the target before it moves the pages: a move that fails (no room
        // for one more mapping) may leave a hole, so the file's pages are mapped back over it
        // (from the mapping itself there is nothing to map back: its caller is a test)
        FT_ASSERT(fd >= 0 && "ft_mapping_to_anonymous: a failed move needs the file to map back");
        void *back = mmap((void *)a, len, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, (off_t)(a - (uintptr_t)base));
        FT_ASSERT(back != MAP_FAILED && "ft_mapping_to_anonymous: the file's pages could not be mapped back");
        munmap(t, len);
        return 0;
    }
    return len;
}

bool ft_huge_pages_available(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char line[128] = "";
    bool ok = fgets(line, sizeof(line), f) && !strstr(line, "[never]");
    fclose(f);
    return ok;
}

void ft_mapping_usage(const void *p, size_t n, size_t *anon, size_t *huge) {
    *anon = *huge = 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return;
    uintptr_t lo = (uintptr_t)p, hi = lo + n;
    char line[512];
    bool in = false;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long s, e, kb;
        char c;
        if (sscanf(line, "%llx-%llx %c", &s, &e, &c) == 3) { // a mapping's first line
            in = (uintptr_t)s >= lo && (uintptr_t)e <= hi;
            continue;
        }
        if (!in) continue;
        if (sscanf(line, "Anonymous: %llu kB", &kb) == 1) *anon += (size_t)kb * 1024;
        else if (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1) *huge += (size_t)kb * 1024;
    }
    fclose(f);
}
