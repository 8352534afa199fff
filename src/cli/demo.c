// demo.c: the built-in demo model, written by `ft synth` into the cache folder on first use.
#include "cli.h"
#include "../model/synth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool cli_demo_model(const char *cmd, char *path, size_t cap) {
    char dir[900];
    if (!ft_cache_dir(dir, sizeof(dir))) {
        fprintf(stderr, "ft %s: no -m and neither HOME nor XDG_CACHE_HOME is set for the demo model\n", cmd);
        return false;
    }
    snprintf(path, cap, "%s/demo-qwen3moe.gguf", dir);
    struct stat st;
    if (stat(path, &st) == 0) {
        fprintf(stderr, "ft %s: using the demo model %s (random weights: its text is noise)\n", cmd, path);
        return true;
    }
    char tmp[1100];
    // mkdir -p: every prefix of dir, ignoring the ones that exist
    for (char *s = dir + 1;; s++) {
        if (*s != '/' && *s != 0) continue;
        char c = *s;
        *s = 0;
        int rc = mkdir(dir, 0755);
        *s = c;
        if (rc != 0 && errno != EEXIST) {
            fprintf(stderr, "ft %s: cannot create %s: %s\n", cmd, dir, strerror(errno));
            return false;
        }
        if (!c) break;
    }
    fprintf(stderr, "ft %s: writing the demo model (a small qwen3moe with RANDOM weights) to %s\n", cmd, path);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    ft_synth_params sp = ft_synth_default_params();
    ft_err err = {{0}};
    if (!ft_synth_write(&sp, tmp, &err) || rename(tmp, path) != 0) {
        fprintf(stderr, "ft %s: writing the demo model: %s\n", cmd, err.msg[0] ? err.msg : strerror(errno));
        return false;
    }
    return true;
}

