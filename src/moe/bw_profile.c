// bw_profile.c: the bandwidth profile's arithmetic, text form and file.
#include "bw_profile.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { PROFILE_VERSION = 2, LINE_MAX_CHARS = 200 };

const moe_bw_rate *moe_bw_rate_of(const moe_bw_profile *p, enum ft_type t) {
    for (int i = 0; i < p->n_rates; i++)
        if (p->rates[i].type == t) return &p->rates[i];
    return NULL;
}

moe_bw_rate *moe_bw_rate_add(moe_bw_profile *p, enum ft_type t) {
    for (int i = 0; i < p->n_rates; i++)
        if (p->rates[i].type == t) return &p->rates[i];
    if (p->n_rates == MOE_BW_MAX_TYPES) return NULL;
    moe_bw_rate *r = &p->rates[p->n_rates++];
    *r = (moe_bw_rate){.type = t};
    return r;
}

bool moe_bw_same_key(const moe_bw_profile *a, const moe_bw_profile *b) {
    return strcmp(a->gpu, b->gpu) == 0 && strcmp(a->cpu, b->cpu) == 0 && a->threads == b->threads;
}

double moe_bw_copy_us(const moe_bw_profile *p, const uint64_t b[3]) {
    if (p->copy_gbps <= 0) return -1;
    return p->copy_fixed_us + (double)(b[0] + b[1] + b[2]) / (p->copy_gbps * 1e3);
}

// sum over the banks of bytes / rate (GB/s = bytes per ns; times 1e3 for bytes per us)
double moe_bw_cpu_us(const moe_bw_profile *p, const enum ft_type t[3], const uint64_t b[3]) {
    double us = 0;
    for (int i = 0; i < 3; i++) {
        if (!b[i]) continue;
        const moe_bw_rate *r = moe_bw_rate_of(p, t[i]);
        if (!r || r->cpu_gbps <= 0) return -1;
        us += (double)b[i] / (r->cpu_gbps * 1e3);
    }
    return us;
}

double moe_bw_gpu_us(const moe_bw_profile *p, const enum ft_type t[3], const uint64_t b[3]) {
    double us = 0;
    for (int i = 0; i < 3; i++) {
        const moe_bw_rate *r = moe_bw_rate_of(p, t[i]);
        if (b[i] && r && r->gpu_gbps > 0) us += (double)b[i] / (r->gpu_gbps * 1e3);
    }
    return us;
}

double moe_bw_cpu_fixed_us(const moe_bw_profile *p, const enum ft_type t[3], const uint64_t b[3]) {
    double us = -1;
    for (int i = 0; i < 3; i++) {
        if (!b[i]) continue;
        const moe_bw_rate *r = moe_bw_rate_of(p, t[i]);
        us = fmax(us, r && r->cpu_fixed_us > 0 ? r->cpu_fixed_us : p->cpu_fixed_us);
    }
    return us < 0 ? p->cpu_fixed_us : us;
}

bool moe_bw_hybrid_costs(const moe_bw_profile *p, const enum ft_type t[3], const uint64_t b[3],
                         moe_hybrid_costs *out) {
    double copy = moe_bw_copy_us(p, b), cpu = moe_bw_cpu_us(p, t, b);
    if (copy < 0 || cpu < 0 || p->meet_us <= 0) return false;
    double fixed = p->meet_us + moe_bw_cpu_fixed_us(p, t, b);
    const double cap = 1e6; // us: a second, far above any real expert; keeps the ns in 32 bits
    *out = (moe_hybrid_costs){(uint32_t)(fmin(copy, cap) * 1e3), (uint32_t)(fmin(cpu, cap) * 1e3),
                              (uint32_t)(fmin(fixed, cap) * 1e3)};
    return true;
}

