// oracle.h: llama.cpp, loaded at run time, as the truth the tests compare against.
//
// The npm package @node-llama-cpp/linux-x64@3.21.1 (installed by `make deps` into
// node_modules/) ships llama.cpp's CPU build as shared libraries. The tests dlopen them rather
// than link them so the suite still builds and runs where they are absent: then each oracle
// test is skipped, or fails when FT_REQUIRE_ORACLE=1 (as in CI), so a missing oracle can
// never pass silently there.
#ifndef FT_TEST_ORACLE_H
#define FT_TEST_ORACLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Directory of the libraries: $FT_LLAMA_LIB_DIR, else the npm package's bins folder.
const char *oracle_lib_dir(void);

// Handles of libggml-base (quant functions, gguf reader) and libllama; NULL when the library
// cannot be loaded, after calling test_skip or test_fail (see above) with the reason.
void *oracle_ggml_base(void);
void *oracle_llama(void);

// True when node and node-llama-cpp can run tests/oracle/llama_eval.mjs; otherwise skips (or
// fails, see above) the current test and returns false.
bool oracle_node_available(void);

// Runs tests/oracle/llama_eval.mjs with the given arguments (shell-quoted by the caller) and
// captures its one line of JSON in out. Returns false (and fails the test) on a non-zero exit.
bool oracle_llama_eval(const char *args, char *out, size_t cap);

// A symbol of a loaded library; fails the current test and returns NULL when absent.
void *oracle_sym(void *lib, const char *name);

// Renders Jinja templates with llama.cpp's Jinja engine (tests/oracle/jinja_render.mjs, through
// node). job: a JSON array of {"template": TEXT, "cases": [VARS, ...]}. Returns (a new reference)
// per template an array with, per case, {"text": ...} or {"error": ...}; NULL after failing the
// test when node fails. Call oracle_node_available() first.
struct json_t;
struct json_t *oracle_jinja_render(struct json_t *job);

// ---------------------------------------------------------------------------------------------
// llama.cpp's tokenizer through its C API (llama.h from the source bundle of node-llama-cpp,
// unpacked by the Makefile into build/llama.cpp; where it is absent these skip or fail as
// above). Byte strings go in as they are, so invalid UTF-8 can be tested.

// Directory of llama.cpp's sources unpacked from the bundle ($FT_LLAMA_SRC, else
// build/llama.cpp): include/, ggml/include/, models/ (vocabulary test vectors). NULL (after
// skip/fail) when absent.
const char *oracle_llama_src(void);

typedef struct oracle_vocab oracle_vocab;

// Loads a GGUF file's vocabulary with llama.cpp (vocab_only). NULL (after skip/fail) when the
// oracle is unavailable or llama.cpp refuses the file.
oracle_vocab *oracle_vocab_load(const char *path);
void oracle_vocab_free(oracle_vocab *o); // NULL is a no-op

// llama_tokenize: the number of ids written (at most cap), or -1 if they do not fit.
int oracle_tokenize(oracle_vocab *o, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t *ids, int cap);
// llama_token_to_piece (lstrip 0): bytes written, or -1.
int oracle_token_to_piece(oracle_vocab *o, int32_t id, bool special, char *buf, int cap);
// llama_detokenize: bytes written, or -1.
int oracle_detokenize(oracle_vocab *o, const int32_t *ids, int n, bool remove_special,
                      bool unparse_special, char *buf, int cap);

// Special tokens as llama.cpp sees them (llama_vocab_bos/eos/eot, -1 for none; add_bos/eos),
// and per token its attributes (enum llama_token_attr bits) and whether it ends generation.
typedef struct oracle_vocab_info {
    int32_t n_tokens, bos, eos, eot;
    bool add_bos, add_eos;
} oracle_vocab_info;
oracle_vocab_info oracle_vocab_get_info(oracle_vocab *o);
uint32_t oracle_token_attr(oracle_vocab *o, int32_t id);
bool oracle_token_is_eog(oracle_vocab *o, int32_t id);

// llama.cpp's code point flags (its internal unicode_cpt_flags_from_cpt, exported by
// libllama): category bits 0x01 undefined, 0x02 number, 0x04 letter, 0x08 separator,
// 0x10 mark, 0x20 punctuation, 0x40 symbol, 0x80 control; 0x100 white space. NULL (after
// skip/fail) when unavailable.
typedef uint16_t (*oracle_flags_fn)(uint32_t cpt);
oracle_flags_fn oracle_unicode_flags(void);

#endif
