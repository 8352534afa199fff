// cmd_run.c: `ft run -m FILE -p TEXT [...]`: generate text and stream it to stdout, then one
// line of figures on stderr. Without -m it runs the built-in demo model (random weights),
// writing it to the cache folder on first use.
#include "cli.h"
#include "args.h"
#include "cli_model.h"
#include "sampling_args.h"
#include "../engine/engine.h"
#include "../engine/stop.h"
#include "../model/synth.h"
#include "../tokenizer/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_STOPS 8

static void run_usage(FILE *out) {
    fprintf(out,
            "usage: ft run [-m FILE.gguf] -p TEXT [options]\n"
            "Generates text after the prompt and streams it to stdout; prints prompt and decode speed\n"
            "on stderr at the end. Without -m, uses the demo model (random weights) in ~/.cache/ft.\n\n"
            "  -m, --model FILE           the model\n"
            "  -p, --prompt TEXT          the prompt (special tokens parsed; BOS as the model asks)\n"
            "  -n, --n-predict N          tokens to generate (default 128)\n"
            "  --chat                     wrap the prompt as a user message in the model's chat template\n"
            "  --chat-template NAME|FILE  with --chat: a built-in template (chatml, qwen3, ...) or a Jinja\n"
            "                             file instead of the GGUF's own\n"
            "  --stop TEXT                stop before this text (up to %d times)\n",
            MAX_STOPS);
    sampling_args_usage(out, false);
    engine_args a = engine_args_init("run", 0);
    engine_args_usage(out, &a);
}

typedef struct {
    tok_stream stream;
    bool stream_live;
    ft_stop *stop;
    bool stopped;
    ft_engine *e;
    int n_tokens;             // tokens passed to on_token so far
    ft_moe_stats moe_prefill; // the expert cache's counters when the prompt was in (offload)
} run_out;

