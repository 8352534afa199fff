// structured.mjs PORT [N]: structured output through the official openai client against
// `ft serve` on a random-weight model: N (default 200) random JSON schemas (objects with
// required and optional properties and additionalProperties false, arrays with
// bounds, enums, const, integers with bounds, numbers, formats, nested, anyOf, oneOf of
// different types, $defs and $ref), each sent as response_format json_schema (every fifth one
// streamed, some through /v1/completions with response_format too). Every reply must finish with
// "stop", parse with JSON.parse and validate under its schema, as the validator below (written
// here from the JSON Schema specification, independent of ft's compiler) judges it. Exits
// non-zero with the schema and the reply on the first failure.
import OpenAI from 'openai';

const port = process.argv[2];
const total = Number(process.argv[3] ?? 200);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0 });

// mulberry32: a small seeded generator, so a failure names a reproducible schema
let seed = 12345;
function rand() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const names = ['id', 'name', 'value', 'tags', 'x y', 'été', 'a"b', 'kind', 'count', 'items'];

function scalar() {
  switch (int(0, 4)) {
    case 0: return pick(names);
    case 1: return int(-500, 500);
    case 2: return int(-80, 80) / 4;
    case 3: return rand() < 0.5;
    default: return null;
  }
}

function schema(depth) {
  const kinds = depth < 3 ? 12 : 8;
  switch (int(0, kinds - 1)) {
    case 0: {
      const s = { type: 'string', maxLength: int(0, 20) };
      if (rand() < 0.3) s.minLength = int(0, s.maxLength);
      return s;
    }
    case 1: return { type: 'string', format: pick(['date', 'time', 'date-time', 'uuid']) };
    case 2: {
      const s = { type: 'integer' };
      const lo = int(-10000, 10000);
      if (rand() < 0.6) s.minimum = lo;
      if (rand() < 0.6) s.maximum = lo + int(0, 3000);
      if (rand() < 0.2) s.exclusiveMinimum = lo - 1;
      return s;
    }
    case 3: return { type: 'number' };
    case 4: return { type: pick(['boolean', 'null']) };
    case 5: {
      const vals = [];
      for (let i = int(1, 4); i > 0; i--) {
        const v = scalar();
        if (!vals.some((w) => JSON.stringify(w) === JSON.stringify(v))) vals.push(v);
      }
      return { enum: vals };
    }
    case 6: return { const: scalar() };
    case 7: return { type: ['string', pick(['null', 'integer'])], maxLength: 12 };
    case 8:
    case 9: {
      const properties = {}, required = [];
      for (let i = int(0, 4); i > 0; i--) {
        const n = pick(names);
        if (properties[n]) continue;
        properties[n] = schema(depth + 1);
        if (rand() < 0.6) required.push(n);
      }
      // further keys are unbounded strings, which a random-weight model seldom closes: none
      return { type: 'object', properties, required, additionalProperties: false };
    }
    case 10: {
      const lo = int(0, 2);
      return { type: 'array', items: schema(depth + 1), minItems: lo, maxItems: lo + int(0, 3) };
    }
    default:
      if (rand() < 0.5) return { anyOf: [schema(depth + 1), schema(depth + 1)] };
      return { oneOf: [{ type: 'null' }, { type: 'array', items: schema(depth + 1), maxItems: 3 }] };
  }
}

// A document's schema at the root, sometimes through $defs and $ref.
function rootSchema() {
  const s = schema(0);
  if (rand() < 0.2) return { $defs: { item: s }, type: 'array', items: { $ref: '#/$defs/item' }, maxItems: 3 };
  return s;
}

// ---------------------------------------------------------------------------------------------
// The validator (JSON Schema 2020-12 for the keywords above; RFC 3339 for the formats)

const equal = (a, b) => {
  if (typeof a === 'number' && typeof b === 'number') return a === b;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => equal(x, b[i]));
  if (a && b && typeof a === 'object' && typeof b === 'object' && !Array.isArray(a) && !Array.isArray(b)) {
    const ka = Object.keys(a), kb = Object.keys(b);
    return ka.length === kb.length && ka.every((k) => k in b && equal(a[k], b[k]));
  }
  return a === b;
};

function typeOk(v, t) {
  switch (t) {
    case 'null': return v === null;
    case 'boolean': return typeof v === 'boolean';
    case 'object': return v !== null && typeof v === 'object' && !Array.isArray(v);
    case 'array': return Array.isArray(v);
    case 'string': return typeof v === 'string';
    case 'number': return typeof v === 'number' && Number.isFinite(v);
    case 'integer': return typeof v === 'number' && Number.isInteger(v);
  }
  return false;
}

