// stall.mjs PORT [BIG] [LIMIT_MS]: does a huge prompt stall other clients? One greedy stream
// runs; once its 5th event arrives, BIG chat requests of 4,000,000 characters each (a prompt far
// past the context) are sent at once, by curl processes so this process only watches the stream.
// Their parsing, templating and tokenizing must run beside the stream, not in its way: each must
// be refused with a 400 naming the context, and the stream's largest gap between two events
// while they were in flight must stay under LIMIT_MS. Prints the gap and the time the big
// requests took; exits 1 on a failure.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [port, big = 2, limit = 500] = process.argv.slice(2).map(Number);
const base = `http://127.0.0.1:${port}`;

const ac = new AbortController();
const res = await fetch(`${base}/v1/completions`, {
  method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 3000, temperature: 0, stream: true }),
});
if (res.status !== 200) throw new Error(`stream: HTTP ${res.status}`);

const dir = mkdtempSync(join(tmpdir(), 'ft-stall-'));
const bodyFile = join(dir, 'big.json');
writeFileSync(bodyFile, JSON.stringify({ messages: [{ role: 'user', content: '1'.repeat(4000000) }], max_tokens: 1 }));

// One big request by curl: {status, body}.
const send = () => new Promise((resolve, reject) => {
  const c = spawn('curl', ['-s', '-m', '120', '-w', '\n%{http_code}', '-H', 'content-type: application/json',
    '--data-binary', `@${bodyFile}`, `${base}/v1/chat/completions`]);
  let out = '';
  c.stdout.on('data', (d) => { out += d; });
  c.on('error', reject);
  c.on('close', () => {
    const k = out.lastIndexOf('\n');
    resolve({ status: Number(out.slice(k + 1)), body: out.slice(0, k) });
  });
});

let window = null; // [start, end] of the big requests, in ms
let bigDone = null;
const fire = () => {
  window = [performance.now(), Infinity];
  bigDone = Promise.all(Array.from({ length: big }, send)).then((rs) => {
    window[1] = performance.now();
    return rs;
  });
};

let events = 0, last = performance.now(), worst = 0, buf = '';
const dec = new TextDecoder();
try {
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      buf = buf.slice(i + 2);
      const now = performance.now();
      // a gap counts when any of it fell inside the window
      if (window && now > window[0] && last < window[1]) worst = Math.max(worst, now - last);
      last = now;
      if (++events === 5) fire();
    }
    if (window && window[1] !== Infinity && performance.now() > window[1] + 200) ac.abort();
  }
} catch (e) {
  if (e.name !== 'AbortError') throw e;
}
if (!bigDone) throw new Error(`the stream ended after ${events} events, before the big requests were sent`);
const rs = await bigDone;
rmSync(dir, { recursive: true, force: true });
if (window[1] === Infinity || last < window[1])
  throw new Error(`the stream ended (${events} events) before the big requests were answered`);
let ok = worst <= limit;
for (const r of rs)
  if (r.status !== 400 || !/context/.test(r.body)) {
    console.log(`big request: HTTP ${r.status}: ${r.body.slice(0, 200)}`);
    ok = false;
  }
console.log(`${big} requests of 4 MB answered in ${(window[1] - window[0]).toFixed(0)} ms; the stream's largest ` +
            `gap meanwhile ${worst.toFixed(0)} ms (limit ${limit})`);
process.exit(ok ? 0 : 1);