char *moe_bw_profile_format(const moe_bw_profile *p) {
    size_t cap = 1024 + (size_t)p->n_rates * LINE_MAX_CHARS;
    char *s = ft_malloc(cap);
    int n =
        snprintf(s, cap,
                 "# ft bandwidth profile (ft bench bw): the costs of moving and computing an expert here\n"
                 "version %d\ngpu %s\ncpu %s\nthreads %d\ncopy_fixed_us %.3f\ncopy_gbps %.3f\nmeet_us %.3f\n"
                 "cpu_fixed_us %.3f\n",
                 PROFILE_VERSION, p->gpu, p->cpu, p->threads, p->copy_fixed_us, p->copy_gbps, p->meet_us,
                 p->cpu_fixed_us);
    for (int i = 0; i < p->n_rates && n >= 0 && (size_t)n < cap; i++)
        n += snprintf(s + n, cap - (size_t)n, "type %s cpu_gbps %.3f gpu_gbps %.3f cpu_fixed_us %.3f\n",
                      ft_type_name(p->rates[i].type), p->rates[i].cpu_gbps, p->rates[i].gpu_gbps,
                      p->rates[i].cpu_fixed_us);
    return s;
}

// A number field: finite, >= 0, at most 1e9, nothing after it.
static bool parse_number(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0 || v > 1e9) return false;
    while (*end == ' ')
        end++;
    if (*end) return false;
    *out = v;
    return true;
}

// A name field: the rest of the line, printable, 1 to MOE_BW_NAME - 1 characters.
static bool parse_name(const char *s, char *out) {
    size_t n = strlen(s);
    if (n == 0 || n >= MOE_BW_NAME) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return false;
    memcpy(out, s, n + 1);
    return true;
}

// "type NAME cpu_gbps X gpu_gbps Y cpu_fixed_us Z" (version 1: up to Y, its fixed cost 0)
static bool parse_rate(const char *s, int version, moe_bw_profile *p) {
    char name[32], k1[16], k2[16], k3[16] = "cpu_fixed_us", v1[64], v2[64], v3[64] = "0";
    int used = 0;
    if (version == 1 ? sscanf(s, "%31s %15s %63s %15s %63s%n", name, k1, v1, k2, v2, &used) != 5
                     : sscanf(s, "%31s %15s %63s %15s %63s %15s %63s%n", name, k1, v1, k2, v2, k3, v3, &used) != 7)
        return false;
    if (s[used] != 0) return false;
    enum ft_type t;
    double c, g, f;
    if (!ft_type_from_name(name, &t) || strcmp(k1, "cpu_gbps") != 0 || strcmp(k2, "gpu_gbps") != 0 ||
        strcmp(k3, "cpu_fixed_us") != 0 || !parse_number(v1, &c) || !parse_number(v2, &g) ||
        !parse_number(v3, &f) || moe_bw_rate_of(p, t))
        return false;
    moe_bw_rate *r = moe_bw_rate_add(p, t);
    if (!r) return false;
    r->cpu_gbps = c, r->gpu_gbps = g, r->cpu_fixed_us = f;
    return true;
}

