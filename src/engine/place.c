// place.c: the memory plan of an engine's device and where the model's weights and experts go
// (see place.h).
#include "place.h"
#include "../util/env.h"
#include "../util/mapping.h"
#include "../kv/kv_pool.h"
#include "../moe/expert_banks.h"
#include "../moe/geometry.h"
#include "../moe/cache_replay.h"
#include "../moe/mode_cost.h"
#include "../moe/route_trace.h"
#include "../backend/bw_measure.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const double MiB = 1024.0 * 1024.0;

// Sequences beside the longest get this much context in the default KV pool, and the default
// context never shrinks below it.
#define ENGINE_SHORT_CTX 4096

// The CUDA context's own allocations and fragmentation, beside what the plan counts.
#define DEVICE_MARGIN ((size_t)256 << 20)

int engine_step_tokens(const ft_engine_params *p) { return p->n_batch + p->n_seq - 1; }

ft_backend_limits engine_limits(const ft_model *m, const ft_engine_params *p) {
    ft_backend_limits lim = {
        .max_tok = engine_step_tokens(p), .max_width = ft_model_max_width(m), .max_ctx = p->n_ctx,
        .max_head_dim = ft_model_max_head_dim(m), .n_expert = m->hp.n_expert, .n_expert_used = m->hp.n_expert_used,
        .ssm_n_v_heads = ft_model_recurrent_heads(m), .n_layer = m->hp.n_layer,
    };
    return lim;
}

size_t engine_activation_floats(const ft_model *m, const ft_engine_params *p) {
    const ft_hparams *hp = &m->hp;
    size_t B = (size_t)engine_step_tokens(p), E = (size_t)hp->n_embd, Q = (size_t)ft_model_max_q_width(m),
           KV = (size_t)ft_model_max_kv_width(m);
    size_t extra = B * ((size_t)ft_model_wide_width(m) + 2 * (size_t)ft_model_recurrent_heads(m));
    return B * (4 * E + 3 * Q + 2 * KV) + extra + (size_t)p->n_seq * (size_t)hp->n_vocab + 64 * 9;
}

ft_kv_params engine_kv_params(const ft_model *m, const ft_engine_params *p, int64_t *arrays) {
    const ft_hparams *hp = &m->hp;
    int n = hp->n_layer;
    int64_t *width = arrays, *conv = arrays + n, *state = arrays + 2 * n, *head = arrays + 3 * n;
    // a recurrent layer's conv sees q, k and v of every head; its state is a matrix per V head
    int64_t channels = (2 * (int64_t)hp->ssm_n_k_heads + hp->ssm_n_v_heads) * hp->ssm_head_dim;
    for (int l = 0; l < n; l++) {
        const ft_layer *L = &m->layers[l];
        bool rec = L->is_recurrent;
        // a layer that reads an earlier one's cache (gemma4's shared KV) keeps none
        width[l] = rec || L->kv_from != l ? 0 : (int64_t)L->n_head_kv * L->head_dim;
        head[l] = L->head_dim;
        conv[l] = rec ? (int64_t)(hp->ssm_d_conv - 1) * channels : 0;
        state[l] = rec ? (int64_t)hp->ssm_n_v_heads * hp->ssm_head_dim * hp->ssm_head_dim : 0;
    }
    return (ft_kv_params){n, p->n_ctx, p->kv_type, width, ft_model_max_head_dim(m), conv, state, engine_kv_blocks(p),
                          head};
}

int64_t engine_kv_blocks(const ft_engine_params *p) {
    // by default one sequence of the whole context beside the others at up to 4096 each
    int64_t tokens = p->num_tokens > 0 ? p->num_tokens
                                       : p->n_ctx + (int64_t)(p->n_seq - 1) * FT_MIN(p->n_ctx, ENGINE_SHORT_CTX);
    return ft_kv_blocks_for(FT_MAX(tokens, (int64_t)p->n_ctx));
}

bool engine_fit_context(const ft_model *m, ft_backend *be, ft_engine_params *p, ft_err *err) {
    if (be->placement == FT_PLACEMENT_CPU) return engine_fit_context_to(m, p, ft_mem_available(), true, err);
    ft_device_info info;
    be->ops->device_info(be, &info);
    return engine_fit_context_to(m, p, engine_device_budget(p, &info), false, err);
}

bool engine_fit_context_to(const ft_model *m, ft_engine_params *p, size_t mem, bool cpu, ft_err *err) {
    const char *what = cpu ? "of memory available" : "of GPU budget";
    size_t kv = engine_kv_bytes(m, p);
    if (!p->n_ctx_default) {
        // the device plan checks its own budget; the CPU's KV is checked here, before the
        // weights are read into memory
        if (!cpu || kv <= mem) return true;
        return ft_err_set(err, "a KV cache of %.0f MiB (%lld positions, -c %d) does not fit the %.0f MiB %s; "
                               "lower -c or --num-tokens, or use --kv-cache-dtype q8_0",
                          kv / MiB, (long long)engine_kv_blocks(p) * FT_KV_BLOCK, p->n_ctx, mem / MiB, what);
    }
    // the default context: the KV cache takes at most a quarter of it
    int train = p->n_ctx;
    while (p->n_ctx > ENGINE_SHORT_CTX && engine_kv_bytes(m, p) > mem / 4)
        p->n_ctx = FT_MAX(ENGINE_SHORT_CTX, p->n_ctx / 2);
    if (p->n_ctx < train)
        fprintf(stderr, "context %d: the model's %d would take more than a quarter of the %.0f MiB %s for the KV cache "
                        "(-c sets it)\n", p->n_ctx, train, mem / MiB, what);
    p->n_batch = FT_MIN(p->n_batch, p->n_ctx);
    return true;
}

