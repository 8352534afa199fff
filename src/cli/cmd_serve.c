// cmd_serve.c: `ft serve [-m FILE] [options]`: the OpenAI- and Anthropic-compatible HTTP
// server (src/server). Without -m it serves the built-in demo model (random weights).
#include "cli.h"
#include "args.h"
#include "cli_model.h"
#include "sampling_args.h"
#include "../model/synth.h"
#include "../server/server.h"
#include "../util/env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void serve_usage(FILE *out) {
    fprintf(
        out,
        "usage: ft serve [-m FILE.gguf] [options]\n"
        "Serves the model over HTTP: POST /v1/chat/completions, /v1/completions, /v1/messages\n"
        "and /v1/messages/count_tokens (Anthropic), /tokenize, /detokenize, /v1/cache/rebuild\n"
        "{\"moe_cache_size\": N} (resizes the GPU expert cache; with --admin-key); GET /v1/models,\n"
        "/health, /metrics, /v1/stats.\n"
        "Without -m, serves the demo model (random weights) from ~/.cache/ft.\n\n"
        "  -m, --model FILE             the model\n"
        "  --host ADDR                  address to listen on (default 127.0.0.1)\n"
        "  --port N                     port (default 1919; 0: any free port)\n"
        "  --max-running-requests N     sequences decoded together in one batched step (default 4;\n"
        "                               also -np, --parallel); they share --num-tokens KV positions,\n"
        "                               each up to -c\n"
        "  --max-queued-requests N      requests waiting beyond those; more get 429 (default 64)\n"
        "  --served-model-name NAME     model id (default: the GGUF's general.name, else the file name;\n"
        "                               also --alias, -a)\n"
        "  -n, --n-predict N            tokens a request generates when it names no max_tokens (default\n"
        "                               -1: until it ends or its context is full)\n"
        "  --jinja, --metrics           llama-server's switches for what ft always does (the GGUF's\n"
        "                               Jinja template, GET /metrics): accepted\n"
        "  --api-key KEY                require 'Authorization: Bearer KEY' or 'x-api-key: KEY'\n"
        "                               (also from FT_API_KEY)\n"
        "  --admin-key KEY              enable the admin routes (/v1/cache/rebuild) with this key\n"
        "  --no-prefix-cache            compute every prompt whole (default: a prompt that starts like\n"
        "                               an earlier one reuses its KV blocks)\n"
        "  --ctx-checkpoints N          models with recurrent layers (qwen35moe, qwen3next): snapshots of\n"
        "                               their state the prefix cache keeps in host memory, over all\n"
        "                               sequences (default 32; 0: such models reuse no prefix)\n"
        "  --no-slots                   turn GET /slots off (llama-server's flag; it lists the sequences,\n"
        "                               their progress and sampling parameters)\n"
        "  --lenient                    ignore request fields ft does not implement yet (tools,\n"
        "                               logit_bias, ...) and a JSON schema's unknown keywords and\n"
        "                               formats instead of refusing them\n"
        "  --chat-template NAME|FILE    a built-in template (chatml, qwen2, qwen2.5, qwen3, llama2,\n"
        "                               mistral, llama3, llama3.1, qwen3.5, glm4.5, gpt-oss) or a Jinja file\n"
        "                               (default: the GGUF's own template, rendered as llama.cpp does)\n"
        "  --timeout S                  drop clients idle or stalled this long, or slower to send a\n"
        "                               whole request (headers and body) (default 600)\n"
        "  --max-connections N          client connections open at once; more wait to be accepted\n"
        "                               (default: what the open-file limit leaves)\n"
        "  --max-body-bytes N           request body limit (default 4194304)\n"
        "  --ready-file F               write the bound port to F once listening (for scripts)\n");
    sampling_args_usage(out, true);
    fputs("The engine (-b: the prefill chunk, a prompt joins the running sequences' steps in chunks):\n", out);
    engine_args a = engine_args_init("serve", 0);
    engine_args_usage(out, &a);
}

