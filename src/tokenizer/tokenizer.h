// tokenizer: text <-> token ids exactly as llama.cpp computes them, and chat templates.
//
// A tok_vocab is built from the tokenizer.* keys of a GGUF file (a full model or a
// vocabulary-only file). Two tokenizer families are supported:
//   - BPE: byte-level (tokenizer.ggml.model = "gpt2"): tokens, merges and token types, with the
//     pre-tokenizer (the word splitter) chosen by tokenizer.ggml.pre; and SentencePiece-style
//     ("gemma4", Gemma 4): words in UTF-8 with ' ' as "▁", split at runs of newlines, bytes
//     without a token as <0xXX>, BOS always added;
//   - SentencePiece (tokenizer.ggml.model = "llama"): tokens, scores, byte fallback, a leading
//     space before the text (Llama 2, Mistral, Mixtral).
// Special tokens (control, user-defined, unknown) are cut out of the text before the words are
// split, as llama.cpp does: user-defined tokens always, control tokens only where the caller
// allows it (tok_segment.parse_special).
//
// Encoding runs in three steps: special-token partition (encode.c), pre-tokenization into words
// (pretok.c, unicode.c), then BPE merges (bpe.c) or SentencePiece merges (spm.c). Decoding
// (decode.c) maps each token to its bytes; tok_stream turns a stream of tokens into valid UTF-8.
// Chat templates render a conversation the way the model's own Jinja template does: the GGUF's
// template through the Jinja interpreter (jinja_*.c, chat_load.c), or a built-in (chat.c);
// harmony.c splits gpt-oss's replies into their channels as they stream.
//
// Memory: a tok_vocab owns copies of everything it needs, so the gguf_file may be closed after
// tok_vocab_load. Thread-safety: a tok_vocab is immutable once loaded; tok_encode*, tok_piece
// and tok_detokenize may run on one vocab from several threads. A tok_stream belongs to one
// thread. Encoding allocates scratch per call; tok_piece and tok_stream_push never allocate.
#ifndef FT_TOKENIZER_H
#define FT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../gguf/gguf.h"
#include "../util/util.h"

typedef int32_t tok_id;
#define TOK_NULL ((tok_id)-1)

enum tok_kind {
    TOK_KIND_BPE = 0, // BPE: byte-level ("gpt2") or SentencePiece-style ("gemma4")
    TOK_KIND_SPM = 1, // SentencePiece ("llama")
};

// Token attributes (bits), as llama.cpp derives them from tokenizer.ggml.token_type and the
// token texts it recognises (e.g. "<|im_end|>" is always a control token).
enum tok_attr {
    TOK_ATTR_UNKNOWN = 1 << 0,
    TOK_ATTR_UNUSED = 1 << 1,
    TOK_ATTR_NORMAL = 1 << 2,
    TOK_ATTR_CONTROL = 1 << 3,
    TOK_ATTR_USER_DEFINED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5,
    TOK_ATTR_LSTRIP = 1 << 7, // special token that eats the white space before it
    TOK_ATTR_RSTRIP = 1 << 8, // ... and after it
};

typedef struct tok_vocab tok_vocab;

// ---------------------------------------------------------------------------------------------
// Vocabulary

// Builds the tokenizer of an open GGUF file. Returns NULL and sets *err ("tokenizer: what")
// when a key is missing or malformed (wrong type, counts that disagree, duplicate tokens), when
// the tokenizer model is not gpt2, gemma4 or llama, or when tokenizer.ggml.pre names a
// pre-tokenizer ft does not know (the message names it).
tok_vocab *tok_vocab_load(const gguf_file *f, ft_err *err);
void tok_vocab_free(tok_vocab *v); // NULL is a no-op

enum tok_kind tok_vocab_kind(const tok_vocab *v);
// The pre-tokenizer's name as the file spells it ("qwen2", "llama-bpe", ...); "" for SPM.
const char *tok_vocab_pre(const tok_vocab *v);
int32_t tok_n_tokens(const tok_vocab *v);