size_t engine_kv_bytes(const ft_model *m, const ft_engine_params *p) {
    int64_t *arrays = ft_malloc(ENGINE_KV_ARRAYS * (size_t)m->hp.n_layer * sizeof(int64_t));
    ft_kv_params kp = engine_kv_params(m, p, arrays);
    size_t bytes = ft_kv_pool_bytes_for(&kp, p->n_seq);
    free(arrays);
    return bytes;
}

// What --gpu-memory-limit leaves ft to allocate: the cap plays a card of that size, so what the
// process holds there already (the CUDA context, the streams) comes out of it, as nvidia-smi
// counts it in the process's share. SIZE_MAX without a cap.
static size_t held_cap(const ft_engine_params *p, const ft_device_info *info) {
    if (!p->gpu_memory_limit) return SIZE_MAX;
    return p->gpu_memory_limit - FT_MIN(p->gpu_memory_limit, info->process_mem);
}

// --memory-ratio, or its default.
static double memory_ratio(const ft_engine_params *p) { return p->memory_ratio > 0 ? p->memory_ratio : 0.9; }

size_t engine_device_budget(const ft_engine_params *p, const ft_device_info *info) {
    return FT_MIN((size_t)(memory_ratio(p) * (double)info->free_mem), held_cap(p, info));
}

// How the budget was set, for the plan's line: "--memory-ratio 0.90 of 80000 MiB free", or the
// cap less what the process holds.
static const char *budget_source(const ft_engine_params *p, const ft_device_info *info, char *buf, size_t cap) {
    if (engine_device_budget(p, info) < held_cap(p, info))
        snprintf(buf, cap, "--memory-ratio %.2f of %.0f MiB free", memory_ratio(p), info->free_mem / MiB);
    else if (info->process_mem)
        snprintf(buf, cap, "--gpu-memory-limit %.0f MiB less the %.0f MiB this process holds there: the CUDA context",
                 p->gpu_memory_limit / MiB, info->process_mem / MiB);
    else
        snprintf(buf, cap, "--gpu-memory-limit %.0f MiB; the CUDA context's share is not known (NVML did not list this "
                           "process), so the cap counts ft's allocations only",
                 p->gpu_memory_limit / MiB);
    return buf;
}

// ---------------------------------------------------------------------------------------------
// The plan

// Memory the host keeps free beside a copy of the weights (page cache, other processes).
#define COPY_SPARE ((size_t)1 << 30)

// Whether the weights the CPU streams (experts_only: cpu mode's experts) are copied into memory
// (engine_place), beside other bytes the plan allocates in host memory: --mmap keeps the
// mapping, auto copies when the copy leaves COPY_SPARE of the available memory, --no-mmap
// copies or fails. Sets out->copy_bytes (0: mapped); why gets the reason it stays mapped.
static bool plan_weights_copy(const ft_model *m, const ft_engine_params *p, bool experts_only, size_t other,
                              engine_placement *out, char *why, size_t cap, ft_err *err) {
    size_t bytes = ft_model_copy_bytes(m, experts_only), avail = ft_mem_available();
    bool fits = bytes + other + COPY_SPARE <= avail;
    out->copy_bytes = 0;
    snprintf(why, cap, "mapped from the file");
    if (p->weights_memory == FT_WEIGHTS_MAPPED) {
        snprintf(why, cap, "mapped from the file: --mmap");
        return true;
    }
    if (!bytes) return true; // read from a buffer, or nothing a whole huge page long
    if (p->weights_memory == FT_WEIGHTS_AUTO && !ft_huge_pages_available()) {
        snprintf(why, cap, "mapped from the file: transparent huge pages are off, so a copy would gain nothing");
        return true;
    }
    if (!fits) {
        if (p->weights_memory == FT_WEIGHTS_COPIED)
            return ft_err_set(err, "--no-mmap: copying the weights takes %.0f MiB and %.0f MiB of memory are available "
                                   "(%.0f MiB of it for the rest of the plan and 1 GiB kept free); without --no-mmap "
                                   "they stay mapped from the file",
                              bytes / MiB, avail / MiB, other / MiB);
        snprintf(why, cap, "mapped from the file: a copy (%.0f MiB) would leave less than 1 GiB free", bytes / MiB);
        return true;
    }
    out->copy_bytes = bytes;
    snprintf(why, cap, "%.0f MiB of it copied into memory in huge pages%s", bytes / MiB,
             p->weights_memory == FT_WEIGHTS_COPIED ? ": --no-mmap" : "");
    return true;
}

