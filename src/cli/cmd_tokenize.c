// cmd_tokenize.c: `ft tokenize -m FILE.gguf [options] TEXT`: the token ids of a text.
//
// Works on any GGUF with a tokenizer, vocabulary-only files included. BOS/EOS are added as the
// model's tokenizer adds them (llama.cpp's rules) unless --no-bos; control tokens written in
// the text are recognised only with --special.
#include "cli.h"
#include "args.h"
#include "../gguf/gguf.h"
#include "../tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char g_usage[] =
    "usage: ft tokenize -m FILE.gguf [--special] [--no-bos] [--json] [--pieces]\n"
    "                   [--chat [--chat-template NAME|FILE]] [-f FILE | TEXT]\n"
    "Prints the token ids of TEXT (or of the contents of FILE) as the model's tokenizer\n"
    "(llama.cpp's) cuts it: one line of space-separated ids.\n"
    "  -m, --model FILE   GGUF file with a tokenizer (a vocabulary-only file is enough)\n"
    "  -f, --file FILE    tokenize the contents of FILE instead of TEXT\n"
    "  --special          recognise control tokens written in the text (<|im_start|>, ...)\n"
    "  --no-bos           add no BOS/EOS even where the model's tokenizer adds them\n"
    "  --json             a JSON array on one line\n"
    "  --pieces           also show the text of each token (one per line; with --json,\n"
    "                     an array of {\"id\", \"piece\"})\n"
    "  --chat             TEXT is a user message: render it with the model's chat template\n"
    "                     (and the assistant prompt), then tokenize; only the template's own\n"
    "                     markers become control tokens, and BOS comes from the template\n"
    "  --chat-template NAME|FILE  the template to use instead of the GGUF's own: a built-in\n"
    "                     (chatml, qwen2, qwen2.5, qwen3, llama2, mistral, llama3, llama3.1,\n"
    "                     qwen3.5, glm4.5, gpt-oss) or a file holding a Jinja template\n";

static char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, fp)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    bool err = ferror(fp);
    fclose(fp);
    if (!buf || err) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

// A piece for a terminal: printable bytes as they are, the rest escaped.
static void print_piece(const char *p, size_t len) {
    putchar('\'');
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\' || c == '\'') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('\'');
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *text = NULL, *template_name = NULL;
    bool special = false, no_bos = false, json = false, pieces = false, chat = false, bad = false;
    bool only_args = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (!only_args && args_flag(argv, i, "-h|--help")) {
            fputs(g_usage, stdout);
            return FT_EXIT_OK;
        }
        if (only_args || argv[i][0] != '-' || !argv[i][1]) {
            if (text) {
                fprintf(stderr, "ft tokenize: more than one TEXT ('%s'); quote the text\n", argv[i]);
                return FT_EXIT_USAGE;
            }
            text = argv[i];
        } else if (!strcmp(argv[i], "--")) {
            only_args = true;
        } else if (args_str(argc, argv, &i, "-m|--model", &model, &bad)) {
        } else if (args_str(argc, argv, &i, "-f|--file", &file, &bad)) {
        } else if (args_str(argc, argv, &i, "--chat-template", &template_name, &bad)) {
            chat = true;
        } else if (args_flag(argv, i, "--chat")) {
            chat = true;
        } else if (args_flag(argv, i, "--special")) {
            special = true;
        } else if (args_flag(argv, i, "--no-bos")) {
            no_bos = true;
        } else if (args_flag(argv, i, "--json")) {
            json = true;
        } else if (args_flag(argv, i, "--pieces")) {
            pieces = true;
        } else {
            fprintf(stderr, "ft tokenize: unknown option '%s' (see ft tokenize --help)\n", argv[i]);
            return FT_EXIT_USAGE;
        }
    }
    if (bad) return FT_EXIT_USAGE;
    if (!model || (!text && !file) || (text && file)) {
        fprintf(stderr, "%s", g_usage);
        return FT_EXIT_USAGE;
    }

    size_t len = 0;
    char *owned = NULL;
    if (file) {
        owned = read_file(file, &len);
        if (!owned) {
            fprintf(stderr, "ft tokenize: cannot read %s\n", file);
            return FT_EXIT_INPUT;
        }
        text = owned;
    } else {
        len = strlen(text);
    }

    ft_err err = {{0}};
    gguf_file *f = gguf_open(model, &err);
    tok_vocab *v = f ? tok_vocab_load(f, &err) : NULL;
    tok_chat *tmpl = NULL;
    bool ok = v && (!chat || (tmpl = tok_chat_load(f, template_name, &err)) != NULL);
    gguf_close(f);
    if (!ok) {
        fprintf(stderr, "ft tokenize: %s: %s\n", model, err.msg);
        tok_vocab_free(v);
        free(owned);
        return FT_EXIT_INPUT;
    }

    tok_ids ids = {0};
    if (chat) {
        // the message may hold any bytes up to its first NUL
        char *msg = strndup(text, len);
        tok_chat_msg m = {.role = "user", .content = msg};
        tok_chat_prompt prompt;
        ok = tok_chat_apply(tmpl, &m, 1, tok_chat_default_params(v), NULL, &prompt, &err);
        tok_chat_free(tmpl);
        if (ok) {
            // the template writes BOS itself where the model wants one
            tok_encode_segments(v, prompt.segs, prompt.n_segs, false, &ids);
            tok_chat_prompt_free(&prompt);
        }
        free(msg);
        if (!ok) {
            fprintf(stderr, "ft tokenize: %s\n", err.msg);
            tok_vocab_free(v);
            free(owned);
            return FT_EXIT_INPUT;
        }
    } else {
        tok_encode(v, text, len, !no_bos, special, &ids);
    }
    if (json) {
        json_t *a = json_array();
        for (size_t i = 0; i < ids.n; i++) {
            if (!pieces) {
                json_array_append_new(a, json_integer(ids.ids[i]));
                continue;
            }
            size_t plen;
            const char *p = tok_piece(v, ids.ids[i], true, &plen);
            // pieces of a multi-byte character's bytes are not UTF-8 on their own
            json_t *ps = json_stringn(p, plen);
            if (!ps) {
                char *hex = malloc(4 * plen + 1);
                for (size_t k = 0; k < plen; k++) sprintf(hex + 4 * k, "\\x%02x", (unsigned char)p[k]);
                ps = json_stringn(hex, 4 * plen);
                free(hex);
            }
            json_array_append_new(a, json_pack("{s:I, s:o}", "id", (json_int_t)ids.ids[i], "piece", ps));
        }
        char *s = json_dumps(a, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        json_decref(a);
    } else if (pieces) {
        for (size_t i = 0; i < ids.n; i++) {
            size_t plen;
            const char *p = tok_piece(v, ids.ids[i], true, &plen);
            printf("%6d ", ids.ids[i]);
            print_piece(p, plen);
            putchar('\n');
        }
    } else {
        for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
        putchar('\n');
    }
    tok_ids_free(&ids);
    tok_vocab_free(v);
    free(owned);
    return FT_EXIT_OK;
}