bool moe_bw_profile_parse(const char *text, size_t len, moe_bw_profile *out, ft_err *err) {
    moe_bw_profile p = {0};
    bool gpu = false, cpu = false, threads = false;
    int version = 0; // the file's, which comes before its rates
    size_t pos = 0;
    for (int line_no = 1; pos < len; line_no++) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
        if (n > LINE_MAX_CHARS)
            return ft_err_set(err, "line %d: longer than %d characters", line_no, LINE_MAX_CHARS);
        char line[LINE_MAX_CHARS + 1];
        memcpy(line, text + pos, n);
        line[n] = 0;
        pos += n + (nl ? 1 : 0);
        if (memchr(line, 0, n)) return ft_err_set(err, "line %d: a NUL byte", line_no);
        if (n == 0 || line[0] == '#') continue;
        char *sp = strchr(line, ' ');
        if (!sp) return ft_err_set(err, "line %d: '%s' has no value", line_no, line);
        *sp = 0;
        const char *key = line;
        char *val = sp + 1;
        double v = 0;
        bool ok;
        if (strcmp(key, "version") == 0) {
            ok = !version && parse_number(val, &v) && (v == 1 || v == PROFILE_VERSION);
            version = ok ? (int)v : version;
        } else if (strcmp(key, "gpu") == 0) {
            ok = !gpu && parse_name(val, p.gpu);
            gpu = true;
        } else if (strcmp(key, "cpu") == 0) {
            ok = !cpu && parse_name(val, p.cpu);
            cpu = true;
        } else if (strcmp(key, "threads") == 0) {
            ok = !threads && parse_number(val, &v) && v >= 1 && v <= 4096 && v == floor(v);
            p.threads = (int)v;
            threads = true;
        } else if (strcmp(key, "copy_fixed_us") == 0) {
            ok = parse_number(val, &p.copy_fixed_us);
        } else if (strcmp(key, "copy_gbps") == 0) {
            ok = parse_number(val, &p.copy_gbps);
        } else if (strcmp(key, "meet_us") == 0) {
            ok = parse_number(val, &p.meet_us);
        } else if (strcmp(key, "cpu_fixed_us") == 0) {
            ok = parse_number(val, &p.cpu_fixed_us);
        } else if (strcmp(key, "type") == 0) {
            ok = version && parse_rate(val, version, &p);
        } else {
            return ft_err_set(err, "line %d: unknown field '%s'", line_no, key);
        }
        if (!ok) return ft_err_set(err, "line %d: bad value for '%s'", line_no, key);
    }
    if (!version || !gpu || !cpu || !threads)
        return ft_err_set(err, "missing %s",
                          !version ? "version"
                          : !gpu   ? "gpu"
                          : !cpu   ? "cpu"
                                   : "threads");
    *out = p;
    return true;
}

// FNV-1a, 64 bits
static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

void moe_bw_profile_path(const moe_bw_profile *key, const char *dir, char *out, size_t cap) {
    char k[2 * MOE_BW_NAME + 32];
    int n = snprintf(k, sizeof(k), "%s\n%s\n%d", key->gpu, key->cpu, key->threads);
    uint64_t h = fnv1a(0xcbf29ce484222325ull, k, (size_t)FT_MAX(n, 0));
    snprintf(out, cap, "%s/bw-%016llx.txt", dir, (unsigned long long)h);
}

enum { FILE_MAX_BYTES = 64 * 1024 };

bool moe_bw_profile_load(const char *path, moe_bw_profile *out, ft_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return ft_err_set(err, "%s: %s", path, strerror(errno));
    char *buf = ft_malloc(FILE_MAX_BYTES + 1);
    size_t n = fread(buf, 1, FILE_MAX_BYTES + 1, f);
    bool read_err = ferror(f);
    fclose(f);
    bool ok = false;
    if (read_err)
        ft_err_set(err, "%s: read error", path);
    else if (n > FILE_MAX_BYTES)
        ft_err_set(err, "%s: larger than %d bytes", path, FILE_MAX_BYTES);
    else
        ok = moe_bw_profile_parse(buf, n, out, err) || ft_err_prefix(err, "%s", path);
    free(buf);
    return ok;
}

bool moe_bw_profile_save(const moe_bw_profile *p, const char *path, ft_err *err) {
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        for (char *c = dir + 1;; c++) { // mkdir -p
            if (*c != '/' && *c != 0) continue;
            char keep = *c;
            *c = 0;
            if (mkdir(dir, 0755) != 0 && errno != EEXIST)
                return ft_err_set(err, "cannot create %s: %s", dir, strerror(errno));
            *c = keep;
            if (!keep) break;
        }
    }
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return ft_err_set(err, "%s: %s", tmp, strerror(errno));
    char *s = moe_bw_profile_format(p);
    size_t n = strlen(s);
    bool ok = fwrite(s, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    free(s);
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return ft_err_set(err, "cannot write %s: %s", path, strerror(e));
    }
    return true;
}
