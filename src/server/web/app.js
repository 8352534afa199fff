// app.js: ft's web page (served by ft serve at /, built into the binary).
//
// The chat streams from POST /v1/chat/completions (stream: true): reasoning_content goes into a
// folded <details>, content below it, tool_calls (where the server sends them) into boxes of
// their own. The live view reads GET /v1/stats every 500 ms and draws what it reports: rates
// from the differences of the engine's counters between two readings, the KV figures, and two
// heat maps (the router's selections per MoE layer and expert, and where there is one the GPU
// expert cache per layer). A figure the server does not report is shown as missing, never
// estimated.
'use strict';

const $ = (id) => document.getElementById(id);
const POLL_MS = 500;

const state = {
  model: null,
  history: [],   // the conversation sent with each request: {role, content[, tool_calls]}
  busy: false,
  abort: null,   // the running request's AbortController
  stats: null,   // the latest /v1/stats reading
  prev: null,    // the one before (rates)
  base: null,    // the reading taken when the last message was sent here (window "last")
  lastTtft: null,
};

// ---------------------------------------------------------------------------------------------
// Settings: the API key for this tab only (sessionStorage), the rest kept (localStorage)

const SETTINGS = ['system', 'max-tokens', 'temperature', 'thinking'];

function loadSettings() {
  for (const id of SETTINGS) {
    const v = localStorage.getItem('ft.' + id);
    if (v !== null) $(id).value = v;
  }
  const key = sessionStorage.getItem('ft.api-key');
  if (key !== null) $('api-key').value = key;
  for (const id of SETTINGS) $(id).addEventListener('change', (e) => localStorage.setItem('ft.' + id, e.target.value));
  $('api-key').addEventListener('change', (e) => {
    sessionStorage.setItem('ft.api-key', e.target.value);
    loadModel();
  });
}

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  const key = $('api-key').value.trim();
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

function setConn(text, cls) {
  const c = $('conn');
  c.textContent = text;
  c.className = 'pill ' + (cls || '');
}

// The error message of a failed response: the API's JSON error, else the status.
async function responseError(res) {
  let msg = `HTTP ${res.status}`;
  try {
    const j = await res.json();
    const m = j && j.error && (j.error.message || j.error);
    if (typeof m === 'string') msg += ': ' + m;
  } catch (e) { /* not JSON */ }
  if (res.status === 401) {
    msg += ' (set the API key under Settings)';
    $('settings').open = true;
  }
  return msg;
}

async function loadModel() {
  try {
    const res = await fetch('/v1/models', { headers: headers(false) });
    if (!res.ok) {
      $('model').textContent = res.status === 401 ? 'API key needed' : `HTTP ${res.status}`;
      if (res.status === 401) $('settings').open = true;
      return;
    }
    const j = await res.json();
    state.model = j.data && j.data[0] ? j.data[0].id : null;
    $('model').textContent = state.model || '?';
  } catch (e) {
    $('model').textContent = 'unreachable';
  }
}

// ---------------------------------------------------------------------------------------------
// Formatting

const fmtInt = (n) => (n === null || n === undefined ? '–' : Number(n).toLocaleString('en-US'));

function fmtMs(s) {
  if (s === null || s === undefined || !isFinite(s)) return '–';
  return s < 1 ? `${(s * 1000).toFixed(0)} ms` : `${s.toFixed(2)} s`;
}

function fmtRate(r) {
  if (r === null || !isFinite(r)) return '–';
  return r >= 100 ? r.toFixed(0) : r.toFixed(1);
}

// ---------------------------------------------------------------------------------------------
// Chat

function scrollDown(force) {
  const m = $('messages');
  if (force || m.scrollHeight - m.scrollTop - m.clientHeight < 80) m.scrollTop = m.scrollHeight;
}

