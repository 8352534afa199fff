// synth_vocab.h: the built-in tokenizer of synthetic models (internal to model/).
#ifndef FT_MODEL_SYNTH_VOCAB_H
#define FT_MODEL_SYNTH_VOCAB_H

#include "../gguf/gguf.h"

// Writes the tokenizer.* keys of a small byte-level BPE vocabulary (GPT-2 byte mapping, the
// qwen2 pre-tokenizer, merges that build a few hundred common English words, ChatML special
// tokens and chat template) into w. Returns the number of tokens.
int64_t synth_vocab_write_builtin(gguf_writer *w);

#endif
