// cmd_probs.c: `ft probs -m FILE -p TEXT [--top K] [-t N] [-c N]`: the next-token
// distribution after a prompt, as one JSON line (the conformance view of the engine).
#include "cli.h"
#include "args.h"
#include "cli_model.h"
#include "../engine/engine.h"
#include "../tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void probs_usage(FILE *out) {
    fprintf(out,
            "usage: ft probs -m FILE.gguf -p TEXT [options]\n"
            "Prints {\"tokens\": [prompt ids], \"top\": [[id, prob], ...]} on one line: the K most\n"
            "likely next tokens after the prompt (softmax at temperature 1 over the vocabulary).\n\n"
            "  -m, --model FILE           the model\n"
            "  -p, --prompt TEXT          the prompt (special tokens parsed; BOS as the model asks)\n"
            "  --top K                    how many tokens (default 10)\n");
    engine_args a = engine_args_init("probs", 0);
    engine_args_usage(out, &a);
}

int cmd_probs(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL;
    int64_t top = 10;
    engine_args ea = engine_args_init("probs", 0);
    bool bad = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (args_flag(argv, i, "-h|--help")) {
            probs_usage(stdout);
            return FT_EXIT_OK;
        }
        if (engine_args_take(&ea, argc, argv, &i, &bad) ||
            args_str(argc, argv, &i, "-m|--model", &model_path, &bad) ||
            args_str(argc, argv, &i, "-p|--prompt", &prompt, &bad) ||
            args_int(argc, argv, &i, "--top", 1, 1 << 20, &top, &bad))
            continue;
        fprintf(stderr, "ft probs: unexpected argument '%s' (see ft probs --help)\n", argv[i]);
        return FT_EXIT_USAGE;
    }
    if (bad) return FT_EXIT_USAGE;
    if (!model_path || !prompt) {
        probs_usage(stderr);
        return FT_EXIT_USAGE;
    }
    ft_engine_params ep = ft_engine_default_params();
    if (!engine_args_apply(&ea, &ep)) return FT_EXIT_USAGE;
    cli_model cm;
    if (!cli_model_open("probs", model_path, true, &cm)) return FT_EXIT_INPUT;
    const ft_model *m = cm.m;
    ft_err err = {{0}};
    int rc = FT_EXIT_INPUT;
    tok_ids ids = {0};
    ft_engine *e = NULL;
    double *p = NULL;
    cli_model_pick_device(&ea, &cm, &ep);
    tok_encode(cm.v, prompt, strlen(prompt), true, true, &ids);
    if (ids.n == 0) {
        fprintf(stderr, "ft probs: the prompt is empty after tokenization\n");
        goto done;
    }
    int need = (int)FT_MIN((size_t)m->hp.n_ctx_train, ids.n);
    ep.n_ctx = engine_args_n_ctx(&ea, need, need);
    if (ep.n_ctx == 0) goto done;
    if (ids.n > (size_t)ep.n_ctx) {
        fprintf(stderr, "ft probs: the prompt has %zu tokens, more than the context of %d (-c)\n", ids.n, ep.n_ctx);
        goto done;
    }
    cli_show_startup(&ep, NULL);
    if (!(e = ft_engine_init(m, &ep, &err))) {
        fprintf(stderr, "ft probs: %s\n", err.msg);
        goto done;
    }
    const float *lg = ft_engine_eval(e, ids.ids, (int)ids.n, &err);
    if (!lg) {
        fprintf(stderr, "ft probs: %s\n", err.msg);
        goto done;
    }
    int n = m->hp.n_vocab;
    p = ft_malloc((size_t)n * sizeof(double));
    float mx = lg[0];
    for (int i = 1; i < n; i++) mx = lg[i] > mx ? lg[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += p[i] = exp((double)lg[i] - mx);
    printf("{\"tokens\": [");
    for (size_t i = 0; i < ids.n; i++) printf("%s%d", i ? ", " : "", ids.ids[i]);
    printf("], \"top\": [");
    // K passes of a selection: K is small next to the vocabulary
    int k = (int)FT_MIN(top, n);
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (p[i] >= 0 && (best < 0 || p[i] > p[best])) best = i;
        printf("%s[%d, %.8g]", j ? ", " : "", best, p[best] / sum);
        p[best] = -1;
    }
    printf("]}\n");
    rc = FT_EXIT_OK;
done:
    free(p);
    ft_engine_free(e);
    tok_ids_free(&ids);
    cli_model_close(&cm);
    return rc;
}