// The CPU plan: the weights copied into memory (or mapped from the file), the KV caches and
// buffers allocated.
static bool plan_cpu(const ft_model *m, const ft_engine_params *p, engine_placement *out, ft_err *err) {
    size_t kv = engine_kv_bytes(m, p);
    size_t weights = (size_t)(gguf_file_size(m->file) - gguf_data_offset(m->file));
    size_t work = engine_activation_floats(m, p) * sizeof(float);
    char why[160];
    if (!plan_weights_copy(m, p, false, kv + work, out, why, sizeof(why), err)) return false;
    if (p->print_plan)
        fprintf(stderr,
                "cpu: weights %.1f MiB (%s), KV cache %.1f MiB (%d x %d positions, %s), buffers %.1f MiB "
                "(prefill chunk %d); %.0f MiB of memory available\n",
                weights / MiB, why, kv / MiB, p->n_seq, p->n_ctx, ft_type_name(p->kv_type), work / MiB,
                p->n_batch, ft_mem_available() / MiB);
    return true;
}

// The device plan of a placement: what it allocates against what ft may use.
typedef struct device_plan {
    size_t weights, kv, work, margin, budget;
} device_plan;

// The device workspace of p's steps: the backend's scratch and the activations.
static size_t workspace_bytes(const ft_model *m, const ft_engine_params *p, ft_backend *be) {
    ft_backend_limits lim = engine_limits(m, p);
    return be->ops->scratch_bytes(be, &lim) + engine_activation_floats(m, p) * sizeof(float);
}

static device_plan device_plan_of(const ft_model *m, const ft_engine_params *p, ft_backend *be,
                                  const ft_device_info *info, bool experts_on_host) {
    device_plan c = {
        .weights = ft_weights_place_bytes(m, experts_on_host), .kv = engine_kv_bytes(m, p),
        .work = workspace_bytes(m, p, be),
        .margin = DEVICE_MARGIN, .budget = engine_device_budget(p, info),
    };
    return c;
}

static size_t device_plan_need(const device_plan *c) { return c->weights + c->kv + c->work + c->margin; }

static void print_device_plan(const device_plan *c, const ft_engine_params *p, const ft_device_info *info,
                              const char *be_name, const char *weights_what) {
    char src[256];
    fprintf(stderr, "%s: %s (sm_%d%d), %.0f MiB free of %.0f, budget %.0f MiB (%s): %s %.1f MiB, "
                    "KV cache %.1f MiB (%lld positions, %d sequences of up to %d, %s), workspace %.1f MiB (batch %d)\n",
            be_name, info->name, info->cc_major, info->cc_minor, info->free_mem / MiB, info->total_mem / MiB,
            c->budget / MiB, budget_source(p, info, src, sizeof(src)), weights_what, c->weights / MiB,
            c->kv / MiB, (long long)engine_kv_blocks(p) * FT_KV_BLOCK, p->n_seq, p->n_ctx, ft_type_name(p->kv_type),
            c->work / MiB, engine_step_tokens(p));
}

// Fails with the plan's numbers when it exceeds the budget.
static bool check_device_plan(const device_plan *c, const ft_engine_params *p, const ft_device_info *info,
                              const char *mode, ft_err *err) {
    if (device_plan_need(c) <= c->budget) return true;
    char src[256];
    return ft_err_set(err, "--moe-backend %s: the model does not fit on %s: it needs %.0f MiB (weights %.0f, KV %.0f, "
                           "workspace %.0f, reserve %.0f) and the budget is %.0f MiB (%s); use a smaller -c, fewer "
                           "sequences, another --moe-backend, or --device cpu",
                      mode, info->name, device_plan_need(c) / MiB, c->weights / MiB, c->kv / MiB, c->work / MiB,
                      c->margin / MiB, c->budget / MiB, budget_source(p, info, src, sizeof(src)));
}

moe_auto_facts engine_auto_facts(const ft_model *m, const ft_engine_params *p, ft_backend *be, char *why,
                                 size_t cap) {
    ft_device_info info;
    be->ops->device_info(be, &info);
    device_plan c = device_plan_of(m, p, be, &info, false);
    moe_auto_facts f = {.n_expert = m->hp.n_expert, .device_takes_types = true, .fused_need = device_plan_need(&c),
                        .budget = c.budget};
    for (int il = 0; il < m->hp.n_layer && f.device_takes_types; il++) {
        const ft_layer *l = &m->layers[il];
        const ft_tensor *banks[] = {&l->gate_exps, &l->up_exps, &l->down_exps};
        for (size_t b = 0; b < FT_ARRAY_LEN(banks); b++)
            if (ft_tensor_present(banks[b]) && !be->ops->supports_type(be, banks[b]->type)) {
                if (why) snprintf(why, cap, "%s (%s)", banks[b]->name, ft_type_name(banks[b]->type));
                f.device_takes_types = false;
                break;
            }
    }
    return f;
}

// The prefill chunks the command's default is raised to (engine_prefill_batch): a step costs far
// less than in proportion to its tokens. On a GPU the grouped expert GEMMs fill their tiles (and
// with the experts in host memory a step streams a layer's experts whatever its token count); on
// the CPU a step decodes each selected expert's weights once for all its rows. The CPU's chunk is
// the smaller: a step holds up the other sequences' decode tokens while it runs.
enum { GPU_BATCH = 2048, CPU_BATCH = 1024 };

// Whether the whole model, at p's chunk, fits the device budget (fused, or auto's choice of it).
static bool whole_fits(const ft_model *m, const ft_engine_params *p, ft_backend *be) {
    moe_auto_facts f = engine_auto_facts(m, p, be, NULL, 0);
    return f.fused_need <= f.budget;
}

