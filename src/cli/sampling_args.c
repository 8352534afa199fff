// sampling_args.c: the sampling flags and a model's recommended defaults (sampling_args.h).
#include "sampling_args.h"

#include "args.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

// One flag: its spelling, its key in a GGUF (NULL: none), its name in the start-up line, the
// field's bit and place in ft_sampler_params, and its range.
typedef struct {
    const char *flag, *model_key, *name;
    unsigned bit;
    size_t off;
    enum { F32, I32, U64 } kind;
    double lo, hi;  // F32's range
    int64_t ihi;    // I32 and U64: in [0, ihi]
} sampling_flag;

#define AT(field) offsetof(ft_sampler_params, field)
static const sampling_flag k_flags[] = {
    {"--temp", "general.sampling.temp", "temp", FT_SAMPLE_TEMP, AT(temp), F32, 0, 100, 0},
    {"--top-k", "general.sampling.top_k", "top-k", FT_SAMPLE_TOP_K, AT(top_k), I32, 0, 0, 1 << 30},
    {"--top-p", "general.sampling.top_p", "top-p", FT_SAMPLE_TOP_P, AT(top_p), F32, 0, 1, 0},
    {"--min-p", "general.sampling.min_p", "min-p", FT_SAMPLE_MIN_P, AT(min_p), F32, 0, 1, 0},
    {"--repeat-penalty", "general.sampling.penalty_repeat", "repeat-penalty", FT_SAMPLE_REPEAT_PENALTY,
     AT(repeat_penalty), F32, 0, 100, 0},
    {"--repeat-last-n", "general.sampling.penalty_last_n", "repeat-last-n", FT_SAMPLE_PENALTY_LAST_N,
     AT(penalty_last_n), I32, 0, 0, 1 << 20},
    {"--presence-penalty", NULL, "presence-penalty", FT_SAMPLE_PRESENCE_PENALTY, AT(presence_penalty), F32, -2, 2, 0},
    {"--frequency-penalty", NULL, "frequency-penalty", FT_SAMPLE_FREQUENCY_PENALTY, AT(frequency_penalty), F32, -2, 2,
     0},
    {"--seed", NULL, "seed", FT_SAMPLE_SEED, AT(seed), U64, 0, 0, INT64_MAX},
};
#undef AT

// Sets f's field of p: a float field to v, an integer one to n (in its range).
static void set_field(ft_sampler_params *p, const sampling_flag *f, double v, int64_t n) {
    char *at = (char *)p + f->off;
    if (f->kind == F32) *(float *)at = (float)v;
    else if (f->kind == I32) *(int *)at = (int)n;
    else *(uint64_t *)at = (uint64_t)n;
}

sampling_args sampling_args_init(void) {
    return (sampling_args){.p = ft_sampler_default_params()};
}

bool sampling_args_take(sampling_args *s, const char *cmd, int argc, char **argv, int *i, bool *bad) {
    for (size_t k = 0; k < sizeof(k_flags) / sizeof(k_flags[0]); k++) {
        const sampling_flag *f = &k_flags[k];
        double v = 0;
        int64_t n = 0;
        bool took = f->kind != F32 ? args_int(argc, argv, i, f->flag, 0, f->ihi, &n, bad) // (range checked)
                                   : args_float(argc, argv, i, f->flag, &v, bad);
        if (!took) continue;
        if (*bad) return true;
        if (f->kind == F32 && !(v >= f->lo && v <= f->hi)) {
            fprintf(stderr, "ft %s: %s %g: expected a value in [%g, %g]\n", cmd, f->flag, v, f->lo, f->hi);
            *bad = true;
            return true;
        }
        set_field(&s->p, f, v, n);
        s->given |= f->bit;
        return true;
    }
    return false;
}

void sampling_args_from_model(sampling_args *s, const char *cmd, const gguf_file *f) {
    for (size_t k = 0; k < sizeof(k_flags) / sizeof(k_flags[0]); k++) {
        const sampling_flag *fl = &k_flags[k];
        if (!fl->model_key || (s->given & fl->bit)) continue;
        double v;
        int64_t n;
        if (gguf_get_int(f, fl->model_key, &n)) v = (double)n;
        else if (!gguf_get_float(f, fl->model_key, &v)) continue;
        bool integer = fl->kind != F32;
        double hi = integer ? (double)fl->ihi : fl->hi;
        if (!(v >= fl->lo && v <= hi) || (integer && v != (double)(int64_t)v)) {
            fprintf(stderr, "ft %s: ignoring the model's %s = %g (expected %s in [%g, %g])\n", cmd, fl->model_key, v,
                    integer ? "an integer" : "a value", fl->lo, hi);
            continue;
        }
        set_field(&s->p, fl, v, (int64_t)v);
        s->from_model |= fl->bit;
    }
}

void sampling_args_describe(const sampling_args *s, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (size_t k = 0; k < sizeof(k_flags) / sizeof(k_flags[0]) && at < cap; k++) {
        const sampling_flag *f = &k_flags[k];
        if (!((s->given | s->from_model) & f->bit)) continue;
        const char *by = (s->given & f->bit) ? f->flag : "the model's", *sep = at ? ", " : "";
        const char *field = (const char *)&s->p + f->off;
        int w = f->kind == U64 ? snprintf(buf + at, cap - at, "%s%s %llu (%s)", sep, f->name,
                                          (unsigned long long)*(const uint64_t *)field, by)
                               : snprintf(buf + at, cap - at, "%s%s %g (%s)", sep, f->name,
                                          f->kind == F32 ? (double)*(const float *)field : *(const int *)field, by);
        if (w < 0) break;
        at += (size_t)w;
    }
}

void sampling_args_usage(FILE *out, bool serve) {
    if (serve)
        fputs("Sampling defaults of requests that name none (else each API's own: temperature 1 and top-p 1\n"
              "for OpenAI's and Anthropic's, llama-server's for POST /completion); the model's\n"
              "general.sampling.* (temp, top_k, top_p, min_p, penalty_*) where these are not given:\n",
              out);
    fprintf(out,
            "  --temp T                   temperature; 0 is greedy%s\n"
            "  --top-k N                  0 off%s\n"
            "  --top-p P                  1 off%s\n"
            "  --min-p P                  0 off%s\n"
            "  --repeat-penalty F         1 off%s\n"
            "  --presence-penalty F       0 off%s\n"
            "  --frequency-penalty F      0 off%s\n"
            "  --repeat-last-n N          tokens the penalties look back over%s\n"
            "  --seed S                   sampling seed (default: from the clock)\n",
            serve ? "" : " (default 0.8, or the model's)", serve ? "" : " (default 40, or the model's)",
            serve ? "" : " (default 0.95, or the model's)", serve ? "" : " (default 0.05, or the model's)",
            serve ? "" : " (default 1, or the model's)", serve ? "" : " (default 0)", serve ? "" : " (default 0)",
            serve ? "" : " (default 64, or the model's)");
}