function addMessage(role) {
  const hint = $('empty-hint');
  if (hint) hint.remove();
  const el = document.createElement('div');
  el.className = 'msg ' + role;
  const who = document.createElement('div');
  who.className = 'who';
  who.textContent = role === 'user' ? 'You' : state.model || 'Model';
  el.append(who);
  $('messages').append(el);
  return el;
}

function addUserMessage(text) {
  const el = addMessage('user');
  const c = document.createElement('div');
  c.className = 'content';
  c.textContent = text;
  el.append(c);
  scrollDown(true);
}

// The assistant's reply as it streams: folded reasoning, content, tool calls, a line of figures.
class Reply {
  constructor() {
    this.el = addMessage('assistant');
    this.el.classList.add('streaming');
    this.reasoning = '';
    this.content = '';
    this.tools = []; // {id, type, function: {name, arguments}} by index, as OpenAI streams them
    this.toolEls = [];
    this.details = null;
    this.contentEl = document.createElement('div');
    this.contentEl.className = 'content';
    this.el.append(this.contentEl);
  }

  addReasoning(text) {
    if (!this.details) {
      this.details = document.createElement('details');
      this.details.className = 'reasoning';
      this.summary = document.createElement('summary');
      this.reasoningEl = document.createElement('div');
      this.reasoningEl.className = 'reasoning-text';
      this.details.append(this.summary, this.reasoningEl);
      this.el.insertBefore(this.details, this.contentEl);
    }
    this.reasoning += text;
    this.reasoningEl.textContent = this.reasoning;
    this.summary.textContent = `Reasoning… (${this.reasoning.length.toLocaleString('en-US')} characters)`;
  }

  addContent(text) {
    this.content += text;
    this.contentEl.textContent = this.content;
  }

  addToolCalls(deltas) {
    for (const d of deltas) {
      const i = typeof d.index === 'number' ? d.index : this.tools.length;
      if (!this.tools[i]) {
        this.tools[i] = { id: d.id || '', type: d.type || 'function', function: { name: '', arguments: '' } };
        const box = document.createElement('div');
        box.className = 'tool-call';
        const name = document.createElement('span');
        name.className = 'tool-name';
        const args = document.createElement('pre');
        box.append(name, args);
        this.el.append(box);
        this.toolEls[i] = { name, args };
      }
      const t = this.tools[i];
      if (d.id) t.id = d.id;
      if (d.function && d.function.name) t.function.name += d.function.name;
      if (d.function && d.function.arguments) t.function.arguments += d.function.arguments;
      this.toolEls[i].name.textContent = `tool call: ${t.function.name || '?'}`;
      this.toolEls[i].args.textContent = t.function.arguments;
    }
  }

  error(msg) {
    const e = document.createElement('div');
    e.className = 'error';
    e.textContent = msg;
    this.el.append(e);
  }

  finish(meta) {
    this.el.classList.remove('streaming');
    if (this.details) this.summary.textContent = `Reasoning (${this.reasoning.length.toLocaleString('en-US')} characters)`;
    if (meta) {
      const m = document.createElement('div');
      m.className = 'meta';
      m.textContent = meta;
      this.el.append(m);
    }
  }
}

function buildMessages() {
  const msgs = [];
  const sys = $('system').value.trim();
  if (sys) msgs.push({ role: 'system', content: sys });
  return msgs.concat(state.history);
}

function numberSetting(id) {
  const v = $(id).value.trim();
  return v === '' || !isFinite(Number(v)) ? undefined : Number(v);
}

function setBusy(busy) {
  state.busy = busy;
  $('send').disabled = busy;
  $('clear').disabled = busy;
  $('stop').disabled = !busy;
}

// Reads an SSE body, calling onData with each event's data (the data: lines joined).
async function readEvents(res, onData) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = ev.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (data && onData(data) === false) return;
    }
  }
}