// The largest chunk from want down, halved, whose workspace takes at most a tenth of mem (and,
// where whole, leaves the resident model fitting), never below p->n_batch or above the context.
static int batch_within(const ft_model *m, ft_backend *be, const ft_engine_params *p, int want, size_t mem,
                        bool whole) {
    ft_engine_params q = *p;
    for (int nb = FT_MIN(want, p->n_ctx); nb > p->n_batch; nb /= 2) {
        q.n_batch = nb;
        if (workspace_bytes(m, &q, be) <= mem / 10 && (!whole || whole_fits(m, &q, be))) return nb;
    }
    return p->n_batch;
}

int engine_prefill_batch(const ft_model *m, ft_backend *be, const ft_engine_params *p) {
    if (!p->n_batch_auto) return p->n_batch;
    if (be->placement == FT_PLACEMENT_CPU)
        return batch_within(m, be, p, CPU_BATCH, ft_mem_available(), false);
    enum ft_moe_backend mode = p->moe_backend;
    if (m->hp.n_expert == 0) mode = FT_MOE_BACKEND_FUSED;
    if (mode == FT_MOE_BACKEND_AUTO) {
        moe_auto_facts f = engine_auto_facts(m, p, be, NULL, 0);
        mode = moe_placement_auto(&f);
    }
    ft_device_info info;
    be->ops->device_info(be, &info);
    return batch_within(m, be, p, GPU_BATCH, engine_device_budget(p, &info), mode == FT_MOE_BACKEND_FUSED);
}

static moe_cache_plan_params offload_plan_params(const ft_model *m, const ft_engine_params *p, ft_backend *be,
                                                 const ft_device_info *info);
static bool load_bw_profile(const ft_engine_params *p, ft_backend *be, moe_bw_profile *out, char *path, size_t cap);

// Steps of the route trace auto predicts the cache's misses on, and those replayed first, uncounted.
enum { AUTO_TRACE_STEPS = 600, AUTO_TRACE_WARMUP = 100 };

// What auto's prediction found: the modes' costs and what they came from.
typedef struct auto_prediction {
    moe_mode_costs costs;
    double hit;        // the cache's predicted hit rate
    int slots;         // its slots
    bool own_trace;    // the misses on --moe-route-trace's routing (else a generated trace)
    bool have_profile; // a bandwidth profile was read (from path)
    char path[1024];
} auto_prediction;

// The predicted expert time of each mode (mode_cost.h) with the bandwidth profile of this
// machine, the expert cache the budget gives offload, and its misses on p's route trace
// (--moe-route-trace: the model's own routing) or else on one generated for the model's shape
// at published reuse levels (moe_trace_gen_calibrate). False without a profile (have_profile
// false) or where a step fails (printed).
static bool predict_mode_costs(const ft_model *m, const ft_engine_params *p, ft_backend *be, auto_prediction *out) {
    moe_bw_profile prof;
    out->have_profile = load_bw_profile(p, be, &prof, out->path, sizeof(out->path));
    if (!out->have_profile) return false;
    ft_device_info info;
    be->ops->device_info(be, &info);
    ft_err err = {{0}};
    moe_geometry g = {0};
    moe_cache_plan plan = {0};
    moe_route_trace t = {0};
    moe_replay_result r = {0};
    int *blocks = NULL;
    double *miss = NULL;
    bool ok = moe_geometry_read(m->file, &g, &err);
    if (ok) moe_geometry_keep_below(&g, m->hp.n_layer);
    ok = ok && g.n_layers > 0;
    if (ok) {
        moe_cache_plan_params pp = offload_plan_params(m, p, be, &info);
        ok = moe_cache_plan_make(&g, &pp, &plan, &err);
    }
    out->own_trace = p->moe_route_trace != NULL;
    if (ok && out->own_trace) {
        ok = moe_route_trace_read(p->moe_route_trace, &t, &err);
    } else if (ok) {
        moe_trace_gen_params tp = moe_trace_gen_default_params();
        blocks = ft_malloc((size_t)g.n_layers * sizeof(int));
        for (int i = 0; i < g.n_layers; i++) {
            blocks[i] = g.layers[i].layer;
            if (ok && g.layers[i].n_expert != g.layers[0].n_expert)
                ok = ft_err_set(&err, "its MoE layers differ in expert count (a generated trace has one)");
        }
        tp.n_layers = g.n_layers, tp.layers = blocks, tp.n_expert = g.layers[0].n_expert;
        tp.top_k = m->hp.n_expert_used, tp.n_seq = 1, tp.n_steps = AUTO_TRACE_STEPS;
        ok = ok && moe_trace_gen_calibrate(&tp, &err) && moe_trace_generate(&tp, &t, &err);
    }
    moe_replay_params rp = moe_replay_default_params(); // the engine's victims: its hit rate
    rp.warmup = FT_MIN(AUTO_TRACE_WARMUP, t.n_steps / 2);
    if (p->moe_self_sizing) rp.policy = moe_cache_sizing_default_params();
    rp.policy.victims = p->moe_cache_lru ? MOE_VICTIMS_LRU : MOE_VICTIMS_FRECENCY;
    ok = ok && moe_cache_replay_params(&plan, &g, &t, &rp, &r, &err) && r.n_layers == g.n_layers;
    if (ok) {
        miss = ft_malloc((size_t)g.n_layers * sizeof(double));
        for (int i = 0; i < g.n_layers; i++) {
            const moe_cache_stats *st = &r.layers[i].stats;
            miss[i] = st->selections ? (double)st->misses / (double)st->selections : 1.0;
        }
        out->hit = r.total.selections ? (double)r.total.hits / (double)r.total.selections : 0.0;
        out->slots = plan.n_slots;
        ok = moe_mode_costs_predict(&prof, &g, miss, m->hp.n_expert_used, &out->costs);
    }
    if (!ok && err.msg[0]) FT_LOG_WARN("--moe-backend auto: no prediction of the modes: %s", err.msg);
    free(miss);
    free(blocks);
    moe_replay_result_free(&r);
    moe_route_trace_free(&t);
    moe_cache_plan_free(&plan);
    moe_geometry_free(&g);
    return ok;
}

