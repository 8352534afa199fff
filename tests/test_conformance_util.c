// test_conformance_util.c: the comparison driver of the conformance tests (see
// test_conformance.h).
#include "test_conformance.h"
#include "oracle.h"
#include "test.h"
#include "../src/engine/engine.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

conf_opts conf_default_opts(void) {
    conf_opts o = {.kv_type = FT_TYPE_F16, .n_prompts = 3, .prompt_len = {1, 9, 40}, .n_gen = 32, .seed = 7};
    return o;
}

ft_synth_params conf_small_params(const char *arch) {
    ft_synth_params p = ft_synth_default_params();
    p.arch = arch;
    p.n_layer = 2;
    p.n_embd = 256;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.head_dim = 64;
    p.n_expert = 8;
    p.n_expert_used = 2;
    p.n_ff_exp = 256;
    p.n_ctx_train = 1024;
    return p;
}

static void softmax(const float *l, int n, double *p) {
    float mx = l[0];
    for (int i = 1; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += p[i] = exp((double)l[i] - mx);
    for (int i = 0; i < n; i++) p[i] /= sum;
}

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

// The largest |ft - llama.cpp| over the reference's top-10 probabilities (p: ft's softmax), and
// the token where it is; -1 on a malformed line (reported).
static double top_diff(const char *label, int pi, json_t *top, const double *p, int n_vocab, int *at) {
    double worst = 0;
    *at = -1;
    for (size_t i = 0; i < json_array_size(top); i++) {
        json_t *e = json_array_get(top, i);
        int id = (int)json_integer_value(json_array_get(e, 0));
        if (id < 0 || id >= n_vocab) return test_fail(__FILE__, __LINE__, "%s prompt %d: bad id %d", label, pi, id), -1;
        double d = fabs(p[id] - json_real_value(json_array_get(e, 1)));
        if (d > worst) worst = d, *at = id;
    }
    return worst;
}

// The reference's probability of token id, or -1 when it is not in its top 10.
static double top_prob(json_t *top, int id) {
    for (size_t i = 0; i < json_array_size(top); i++)
        if (json_integer_value(json_array_get(json_array_get(top, i), 0)) == id)
            return json_real_value(json_array_get(json_array_get(top, i), 1));
    return -1;
}

// What the checks of one model share: the model file and engine parameters (the stability
// check loads perturbed copies), and how many steps were left unjudged as chaotic.
typedef struct conf_ctx {
    const char *label, *path;
    const ft_engine_params *ep;
    int n_vocab;
    float *exact;     // (n_vocab) ft's logits after the step being checked, for the stability check
    int unjudged;     // prompts with a chaotic step
    int chaotic_prompt; // the prompt whose step was found chaotic (-1: none yet)
} conf_ctx;

// Evaluates prompt pi from position 0 in chunks as ft_engine_eval cuts them (by_token false), or
// one token per step, then the n_gen tokens of gen (the reference's greedy ones) one at a time;
// returns the last logits or NULL (reported).
static const float *eval_prompt(const char *label, int pi, ft_engine *e, const int32_t *prompt, int n, bool by_token,
                                json_t *gen, size_t n_gen) {
    ft_err err = {{0}};
    ft_engine_reset(e);
    const float *lg = NULL;
    for (int i = 0; i < n; i += by_token ? 1 : n)
        if (!(lg = ft_engine_eval(e, prompt + i, by_token ? 1 : n, &err))) break;
    for (size_t g = 0; g < n_gen && lg; g++) {
        int32_t t = (int32_t)json_integer_value(json_array_get(json_array_get(gen, g), 0));
        lg = ft_engine_eval(e, &t, 1, &err);
    }
    if (!lg) test_fail(__FILE__, __LINE__, "%s prompt %d: eval: %s", label, pi, err.msg);
    return lg;
}

// The perturbed copies of the stability check: one weight in three of the first attention
// norm scaled by 1 + CONF_PERTURB (each copy a different third), as the GPU suite perturbs its
// CPU reference.
#define CONF_PERTURBED 3
#define CONF_PERTURB 1e-5f

// Whether ft's own result after the prompt (and the first n_gen greedy tokens) moves by more
// than CONF_TOL in some top-10 probability when the model is perturbed by a rounding-level
// amount: random-weight models are chaotic at some steps (a routing or requantization decision
// near its threshold), where two engines that differ only in rounding may differ by more than
// any bound. Such a step (and what follows it in the same prompt) cannot judge ft against
// llama.cpp; conf_check allows one prompt with one per model.
// lg: ft's logits after the same evaluation, unperturbed.
static bool step_is_chaotic(conf_ctx *cx, int pi, const float *lg, const int32_t *prompt, int n, json_t *gen,
                            size_t n_gen) {
    if (cx->chaotic_prompt == pi) return true; // its later steps and checks follow from that one
    double *p0 = ft_malloc((size_t)cx->n_vocab * sizeof(double)), *p1 = ft_malloc((size_t)cx->n_vocab * sizeof(double));
    softmax(lg, cx->n_vocab, p0);
    int top[10], k = cx->n_vocab < 10 ? cx->n_vocab : 10;
    for (int j = 0; j < k; j++) { // ft's own top 10
        top[j] = -1;
        for (int i = 0; i < cx->n_vocab; i++) {
            bool taken = false;
            for (int m = 0; m < j; m++) taken |= top[m] == i;
            if (!taken && (top[j] < 0 || p0[i] > p0[top[j]])) top[j] = i;
        }
    }
    double moved = 0;
    for (int c = 0; c < CONF_PERTURBED; c++) {
        ft_err err = {{0}};
        ft_model *m = ft_model_load(cx->path, &err);
        if (!m) return test_fail(__FILE__, __LINE__, "%s: load: %s", cx->label, err.msg), false;
        ft_tensor *w = &m->layers[0].attn_norm;
        FT_ASSERT(w->type == FT_TYPE_F32);
        float *norm = ft_malloc((size_t)w->ne[0] * sizeof(float));
        memcpy(norm, w->data, (size_t)w->ne[0] * sizeof(float));
        for (int64_t i = c; i < w->ne[0]; i += CONF_PERTURBED) norm[i] *= 1.0f + CONF_PERTURB;
        w->data = norm;
        ft_engine *e = ft_engine_init(m, cx->ep, &err);
        const float *lp = e ? eval_prompt(cx->label, pi, e, prompt, n, false, gen, n_gen) : NULL;
        if (!e) test_fail(__FILE__, __LINE__, "%s: engine: %s", cx->label, err.msg);
        if (lp) {
            softmax(lp, cx->n_vocab, p1);
            for (int j = 0; j < k; j++) moved = fmax(moved, fabs(p1[top[j]] - p0[top[j]]));
        }
        ft_engine_free(e);
        ft_model_free(m);
        free(norm);
    }
    free(p0);
    free(p1);
    bool chaotic = moved > CONF_TOL;
    if (chaotic) {
        cx->unjudged++;
        cx->chaotic_prompt = pi;
        fprintf(stderr,
                "    %s prompt %d (+%zu greedy tokens): ft itself moves by %.5f under a %g perturbation: a chaotic step, "
                "not judged\n",
                cx->label, pi, n_gen, moved, (double)CONF_PERTURB);
    }
    return chaotic;
}

// A different arg-max than the reference's best ref_best, which has probability p0, where
// ft's choice has the reference's probability r_ft (-1: outside its top 10): allowed when the
// reference's own two best are within CONF_TOL, or when ft's choice is within 2 CONF_TOL of the
// best (each probability within CONF_TOL lets such a pair swap) and ft's other summation order
// (the prompt one token per step, then the greedy tokens so far) picks the reference's token.
static bool swap_allowed(const char *label, int pi, ft_engine *e, const int32_t *prompt, int n, json_t *gen,
                         size_t n_gen, int n_vocab, int ref_best, double p0, double p1, double r_ft) {
    if (p0 - p1 < CONF_TOL) return true;
    if (r_ft < 0 || p0 - r_ft >= 2 * CONF_TOL) return false;
    const float *lt = eval_prompt(label, pi, e, prompt, n, true, gen, n_gen);
    return lt && argmax(lt, n_vocab) == ref_best;
}

// Checks the distribution and arg-max after prompt pi (see the header for the rules); updates
// *worst with the default evaluation's difference. Leaves e after the default evaluation and
// returns its logits (NULL on a failed eval).
static const float *check_prompt(conf_ctx *cx, int pi, json_t *top, ft_engine *e, const int32_t *prompt, int n,
                                 double *p, double *worst) {
    const char *label = cx->label;
    int n_vocab = cx->n_vocab;
    const float *lg = eval_prompt(label, pi, e, prompt, n, false, NULL, 0);
    if (!lg) return NULL;
    memcpy(cx->exact, lg, (size_t)n_vocab * sizeof(float));
    size_t n_top = json_array_size(top);
    if (n_top < 2) return test_fail(__FILE__, __LINE__, "%s prompt %d: oracle gave %zu probabilities", label, pi, n_top), lg;
    double p0 = json_real_value(json_array_get(json_array_get(top, 0), 1));
    double p1 = json_real_value(json_array_get(json_array_get(top, 1), 1));
    if (p0 >= 0.9)
        test_fail(__FILE__, __LINE__, "%s prompt %d: degenerate reference (top-1 %.3f): the test could not fail", label,
                  pi, p0);
    softmax(lg, n_vocab, p);
    int at;
    double d = top_diff(label, pi, top, p, n_vocab, &at);
    if (d > *worst) *worst = d;
    if (d > CONF_TOL) {
        // ft's other summation order: one token per step, every row on the per-row kernels
        double pd = p[at];
        const float *lt = eval_prompt(label, pi, e, prompt, n, true, NULL, 0);
        if (!lt) return NULL;
        softmax(lt, n_vocab, p);
        int at_t;
        double t = top_diff(label, pi, top, p, n_vocab, &at_t);
        if ((t > CONF_TOL || d > 2 * CONF_TOL) && !step_is_chaotic(cx, pi, cx->exact, prompt, n, NULL, 0))
            test_fail(__FILE__, __LINE__,
                      "%s prompt %d: token %d: ft %.5f, llama.cpp %.5f (difference %.5f; token by token the largest "
                      "difference is %.5f)",
                      label, pi, at, pd, top_prob(top, at), d, t);
        else
            fprintf(stderr, "    %s prompt %d: difference %.5f at token %d, %.5f token by token: summation order\n",
                    label, pi, d, at, t);
        if (!(lg = eval_prompt(label, pi, e, prompt, n, false, NULL, 0))) return NULL;
        softmax(lg, n_vocab, p);
    }
    int ref_best = (int)json_integer_value(json_array_get(json_array_get(top, 0), 0));
    int ft_best = argmax(lg, n_vocab);
    double r_ft = top_prob(top, ft_best);
    if (ft_best != ref_best) {
        if (!swap_allowed(label, pi, e, prompt, n, NULL, 0, n_vocab, ref_best, p0, p1, r_ft) &&
            !step_is_chaotic(cx, pi, cx->exact, prompt, n, NULL, 0))
            test_fail(__FILE__, __LINE__, "%s prompt %d: arg-max ft %d, llama.cpp %d (%.4f vs %.4f)", label, pi,
                      ft_best, ref_best, p0, r_ft);
        lg = eval_prompt(label, pi, e, prompt, n, false, NULL, 0); // back to the default evaluation
    }
    return lg;
}

double conf_check(const char *label, const ft_synth_params *sp, const conf_opts *o) {
    double worst_gen_v = 0, *worst_gen = &worst_gen_v;
    if (!oracle_node_available()) return -1;
    char path[600];
    snprintf(path, sizeof(path), "%s", test_path(label));
    strncat(path, ".gguf", sizeof(path) - strlen(path) - 1);
    ft_err err = {{0}};
    // FT_CONF_SEED=N shifts every model's seed: for sweeping many models by hand
    ft_synth_params spv = *sp;
    if (getenv("FT_CONF_SEED")) spv.seed += (uint64_t)atoll(getenv("FT_CONF_SEED"));
    sp = &spv;
    if (!ft_synth_write(sp, path, &err)) return test_fail(__FILE__, __LINE__, "%s: synth: %s", label, err.msg), -1;
    ft_model *m = ft_model_load(path, &err);
    if (!m) return test_fail(__FILE__, __LINE__, "%s: load: %s", label, err.msg), -1;
    int n_vocab = m->hp.n_vocab;

    // prompts: random ids, fixed by the seed
    ft_rng rng = ft_rng_init(o->seed);
    static int32_t prompts[8][CONF_MAX_PROMPT];
    char *arg = ft_malloc(65536);
    size_t len = 0;
    for (int pi = 0; pi < o->n_prompts; pi++) {
        FT_ASSERT(o->prompt_len[pi] <= CONF_MAX_PROMPT);
        for (int i = 0; i < o->prompt_len[pi]; i++) {
            prompts[pi][i] = (int32_t)(ft_rng_next(&rng) % (uint64_t)n_vocab);
            len += (size_t)snprintf(arg + len, 65536 - len, "%s%d", i ? "," : (pi ? ";" : ""), prompts[pi][i]);
        }
    }
    // the context: the longest prompt and the greedy tokens, at least the 1,024 of the others
    int n_ctx = 1024;
    for (int pi = 0; pi < o->n_prompts; pi++) n_ctx = FT_MAX(n_ctx, o->prompt_len[pi] + o->n_gen + 8);
    char *cmd = ft_malloc(80000), *out = ft_malloc(1 << 20);
    snprintf(cmd, 80000, "'%s' --prompts '%s' --gen %d --top 10 --threads 2 --kv-type %s --ctx %d", path, arg,
             o->n_gen, ft_type_name(o->kv_type), n_ctx);
    free(arg);
    double worst = 0;
    if (getenv("FT_CONF_VERBOSE")) fprintf(stderr, "    oracle: %s\n", cmd);
    if (!oracle_llama_eval(cmd, out, 1 << 20)) goto done;

    ft_engine_params ep = ft_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = n_ctx;
    ep.kv_type = o->kv_type;
    if (o->n_batch) ep.n_batch = o->n_batch;
    ft_engine *e = ft_engine_init(m, &ep, &err);
    if (!e) {
        test_fail(__FILE__, __LINE__, "%s: engine: %s", label, err.msg);
        goto done;
    }
    double *p = ft_malloc((size_t)n_vocab * sizeof(double));
    conf_ctx cx = {label, path, &ep, n_vocab, ft_malloc((size_t)n_vocab * sizeof(float)), 0, -1};
    int n_checked = 0;
    char *line = out;
    for (int pi = 0; pi < o->n_prompts && line && *line; pi++) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        json_error_t jerr;
        json_t *j = json_loads(line, 0, &jerr);
        line = nl ? nl + 1 : NULL;
        if (!j) {
            test_fail(__FILE__, __LINE__, "%s: oracle output is not JSON: %s", label, jerr.text);
            break;
        }
        const float *lg = check_prompt(&cx, pi, json_object_get(j, "top"), e, prompts[pi], o->prompt_len[pi], p, &worst);
        n_checked++;
        if (!lg) {
            json_decref(j);
            break;
        }
        // greedy continuation, compared up to the reference's first near-tie
        json_t *gen = json_object_get(j, "gen");
        for (size_t g = 0; g < json_array_size(gen) && cx.chaotic_prompt != pi; g++) {
            json_t *s = json_array_get(gen, g);
            int ref = (int)json_integer_value(json_array_get(s, 0));
            double r1 = json_real_value(json_array_get(s, 1)), r2 = json_real_value(json_array_get(s, 3));
            if (r1 - r2 < CONF_TOL) break;
            int mine = argmax(lg, n_vocab);
            if (mine != ref) {
                // the oracle gives its best two: a swap with the second may be allowed
                double r_mine = mine == (int)json_integer_value(json_array_get(s, 2)) ? r2 : -1;
                memcpy(cx.exact, lg, (size_t)n_vocab * sizeof(float));
                if (!swap_allowed(label, pi, e, prompts[pi], o->prompt_len[pi], gen, g, n_vocab, ref, r1, r2, r_mine) &&
                    !step_is_chaotic(&cx, pi, cx.exact, prompts[pi], o->prompt_len[pi], gen, g))
                    test_fail(__FILE__, __LINE__, "%s prompt %d: greedy token %zu: ft %d, llama.cpp %d (%.5f, second %.5f)",
                              label, pi, g, mine, ref, r1, r2);
                else
                    fprintf(stderr, "    %s prompt %d: greedy token %zu: ft %d, llama.cpp %d (%.5f vs %.5f): a near-tie, "
                            "token by token as llama.cpp\n",
                            label, pi, g, mine, ref, r1, r2);
                break;
            }
            // probabilities along the continuation are reported, not held to the bound: f16
            // accumulation in llama.cpp's attention makes long sequences drift by ~0.01
            softmax(lg, n_vocab, p);
            double d = fabs(p[ref] - r1);
            if (d > *worst_gen) *worst_gen = d;
            int32_t t = ref;
            if (g + 1 < json_array_size(gen) && !(lg = ft_engine_eval(e, &t, 1, &err))) {
                test_fail(__FILE__, __LINE__, "%s: eval: %s", label, err.msg);
                break;
            }
        }
        json_decref(j);
    }
    fprintf(stderr, "    %s: worst top-10 probability difference %.5f (greedy steps: %.5f)\n", label, worst,
            worst_gen_v);
    if (n_checked != o->n_prompts)
        test_fail(__FILE__, __LINE__, "%s: %d of %d prompts checked (the oracle's output ended early?)", label, n_checked,
                  o->n_prompts);
    // a chaotic step is not judged, but a model of such steps would judge nothing: one is
    // allowed, or half the prompts' where there are four or more (a long prompt's last step
    // is often chaotic on these random models, whichever way a kernel rounds)
    int max_unjudged = FT_MAX(1, o->n_prompts / 2);
    if (cx.unjudged > max_unjudged)
        test_fail(__FILE__, __LINE__, "%s: %d chaotic steps left unjudged (at most %d): pick another seed", label,
                  cx.unjudged, max_unjudged);
    free(cx.exact);
    free(p);
    ft_engine_free(e);
done:
    free(cmd);
    free(out);
    ft_model_free(m);
    return worst;
}