async function send(text) {
  setBusy(true);
  state.base = await readStats(); // the counters before this message: the window "last" starts here
  if (state.base) showStats(state.base);
  addUserMessage(text);
  state.history.push({ role: 'user', content: text });
  const reply = new Reply();
  const body = { model: state.model || 'ft', messages: buildMessages(), stream: true, stream_options: { include_usage: true } };
  const maxTokens = numberSetting('max-tokens'), temperature = numberSetting('temperature');
  if (maxTokens !== undefined) body.max_tokens = maxTokens;
  if (temperature !== undefined) body.temperature = temperature;
  if ($('thinking').value === 'off') body.chat_template_kwargs = { enable_thinking: false };
  const ac = new AbortController();
  state.abort = ac;
  const t0 = performance.now();
  let tFirst = 0, tLast = 0, usage = null, finish = null, failed = false;
  try {
    const res = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(true), body: JSON.stringify(body), signal: ac.signal });
    if (!res.ok) throw new Error(await responseError(res));
    await readEvents(res, (data) => {
      if (data === '[DONE]') return false;
      let j;
      try {
        j = JSON.parse(data);
      } catch (e) {
        throw new Error('a stream event that is not JSON: ' + data.slice(0, 200));
      }
      if (j.error) throw new Error(j.error.message || JSON.stringify(j.error));
      if (j.usage) usage = j.usage;
      const ch = j.choices && j.choices[0];
      if (!ch) return true;
      const d = ch.delta || {};
      const any = d.reasoning_content || d.content || (d.tool_calls && d.tool_calls.length);
      if (any) {
        const now = performance.now();
        if (!tFirst) {
          tFirst = now;
          state.lastTtft = (now - t0) / 1000;
        }
        tLast = now;
      }
      if (d.reasoning_content) reply.addReasoning(d.reasoning_content);
      if (d.content) reply.addContent(d.content);
      if (d.tool_calls) reply.addToolCalls(d.tool_calls);
      if (ch.finish_reason) finish = ch.finish_reason;
      scrollDown(false);
      return true;
    });
  } catch (e) {
    failed = true;
    if (e.name === 'AbortError') reply.error('stopped');
    else reply.error(e.message || String(e));
  }
  state.abort = null;
  const parts = [];
  if (usage) parts.push(`${fmtInt(usage.completion_tokens)} tokens`);
  if (tFirst) parts.push(`TTFT ${fmtMs((tFirst - t0) / 1000)}`);
  if (usage && usage.completion_tokens > 1 && tLast > tFirst)
    parts.push(`${fmtRate((usage.completion_tokens - 1) / ((tLast - tFirst) / 1000))} tok/s`);
  if (finish) parts.push(`finish: ${finish}`);
  reply.finish(parts.length ? parts.join(' · ') + (tFirst ? ' (measured in this page)' : '') : '');
  if (reply.content || reply.tools.length) {
    const m = { role: 'assistant', content: reply.content };
    if (reply.tools.length) m.tool_calls = reply.tools.filter(Boolean);
    state.history.push(m);
  } else if (failed) {
    state.history.pop(); // nothing came back: the message is not part of the conversation
  }
  setBusy(false);
  $('input').focus();
}

// ---------------------------------------------------------------------------------------------
// Heat maps

// Colour of t in (0, 1]: light amber to dark red.
const RAMP = [[0, [254, 232, 178]], [0.3, [253, 174, 97]], [0.6, [228, 87, 46]], [1, [122, 12, 46]]];

function rampColor(t) {
  t = Math.min(1, Math.max(0, t));
  for (let i = 1; i < RAMP.length; i++) {
    if (t <= RAMP[i][0]) {
      const [t0, a] = RAMP[i - 1], [t1, b] = RAMP[i];
      const u = (t - t0) / (t1 - t0);
      return `rgb(${a.map((x, k) => Math.round(x + (b[k] - x) * u)).join(',')})`;
    }
  }
  return `rgb(${RAMP[RAMP.length - 1][1].join(',')})`;
}

const cssVar = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

// Where each canvas' cells are, for the tooltip: {rows, cols, cw, ch, text(r, c)}.
const grids = new Map();

