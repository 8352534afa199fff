// progress: a progress bar on stderr for long start-up steps (reading a model into memory,
// copying weights to the GPU).
//
// On a terminal the bar redraws in place ("\r") at most every percent; otherwise (a log
// file, a pipe) it writes one line per 10%, so logs stay short. Single-threaded use.
#ifndef FT_PROGRESS_H
#define FT_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>

// Reports that done of total bytes of the step `what` ("uploading weights", ...) are finished;
// ctx is what the caller registered.
typedef void (*ft_progress_fn)(void *ctx, const char *what, size_t done, size_t total);

typedef struct ft_progress {
    const char *what;  // "loading", "uploading", ... (printed before the bar)
    bool tty;          // stderr is a terminal
    int last;          // last percentage printed (-1: none yet)
} ft_progress;

// Starts a bar labelled what (NULL: by the first report's step).
ft_progress ft_progress_begin(const char *what);
// The ft_progress_fn that draws ctx (an ft_progress); the line ends when done == total, and a
// report of another step starts a new bar.
void ft_progress_report(void *ctx, const char *what, size_t done, size_t total);

#endif