// Special token ids, TOK_NULL where the vocabulary has none.
tok_id tok_bos(const tok_vocab *v);
tok_id tok_eos(const tok_vocab *v);
tok_id tok_eot(const tok_vocab *v);
// Whether encoding with add_special prepends BOS / appends EOS: tokenizer.ggml.add_bos_token
// and add_eos_token where present, else llama.cpp's default (SPM and llama-bpe add BOS).
bool tok_adds_bos(const tok_vocab *v);
bool tok_adds_eos(const tok_vocab *v);
// True for tokens that end generation (EOS, EOT, "<|im_end|>", ...), as llama.cpp's EOG set.
bool tok_is_eog(const tok_vocab *v, tok_id id);

// Attributes (enum tok_attr bits) and raw vocabulary text of a token; id must be in range
// (FT_ASSERT). The text is not NUL-terminated; it lives as long as the vocab.
uint32_t tok_attrs(const tok_vocab *v, tok_id id);
const char *tok_text(const tok_vocab *v, tok_id id, size_t *len);
// The id of a token with exactly this text, or TOK_NULL.
tok_id tok_find(const tok_vocab *v, const char *text, size_t len);

// ---------------------------------------------------------------------------------------------
// Encoding

// A growable array of token ids; zero-initialise, release with tok_ids_free.
typedef struct tok_ids {
    tok_id *ids;
    size_t n, cap;
} tok_ids;
void tok_ids_free(tok_ids *t);

// One piece of input text. Control tokens written in it are recognised only if parse_special;
// user-defined tokens always are (llama.cpp's rule). A server renders template markup as
// segments with parse_special and user content as segments without.
typedef struct tok_segment {
    const char *text;
    size_t len;
    bool parse_special;
} tok_segment;

// Tokenizes the concatenation of the segments and appends the ids to *out; text that meets
// across a segment boundary is split into words as if it were one string. With add_special,
// BOS/EOS are added as tok_adds_bos/tok_adds_eos say. Any bytes are accepted: invalid UTF-8
// is tokenized as llama.cpp does (BPE: each bad byte as U+FFFD; SPM: byte tokens). Returns the
// number of ids appended.
size_t tok_encode_segments(const tok_vocab *v, const tok_segment *segs, size_t n_segs,
                           bool add_special, tok_ids *out);

// tok_encode_segments on one segment: llama_tokenize(text, add_special, parse_special).
size_t tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_special,
                  bool parse_special, tok_ids *out);

// ---------------------------------------------------------------------------------------------
// Decoding

// The bytes a token stands for (llama_token_to_piece): BPE byte-level text mapped back to bytes,
// SPM "▁" as a space, byte tokens as their byte; control and unknown tokens are empty unless
// special. Points into the vocab (not NUL-terminated). id must be in range (FT_ASSERT).
const char *tok_piece(const tok_vocab *v, tok_id id, bool special, size_t *len);
// The longest piece of any token, for sizing buffers.
size_t tok_max_piece_len(const tok_vocab *v);

// Whole-sequence detokenization as llama_detokenize: remove_special drops a leading BOS / a
// trailing EOS where the vocab adds them, unparse_special renders control tokens, and the
// vocab's clean-up rules apply (BPE "gpt-2"/"llama-bpe": " ," -> ","). Returns a NUL-terminated
// string the caller frees; *len (if non-NULL) gets its length.
char *tok_detokenize(const tok_vocab *v, const tok_id *ids, size_t n, bool remove_special,
                     bool unparse_special, size_t *len);

// Streaming detokenizer for generated text: emits only complete UTF-8. A token that ends inside
// a multi-byte character holds those bytes back until the character completes; bytes that can
// never form a character come out as U+FFFD (one per maximal invalid subsequence).
typedef struct tok_stream {
    const tok_vocab *v;
    bool special;        // render control tokens
    uint8_t seq[4];      // bytes of the character being completed
    uint8_t seen, need;  // of it: bytes held, bytes it will have (0: between characters)
    uint8_t lower, upper; // range of the next continuation byte
    char *out;           // output buffer, sized once at init
    size_t cap;
} tok_stream;

void tok_stream_init(tok_stream *s, const tok_vocab *v, bool special);
void tok_stream_free(tok_stream *s);
// Feeds one token; returns the text that is complete now (valid UTF-8, possibly empty), valid
// until the next call. Never allocates.
const char *tok_stream_push(tok_stream *s, tok_id id, size_t *len);
// End of stream: whatever is held back comes out as U+FFFD.
const char *tok_stream_flush(tok_stream *s, size_t *len);

