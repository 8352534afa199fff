// cli_model.c: see cli_model.h.
#include "cli_model.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

bool cli_model_open(const char *cmd, const char *path, bool vocab, cli_model *cm) {
    memset(cm, 0, sizeof(*cm));
    if (!path) {
        if (!cli_demo_model(cmd, cm->demo, sizeof(cm->demo))) return false;
        path = cm->demo;
    }
    ft_err err = {{0}};
    if (!(cm->m = ft_model_load(path, &err)) || (vocab && !(cm->v = tok_vocab_load(cm->m->file, &err)))) {
        fprintf(stderr, "ft %s: %s\n", cmd, err.msg);
        cli_model_close(cm);
        return false;
    }
    return true;
}

void cli_model_close(cli_model *cm) {
    tok_vocab_free(cm->v);
    ft_model_free(cm->m);
    cm->v = NULL;
    cm->m = NULL;
}

bool cli_model_context(const engine_args *ea, const cli_model *cm, int default_ctx, ft_engine_params *ep) {
    int train = cm->m->hp.n_ctx_train;
    ep->n_ctx = engine_args_n_ctx(ea, FT_MIN(default_ctx, train), train);
    // no -c and no --num-tokens: the engine shrinks a default as large as the model's to fit
    ep->n_ctx_default = ea->n_ctx <= 0 && ea->num_tokens <= 0 && default_ctx >= train;
    if (ep->n_ctx > train) {
        fprintf(stderr, "ft %s: -c %d exceeds the model's context of %d tokens\n", ea->cmd, ep->n_ctx, train);
        return false;
    }
    return true;
}

void cli_model_pick_device(const engine_args *ea, const cli_model *cm, ft_engine_params *ep) {
    unsigned missing = ft_model_op_features(cm->m) & ~ft_backend_features(FT_PLACEMENT_CUDA);
    if (ea->device || ea->gpu_flags[0] || ep->device != FT_PLACEMENT_CUDA || !missing) return;
    char names[256];
    fprintf(stderr, "ft %s: %s runs on the CPU in this version (the CUDA backend has no %s yet): running on the "
                    "CPU (--device cpu)\n",
            ea->cmd, cm->m->arch->name, ft_ops_features_name(missing, names, sizeof(names)));
    ep->device = FT_PLACEMENT_CPU;
}

void cli_show_startup(ft_engine_params *ep, ft_progress *bar) {
    ep->print_plan = true;
    if (!bar) return;
    *bar = ft_progress_begin(NULL);
    ep->progress = ft_progress_report;
    ep->progress_ctx = bar;
}