// The loopback addresses (and names for them): only this machine reaches them.
static bool host_is_loopback(const char *host) {
    return !strcmp(host, "localhost") || !strcmp(host, "::1") || !strncmp(host, "127.", 4);
}

int cmd_serve(int argc, char **argv) {
    const char *model_path = NULL, *tmpl_name = NULL;
    int64_t v64;
    bool bad = false, no_prefix_cache = false;
    int ctx_checkpoints = -1;
    engine_args ea = engine_args_init("serve", 0);
    sampling_args sa = sampling_args_init();
    srv_params p = srv_default_params();
    // an empty key would switch authentication off (as --api-key "$KEY" gives with KEY unset)
    const char *env_key = ft_env_str(FT_ENV_API_KEY);
    if (env_key && !*env_key) {
        fprintf(stderr, "ft serve: FT_API_KEY is set but empty; unset it, or give a key\n");
        return FT_EXIT_USAGE;
    }
    p.api_key = env_key;
    for (int i = 1; i < argc && !bad; i++) {
        if (args_flag(argv, i, "-h|--help")) {
            serve_usage(stdout);
            return FT_EXIT_OK;
        }
        if (engine_args_take(&ea, argc, argv, &i, &bad) || sampling_args_take(&sa, "serve", argc, argv, &i, &bad)) continue;
        if (args_flag(argv, i, "--lenient")) {
            p.lenient = true;
            continue;
        }
        // llama-server's switches for what ft always does: the GGUF's Jinja template, /metrics
        if (args_flag(argv, i, "--jinja") || args_flag(argv, i, "--metrics")) continue;
        if (args_int(argc, argv, &i, "-n|--n-predict", -1, INT32_MAX, &v64, &bad)) {
            p.default_max_tokens = (int)v64;
            continue;
        }
        if (args_flag(argv, i, "--no-slots")) {
            p.no_slots = true;
            continue;
        }
        if (args_flag(argv, i, "--no-prefix-cache")) {
            no_prefix_cache = true;
            continue;
        }
        if (args_int(argc, argv, &i, "--ctx-checkpoints|-ctxcp", 0, 4096, &v64, &bad)) {
            ctx_checkpoints = (int)v64;
            continue;
        }
        if (args_int(argc, argv, &i, "--port", 0, 65535, &v64, &bad)) {
            p.port = (int)v64;
            continue;
        }
        if (args_int(argc, argv, &i, "--max-running-requests|-np|--parallel", 1, 256, &v64, &bad)) {
            p.max_running = (int)v64;
            continue;
        }
        if (args_int(argc, argv, &i, "--max-queued-requests", 1, 1 << 20, &v64, &bad)) {
            p.max_queue = (int)v64;
            continue;
        }
        if (args_int(argc, argv, &i, "--max-connections", 1, 1 << 20, &v64, &bad)) {
            p.max_connections = (int)v64;
            continue;
        }
        if (args_int(argc, argv, &i, "--timeout", 1, 1 << 20, &v64, &bad)) {
            p.timeout_s = (int)v64;
            continue;
        }
        if (args_int(argc, argv, &i, "--max-body-bytes", 1024, (int64_t)1 << 32, &v64, &bad)) {
            p.max_body = (size_t)v64;
            continue;
        }
        if (args_str(argc, argv, &i, "-m|--model", &model_path, &bad) ||
            args_str(argc, argv, &i, "--host", &p.host, &bad) ||
            args_str(argc, argv, &i, "--served-model-name|--alias|-a", &p.model_name, &bad) ||
            args_str(argc, argv, &i, "--api-key", &p.api_key, &bad) ||
            args_str(argc, argv, &i, "--admin-key", &p.admin_key, &bad) ||
            args_str(argc, argv, &i, "--chat-template", &tmpl_name, &bad) ||
            args_str(argc, argv, &i, "--ready-file", &p.ready_file, &bad))
            continue;
        fprintf(stderr, "ft serve: unexpected argument '%s' (see ft serve --help)\n", argv[i]);
        return FT_EXIT_USAGE;
    }
    if (bad) return FT_EXIT_USAGE;
    if (!engine_args_apply(&ea, &p.engine)) return FT_EXIT_USAGE;
    p.engine.prefix_cache = !no_prefix_cache;
    if (ctx_checkpoints >= 0) p.engine.ctx_checkpoints = ctx_checkpoints;
    if (p.api_key && !*p.api_key) {
        fprintf(stderr, "ft serve: --api-key is empty (that would serve without a key); give a key or leave it out\n");
        return FT_EXIT_USAGE;
    }
    if (p.admin_key && !*p.admin_key) {
        fprintf(stderr, "ft serve: --admin-key is empty; give a key or leave it out (admin routes off)\n");
        return FT_EXIT_USAGE;
    }
    if (!p.api_key && !host_is_loopback(p.host))
        fprintf(stderr, "ft serve: warning: listening on %s without --api-key: whoever reaches the port can use "
                        "the model\n", p.host);
    cli_model cm;
    if (!cli_model_open("serve", model_path, true, &cm)) return FT_EXIT_INPUT;
    if (!model_path) model_path = cm.demo;
    p.model_path = model_path;
    const ft_model *m = cm.m;
    const tok_vocab *v = cm.v;
    ft_err err = {{0}};
    int rc = FT_EXIT_INPUT;
    tok_chat *chat = NULL;
    char name[256];
    if (!p.model_name) {
        gguf_str gn;
        if (gguf_get_str(m->file, "general.name", &gn) && gn.len > 0) {
            snprintf(name, sizeof(name), "%.*s", (int)FT_MIN(gn.len, 255), gn.ptr);
        } else {
            const char *base = strrchr(model_path, '/');
            snprintf(name, sizeof(name), "%s", base ? base + 1 : model_path);
            size_t l = strlen(name);
            if (l > 5 && !strcmp(name + l - 5, ".gguf")) name[l - 5] = 0;
        }
        p.model_name = name;
    }
    chat = tok_chat_load(m->file, tmpl_name, &err);
    if (chat) {
        fprintf(stderr, "ft serve: chat template: %s; tool calls: %s\n", tok_chat_describe(chat),
                tok_chat_tool_format(chat)    ? tok_tool_format_name(tok_chat_tool_format(chat))
                : tok_chat_builtin(chat) >= 0 ? "none (a built-in template renders no tools)"
                                              : "none (tools only with tool_choice \"none\")");
    } else if (tmpl_name) {
        fprintf(stderr, "ft serve: %s\n", err.msg);
        goto done;
    } else {
        fprintf(stderr, "ft serve: %s; the chat routes will answer 400\n", err.msg);
    }
    p.chat = chat;
    sampling_args_from_model(&sa, "serve", m->file);
    p.sampling = sa.p;
    p.sampling_set = sa.given | sa.from_model;
    char said[512];
    sampling_args_describe(&sa, said, sizeof(said));
    if (said[0]) fprintf(stderr, "ft serve: sampling defaults of requests that name none: %s\n", said);
    cli_model_pick_device(&ea, &cm, &p.engine);
    p.engine.n_seq = p.max_running;
    // the model's context by default, as far as memory holds it (the engine says when not)
    if (!cli_model_context(&ea, &cm, INT32_MAX, &p.engine)) goto done;
    // the mapping is lazy: the engine reads it into memory where the CPU computes from it (the
    // CPU device, or the experts --moe-backend cpu computes), so the first requests do not wait
    ft_progress bar;
    cli_show_startup(&p.engine, &bar);
    p.engine.prefault = true;
    if (!srv_run(&p, m, v, &err)) {
        fprintf(stderr, "ft serve: %s\n", err.msg);
        goto done;
    }
    rc = FT_EXIT_OK;
done:
    tok_chat_free(chat);
    cli_model_close(&cm);
    return rc;
}