// Draws rows x cols cells on canvas; value(r, c) is in [0, 1], or null for an empty cell (no
// count). label(r, c), where given, is written in cells tall enough.
function drawGrid(canvas, rows, cols, value, maxRowsHeight, label) {
  const dpr = window.devicePixelRatio || 1;
  const cssW = Math.max(canvas.parentElement.clientWidth, 100);
  const cw = Math.max(1, Math.floor((cssW * dpr) / cols));
  const chCss = Math.max(3, Math.min(18, Math.floor(maxRowsHeight / Math.max(rows, 1))));
  const ch = Math.round(chCss * dpr);
  canvas.width = cw * cols;
  canvas.height = Math.max(ch * rows, 1);
  const g = canvas.getContext('2d');
  g.fillStyle = cssVar('--panel');
  g.fillRect(0, 0, canvas.width, canvas.height);
  const gap = cw >= 4 * dpr && ch >= 4 * dpr ? Math.max(1, Math.round(dpr)) : 0;
  const empty = cssVar('--heat-empty');
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const v = value(r, c);
      g.fillStyle = v === null ? empty : rampColor(v);
      g.fillRect(c * cw, r * ch, cw - gap, ch - gap);
      if (label && chCss >= 12) {
        g.fillStyle = v !== null && v > 0.55 ? '#fff' : '#222';
        g.font = `${Math.round(10 * dpr)}px system-ui, sans-serif`;
        g.textAlign = 'center';
        g.textBaseline = 'middle';
        g.fillText(label(r, c), c * cw + cw / 2, r * ch + ch / 2);
      }
    }
  }
  return { rows, cols, cw, ch };
}

function attachTip(canvas) {
  const tip = $('tip');
  canvas.addEventListener('mousemove', (e) => {
    const grid = grids.get(canvas);
    if (!grid) return;
    const rect = canvas.getBoundingClientRect();
    const x = ((e.clientX - rect.left) / rect.width) * canvas.width, y = ((e.clientY - rect.top) / rect.height) * canvas.height;
    const c = Math.floor(x / grid.cw), r = Math.floor(y / grid.ch);
    if (r < 0 || r >= grid.rows || c < 0 || c >= grid.cols) {
      tip.hidden = true;
      return;
    }
    tip.textContent = grid.text(r, c);
    tip.hidden = false;
    tip.style.left = `${Math.min(e.clientX + 12, window.innerWidth - tip.offsetWidth - 4)}px`;
    tip.style.top = `${e.clientY + 14}px`;
  });
  canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
}

// The counts the window asks for: since start-up, or since the last message sent here.
function sinceBase(now, base) {
  return $('window').value === 'last' ? (base === undefined || base === null ? 0 : now - base) : now;
}

function drawRouting(s) {
  const r = s.routing, canvas = $('heat'), caption = $('heat-caption');
  if (!r || !r.layers || r.layers.length === 0) {
    grids.delete(canvas);
    canvas.hidden = true;
    $('legend-hi').textContent = '';
    const dev = s.engine ? s.engine.device : '?';
    caption.textContent = r === null || r === undefined
      ? `This backend (${dev}) does not count its routing: no expert map to draw.` +
        (dev === 'cuda' ? ' (FT_CUDA_ROUTE_COUNTS=1 in ft serve\'s environment turns the count on.)' : '')
      : 'The model has no MoE layers.';
    return;
  }
  canvas.hidden = false;
  const last = $('window').value === 'last';
  const base = last && state.base && state.base.routing ? state.base.routing.selections : null;
  const rows = r.selections.map((row, i) => row.map((c, e) => (last ? (base ? sinceBase(c, base[i][e]) : 0) : c)));
  const sums = rows.map((row) => row.reduce((a, b) => a + b, 0));
  let maxShare = 0, total = 0;
  rows.forEach((row, i) => {
    total += sums[i];
    for (const c of row) if (sums[i] > 0) maxShare = Math.max(maxShare, c / sums[i]);
  });
  const grid = drawGrid(canvas, rows.length, r.n_expert,
    (i, e) => (rows[i][e] > 0 ? rows[i][e] / sums[i] / maxShare : null), 260);
  grid.text = (i, e) => {
    const c = rows[i][e], share = sums[i] ? ((100 * c) / sums[i]).toFixed(1) : '0';
    return `layer ${r.layers[i]}, expert ${e}: ${fmtInt(c)} selections (${share}% of the layer's)`;
  };
  grids.set(canvas, grid);
  $('legend-hi').textContent = maxShare > 0 ? `${(100 * maxShare).toFixed(1)}% of a layer's selections` : '';
  const first = r.layers[0], lastL = r.layers[r.layers.length - 1];
  const what = last ? (state.base ? 'since the last message sent here' : 'since the last message sent here (none yet)') : 'since the server started';
  caption.textContent = `Rows: the ${r.layers.length} MoE layers (blocks ${first}–${lastL}, top to bottom); columns: ` +
    `the ${r.n_expert} experts of each (${r.n_expert_used} chosen per token). Colour: the expert's share of its ` +
    `layer's selections, ${what}: ${fmtInt(total)} in all; empty cells: never chosen. Hover for counts.`;
}