// ---------------------------------------------------------------------------------------------
// Chat templates
//
// A model's own Jinja template (tokenizer.chat_template) is rendered by the interpreter below
// (tok_chat_load). The built-ins here render the families ft serves in C, exactly as their Jinja
// source renders (without tools): they are the fallback where the interpreter refuses a
// template, and --chat-template NAME. A GGUF's template is recognised as a built-in only when its
// text is one ft knows (whitespace at its ends aside): ft never guesses from look-alike markers.

enum tok_chat_template {
    TOK_CHAT_CHATML = 0,  // <|im_start|>role\n...<|im_end|>\n (generic ChatML)
    TOK_CHAT_QWEN2,       // ChatML with "You are a helpful assistant" as default system prompt
    TOK_CHAT_QWEN25,      // ChatML with Qwen2.5's default system prompt ("You are Qwen, ...")
    TOK_CHAT_QWEN3,       // ChatML with <think> reasoning (Qwen3)
    TOK_CHAT_LLAMA2,      // <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s> (Llama 2)
    TOK_CHAT_MISTRAL,     // <s>[INST] ... [/INST]...</s> (Mistral 7B v0.1/v0.2, Mixtral 8x7B)
    TOK_CHAT_LLAMA3,      // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> (Llama 3)
    TOK_CHAT_LLAMA31,     // Llama 3 with the knowledge-date system preamble (Llama 3.1 / 3.3)
    TOK_CHAT_QWEN35,      // ChatML, trimmed text, <think> opened by the prompt (Qwen3.5 / 3.6)
    TOK_CHAT_GLM45,       // [gMASK]<sop><|user|>\n...<|assistant|>\n<think>...</think> (GLM-4.5 / 4.6)
    TOK_CHAT_GPT_OSS,     // harmony: <|start|>role<|channel|>...<|message|>...<|end|> (gpt-oss)
    TOK_CHAT_GEMMA4,      // <bos><|turn>user\n...<turn|>\n<|turn>model\n (Gemma 4, llama.cpp's
                          // google-gemma-4-31B-it.jinja: an assistant turn after another continues it)
    TOK_CHAT_GEMMA4_INTERLEAVED, // the same, each assistant turn its own (google-gemma-4-31B-it-interleaved.jinja)
    TOK_CHAT_GEMMA4_V1,   // the same, "<|think|>" without its newline (the text of Gemma 4 GGUFs
                          // converted at its release, as llama.cpp's ggml-vocab-gemma-4.gguf)
    TOK_CHAT_COUNT
};

typedef struct tok_chat_msg {
    const char *role;      // "system", "user", "assistant", "tool"
    const char *content;   // NULL reads as ""
    const char *reasoning; // assistant reasoning_content (Qwen3 and GLM <think>, gpt-oss's
                           // "thinking"), or NULL
    // Tools (Jinja templates only; the built-ins refuse a message that has them):
    const char *tool_calls;   // an assistant's calls: a JSON array as templates read it,
                              // [{"type": "function", "function": {"name": ..., "arguments": ...},
                              // "id": ...}] (arguments an object or a string: tok_chat_object_arguments),
                              // or NULL
    const char *tool_call_id; // a tool result's call id, or NULL
    const char *name;         // a tool result's tool name, or NULL
} tok_chat_msg;

typedef struct tok_chat_params {
    bool add_generation_prompt; // end with the start of an assistant turn
    bool enable_thinking;       // Qwen3, GLM: false adds an empty <think></think> to the prompt
                                // (GLM: and "/nothink" to user turns); Gemma 4: true asks for
                                // thinking (<|think|>), false closes an empty thought channel
    const char *bos_text;       // the template's bos_token / eos_token ("<s>", "</s>")
    const char *eos_text;
    const char *reasoning_effort; // gpt-oss: "Reasoning: ..." of its system message (NULL: "medium");
                                  // a Jinja template: its reasoning_effort (NULL: undefined)
} tok_chat_params;

