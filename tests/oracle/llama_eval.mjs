// llama_eval.mjs: llama.cpp (node-llama-cpp, CPU) as the oracle of the C tests.
//
// usage: node tests/oracle/llama_eval.mjs MODEL.gguf [--text TEXT | --tokens 1,2,3] [--top K]
//        [--special] [--threads N] [--prompts "1,2,3;4,5"] [--gen N] [--kv-type f16|q8_0]
//        [--ctx N]
// Loads the model, tokenizes TEXT (special tokens parsed with --special) or takes the token ids,
// evaluates them and prints one JSON line: {"n_vocab" (tokens in the distribution), "tokens": [...],
// "top": [[id, prob], ...]}
// with the K most likely next tokens after the whole input (softmax at temperature 1).
//
// --prompts evaluates several token lists in one process (one model load), each from an empty
// sequence, and prints one such line per prompt. With --gen N each line also has "gen": the N
// greedily generated tokens as [[id, p1, id2, p2], ...]: the chosen token with its probability
// and the runner-up with its own (to spot near-ties). --kv-type sets the KV cache type of
// keys and values.
import {getLlama} from "node-llama-cpp";

const args = process.argv.slice(2);
const model_path = args.shift();
let text = null, tokens = null, top = 10, special = false, threads = 1, prompts = null, gen = 0;
let kv_type = null, ctx_size = 0;
while (args.length) {
    const a = args.shift();
    if (a === "--text") text = args.shift();
    else if (a === "--tokens") tokens = args.shift().split(",").filter(s => s.length).map(Number);
    else if (a === "--top") top = Number(args.shift());
    else if (a === "--special") special = true;
    else if (a === "--threads") threads = Number(args.shift());
    else if (a === "--prompts") prompts = args.shift().split(";").map(p => p.split(",").filter(s => s.length).map(Number));
    else if (a === "--gen") gen = Number(args.shift());
    else if (a === "--kv-type") kv_type = args.shift().toUpperCase();
    else if (a === "--ctx") ctx_size = Number(args.shift());
    else { console.error(`llama_eval: unknown argument ${a}`); process.exit(2); }
}

const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath: model_path, gpuLayers: 0});
if (prompts === null) {
    if (tokens === null) tokens = Array.from(model.tokenize(text ?? "", special));
    prompts = [tokens];
}
const longest = Math.max(...prompts.map(p => p.length));
const options = {contextSize: ctx_size || Math.max(256, longest + gen + 16), threads,
                 batchSize: Math.max(longest, 1)};
if (kv_type) {
    options.experimentalKvCacheKeyType = kv_type;
    options.experimentalKvCacheValueType = kv_type;
}
const context = await model.createContext(options);
const seq = context.getSequence();

function best(probs, k) {
    const out = [];
    for (const [id, p] of probs) { if (out.length >= k) break; out.push([id, p]); }
    return out;
}

for (const toks of prompts) {
    await seq.clearHistory();
    const items = toks.map((t, i) => i === toks.length - 1 ? [t, {generateNext: {probabilities: true}}] : t);
    const out = await seq.controlledEvaluate(items);
    const probs = out[toks.length - 1].next.probabilities;
    const line = {n_vocab: probs.size, tokens: toks, top: best(probs, top)};
    if (gen > 0) {
        line.gen = [];
        let cur = probs;
        for (let i = 0; i < gen; i++) {
            const [a, b] = best(cur, 2);
            line.gen.push([a[0], a[1], b ? b[0] : -1, b ? b[1] : 0]);
            if (i + 1 === gen) break;
            const next = await seq.controlledEvaluate([[a[0], {generateNext: {probabilities: true}}]]);
            cur = next[0].next.probabilities;
        }
    }
    console.log(JSON.stringify(line));
}
await context.dispose();
await model.dispose();