function drawCache(s) {
  const m = s.moe_cache, canvas = $('cache-heat');
  if (!m) {
    grids.delete(canvas);
    $('cache-block').hidden = true;
    const e = s.engine || {};
    const why = e.moe_backend === 'cpu'
      ? 'the routed experts are computed on the CPU from host memory (--moe-backend cpu); the routing map above counts their selections where the backend reports it.'
      : e.device === 'cpu'
        ? 'the model runs on the CPU.'
        : `every expert stays in GPU memory (--moe-backend ${e.moe_backend || '?'}).`;
    $('cache-none').textContent = `No GPU expert cache: ${why}`;
    return;
  }
  $('cache-none').textContent = `${fmtInt(m.slots)} slots, ${(m.bytes / (1 << 30)).toFixed(2)} GiB, ${m.layout} layout; ` +
    `hit rate ${(100 * m.total.hit_rate).toFixed(1)}%, ${(m.total.h2d_bytes / (1 << 20)).toFixed(1)} MiB copied since start-up.`;
  $('cache-block').hidden = false;
  const last = $('window').value === 'last';
  const base = last && state.base && state.base.moe_cache ? state.base.moe_cache.layers : null;
  const rows = m.layers.map((L, i) => {
    const b = base && base[i] ? base[i] : null;
    const sel = last ? (b ? L.selections - b.selections : 0) : L.selections;
    const hits = last ? (b ? L.hits - b.hits : 0) : L.hits;
    const misses = last ? (b ? L.misses - b.misses : 0) : L.misses;
    const bytes = last ? (b ? L.h2d_bytes - b.h2d_bytes : 0) : L.h2d_bytes;
    return { layer: L.layer, pool: L.pool, sel, hits, misses, mib: bytes / (1 << 20), rate: sel > 0 ? hits / sel : null };
  });
  const max = (k) => Math.max(0, ...rows.map((x) => x[k]));
  const mx = { misses: max('misses'), mib: max('mib'), sel: max('sel') };
  const cell = (x, c) => {
    if (c === 0) return x.rate === null ? null : x.rate;
    const k = ['', 'misses', 'mib', 'sel'][c];
    return x[k] > 0 && mx[k] > 0 ? x[k] / mx[k] : null;
  };
  const label = (i, c) => {
    const x = rows[i];
    return c === 0 ? (x.rate === null ? '' : `${(100 * x.rate).toFixed(0)}%`) : c === 2 ? x.mib.toFixed(1) : fmtInt(c === 1 ? x.misses : x.sel);
  };
  const grid = drawGrid(canvas, rows.length, 4, (i, c) => cell(rows[i], c), 360, label);
  grid.text = (i) => {
    const x = rows[i];
    return `layer ${x.layer} (pool ${x.pool}): ${fmtInt(x.sel)} selections, ${fmtInt(x.hits)} hits` +
      `${x.rate === null ? '' : ` (${(100 * x.rate).toFixed(1)}%)`}, ${fmtInt(x.misses)} misses, ${x.mib.toFixed(1)} MiB copied`;
  };
  grids.set(canvas, grid);
  $('cache-caption').textContent = `Rows: the MoE layers, top to bottom. Colour: the hit rate (darkest 100%), and for the ` +
    `other columns the share of the busiest layer's count; empty: none. Experts computed on the CPU are not counted by this server.`;
}