// --moe-backend auto's choice, and why, on stderr.
static enum ft_moe_backend auto_pick(const ft_model *m, const ft_engine_params *p, ft_backend *be) {
    char why[200] = "";
    moe_auto_facts f = engine_auto_facts(m, p, be, why, sizeof(why));
    auto_prediction a = {0};
    if (f.n_expert && f.device_takes_types && f.fused_need > f.budget && predict_mode_costs(m, p, be, &a))
        f.costs = &a.costs;
    enum ft_moe_backend b = moe_placement_auto(&f);
    if (f.n_expert == 0) return b;
    if (!f.device_takes_types) {
        fprintf(stderr, "--moe-backend auto: cpu: the experts %s have no CUDA kernel, so the CPU computes them\n", why);
    } else if (b == FT_MOE_BACKEND_FUSED) {
        fprintf(stderr, "--moe-backend auto: fused: the whole model fits the GPU budget (%.0f of %.0f MiB)\n",
                f.fused_need / MiB, f.budget / MiB);
    } else if (f.costs) {
        fprintf(stderr, "--moe-backend auto: %s: the whole model needs %.0f MiB, more than the GPU budget of %.0f MiB; "
                        "predicted expert time a token: offload %.2f ms, hybrid %.2f, cpu %.2f (another mode than "
                        "offload must be %.0f%% faster); from a cache of %d slots hitting %.1f%% of %s, %.2f misses a "
                        "token, and an expert's copy %.1f us, CPU %.1f us and GPU %.1f us (bandwidth profile %s)\n",
                ft_moe_backend_name(b), f.fused_need / MiB, f.budget / MiB, a.costs.offload_us / 1e3,
                a.costs.hybrid_us / 1e3, a.costs.cpu_us / 1e3, MOE_AUTO_MARGIN * 100, a.slots, a.hit * 100,
                a.own_trace ? "--moe-route-trace's routing" : "a trace generated at published reuse levels",
                a.costs.misses, a.costs.copy_us, a.costs.cpu_expert_us, a.costs.gpu_expert_us, a.path);
    } else {
        fprintf(stderr, "--moe-backend auto: offload: the whole model needs %.0f MiB, more than the GPU budget of %.0f "
                        "MiB; the experts stay in host memory behind a GPU expert cache (%s)\n",
                f.fused_need / MiB, f.budget / MiB,
                a.have_profile ? "the modes could not be weighed: see the warning above"
                             : "with a bandwidth profile, `ft bench bw`, auto would weigh hybrid and cpu mode too");
    }
    return b;
}

// Bytes of the routed experts (what --moe-backend cpu and offload keep in host memory).
static size_t expert_bytes(const ft_model *m) {
    size_t n = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const ft_layer *l = &m->layers[il];
        const ft_tensor *banks[] = {&l->gate_exps, &l->up_exps, &l->down_exps};
        for (size_t b = 0; b < FT_ARRAY_LEN(banks); b++)
            if (ft_tensor_present(banks[b])) n += banks[b]->mat_bytes * (size_t)banks[b]->ne[2];
    }
    return n;
}

static int host_overlay_buffers(const ft_engine_params *p) { return p->moe_prefill_serial ? 1 : 2; }

// The CPU experts of --moe-backend cpu: descriptors into the model's mapping (arrays of n_layer,
// absent where a block is not MoE). Free with host_experts_free.
static ft_host_experts_params host_experts_of(const ft_model *m, const ft_engine_params *p) {
    int n = m->hp.n_layer;
    ft_tensor *t = ft_calloc(10 * (size_t)n, sizeof(ft_tensor));
    ft_host_experts_params h = {.n_layer = n, .routers = t, .sel_bias = t + n, .gate_exps = t + 2 * n,
                                .up_exps = t + 3 * n, .down_exps = t + 4 * n, .router_bias = t + 5 * n,
                                .gate_bias = t + 6 * n, .up_bias = t + 7 * n, .down_bias = t + 8 * n,
                                .down_scale = t + 9 * n, .n_threads = p->n_threads, .reference = p->reference,
                                .overlay_buffers = host_overlay_buffers(p)};
    for (int il = 0; il < n; il++) {
        const ft_layer *l = &m->layers[il];
        if (!l->is_moe) continue;
        t[il] = l->router;
        t[n + il] = l->sel_bias;
        t[2 * n + il] = l->gate_exps;
        t[3 * n + il] = l->up_exps;
        t[4 * n + il] = l->down_exps;
        t[5 * n + il] = l->router_b;
        t[6 * n + il] = l->gate_exps_b;
        t[7 * n + il] = l->up_exps_b;
        t[8 * n + il] = l->down_exps_b;
        t[9 * n + il] = l->down_exps_s;
    }
    return h;
}

