// sampling_args.c: the sampling flags and a model's recommended defaults (sampling_args.h).
#include "sampling_args.h"

#include "args.h"

#include <stdint.h>
#include <string.h>

// One flag: its spelling, the field's bit, its range, and where in ft_sampler_params it goes.
typedef struct {
    const char *flag, *model_key, *name;
    unsigned bit;
    double lo, hi; // a float's range
    bool integer;  // else an integer in [0, ihi]
    int64_t ihi;
} sampling_flag;

static const sampling_flag k_flags[] = {
    {"--temp", "general.sampling.temp", "temp", FT_SAMPLE_TEMP, 0, 100, false, 0},
    {"--top-k", "general.sampling.top_k", "top-k", FT_SAMPLE_TOP_K, 0, 0, true, 1 << 30},
    {"--top-p", "general.sampling.top_p", "top-p", FT_SAMPLE_TOP_P, 0, 1, false, 0},
    {"--min-p", "general.sampling.min_p", "min-p", FT_SAMPLE_MIN_P, 0, 1, false, 0},
    {"--repeat-penalty", "general.sampling.penalty_repeat", "repeat-penalty", FT_SAMPLE_REPEAT_PENALTY, 0, 100, false, 0},
    {"--repeat-last-n", "general.sampling.penalty_last_n", "repeat-last-n", FT_SAMPLE_PENALTY_LAST_N, 0, 0, true, 1 << 20},
    {"--presence-penalty", NULL, "presence-penalty", FT_SAMPLE_PRESENCE_PENALTY, -2, 2, false, 0},
    {"--frequency-penalty", NULL, "frequency-penalty", FT_SAMPLE_FREQUENCY_PENALTY, -2, 2, false, 0},
    {"--seed", NULL, "seed", FT_SAMPLE_SEED, 0, 0, true, INT64_MAX},
};

static void set_field(ft_sampler_params *p, unsigned bit, double v) {
    switch (bit) {
    case FT_SAMPLE_TEMP: p->temp = (float)v; break;
    case FT_SAMPLE_TOP_K: p->top_k = (int)v; break;
    case FT_SAMPLE_TOP_P: p->top_p = (float)v; break;
    case FT_SAMPLE_MIN_P: p->min_p = (float)v; break;
    case FT_SAMPLE_REPEAT_PENALTY: p->repeat_penalty = (float)v; break;
    case FT_SAMPLE_PENALTY_LAST_N: p->penalty_last_n = (int)v; break;
    case FT_SAMPLE_PRESENCE_PENALTY: p->presence_penalty = (float)v; break;
    case FT_SAMPLE_FREQUENCY_PENALTY: p->frequency_penalty = (float)v; break;
    }
}

static double get_field(const ft_sampler_params *p, unsigned bit) {
    switch (bit) {
    case FT_SAMPLE_TEMP: return p->temp;
    case FT_SAMPLE_TOP_K: return p->top_k;
    case FT_SAMPLE_TOP_P: return p->top_p;
    case FT_SAMPLE_MIN_P: return p->min_p;
    case FT_SAMPLE_REPEAT_PENALTY: return p->repeat_penalty;
    case FT_SAMPLE_PENALTY_LAST_N: return p->penalty_last_n;
    case FT_SAMPLE_PRESENCE_PENALTY: return p->presence_penalty;
    case FT_SAMPLE_FREQUENCY_PENALTY: return p->frequency_penalty;
    default: return 0; // (the seed is printed apart)
    }
}

sampling_args sampling_args_init(void) {
    return (sampling_args){.p = ft_sampler_default_params()};
}

bool sampling_args_take(sampling_args *s, const char *cmd, int argc, char **argv, int *i, bool *bad) {
    for (size_t k = 0; k < sizeof(k_flags) / sizeof(k_flags[0]); k++) {
        const sampling_flag *f = &k_flags[k];
        double v;
        int64_t n;
        bool took = f->integer ? args_int(argc, argv, i, f->flag, 0, f->ihi, &n, bad)
                               : args_float(argc, argv, i, f->flag, &v, bad);
        if (!took) continue;
        if (*bad) return true;
        if (f->integer) v = (double)n; // (args_int checked its range)
        else if (!(v >= f->lo && v <= f->hi)) {
            fprintf(stderr, "ft %s: %s %g: expected a value in [%g, %g]\n", cmd, f->flag, v, f->lo, f->hi);
            *bad = true;
            return true;
        }
        if (f->bit == FT_SAMPLE_SEED) s->p.seed = (uint64_t)n; // (a double would round it)
        else set_field(&s->p, f->bit, v);
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
        double hi = fl->integer ? (double)fl->ihi : fl->hi;
        if (!(v >= fl->lo && v <= hi) || (fl->integer && v != (double)(int64_t)v)) {
            fprintf(stderr, "ft %s: ignoring the model's %s = %g (expected %s in [%g, %g])\n", cmd, fl->model_key, v,
                    fl->integer ? "an integer" : "a value", fl->lo, hi);
            continue;
        }
        set_field(&s->p, fl->bit, v);
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
        int w = f->bit == FT_SAMPLE_SEED
                    ? snprintf(buf + at, cap - at, "%s%s %llu (%s)", sep, f->name, (unsigned long long)s->p.seed, by)
                    : snprintf(buf + at, cap - at, "%s%s %g (%s)", sep, f->name, get_field(&s->p, f->bit), by);
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