function drawLegend() {
  const c = $('legend'), g = c.getContext('2d');
  for (let x = 0; x < c.width; x++) {
    g.fillStyle = rampColor((x + 1) / c.width);
    g.fillRect(x, 0, 1, c.height);
  }
}

// ---------------------------------------------------------------------------------------------
// The live figures

async function readStats() {
  try {
    const res = await fetch('/v1/stats', { headers: headers(false), cache: 'no-store' });
    if (!res.ok) {
      setConn(res.status === 401 ? 'API key needed' : `HTTP ${res.status}`, 'bad');
      if (res.status === 401) $('settings').open = true;
      return null;
    }
    setConn('live', 'ok');
    return await res.json();
  } catch (e) {
    setConn('offline', 'bad');
    return null;
  }
}

function showStats(s) {
  state.prev = state.stats;
  state.stats = s;
  const p = state.prev, e = s.engine || null;
  const dt = p && p.engine && e ? s.uptime_s - p.uptime_s : 0;
  $('fig-decode').textContent = dt > 0 ? fmtRate((e.tokens_generated - p.engine.tokens_generated) / dt) : '–';
  $('fig-prompt').textContent = dt > 0 ? fmtRate((e.prompt_tokens_evaluated - p.engine.prompt_tokens_evaluated) / dt) : '–';
  $('fig-ttft-last').textContent = fmtMs(state.lastTtft);
  $('fig-ttft-mean').textContent = s.ttft && s.ttft.count ? `${fmtMs(s.ttft.mean_s)} over ${fmtInt(s.ttft.count)}` : '–';
  const done = s.requests ? Object.values(s.requests).reduce((a, b) => a + b, 0) : 0;
  $('fig-requests').textContent = `${fmtInt(s.running)} running, ${fmtInt(s.queued)} queued, ${fmtInt(done)} done`;
  $('fig-generated').textContent = e ? fmtInt(e.tokens_generated) : '–';
  const kv = s.kv_cache || {};
  $('fig-kv').textContent = `${fmtInt(kv.used_tokens)} / ${fmtInt(kv.capacity_tokens)}`;
  $('kv-meter').value = kv.capacity_tokens ? kv.used_tokens / kv.capacity_tokens : 0;
  $('fig-prefix').textContent = kv.prefix_cache ? `${fmtInt(kv.prefix_cache_tokens)} positions kept` : 'off';
  $('engine-kind').textContent = e ? `${e.device}, --moe-backend ${e.moe_backend}` : '';
  drawRouting(s);
  drawCache(s);
}

async function poll() {
  const s = await readStats();
  if (s) showStats(s);
  setTimeout(poll, POLL_MS);
}

// ---------------------------------------------------------------------------------------------
// Start

function start() {
  loadSettings();
  drawLegend();
  attachTip($('heat'));
  attachTip($('cache-heat'));
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('input').value;
    if (state.busy || !text.trim()) return;
    $('input').value = '';
    send(text);
  });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => { if (state.abort) state.abort.abort(); });
  $('clear').addEventListener('click', () => {
    state.history = [];
    $('messages').replaceChildren();
  });
  $('window').addEventListener('change', () => { if (state.stats) { drawRouting(state.stats); drawCache(state.stats); } });
  window.addEventListener('resize', () => { if (state.stats) { drawRouting(state.stats); drawCache(state.stats); } });
  loadModel();
  poll();
}

start();
