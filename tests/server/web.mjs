// web.mjs PORT SCREENSHOT.png: ft serve's web page in headless Chromium, driven over the
// DevTools protocol (--remote-debugging-pipe: JSON messages ending in NUL on fds 3 and 4, so no
// WebSocket client is needed). The server runs a random-weight model with the qwen3.5 template
// (its replies open in reasoning) on the CPU, fresh: no request before this script.
//
//   1. the page loads with no console error, exception or policy violation (none all along);
//      it names the served model, reads /v1/stats and draws the expert map: every cell empty;
//   2. greedy, 200 tokens: a message typed and sent with the Send button streams its reply as
//      reasoning, folded (a closed <details>), growing while it streams;
//   3. thinking off, 400 tokens: the reply streams as content, seen growing; the decode rate
//      shows a positive figure while it streams (where the stream lasts over 1.5 s: about 2 s
//      here); afterwards the map has cells in colour, the tokens-generated figure is the
//      server's, and the screenshot is saved;
//   4. New chat, then a message stopped with the Stop button: 'stopped' shows and the server
//      cancels it.
// Chromium: $CHROMIUM, else `chromium` (Debian's package). Exits 1 with the reason on a failure.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [port, shot] = process.argv.slice(2);
if (!port || !shot) {
  console.log('usage: node web.mjs PORT SCREENSHOT.png');
  process.exit(2);
}
const base = `http://127.0.0.1:${port}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const deadline = setTimeout(() => fail('the test took over 150 s'), 150000);

const problems = []; // what the page reported as wrong (below)
const profile = mkdtempSync(join(tmpdir(), 'ft-web-'));
const args = ['--headless', '--remote-debugging-pipe', `--user-data-dir=${profile}`, '--window-size=1400,1000',
  '--force-device-scale-factor=1', '--hide-scrollbars', '--no-first-run', '--no-default-browser-check',
  '--disable-extensions', '--disable-background-networking', '--disable-dev-shm-usage', '--disable-gpu',
  '--mute-audio', 'about:blank'];
if (process.getuid && process.getuid() === 0) args.unshift('--no-sandbox'); // Chromium refuses root otherwise
const chrome = spawn(process.env.CHROMIUM || 'chromium', args, { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
let chromeLog = '';
chrome.stderr.on('data', (d) => { chromeLog = (chromeLog + d).slice(-4000); });
chrome.on('error', (e) => fail(`cannot start Chromium: ${e.message}`));

function fail(msg) {
  console.log(`web.mjs: ${msg}`);
  if (problems.length) console.log(`page problems:\n  ${problems.join('\n  ')}`);
  try { chrome.kill('SIGKILL'); } catch (e) { /* gone */ }
  const done = () => {
    try { rmSync(profile, { recursive: true, force: true }); } catch (e) { /* Chromium's last writes */ }
    process.exit(1);
  };
  if (chrome.exitCode !== null || chrome.signalCode !== null) done();
  else chrome.on('exit', done);
}

// ---- the protocol over the pipe
let nextId = 0;
const pending = new Map();
const listeners = [];
let inBuf = Buffer.alloc(0);
chrome.stdio[4].on('data', (d) => {
  inBuf = Buffer.concat([inBuf, d]);
  let i;
  while ((i = inBuf.indexOf(0)) >= 0) {
    const m = JSON.parse(inBuf.subarray(0, i).toString('utf8'));
    inBuf = inBuf.subarray(i + 1);
    if (m.id !== undefined) {
      const p = pending.get(m.id);
      pending.delete(m.id);
      if (m.error) p.reject(new Error(`${p.method}: ${m.error.message}`));
      else p.resolve(m.result);
    } else {
      for (const l of listeners) l(m);
    }
  }
});
chrome.stdio[3].on('error', () => {});
function cdp(method, params = {}, sessionId = undefined) {
  const id = ++nextId;
  const msg = { id, method, params };
  if (sessionId) msg.sessionId = sessionId;
  chrome.stdio[3].write(JSON.stringify(msg) + '\0');
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject, method }));
}

// Everything the page reports as wrong: its console errors and warnings, uncaught exceptions,
// the browser's log errors (a blocked resource, a policy violation, a failed request). (The
// browser's log warnings are not: reading the canvas back here draws one.)
listeners.push((m) => {
  if (m.method === 'Runtime.exceptionThrown') {
    const d = m.params.exceptionDetails;
    problems.push(`exception: ${d.exception ? d.exception.description : d.text}`);
  } else if (m.method === 'Runtime.consoleAPICalled' && (m.params.type === 'error' || m.params.type === 'warning')) {
    problems.push(`console.${m.params.type}: ${m.params.args.map((a) => a.value ?? a.description).join(' ')}`);
  } else if (m.method === 'Log.entryAdded' && m.params.entry.level === 'error') {
    problems.push(`log ${m.params.entry.level}: ${m.params.entry.text} ${m.params.entry.url || ''}`);
  }
});

function waitEvent(method, sessionId) {
  return new Promise((resolve) => {
    const l = (m) => {
      if (m.method === method && m.sessionId === sessionId) {
        listeners.splice(listeners.indexOf(l), 1);
        resolve(m.params);
      }
    };
    listeners.push(l);
  });
}

const { targetInfos } = await cdp('Target.getTargets');
const target = targetInfos.find((t) => t.type === 'page');
if (!target) fail('Chromium opened no page');
const { sessionId } = await cdp('Target.attachToTarget', { targetId: target.targetId, flatten: true });
const page = (method, params) => cdp(method, params, sessionId);
await page('Runtime.enable');
await page('Log.enable');
await page('Page.enable');

async function evaluate(expr) {
  const r = await page('Runtime.evaluate', { expression: expr, returnByValue: true, awaitPromise: true });
  if (r.exceptionDetails) throw new Error(`${expr.slice(0, 80)}: ${r.exceptionDetails.exception?.description || r.exceptionDetails.text}`);
  return r.result.value;
}

async function waitFor(expr, ms, what) {
  const t0 = Date.now();
  for (;;) {
    const v = await evaluate(expr);
    if (v) return v;
    if (Date.now() - t0 > ms) fail(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(25);
  }
}

async function click(selector) {
  const at = await evaluate(`(() => { const e = document.querySelector(${JSON.stringify(selector)});
    if (!e) return null; const r = e.getBoundingClientRect(); return {x: r.x + r.width / 2, y: r.y + r.height / 2}; })()`);
  if (!at) fail(`no ${selector} to click`);
  for (const type of ['mouseMoved', 'mousePressed', 'mouseReleased'])
    await page('Input.dispatchMouseEvent', { type, x: at.x, y: at.y, button: 'left', clickCount: 1 });
}

// Clicks into a field and types text (replacing what it holds with replace).
async function typeInto(selector, text, replace = false) {
  await click(selector);
  if (replace) await evaluate(`(() => { document.querySelector(${JSON.stringify(selector)}).select(); return true; })()`);
  await page('Input.insertText', { text });
}

async function stats() {
  const r = await fetch(`${base}/v1/stats`);
  return r.json();
}

// The colours of the expert map's pixels: {"r,g,b": count}.
const heatColors = () => evaluate(`(() => { const c = document.getElementById('heat');
  if (c.hidden || !c.width || !c.height) return null;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, n = {};
  for (let i = 0; i < d.length; i += 4) { const k = d[i] + ',' + d[i + 1] + ',' + d[i + 2]; n[k] = (n[k] || 0) + 1; }
  return n; })()`);

// ---- 1. load
const loaded = waitEvent('Page.loadEventFired', sessionId);
await page('Page.navigate', { url: `${base}/` });
await loaded;
const models = await (await fetch(`${base}/v1/models`)).json();
await waitFor(`document.getElementById('model').textContent === ${JSON.stringify(models.data[0].id)}`, 10000, 'the model name');
await waitFor(`document.getElementById('conn').textContent === 'live'`, 10000, 'the first /v1/stats reading');
await waitFor(`!document.getElementById('heat').hidden && document.getElementById('heat-caption').textContent.includes('MoE layers')`,
  10000, 'the expert map');
const s0 = await stats();
if (s0.routing.total !== 0) fail(`the server has routed before the page: ${s0.routing.total}`);
const before = await heatColors();
if (!before || Object.keys(before).length > 2) fail(`the empty map has more than a background and an empty colour: ${JSON.stringify(before)}`);
const cacheNote = await evaluate(`document.getElementById('cache-none').textContent`);
if (!/No GPU expert cache/.test(cacheNote)) fail(`the cache panel says: ${cacheNote}`);

// settings, as a user sets them
await click('#settings summary');
for (const [id, v] of [['max-tokens', '200'], ['temperature', '0']]) await typeInto(`#${id}`, v, true);
await click('#settings summary');