// add_generation_prompt and enable_thinking on; bos/eos texts from the vocab (v may be NULL).
tok_chat_params tok_chat_default_params(const tok_vocab *v);

// Template by name ("chatml", "qwen2", "qwen2.5", "qwen3", "llama2", "mistral", "llama3",
// "llama3.1", "qwen3.5", "glm4.5", "gpt-oss", "gemma4", "gemma4-interleaved", "gemma4-v1"); false
// and *err if unknown (the message lists the names).
bool tok_chat_from_name(const char *name, enum tok_chat_template *out, ft_err *err);
const char *tok_chat_name(enum tok_chat_template t);
// Recognises a GGUF's tokenizer.chat_template. False and *err ("unknown chat template ...; use
// --chat-template NAME") when the Jinja text is not one ft can render exactly.
bool tok_chat_detect(const char *jinja, size_t len, enum tok_chat_template *out, ft_err *err);

// A rendered conversation: the whole text, and the same text cut into segments of template
// markup (parse_special = true) and message text (parse_special = false), ready for
// tok_encode_segments so that nothing a user writes becomes a control token.
typedef struct tok_chat_prompt {
    char *text; // NUL-terminated
    size_t len;
    tok_segment *segs; // point into text
    size_t n_segs;
} tok_chat_prompt;

// Renders messages. Returns false and sets *err on a conversation the template rejects (its
// raise_exception cases, e.g. Llama 2 roles that do not alternate, or tool messages).
bool tok_chat_render(enum tok_chat_template t, const tok_chat_msg *msgs, size_t n_msgs,
                     tok_chat_params p, tok_chat_prompt *out, ft_err *err);
void tok_chat_prompt_free(tok_chat_prompt *p);

// ---------------------------------------------------------------------------------------------
// gpt-oss's replies (harmony), split by channel as they stream
//
// A reply after the generation prompt "<|start|>assistant" is a sequence of messages, each a
// header up to "<|message|>" naming its channel ("<|channel|>analysis", "<|channel|>final",
// "<|channel|>commentary", possibly a recipient " to=..." and a "<|constrain|>" type), then its
// text up to "<|end|>", the next one opening with "<|start|>assistant" again; the last ends where
// generation does (<|return|>, an end-of-generation token the text does not hold). As llama.cpp
// parses it: analysis is reasoning; final, and commentary without a recipient (a preamble), are
// the answer; a message to a recipient (a tool call) goes to TOK_CHANNEL_CALL: its header first
// (TOK_CHANNEL_CALL_HEADER, once, the header's text without "<|message|>"), then its text, then
// TOK_CHANNEL_CALL_END (no bytes) where the message ends ("<|end|>", or the reply's end at the
// flush). Every other header and end marker goes nowhere. A stray "<|channel|>commentary" before the channel
// (gpt-oss-20b writes one at times) is read past: the last channel named counts. Text that does
// not open with a header (a model off the format) is all answer.

enum tok_channel {
    TOK_CHANNEL_CONTENT,
    TOK_CHANNEL_REASONING,
    TOK_CHANNEL_NONE,
    TOK_CHANNEL_CALL_HEADER, // a message to a recipient: its header, whole
    TOK_CHANNEL_CALL,        // its text
    TOK_CHANNEL_CALL_END,    // its end
};

// Receives the reply's text piece by piece, in order, with the channel of each.
typedef void (*tok_channel_fn)(void *ctx, enum tok_channel ch, const char *s, size_t n);

#define TOK_HARMONY_HEADER_MAX 256 // longer headers are not headers: the reply is read as answer

typedef struct tok_harmony {
    int state;
    enum tok_channel route;            // the open message's channel
    char buf[TOK_HARMONY_HEADER_MAX];  // a header being read, or a marker's beginning held back
    size_t n;
} tok_harmony;

// A splitter at the start of a reply: reading a header, or (in_final) inside the final channel's
// text already (a prefill that continues the answer).
void tok_harmony_init(tok_harmony *h, bool in_final);
// Feeds the next n bytes of the reply (cut anywhere, markers included); calls fn with what is
// known to belong to a channel, holding back what may still be a marker.
void tok_harmony_feed(tok_harmony *h, const char *s, size_t n, tok_channel_fn fn, void *ctx);
// At the end of the reply: gives what was held back (text held as a possible "<|end|>" goes
// to its channel; an unfinished header is markup and goes nowhere).
void tok_harmony_flush(tok_harmony *h, tok_channel_fn fn, void *ctx);