static void host_experts_free(ft_host_experts_params *h) { free((void *)h->routers); }

// --moe-backend cpu: the routed experts stay in the file's mapping and the CPU computes them;
// every other weight on the device. Their pages must fit in RAM, or every token would read
// them from the disk. Prefill steps run the layers whose expert types the grouped GEMM takes on
// the GPU, from a device overlay the plan counts in the workspace.
static bool plan_host_experts(const ft_model *m, ft_backend *be, const ft_engine_params *p, const ft_device_info *info,
                              engine_placement *out, ft_err *err) {
    if (m->hp.n_expert == 0) return ft_err_set(err, "--moe-backend cpu: the model has no routed experts");
    device_plan c = device_plan_of(m, p, be, info, true);
    size_t experts = expert_bytes(m), ram = ft_mem_available(), staging = 0;
    ft_host_experts_params h = host_experts_of(m, p);
    size_t overlay = be->ops->host_experts_device_bytes(be, &h, &staging);
    host_experts_free(&h);
    int n_buf = host_overlay_buffers(p);
    c.work += overlay;
    char why[160];
    if (!plan_weights_copy(m, p, true, 0, out, why, sizeof(why), err)) return false;
    if (p->print_plan) {
        print_device_plan(&c, p, info, be->ops->name, "weights but the routed experts");
        fprintf(stderr, "cpu: routed experts %.1f MiB in host memory (%s; %.0f MiB available), computed by %d "
                        "threads\n", experts / MiB, why, ram / MiB, p->n_threads);
        if (overlay)
            fprintf(stderr, "cpu: prefill steps for the grouped GEMM run the experts on the GPU from an overlay of %d x "
                            "%.1f MiB (in the workspace; %s), copied through %.0f MiB of pinned staging\n", n_buf,
                    overlay / n_buf / MiB, n_buf == 2 ? "double-buffered" : "copy then compute", staging / MiB);
        else
            fprintf(stderr, "cpu: no prefill overlay (the grouped GEMM takes none of the expert types)\n");
    }
    if (experts > ram)
        return ft_err_set(err, "--moe-backend cpu: the routed experts need %.0f MiB of host memory and %.0f MiB are "
                               "available", experts / MiB, ram / MiB);
    return check_device_plan(&c, p, info, "cpu", err);
}

// The expert cache's plan parameters of --moe-backend offload (and hybrid) under p's budget.
static moe_cache_plan_params offload_plan_params(const ft_model *m, const ft_engine_params *p, ft_backend *be,
                                                 const ft_device_info *info) {
    size_t kv = engine_kv_bytes(m, p);
    int64_t kv_tokens = engine_kv_blocks(p) * FT_KV_BLOCK;
    moe_cache_plan_params pp = moe_cache_plan_default_params();
    pp.n_slots = p->moe_cache_size;
    pp.layout = p->moe_pool_layout == MOE_POOL_LAYOUT_UNIFORM ? MOE_POOL_LAYOUT_UNIFORM : MOE_POOL_LAYOUT_EXACT;
    pp.top_k = m->hp.n_expert_used;
    pp.n_running = p->n_seq;
    pp.vram_free = engine_device_budget(p, info); // already the share ft may use (--memory-ratio, --gpu-memory-limit)
    pp.memory_ratio = 1.0;
    pp.dense_bytes = ft_weights_place_bytes(m, true);
    pp.workspace_bytes = workspace_bytes(m, p, be) + DEVICE_MARGIN;
    pp.kv_bytes_per_token = kv_tokens > 0 ? kv / (size_t)kv_tokens : 0;
    pp.kv_reserve_tokens = p->kv_reserve_tokens > 0 ? p->kv_reserve_tokens : kv_tokens;
    return pp;
}