// Sends text with the Send button; resolves once the reply streams (the assistant's message is
// marked streaming), with its element's index.
async function sendMessage(text) {
  const n = await evaluate(`document.querySelectorAll('.msg.assistant').length`);
  await typeInto('#input', text);
  await click('#send');
  await waitFor(`document.querySelectorAll('.msg.assistant').length === ${n + 1}`, 10000, 'the reply to appear');
  return n;
}
const replyExpr = (i, what) => `document.querySelectorAll('.msg.assistant')[${i}]${what}`;

// Watches reply i stream: the lengths of textExpr seen while it is marked streaming, and whether
// test() held at some point while it streamed. Returns when it is done.
async function watchStream(i, textExpr, test) {
  const seen = [];
  let held = false;
  const t0 = Date.now();
  for (;;) {
    const v = await evaluate(`(() => { const m = ${replyExpr(i, '')}; return {streaming: m.classList.contains('streaming'),
      len: (${textExpr}) || 0, test: ${test || 'false'}}; })()`);
    if (!v.streaming) return { seen, held, ms: Date.now() - t0 };
    if (v.len > 0 && seen[seen.length - 1] !== v.len) seen.push(v.len);
    held = held || v.test;
    if (Date.now() - t0 > 90000) fail('a reply streamed for over 90 s');
    await sleep(20);
  }
}

