// fixtures.h: what several test files share. Synthetic models written to the suite's scratch
// directory (in the process, or once per run through `ft synth`), loaded or not, among them the
// MoE cache tests' geometry and the models the GPU suite runs beside the CPU, and the split
// twin of a model with fused gate/up experts; a GGUF with its expert geometry; a host KV-cache
// tensor; a file read whole; a vocabulary from a GGUF; stderr silenced around notices; a
// growable byte buffer for files written by hand; op inputs (NaN-filled outputs, random weights).
//
// A fixture that can fail records the failure in the running test (test_fail, naming what
// failed and why) and returns NULL or false, so a caller stops with a bare REQUIRE(x).
// Paths returned live in rotating buffers like test_path's: valid for the next 8 calls.
#ifndef FT_TEST_FIXTURES_H
#define FT_TEST_FIXTURES_H

#include "test.h"
#include "../src/model/model.h"
#include "../src/model/synth.h"
#include "../src/moe/geometry.h"
#include "../src/util/rng.h"
#include "../src/tokenizer/tokenizer.h"

#include <stdint.h>

// ---------------------------------------------------------------------------------------------
// Synthetic models

// The expert geometry the MoE cache tests price their slots from: n_embd = n_ff_exp = 256
// (a Q4_K bank is 36 KiB, a BF16 one 128 KiB), top-2 of n_expert experts, n_layer layers;
// the rest as ft_synth_default_params().
ft_synth_params fixture_moe_params(int n_layer, int n_expert);

// Sets the expert types per layer from comma-separated names as `ft synth --expert-types`
// takes them ("q4_K,bf16,q8_0": entry L is layer L's, the last repeats); down: the down
// banks' (NULL: as gate/up). Aborts on a bad list (a mistake in the test).
void fixture_expert_types(ft_synth_params *p, const char *gate_up, const char *down);

// The models the GPU suite runs beside the CPU reference: 3 layers of arch, a context of 256,
// the given head_dim; strict: q8_0 for the dense and the expert weights (CPU and GPU then
// agree closely); laguna: one leading dense layer; glm4moe: as fixture_glm4moe.
ft_synth_params fixture_compare_params(const char *arch, int head_dim, bool strict);
// Makes a glm4moe of p as GLM-4.5: a leading dense layer, Q/K/V biases, Q/K norms, rotary over
// half of each head, and an MTP block after the layers (which no engine may run or place).
void fixture_glm4moe(ft_synth_params *p);
// gpt-oss: Q/K/V biases, sliding windows of 8 on the even layers, YaRN (the sinks, the
// router's and experts' biases come with the architecture).
void fixture_gptoss(ft_synth_params *p);
// Makes p 4 layers whose last one has bf16 experts, the others q4_K (strict: q8_0).
void fixture_bf16_tail(ft_synth_params *p, bool strict);

// Writes p as test_path(name). Returns the path, or NULL after a recorded failure.
const char *fixture_write(const ft_synth_params *p, const char *name);

// fixture_write, then ft_model_load. Returns the model (free with ft_model_free), or NULL
// after a recorded failure.
ft_model *fixture_model(const ft_synth_params *p, const char *name);

// `ft synth test_path(name) synth_args` through the built binary, once per name in a run:
// later calls with that name return the file already written (whatever their arguments).
// Returns the path, or NULL after a recorded failure.
const char *fixture_cli_model(const char *name, const char *synth_args);

// A twin of the model at src with each layer's fused gate/up experts (ffn_gate_up_exps) split
// into ffn_gate_exps and ffn_up_exps (each expert's first and second half), written as
// test_path(name): the same weights in the split layout, so every engine must give both the
// same logits bit for bit. Returns the path, or NULL after a recorded failure (also when src
// has no fused tensor).
const char *fixture_split_gate_up(const char *src, const char *name);

// Copies the GGUF at src to dst: its key/values but the one named drop (NULL: none), then what
// add writes (NULL: nothing), then every tensor. False after a recorded failure.
typedef struct gguf_writer gguf_writer;
bool fixture_gguf_rewrite(const char *src, const char *dst, const char *drop, void (*add)(gguf_writer *w, void *ctx),
                          void *ctx);

// Opens the GGUF at path and reads its expert geometry (free both with moe_geometry_free and
// gguf_close). Returns false after a recorded failure, with nothing left open.
bool fixture_open_moe(const char *path, gguf_file **f, moe_geometry *g);

// ---------------------------------------------------------------------------------------------
// Tensors

// A KV-cache tensor of type t: n_ctx rows of width values, zeroed, in host memory (free its
// data with free).
ft_tensor fixture_kv_cache(enum ft_type t, int width, int n_ctx);

// ---------------------------------------------------------------------------------------------
// Files

// The whole file, NUL-terminated (malloc'd; *len, when len is not NULL, its size without the
// NUL). Returns NULL when it cannot be opened or read whole; records no failure.
char *fixture_read_file(const char *path, size_t *len);

// Calls fn with the path of every C, CUDA and header file (.c .h .cu .cuh) under dir, in its
// subfolders too (hidden entries skipped); returns how many.
int fixture_for_each_source(const char *dir, void (*fn)(void *ctx, const char *path), void *ctx);

// The tokenizer of a GGUF file. Returns NULL after a recorded failure (naming the path).
tok_vocab *fixture_vocab(const char *path);

// ---------------------------------------------------------------------------------------------
// stderr

// Sends stderr to /dev/null until the matching fixture_stderr_restore (nested pairs: the
// outermost restores it).
void fixture_stderr_mute(void);
void fixture_stderr_restore(void);

// ---------------------------------------------------------------------------------------------
// Bytes written by hand (GGUF files with defects)

typedef struct fixture_buf {
    uint8_t *p;
    size_t n, cap;
} fixture_buf;

void fixture_buf_put(fixture_buf *b, const void *d, size_t n);
void fixture_buf_u8(fixture_buf *b, uint8_t v);
void fixture_buf_u32(fixture_buf *b, uint32_t v);
void fixture_buf_u64(fixture_buf *b, uint64_t v);
void fixture_buf_str(fixture_buf *b, const char *s); // a GGUF string: u64 length, then the bytes
void fixture_buf_free(fixture_buf *b);

// ---------------------------------------------------------------------------------------------
// Op inputs

// x[0..n) = NaN (an output an op forgets to write then fails), or normal draws times scale.
void fixture_fill_nan(float *x, size_t n);
void fixture_fill_normal(ft_rng *r, float *x, size_t n, float scale);
// A host weight tensor (ne0, ne1, ne2) of random valid rows of type (the caller frees t.data).
ft_tensor fixture_weight(enum ft_type type, int64_t ne0, int64_t ne1, int64_t ne2, ft_rng *r);

#endif