// --moe-backend offload: every weight but the routed experts on the device, the experts in
// page-locked host banks read once from the GGUF, and the GPU expert cache in front of them.
// The cache's own plan is made here too, so a cache below the floor or a budget that leaves
// nothing fails before anything is allocated.
static bool plan_offload(const ft_model *m, ft_backend *be, const ft_engine_params *p, const ft_device_info *info,
                         engine_placement *pl, ft_err *err) {
    moe_geometry *g = &pl->geometry;
    if (!moe_geometry_read(m->file, g, err)) return false;
    moe_geometry_keep_below(g, m->hp.n_layer); // not the MTP blocks' experts: they are not run
    if (g->n_layers == 0) return ft_err_set(err, "--moe-backend offload: the model has no routed experts");
    size_t dense = ft_weights_place_bytes(m, true);
    size_t kv = engine_kv_bytes(m, p);
    size_t work = workspace_bytes(m, p, be);
    size_t budget = engine_device_budget(p, info);
    int64_t kv_tokens = engine_kv_blocks(p) * FT_KV_BLOCK;

    ft_expert_cache_params *cp = &pl->cache;
    cp->geometry = g;
    cp->plan = offload_plan_params(m, p, be, info);
    cp->prefill_serial = p->moe_prefill_serial;
    cp->victims = p->moe_cache_lru ? MOE_VICTIMS_LRU : MOE_VICTIMS_FRECENCY;
    cp->self_sizing = p->moe_self_sizing;

    moe_cache_plan plan;
    char src[256];
    if (!moe_cache_plan_make(g, &cp->plan, &plan, err)) return false;
    if (p->print_plan)
        fprintf(stderr, "%s: %s (sm_%d%d), %.0f MiB free, budget %.0f MiB (%s): dense weights %.1f MiB, KV cache "
                        "%.1f MiB (%lld positions, %d sequences of up to %d, %s), workspace %.1f MiB (prefill chunks of "
                        "%d), expert cache %.1f MiB (%d slots)\n",
                be->ops->name, info->name, info->cc_major, info->cc_minor, info->free_mem / MiB, budget / MiB,
                budget_source(p, info, src, sizeof(src)),
                dense / MiB, kv / MiB, (long long)kv_tokens, p->n_seq, p->n_ctx, ft_type_name(p->kv_type),
                work / MiB, p->n_batch, plan.bytes / MiB,
                plan.n_slots);
    // the prefill overlay (one layer's experts at the widest stride) is carved from the
    // arenas when they hold it, else allocated beside them
    int most = 0;
    for (int i = 0; i < g->n_layers; i++) most = FT_MAX(most, g->layers[i].n_expert);
    if (plan.n_slots < most) {
        size_t ov = 0;
        for (int b = 0; b < MOE_BANK_COUNT; b++) ov += (size_t)most * plan.max_stride[b];
        if (p->print_plan)
            fprintf(stderr, "offload: the prefill overlay (%.1f MiB) does not fit in the arenas: allocated beside them\n",
                    ov / MiB);
        work += ov;
    }
    bool ok = true;
    if (dense + kv + work + DEVICE_MARGIN + plan.bytes > budget)
        ok = ft_err_set(err, "--moe-backend offload: %.0f MiB needed (dense %.0f, KV %.0f, workspace %.0f, reserve "
                             "%.0f, expert cache %.0f for %d slots) but the budget is %.0f MiB; use a smaller "
                             "--moe-cache-size, -c or fewer sequences",
                        (dense + kv + work + DEVICE_MARGIN + plan.bytes) / MiB, dense / MiB, kv / MiB, work / MiB,
                        DEVICE_MARGIN / MiB, plan.bytes / MiB, plan.n_slots, budget / MiB);
    moe_cache_plan_free(&plan);
    if (ok && p->moe_route_trace) {
        ok = moe_route_trace_read(p->moe_route_trace, &pl->trace, err);
        cp->trace = ok ? &pl->trace : NULL;
    }
    return ok;
}

bool engine_plan(const ft_model *m, ft_backend *be, const ft_engine_params *p, engine_placement *out, ft_err *err) {
    memset(out, 0, sizeof(*out));
    out->mode = FT_MOE_BACKEND_FUSED;
    // the ops some layers need beyond every backend's set
    if ((ft_model_recurrent_heads(m) && !be->ops->delta_net) || (ft_model_wide_width(m) && !be->ops->split_heads))
        return ft_err_set(err, "--device %s: %s's linear-attention layers have no %s kernels yet (use --device cpu)",
                          be->ops->name, m->arch->name, be->ops->name);
    // op parameters the backend does not compute (gpt-oss's sinks, biases, routing, SwiGLU on CUDA)
    unsigned missing = ft_model_op_features(m) & ~be->ops->features;
    if (missing) {
        char names[256];
        return ft_err_set(err, "--device %s: %s runs on the CPU in this version (the %s backend has no %s yet); "
                               "use --device cpu",
                          be->ops->name, m->arch->name, be->ops->name, ft_ops_features_name(missing, names, sizeof(names)));
    }
    if (be->placement == FT_PLACEMENT_CPU) return plan_cpu(m, p, out, err);
    bool ok;
    ft_device_info info;
    be->ops->device_info(be, &info);
    out->mode = p->moe_backend == FT_MOE_BACKEND_AUTO ? auto_pick(m, p, be) : p->moe_backend;
    // cpu mode's routing on the host (a developer's switch) reads the experts' input: not a router's own
    if (out->mode == FT_MOE_BACKEND_CPU && (ft_model_op_features(m) & FT_OPS_MOE_ROUTER_INPUT) &&
        ft_env_is(FT_ENV_CPU_EXPERTS_ROUTE, "host"))
        return ft_err_set(err, "FT_CPU_EXPERTS_ROUTE=host: %s's routers read an input of their own, which only the GPU "
                               "routes from",
                          m->arch->name);
    switch (out->mode) {
    case FT_MOE_BACKEND_OFFLOAD:
    case FT_MOE_BACKEND_HYBRID:
        out->experts_on_host = true;
        ok = plan_offload(m, be, p, &info, out, err);
        if (ok && out->mode == FT_MOE_BACKEND_HYBRID && p->print_plan)
            fprintf(stderr, "hybrid: decode steps split their misses between copies to the GPU and %d CPU threads "
                            "(from the cache's host banks), by costs measured when the cache starts\n", p->n_threads);
        break;
    case FT_MOE_BACKEND_CPU:
        out->experts_on_host = true;
        ok = plan_host_experts(m, be, p, &info, out, err);
        break;
    default: {
        device_plan c = device_plan_of(m, p, be, &info, false);
        if (p->print_plan) print_device_plan(&c, p, &info, be->ops->name, "weights");
        ok = check_device_plan(&c, p, &info, "fused", err);
    }
    }
    if (!ok) engine_placement_free(out);
    return ok;
}