// ---- 2. reasoning
const r1 = await sendMessage('Why do caches help?');
const w1 = await watchStream(r1, `m.querySelector('details.reasoning .reasoning-text')?.textContent.length`);
if (w1.seen.length < 2) fail(`the reasoning did not stream (lengths seen while streaming: ${w1.seen})`);
const d1 = await evaluate(`(() => { const m = ${replyExpr(r1, '')}, d = m.querySelector('details.reasoning');
  return {details: !!d, open: d && d.open, summary: d && d.querySelector('summary').textContent,
  reasoning: d ? d.querySelector('.reasoning-text').textContent.length : 0, content: m.querySelector('.content').textContent,
  meta: m.querySelector('.meta')?.textContent, error: m.querySelector('.error')?.textContent}; })()`);
if (!d1.details || d1.open || !/^Reasoning \(/.test(d1.summary) || d1.reasoning === 0)
  fail(`the reasoning is not shown folded: ${JSON.stringify(d1)}`);
if (d1.error || !/finish: (length|stop)/.test(d1.meta || '')) fail(`the first reply: ${JSON.stringify(d1)}`);

// ---- 3. content, live figures, the map
await evaluate(`(() => { const e = document.getElementById('thinking'); e.value = 'off'; e.dispatchEvent(new Event('change')); return true; })()`);
await click('#settings summary');
await typeInto('#max-tokens', '400', true);
await click('#settings summary');
const r2 = await sendMessage('Tell me about caches.');
const w2 = await watchStream(r2, `m.querySelector('.content').textContent.length`,
  `Number(document.getElementById('fig-decode').textContent) > 0`);
if (w2.seen.length < 2) fail(`the answer did not stream (lengths seen while streaming: ${w2.seen})`);
if (w2.ms > 1500 && !w2.held) fail(`no decode rate shown during a ${w2.ms} ms stream`);
if (!w2.held) console.log(`(the stream took ${w2.ms} ms: too short to require a live rate)`);
const d2 = await evaluate(`(() => { const m = ${replyExpr(r2, '')};
  return {reasoning: !!m.querySelector('details.reasoning'), content: m.querySelector('.content').textContent.length,
  meta: m.querySelector('.meta')?.textContent, error: m.querySelector('.error')?.textContent}; })()`);
if (d2.reasoning || d2.content === 0 || d2.error || !/finish: (length|stop)/.test(d2.meta || ''))
  fail(`the second reply: ${JSON.stringify(d2)}`);
// the next readings: the map in colour, the figures the server's
const s2 = await stats();
if (s2.running !== 0 || s2.routing.total === 0) fail(`the server after two replies: ${JSON.stringify(s2.engine)}`);
const gen = s2.engine.tokens_generated.toLocaleString('en-US');
await waitFor(`document.getElementById('fig-generated').textContent === ${JSON.stringify(gen)}`, 5000,
  `the tokens-generated figure to read ${gen}`);
const after = await heatColors();
let hot = 0;
for (const [k, n] of Object.entries(after)) if (!(k in before)) hot += n;
const cells = s2.routing.selections.flat().filter((c) => c > 0).length;
if (hot === 0) fail(`the map has no coloured cell after ${s2.routing.total} selections (${cells} experts chosen)`);
const png = await page('Page.captureScreenshot', { format: 'png' });
writeFileSync(shot, Buffer.from(png.data, 'base64'));

// ---- 4. a new chat, stopped
await click('#clear');
if (await evaluate(`document.querySelectorAll('.msg').length`) !== 0) fail('New chat left messages');
await click('#settings summary');
await typeInto('#max-tokens', '3000', true);
await click('#settings summary');
const r3 = await sendMessage('And once more, at length.');
await waitFor(`${replyExpr(r3, ".querySelector('.content').textContent.length")} > 0`, 20000, 'the third reply');
await click('#stop');
await waitFor(`!${replyExpr(r3, ".classList.contains('streaming')")}`, 10000, 'the stop');
const e3 = await evaluate(`${replyExpr(r3, ".querySelector('.error')?.textContent")}`);
if (e3 !== 'stopped') fail(`the stopped reply says: ${e3}`);
for (let i = 0; (await stats()).running !== 0; i++) {
  if (i > 100) fail('the server still runs the stopped request');
  await sleep(50);
}
await sleep(600); // a last reading, for problems it may bring
if (problems.length) fail('the page reported problems');
console.log(`web page: reasoning ${d1.reasoning} chars in ${w1.seen.length} updates, answer ${d2.content} chars in ` +
  `${w2.seen.length} updates over ${w2.ms} ms, live rate ${w2.held ? 'seen' : 'not seen'} while streaming, ` +
  `${hot} coloured map pixels for ${cells} chosen experts`);
clearTimeout(deadline);
await cdp('Browser.close').catch(() => {});
await new Promise((r) => (chrome.exitCode !== null ? r() : chrome.on('exit', r)));
rmSync(profile, { recursive: true, force: true });
process.exit(0);