function isDate(s) {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(s);
  if (!m) return false;
  const y = +m[1], mo = +m[2], d = +m[3];
  const leap = y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
  return mo >= 1 && mo <= 12 && d >= 1 && d <= days[mo - 1];
}
function isTime(s) {
  const m = /^(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))$/.exec(s);
  return !!m && +m[1] <= 23 && +m[2] <= 59 && +m[3] <= 60 && (m[6] === undefined || (+m[6] <= 23 && +m[7] <= 59));
}
const formats = {
  date: isDate,
  time: isTime,
  'date-time': (s) => { const i = s.search(/[Tt]/); return i > 0 && isDate(s.slice(0, i)) && isTime(s.slice(i + 1)); },
  uuid: (s) => /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/.test(s),
};

function valid(root, s, v) {
  if (s === true) return true;
  if (s === false) return false;
  if (s.$ref) {
    let t = root;
    for (const seg of s.$ref.slice(2).split('/')) t = t[seg.replace(/~1/g, '/').replace(/~0/g, '~')];
    if (!valid(root, t, v)) return false;
  }
  if (s.type !== undefined && !(Array.isArray(s.type) ? s.type : [s.type]).some((t) => typeOk(v, t))) return false;
  if ('const' in s && !equal(s.const, v)) return false;
  if (s.enum && !s.enum.some((e) => equal(e, v))) return false;
  if (s.anyOf && !s.anyOf.some((x) => valid(root, x, v))) return false;
  if (s.oneOf && s.oneOf.filter((x) => valid(root, x, v)).length !== 1) return false;
  if (typeof v === 'string') {
    const n = [...v].length;
    if (s.minLength !== undefined && n < s.minLength) return false;
    if (s.maxLength !== undefined && n > s.maxLength) return false;
    if (s.format && !formats[s.format](v)) return false;
  }
  if (typeof v === 'number') {
    if (s.minimum !== undefined && !(v >= s.minimum)) return false;
    if (s.maximum !== undefined && !(v <= s.maximum)) return false;
    if (s.exclusiveMinimum !== undefined && !(v > s.exclusiveMinimum)) return false;
  }
  if (Array.isArray(v)) {
    if (s.minItems !== undefined && v.length < s.minItems) return false;
    if (s.maxItems !== undefined && v.length > s.maxItems) return false;
    if (s.items && !v.every((x) => valid(root, s.items, x))) return false;
  }
  if (typeOk(v, 'object')) {
    for (const r of s.required ?? []) if (!(r in v)) return false;
    for (const [k, x] of Object.entries(v)) {
      if (s.properties && k in s.properties) {
        if (!valid(root, s.properties[k], x)) return false;
      } else if (s.additionalProperties !== undefined && !valid(root, s.additionalProperties, x)) {
        return false;
      }
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------

function fail(what, s, text) {
  console.error(`structured: ${what}\nschema: ${JSON.stringify(s)}\nreply: ${JSON.stringify(text)}`);
  process.exit(1);
}

let tokens = 0, streamed = 0, legacy = 0;
const messages = [{ role: 'user', content: 'Reply with JSON.' }];
for (let i = 0; i < total; i++) {
  const s = rootSchema();
  const response_format = { type: 'json_schema', json_schema: { name: `s${i}`, schema: s, strict: true } };
  let text = '', finish = null;
  if (i % 5 === 4) {
    streamed++;
    const stream = await client.chat.completions.create({
      model: 'any', messages, response_format, max_tokens: 3000, temperature: 1, seed: i, stream: true,
      stream_options: { include_usage: true },
    });
    for await (const chunk of stream) {
      if (chunk.usage) tokens += chunk.usage.completion_tokens;
      for (const c of chunk.choices) {
        if (c.delta?.content) text += c.delta.content;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
  } else if (i % 7 === 3) {
    legacy++;
    const r = await client.completions.create({
      model: 'any', prompt: 'JSON:', response_format, max_tokens: 3000, temperature: 1, seed: i,
    });
    text = r.choices[0].text;
    finish = r.choices[0].finish_reason;
    tokens += r.usage.completion_tokens;
  } else {
    const r = await client.chat.completions.create({
      model: 'any', messages, response_format, max_tokens: 3000, temperature: 1, seed: i,
    });
    text = r.choices[0].message.content;
    finish = r.choices[0].finish_reason;
    tokens += r.usage.completion_tokens;
  }
  if (finish !== 'stop') fail(`reply ${i} finished with '${finish}'`, s, text);
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    fail(`reply ${i} is not JSON (${e.message})`, s, text);
  }
  if (!valid(s, s, v)) fail(`reply ${i} is not valid under its schema`, s, text);
}

// a schema ft cannot enforce: the SDK's typed 400, naming the keyword and where
await client.chat.completions
  .create({
    model: 'any', messages,
    response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'object', properties: { a: { type: 'string', pattern: '^x' } } } } },
  })
  .then(() => fail('a pattern was accepted', {}, ''), (e) => {
    if (e.status !== 400 || !/#\/properties\/a: the keyword 'pattern' is not supported/.test(e.message))
      fail(`unexpected error ${e.status} ${e.message}`, {}, '');
  });
console.log(`structured: ${total} schemas (${streamed} streamed, ${legacy} through /v1/completions), every reply ` +
  `valid JSON under its schema, ${(tokens / total).toFixed(1)} tokens a reply`);