static void emit(void *ctx, const char *text, size_t len) {
    (void)ctx;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

static bool on_token(void *ctx, int32_t token) {
    run_out *o = ctx;
    // the first token comes right after the prompt's evaluation: the end of prefill
    if (o->n_tokens++ == 0) ft_engine_moe_stats(o->e, &o->moe_prefill);
    size_t len;
    const char *text = tok_stream_push(&o->stream, token, &len);
    if (ft_stop_feed(o->stop, text, len, emit, NULL)) o->stopped = true;
    return !o->stopped;
}

// Tokenizes the prompt, through the chat template with --chat. Returns false on an error.
static bool tokenize_prompt(const ft_model *m, const tok_vocab *v, const char *prompt, bool chat,
                            const char *template_name, tok_ids *ids) {
    if (!chat) {
        tok_encode(v, prompt, strlen(prompt), true, true, ids);
        return true;
    }
    ft_err err = {{0}};
    tok_chat *t = tok_chat_load(m->file, template_name, &err);
    if (!t) {
        fprintf(stderr, "ft run: --chat: %s\n", err.msg);
        return false;
    }
    tok_chat_msg msg = {.role = "user", .content = prompt};
    tok_chat_params cp = tok_chat_default_params(v);
    tok_chat_prompt rendered = {0};
    bool ok = tok_chat_apply(t, &msg, 1, cp, NULL, &rendered, &err);
    tok_chat_free(t);
    if (!ok) {
        fprintf(stderr, "ft run: --chat: %s\n", err.msg);
        return false;
    }
    // a template that writes the BOS text itself must not get a second one
    bool has_bos = cp.bos_text && *cp.bos_text && !strncmp(rendered.text, cp.bos_text, strlen(cp.bos_text));
    tok_encode_segments(v, rendered.segs, rendered.n_segs, !has_bos, ids);
    tok_chat_prompt_free(&rendered);
    return true;
}

int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *template_name = NULL;
    const char *stops[MAX_STOPS];
    int n_stops = 0;
    int64_t n_predict = 128;
    engine_args ea = engine_args_init("run", 0);
    bool chat = false, bad = false;
    sampling_args sa = sampling_args_init();
    for (int i = 1; i < argc && !bad; i++) {
        if (args_flag(argv, i, "-h|--help")) {
            run_usage(stdout);
            return FT_EXIT_OK;
        }
        if (args_flag(argv, i, "--chat")) {
            chat = true;
            continue;
        }
        const char *stop;
        if (args_str(argc, argv, &i, "--stop", &stop, &bad)) {
            if (n_stops == MAX_STOPS) {
                fprintf(stderr, "ft run: at most %d --stop strings\n", MAX_STOPS);
                return FT_EXIT_USAGE;
            }
            stops[n_stops++] = stop;
            continue;
        }
        if (sampling_args_take(&sa, "run", argc, argv, &i, &bad) || engine_args_take(&ea, argc, argv, &i, &bad) ||
            args_str(argc, argv, &i, "-m|--model", &model_path, &bad) ||
            args_str(argc, argv, &i, "-p|--prompt", &prompt, &bad) ||
            args_str(argc, argv, &i, "--chat-template", &template_name, &bad) ||
            args_int(argc, argv, &i, "-n|--n-predict", 0, 1 << 26, &n_predict, &bad))
            continue;
        fprintf(stderr, "ft run: unexpected argument '%s' (see ft run --help)\n", argv[i]);
        return FT_EXIT_USAGE;
    }
    if (bad) return FT_EXIT_USAGE;
    if (!prompt) {
        run_usage(stderr);
        return FT_EXIT_USAGE;
    }
    ft_engine_params ep = ft_engine_default_params();
    if (!engine_args_apply(&ea, &ep)) return FT_EXIT_USAGE;
    if (!(sa.given & FT_SAMPLE_SEED)) sa.p.seed = (uint64_t)time(NULL);

    cli_model cm;
    if (!cli_model_open("run", model_path, true, &cm)) return FT_EXIT_INPUT;
    const ft_model *m = cm.m;
    const tok_vocab *v = cm.v;
    ft_err err = {{0}};
    int rc = FT_EXIT_INPUT;
    tok_ids ids = {0};
    ft_engine *e = NULL;
    ft_sampler *s = NULL;
    int32_t *eog = NULL;
    run_out out = {0};
    ft_moe_stats moe_start = {0}, moe_end = {0}; // the expert cache's counters (offload)
    ft_progress bar;
    if (!tokenize_prompt(m, v, prompt, chat, template_name, &ids)) goto done;
    if (ids.n == 0) {
        fprintf(stderr, "ft run: the prompt is empty after tokenization\n");
        goto done;
    }
    cli_model_pick_device(&ea, &cm, &ep);
    if (!cli_model_context(&ea, &cm, 4096, &ep)) goto done;
    if (ids.n > (size_t)ep.n_ctx) {
        fprintf(stderr, "ft run: the prompt has %zu tokens, more than the context of %d (-c)\n", ids.n, ep.n_ctx);
        goto done;
    }
    cli_show_startup(&ep, &bar);
    if (!(e = ft_engine_init(m, &ep, &err))) {
        fprintf(stderr, "ft run: %s\n", err.msg);
        goto done;
    }
    sampling_args_from_model(&sa, "run", m->file);
    char said[512];
    sampling_args_describe(&sa, said, sizeof(said));
    if (said[0]) fprintf(stderr, "sampling: %s\n", said);
    s = ft_sampler_init(&sa.p, m->hp.n_vocab);
    int n_eog = 0;
    eog = ft_malloc((size_t)m->hp.n_vocab * sizeof(int32_t));
    for (int32_t t = 0; t < m->hp.n_vocab && t < tok_n_tokens(v); t++)
        if (tok_is_eog(v, t)) eog[n_eog++] = t;
    tok_stream_init(&out.stream, v, false);
    out.stream_live = true;
    out.stop = ft_stop_init(stops, n_stops);
    int room = ep.n_ctx - (int)ids.n;
    ft_generate_stats st;
    out.e = e;
    bool moe = ft_engine_moe_stats(e, &moe_start);
    if (!ft_generate(e, s, ids.ids, (int)ids.n, (int)FT_MIN(n_predict, room), eog, n_eog, on_token, &out, &st, &err)) {
        fprintf(stderr, "\nft run: %s\n", err.msg);
        goto done;
    }
    if (!out.stopped) {
        size_t len;
        const char *tail = tok_stream_flush(&out.stream, &len);
        if (!ft_stop_feed(out.stop, tail, len, emit, NULL)) ft_stop_flush(out.stop, emit, NULL);
    }
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "prompt: %d tokens, %.1f tok/s | decode: %d tokens, %.1f tok/s\n", st.n_prompt,
            st.prompt_s > 0 ? st.n_prompt / st.prompt_s : 0.0, st.n_gen, st.gen_s > 0 ? st.n_gen / st.gen_s : 0.0);
    if (moe && out.moe_prefill.n_layers > 0 && ft_engine_moe_stats(e, &moe_end)) {
        // decode evaluated every generated token but the last
        ft_moe_stats_sub(&moe_end, &out.moe_prefill);
        ft_moe_stats_sub(&out.moe_prefill, &moe_start);
        fprintf(stderr, "prompt, ");
        ft_moe_stats_print(&out.moe_prefill, st.n_prompt, stderr);
        fprintf(stderr, "decode, ");
        ft_moe_stats_print(&moe_end, FT_MAX(st.n_gen - 1, 0), stderr);
    }

    rc = FT_EXIT_OK;
done:
    ft_moe_stats_free(&out.moe_prefill);
    ft_moe_stats_free(&moe_start);
    ft_moe_stats_free(&moe_end);
    if (out.stream_live) tok_stream_free(&out.stream);
    ft_stop_free(out.stop);
    free(eog);
    ft_sampler_free(s);
    ft_engine_free(e);
    tok_ids_free(&ids);
    cli_model_close(&cm);
    return rc;
}