// ---------------------------------------------------------------------------------------------
// Jinja templates
//
// An interpreter for the Jinja subset chat templates use (if/elif/else, for with loop and else,
// set and set blocks, namespace(), macros with defaults, filter blocks, break/continue, filters,
// tests, string/list/dict methods, slicing, tojson, raise_exception, strftime_now), with the
// semantics of llama.cpp's Jinja engine, so that a GGUF's own tokenizer.chat_template renders as
// llama.cpp renders it. A template is parsed once and rendered many times; a parsed template is
// immutable and may be rendered by several threads at once.
//
// Templates are untrusted input: parsing and rendering never crash on any bytes, and a render
// that would exceed a limit (a loop that runs too long, recursion too deep, a string, list or
// output too large) fails with a message naming the limit.

typedef struct tok_jinja tok_jinja;

typedef struct tok_jinja_limits {
    size_t max_output;  // bytes of rendered text
    size_t max_string;  // bytes of any one string value
    size_t max_items;   // items of any one list or dict
    size_t max_memory;  // bytes of values alive at once
    uint64_t max_steps; // evaluation steps (each expression and statement, each loop iteration,
                        // and one per 256 bytes or 16 items of values built or scanned)
    uint32_t max_depth; // nested evaluations (statements, expressions, macro calls)
} tok_jinja_limits;

// 64 MiB of output, 64 MiB strings, 1,000,000 items, 512 MiB of values, 50,000,000 steps,
// depth 1,000.
tok_jinja_limits tok_jinja_default_limits(void);

// Parses a template. Returns NULL and sets *err ("line L, column C: what") on a template that
// does not lex or parse (or nests deeper than 256 levels).
tok_jinja *tok_jinja_parse(const char *src, size_t len, ft_err *err);
void tok_jinja_free(tok_jinja *t); // NULL is a no-op

// Whether the template names the identifier anywhere (a variable read or set, an attribute, a
// macro or loop variable): what a caller may ask before passing an optional variable.
bool tok_jinja_names(const tok_jinja *t, const char *name);

typedef struct tok_jinja_params {
    tok_jinja_limits limits;
    int64_t now; // the time strftime_now formats (seconds since the epoch, local time zone)
} tok_jinja_params;

// Default limits and the current time.
tok_jinja_params tok_jinja_default_params(void);

// Renders a template. vars: n JSON texts, each an object whose members become the template's
// variables (a later one's replacing an earlier one's). Strings from vars are user text (their
// segments tokenized without special tokens), except "bos_token", "eos_token" and the "role" of
// each object in "messages", which are the protocol's (the caller vouches for them). Returns
// false and sets *err ("line L, column C: what" where the template failed; the template's own
// message for raise_exception) on a render that fails or exceeds a limit, or malformed vars.
bool tok_jinja_render(const tok_jinja *t, const char *const *vars, const size_t *var_lens, size_t n,
                      const tok_jinja_params *p, tok_chat_prompt *out, ft_err *err);

// ---------------------------------------------------------------------------------------------
// A model's chat template: the GGUF's own Jinja template, a built-in, or a Jinja file

typedef struct tok_chat tok_chat;

// Chooses the template. spec (--chat-template) names a built-in (tok_chat_from_name's names) or
// a file holding a Jinja template (a name wins over a file of the same name: write ./NAME).
// Without spec: the GGUF's tokenizer.chat_template, rendered by the interpreter; where the
// interpreter refuses it (it does not parse, or fails on a one-message conversation) the
// built-in recognised from its text (tok_chat_detect) is used, with a warning saying why.
// Returns NULL and sets *err when spec is neither a name nor a readable, parseable template,
// or the model has no template ft can render.
tok_chat *tok_chat_load(const gguf_file *f, const char *spec, ft_err *err);
void tok_chat_free(tok_chat *c); // NULL is a no-op

