// stop: stop strings over streamed text.
//
// Generated text is fed piece by piece; text that might be the beginning of a stop string is
// held back until it either completes one (generation ends; the stop string and anything
// after it are never emitted) or cannot any more (it is released). Buffers are sized at init
// from the longest stop string; feeding never allocates. One matcher per sequence.
#ifndef FT_ENGINE_STOP_H
#define FT_ENGINE_STOP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ft_stop ft_stop;

// Receives text that is safe to show.
typedef void (*ft_emit_fn)(void *ctx, const char *text, size_t len);

// A matcher for n stop strings (copied; empty ones ignored). n may be 0.
ft_stop *ft_stop_init(const char *const *stops, int n);
void ft_stop_free(ft_stop *s); // NULL is a no-op

// Feeds text. Emits what can no longer be part of a stop string and returns true when a stop
// string has completed (its text and what follows are dropped).
bool ft_stop_feed(ft_stop *s, const char *text, size_t len, ft_emit_fn emit, void *ctx);
// The stop string that completed (the matcher's copy, alive until ft_stop_free), or NULL.
const char *ft_stop_matched(const ft_stop *s);
// End of generation: emits what is held back.
void ft_stop_flush(ft_stop *s, ft_emit_fn emit, void *ctx);

#endif
