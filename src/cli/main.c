// main.c: the `ft` command: dispatch to a subcommand.
#include "cli.h"
#include "../util/util.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command g_commands[] = {
    {"inspect", cmd_inspect, "show a GGUF file: metadata, tensors, expert geometry"},
    {"synth", cmd_synth, "write a synthetic model with random weights"},
    {"tokenize", cmd_tokenize, "print the token ids of a text (the model's tokenizer)"},
    {"run", cmd_run, "generate text from a prompt, streamed to stdout"},
    {"probs", cmd_probs, "print the next-token probabilities after a prompt as JSON"},
    {"bench", cmd_bench, "measure prompt and decode speed against the memory roofline"},
    {"serve", cmd_serve, "serve the model over HTTP (OpenAI- and Anthropic-compatible)"},
    {"trace-gen", cmd_trace_gen, "write a route trace with realistic expert reuse (for benchmarks)"},
    {"replay", cmd_replay, "replay a route trace: cache policies against Belady's optimum"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: ft <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(g_commands) / sizeof(g_commands[0]); i++)
        fprintf(out, "  %-10s %s\n", g_commands[i].name, g_commands[i].summary);
    fprintf(out, "\n`ft <command> --help` describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return FT_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "-h") || !strcmp(name, "--help") || !strcmp(name, "help")) {
        usage(stdout);
        return FT_EXIT_OK;
    }
    if (!strcmp(name, "--version") || !strcmp(name, "version")) {
        printf("ft %s\n", FT_VERSION);
        return FT_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(g_commands) / sizeof(g_commands[0]); i++)
        if (!strcmp(name, g_commands[i].name)) return g_commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "ft: unknown command '%s'\n\n", name);
    usage(stderr);
    return FT_EXIT_USAGE;
}