// Which template, in words: "the GGUF's own (Jinja, 4,096 bytes)", "built-in qwen3", ...
const char *tok_chat_describe(const tok_chat *c);
// The built-in's enum, or -1 for a Jinja template.
int tok_chat_builtin(const tok_chat *c);
// Whether replies follow gpt-oss's harmony format, to be split by tok_harmony: the built-in
// gpt-oss, or a Jinja template whose text holds "<|channel|>" (llama.cpp's test for that format).
bool tok_chat_harmony(const tok_chat *c);
// Whether the template takes tok_chat_params.reasoning_effort: the built-in gpt-oss, or a Jinja
// template that names reasoning_effort or reasoning_strength.
bool tok_chat_takes_effort(const tok_chat *c);
// Whether replies carry their reasoning in Gemma 4's thought channel ("<|channel>thought" ...
// "<channel|>"): the built-in gemma4 templates, or a Jinja template whose text holds
// '<|tool_call>call:' (llama.cpp's test for Gemma 4's format).
bool tok_chat_thought_channel(const tok_chat *c);

// Whether a Jinja template reads a tool call's arguments as an object (its members, or the
// object through tojson), as llama.cpp's capability check decides by a trial render: a call
// whose arguments are {"arg": MARK} renders, and MARK is printed other than inside the object's
// own repr. Where it does not, arguments go to the template as the JSON text the client sent.
// False for a built-in.
bool tok_chat_object_arguments(const tok_chat *c);

// How a model writes its tool calls, told from its template's text (markers llama.cpp's parsers
// look for); which one a model's replies are parsed with (src/server/tool_call.c).
enum tok_tool_format {
    TOK_TOOLS_NONE = 0,   // no format ft parses (tools are refused)
    TOK_TOOLS_HERMES,     // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Qwen2.5, Qwen3, Hermes)
    TOK_TOOLS_QWEN3_CODER,// <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
                          // (Qwen3-Coder, Qwen3.5)
    TOK_TOOLS_HARMONY,    // <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...} (gpt-oss)
    TOK_TOOLS_GLM45,      // <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call>
    TOK_TOOLS_DEEPSEEK,   // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
                          // <｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (V3, R1; V3.1: NAME<｜tool▁sep｜>{...})
    TOK_TOOLS_KIMI_K2,    // <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:I
                          // <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
    TOK_TOOLS_MISTRAL,    // [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}, ...] (Mistral Nemo)
    TOK_TOOLS_MISTRAL_ARGS, // [TOOL_CALLS]NAME[ARGS]{...} (Mistral Small 3.2, Devstral, Ministral)
    TOK_TOOLS_LLAMA3,     // {"name": ..., "parameters": {...}} as the whole reply (Llama 3.1 / 3.2 / 3.3)
    TOK_TOOLS_COUNT
};
// The format's name ("hermes", "qwen3-coder", "harmony", "glm4.5", "deepseek", "kimi-k2",
// "mistral", "mistral-args", "llama3", "none").
const char *tok_tool_format_name(enum tok_tool_format f);
// The format of a Jinja template's text; TOK_TOOLS_NONE where it has no format ft knows.
enum tok_tool_format tok_tool_format_detect(const char *jinja, size_t len);
// The template's format: a Jinja template's (tok_tool_format_detect), TOK_TOOLS_NONE for a
// built-in (they render no tools).
enum tok_tool_format tok_chat_tool_format(const tok_chat *c);

// Extra inputs of a Jinja template: JSON texts or NULL. A built-in refuses tools.
typedef struct tok_chat_extra {
    const char *tools;  // an array, the template's `tools`
    const char *kwargs; // an object whose members become variables (chat_template_kwargs)
} tok_chat_extra;

// Renders messages with c, as tok_chat_render does. A Jinja template sees messages (role,
// content, and reasoning_content where a message has reasoning, also as thinking for a harmony
// template, as llama.cpp passes it to gpt-oss's), add_generation_prompt, enable_thinking,
// bos_token, eos_token, reasoning_effort and reasoning_strength (where p sets an effort), then
// tools and the kwargs of extra (may be NULL).
bool tok_chat_apply(const tok_chat *c, const tok_chat_msg *msgs, size_t n_msgs, tok_chat_params p,
                    const tok_chat_extra *extra, tok_chat_prompt *out, ft_err *err);

#endif
