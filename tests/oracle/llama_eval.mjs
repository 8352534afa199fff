// llama_eval.mjs: llama.cpp (node-llama-cpp, CPU) as the oracle of the C tests.
//
// usage: node tests/oracle/llama_eval.mjs MODEL.gguf [--text TEXT | --tokens 1,2,3] [--top K]
//        [--special] [--threads N]
// Loads the model, tokenizes TEXT (special tokens parsed with --special) or takes the token ids,
// evaluates them and prints one JSON line: {"n_vocab" (tokens in the distribution), "tokens": [...],
// "top": [[id, prob], ...]}
// with the K most likely next tokens after the whole input (softmax at temperature 1).
import {getLlama} from "node-llama-cpp";

const args = process.argv.slice(2);
const model_path = args.shift();
let text = null, tokens = null, top = 10, special = false, threads = 1;
while (args.length) {
    const a = args.shift();
    if (a === "--text") text = args.shift();
    else if (a === "--tokens") tokens = args.shift().split(",").filter(s => s.length).map(Number);
    else if (a === "--top") top = Number(args.shift());
    else if (a === "--special") special = true;
    else if (a === "--threads") threads = Number(args.shift());
    else { console.error(`llama_eval: unknown argument ${a}`); process.exit(2); }
}

const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath: model_path, gpuLayers: 0});
if (tokens === null) tokens = Array.from(model.tokenize(text ?? "", special));
const context = await model.createContext({contextSize: Math.max(256, tokens.length + 16), threads,
                                           batchSize: Math.max(tokens.length, 1)});
const seq = context.getSequence();
const items = tokens.map((t, i) => i === tokens.length - 1 ? [t, {generateNext: {probabilities: true}}] : t);
const out = await seq.controlledEvaluate(items);
const probs = out[tokens.length - 1].next.probabilities;
const best = [];
for (const [id, p] of probs) { if (best.length >= top) break; best.push([id, p]); }
console.log(JSON.stringify({n_vocab: probs.size, tokens, top: best}));
await context.dispose();
await model.dispose();