// ---------------------------------------------------------------------------------------------
// Carrying it out

// The offload's host banks, read from the file once (the long step), for the cache.
static moe_expert_banks *load_host_banks(const ft_model *m, ft_backend *be, const engine_placement *pl, ft_err *err) {
    moe_expert_banks_params bp = moe_expert_banks_default_params();
    bp.alloc = be->ops->expert_host_allocator(be);
    fprintf(stderr, "offload: reading %.1f MiB of experts into host banks\n",
            moe_expert_banks_bytes(&pl->geometry) / MiB);
    return moe_expert_banks_load(m->file, &pl->geometry, &bp, err);
}

// The weights the CPU streams into memory in huge pages (engine_plan decided it fits: planned
// bytes), said in one line: how much, how much the kernel backs with huge pages, how long it took.
static size_t copy_weights(const ft_model *m, bool experts_only, size_t planned, const ft_engine_params *p) {
    double t0 = ft_time_s();
    size_t moved = ft_model_copy_into_memory(m, experts_only, p->n_threads, p->progress, p->progress_ctx);
    size_t anon, huge;
    ft_mapping_usage(gguf_file_base(m->file), (size_t)gguf_file_size(m->file), &anon, &huge);
    if (moved < planned)
        FT_LOG_WARN("weights: %.1f MiB copied into memory, the rest left mapped from the file (no memory for more)",
                    moved / MiB);
    if (p->print_plan)
        fprintf(stderr, "%s: %.1f MiB copied into memory in %.1f s, %.1f MiB of it in huge pages\n",
                experts_only ? "cpu: routed experts" : "cpu: weights", moved / MiB, ft_time_s() - t0,
                huge / MiB);
    return moved;
}

// The bandwidth profile hybrid splits by and auto chooses by: --profile FILE, else this machine's (the GPU's name,
// the CPU's and the thread count pick the file in the cache folder). False when there is none
// or it cannot be read (printed when it was asked for or is malformed).
static bool load_bw_profile(const ft_engine_params *p, ft_backend *be, moe_bw_profile *out, char *path, size_t cap) {
    moe_bw_profile key;
    ft_bw_profile_key(&key, p->n_threads);
    ft_device_info info;
    be->ops->device_info(be, &info);
    snprintf(key.gpu, sizeof(key.gpu), "%.*s", (int)sizeof(key.gpu) - 1, info.name);
    char dir[1024];
    if (p->bw_profile) snprintf(path, cap, "%s", p->bw_profile);
    else if (ft_cache_dir(dir, sizeof(dir))) moe_bw_profile_path(&key, dir, path, cap);
    else return false;
    ft_err err = {{0}};
    if (!p->bw_profile && access(path, F_OK) != 0) return false;
    if (!moe_bw_profile_load(path, out, &err)) {
        FT_LOG_WARN("the bandwidth profile is not used: %s", err.msg);
        return false;
    }
    if (!moe_bw_same_key(out, &key))
        FT_LOG_WARN("the bandwidth profile %s was measured for %s, %s, %d threads; this is %s, %s, %d threads",
                    path, out->gpu, out->cpu, out->threads, key.gpu, key.cpu, key.threads);
    return true;
}

ft_weights *engine_place(const ft_model *m, ft_backend *be, const ft_engine_params *p, engine_placement *pl,
                         ft_err *err) {
    moe_expert_banks *hb = NULL;
    bool cache = pl->mode == FT_MOE_BACKEND_OFFLOAD || pl->mode == FT_MOE_BACKEND_HYBRID;
    if (cache && !(hb = load_host_banks(m, be, pl, err))) return NULL;
    ft_weights *w = ft_weights_place(m, be, pl->experts_on_host, p->progress, p->progress_ctx, err);
    if (!w) {
        moe_expert_banks_free(hb);
        return NULL;
    }
    if (cache && !be->ops->expert_cache_init(be, hb, &pl->cache, err)) {
        ft_weights_free(w); // (the cache freed hb)
        return NULL;
    }
    if (pl->mode == FT_MOE_BACKEND_CPU || pl->mode == FT_MOE_BACKEND_HYBRID) { // hybrid: beside the cache
        ft_host_experts_params h = host_experts_of(m, p);
        moe_bw_profile prof;
        char path[1200];
        if (pl->mode == FT_MOE_BACKEND_HYBRID && load_bw_profile(p, be, &prof, path, sizeof(path)))
            h.profile = &prof, h.profile_path = path;
        be->ops->host_experts_init(be, &h);
        host_experts_free(&h);
    }
    bool cpu_reads = be->placement == FT_PLACEMENT_CPU || pl->mode == FT_MOE_BACKEND_CPU;
    if (cpu_reads && pl->copy_bytes) pl->copy_bytes = copy_weights(m, be->placement != FT_PLACEMENT_CPU, pl->copy_bytes, p);
    // the mapping is lazy: read it now where the CPU computes from it, so that the first
    // tokens do not wait on the disk
    if (p->prefault && cpu_reads) ft_model_prefault(m, p->progress, p->progress_ctx);
    return w;
}

void engine_placement_free(engine_placement *pl) {
    moe_geometry_free(&pl->geometry);
    moe_route_trace_free(&pl->trace);
    memset(pl, 0, sizeof(*pl));
}
