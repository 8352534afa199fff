// load.mjs PORT [CLIENTS] [REQUESTS] [CANCEL_FRACTION]: a load test of `ft serve` with plain
// fetch. CLIENTS concurrent streaming clients send REQUESTS greedy /v1/chat/completions
// requests of mixed lengths; a fraction are cancelled mid-stream. The server batches the
// running requests together, so each completed stream is checked against the same request
// run alone first: well-formed SSE ending in [DONE], and the same tokens up to the first
// near-tie (top two probabilities within 0.01, read from the alone run's top_logprobs), where
// batched arithmetic may legitimately pick the other token; without such a split the same
// text. Then KV use must return to zero and the server still answer. Prints requests/s and
// aggregate tok/s.
import assert from 'node:assert/strict';

const [port, clients = 16, total = 200, cancelFrac = 0.1] = process.argv.slice(2).map(Number);
const base = `http://127.0.0.1:${port}`;
const prompts = ['Hello', 'Tell me a story about a fox', 'What is 2 + 2?',
  'Write a long essay on the history of the printing press and its effects on Europe'];
const lengths = [8, 32, 64, 128];

// Sends one streaming request; returns {text, tokens, events, toks} (toks: per generated
// token its bytes and top-2 logprobs) or {cancelled: true}.
async function stream(prompt, maxTokens, cancelAfter = -1) {
  const ac = new AbortController();
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: prompt }], max_tokens: maxTokens, temperature: 0,
      stream: true, stream_options: { include_usage: true }, logprobs: true, top_logprobs: 2 }),
  });
  assert.equal(res.status, 200);
  const dec = new TextDecoder();
  let buf = '', text = '', tokens = -1, events = 0, done = false;
  const toks = [];
  try {
    for await (const chunk of res.body) {
      buf += dec.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        assert.ok(!done, 'data after [DONE]');
        assert.ok(ev.startsWith('data: '), `bad event: ${ev}`);
        const data = ev.slice(6);
        events++;
        if (data === '[DONE]') { done = true; continue; }
        const j = JSON.parse(data);
        if (j.usage) tokens = j.usage.completion_tokens;
        text += j.choices[0]?.delta?.content ?? '';
        for (const t of j.choices[0]?.logprobs?.content ?? [])
          toks.push({ bytes: JSON.stringify(t.bytes), top: t.top_logprobs.map((a) => Math.exp(a.logprob)) });
        if (cancelAfter >= 0 && events > cancelAfter) { ac.abort(); return { cancelled: true }; }
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') return { cancelled: true };
    throw e;
  }
  assert.ok(done && buf === '', 'stream did not end with [DONE]');
  assert.equal(toks.length, tokens, 'one logprobs entry per generated token');
  return { text, tokens, events, toks };
}

// Compares a batched result with the request alone: the same tokens up to the first position
// where they differ, which must be a near-tie in either run. Returns true when they split there.
function sameUpToNearTie(k, got, ref) {
  const n = Math.min(got.toks.length, ref.toks.length);
  for (let i = 0; i < n; i++) {
    if (got.toks[i].bytes === ref.toks[i].bytes) continue;
    const gap = (t) => (t.top.length < 2 ? 1 : t.top[0] - t.top[1]);
    assert.ok(gap(ref.toks[i]) <= 0.01 || gap(got.toks[i]) <= 0.01,
      `request ${k}: token ${i} differs from the request alone without a near-tie ` +
      `(top-2 gaps ${gap(ref.toks[i]).toFixed(4)} alone, ${gap(got.toks[i]).toFixed(4)} batched)`);
    return true;
  }
  assert.equal(got.toks.length, ref.toks.length, `request ${k}: ${got.toks.length} tokens, ${ref.toks.length} alone`);
  assert.equal(got.text, ref.text, `request ${k}: text differs from the request alone`);
  return false;
}

// The reference: each (prompt, length) alone.
const alone = new Map();
for (const p of prompts) for (const n of lengths) alone.set(`${p}|${n}`, await stream(p, n));

let next = 0, completed = 0, cancelled = 0, tokens = 0, splits = 0;
const t0 = performance.now();
async function client() {
  while (next < total) {
    const k = next++;
    const p = prompts[k % prompts.length], n = lengths[(k >> 2) % lengths.length];
    const cancel = (k * 7919) % 100 < cancelFrac * 100;
    const r = await stream(p, n, cancel ? 2 + (k % 5) : -1);
    if (r.cancelled) { cancelled++; continue; }
    if (sameUpToNearTie(k, r, alone.get(`${p}|${n}`))) splits++;
    completed++;
    tokens += r.tokens;
  }
}
await Promise.all(Array.from({ length: clients }, client));
const s = (performance.now() - t0) / 1000;

// nothing leaks: KV use back to zero once the cancelled sequences are reaped
let stats;
for (let i = 0; i < 100; i++) {
  stats = await (await fetch(`${base}/v1/stats`)).json();
  if (stats.kv_cache.used_tokens === 0 && stats.running === 0) break;
  await new Promise((r) => setTimeout(r, 50));
}
assert.equal(stats.kv_cache.used_tokens, 0, 'KV positions still in use');
assert.equal(stats.running, 0);
assert.equal((await fetch(`${base}/health`)).status, 200);
console.log(`load: ${clients} clients, ${total} requests (${completed} completed, ${cancelled} cancelled, ` +
  `${splits} split from the alone run at a near-tie) in ${s.toFixed(2)} s: ${(total / s).toFixed(1)} requests/s, ` +
  `${(tokens / s).toFixed(0)} tok/s aggregate`);
