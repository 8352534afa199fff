// mapping: read-only file mappings at huge-page alignment, whose pages can later be swapped for
// anonymous memory in transparent huge pages without moving (weights the CPU streams).
//
// A file's pages in the page cache are mapped 4 KiB at a time, so a decode step that streams
// gigabytes of weights through them takes a TLB miss every 4 KiB; the same bytes in 2 MiB pages
// take one every 2 MiB. ft_mapping_to_anonymous copies a range into anonymous memory (asking
// the kernel for huge pages with MADV_HUGEPAGE) and moves that memory onto the range's own
// addresses (mremap), so every pointer into the mapping stays valid. Only whole huge pages move:
// the file must be mapped at a huge-page-aligned address (ft_mapping_open) so that a file offset
// and its address agree on the alignment.
#ifndef FT_UTIL_MAPPING_H
#define FT_UTIL_MAPPING_H

#include <stdbool.h>
#include <stddef.h>

#define FT_HUGE_PAGE ((size_t)2 << 20)

// Maps size bytes of the open file fd, read-only and private, at an FT_HUGE_PAGE-aligned
// address. Returns NULL (errno set) on failure; ft_mapping_close unmaps it.
void *ft_mapping_open(int fd, size_t size);
void ft_mapping_close(void *p, size_t size);

// Replaces the whole huge pages inside [p, p + n), which must lie in the mapping at base of
// ft_mapping_open(fd, ...), with anonymous read-only memory holding the same bytes, staged at
// once (the caller bounds n: the engine moves the weights in units on its threads). The bytes
// are read from fd (pread: several times faster than faulting the mapping in), or copied from
// the mapping where fd is -1 (tests: a move the kernel refuses can then not be undone, which
// aborts). Returns the bytes moved: all of them, or 0 on a failure (no memory, a short read),
// which leaves the range mapped from the file, reading the same.
size_t ft_mapping_to_anonymous(const void *base, int fd, void *p, size_t n);

// The bytes of [p, p + n) that ft_mapping_to_anonymous would move.
size_t ft_mapping_movable(const void *p, size_t n);

// n bytes of zeroed read-write anonymous memory at an FT_HUGE_PAGE-aligned address, asking the
// kernel for huge pages (MADV_HUGEPAGE); NULL when it cannot be had. ft_huge_free(p, n) with
// the same n gives it back.
void *ft_huge_alloc(size_t n);
void ft_huge_free(void *p, size_t n);

// Whether the kernel gives transparent huge pages to memory that asks (MADV_HUGEPAGE): its
// setting is "always" or "madvise", not "never" (false where it has none).
bool ft_huge_pages_available(void);

// The bytes of the mappings inside [p, p + n) that are anonymous memory now, and of those the
// bytes in huge pages (from /proc/self/smaps; 0 where it cannot tell), for messages and tests.
void ft_mapping_usage(const void *p, size_t n, size_t *anon, size_t *huge);

#endif
