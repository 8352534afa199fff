// llama_bench.mjs: llama.cpp (node-llama-cpp, CPU) measured the way `ft bench` measures ft.
//
// usage: node bench/llama_bench.mjs MODEL.gguf [-p 512] [-n 128] [-t THREADS] [-r REPS] [--json]
//
// Each run clears the sequence, evaluates a prompt of p deterministic token ids in one call
// (prefill, timed; logits for the last token only) and then n more ids one at a time, each with
// the next token's logits computed and sampled greedily (decode, timed). The ids are those of
// ft bench (bench_token in src/cli/cmd_bench.c): (i * 7919 + 13) mod min(n_vocab, 32000). An
// untimed warm-up run comes first. Prints the medians over REPS runs; with --json one line with
// prompt_tok_s, decode_tok_s and the per-run figures.
import {getLlama} from "node-llama-cpp";

const args = process.argv.slice(2);
const model_path = args.shift();
let n_prompt = 512, n_gen = 128, threads = 2, reps = 3, json = false;
while (args.length) {
    const a = args.shift();
    if (a === "-p") n_prompt = Number(args.shift());
    else if (a === "-n") n_gen = Number(args.shift());
    else if (a === "-t") threads = Number(args.shift());
    else if (a === "-r") reps = Number(args.shift());
    else if (a === "--json") json = true;
    else { console.error(`llama_bench: unknown argument ${a}`); process.exit(2); }
}
if (!model_path || !(n_prompt >= 0 && n_gen >= 0 && reps >= 1 && threads >= 1)) {
    console.error("usage: node bench/llama_bench.mjs MODEL.gguf [-p N] [-n N] [-t N] [-r N] [--json]");
    process.exit(2);
}

const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath: model_path, gpuLayers: 0});
const n_vocab = model.tokens.count ?? model.fileInsights.metadata?.tokenizer?.ggml?.tokens?.length;
const mod = Math.min(n_vocab, 32000);
const ids = Array.from({length: n_prompt + n_gen}, (_, i) => (i * 7919 + 13) % mod);
const context = await model.createContext({contextSize: Math.max(n_prompt + n_gen + 16, 256), threads,
                                           batchSize: Math.max(1, Math.min(n_prompt, 512))});
const seq = context.getSequence();
const greedy = {generateNext: {token: true, options: {temperature: 0}}};

async function once(p, n) {
    await seq.clearHistory();
    const t0 = performance.now();
    if (p > 0) await seq.controlledEvaluate(ids.slice(0, p).map((t, i) => i === p - 1 ? [t, greedy] : t));
    const t1 = performance.now();
    for (let i = 0; i < n; i++) await seq.controlledEvaluate([[ids[p + i], greedy]]);
    const t2 = performance.now();
    return [p > 0 ? p / ((t1 - t0) / 1e3) : 0, n > 0 ? n / ((t2 - t1) / 1e3) : 0];
}

function median(v) {
    const s = [...v].sort((a, b) => a - b), h = s.length >> 1;
    return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2;
}

await once(Math.min(n_prompt, 64), Math.min(n_gen, 4));
const pr = [], dr = [];
for (let r = 0; r < reps; r++) {
    const [p, d] = await once(n_prompt, n_gen);
    pr.push(p), dr.push(d);
    if (!json) console.error(`run ${r + 1}/${reps}: prompt ${p.toFixed(2)} tok/s, decode ${d.toFixed(2)} tok/s`);
}
const out = {engine: "llama.cpp", threads, n_prompt, n_gen, reps, n_vocab, prompt_tok_s: median(pr),
             decode_tok_s: median(dr), prompt_tok_s_runs: pr, decode_tok_s_runs: dr};
if (json) console.log(JSON.stringify(out));
else console.log(`llama.cpp: prompt ${out.prompt_tok_s.toFixed(2)} tok/s, decode ${out.decode_tok_s.toFixed(2)} tok/s ` +
                 `(median of ${reps}, ${threads} threads)`);
await context.dispose();
await model.dispose();
