// progress.c: the start-up progress bar (see progress.h).
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

ft_progress ft_progress_begin(const char *what) {
    return (ft_progress){.what = what, .tty = isatty(STDERR_FILENO) == 1, .last = -1};
}

void ft_progress_report(void *ctx, const char *what, size_t done, size_t total) {
    ft_progress *p = ctx;
    if (what && (!p->what || strcmp(what, p->what))) {
        p->what = what;
        p->last = -1;
    }
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
    if (pct > 100) pct = 100;
    int step = p->tty ? 1 : 10;
    if (pct != 100 && p->last >= 0 && pct / step == p->last / step) return;
    if (pct == p->last) return;
    p->last = pct;
    bool gb = total >= 1000000000u; // small files in MB, so the numbers move
    const double unit = gb ? 1e9 : 1e6;
    enum { WIDTH = 40 };
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++)
        bar[i] = i < pct * WIDTH / 100 ? '#' : '.';
    bar[WIDTH] = 0;
    fprintf(stderr, "%s%s [%s] %3d%% %.2f/%.2f %s%s", p->tty ? "\r" : "", p->what, bar, pct, (double)done / unit,
            (double)total / unit, gb ? "GB" : "MB", p->tty && pct < 100 ? "" : "\n");
    fflush(stderr);
}
