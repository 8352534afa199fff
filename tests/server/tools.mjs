// tools.mjs PORT: a tool loop through the official openai and @anthropic-ai/sdk clients against
// `ft serve` on a random-weight model whose template writes Hermes tool calls (Qwen3's): each
// request's tool_choice forces a call ("required", a named function, Anthropic's "any" and
// "tool"), streamed and not; the SDKs parse the call, whose arguments must validate under the
// tool's schema; the tool's result goes back and the model answers (tool_choice "none").
// Exits non-zero with a message on the first failure.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';

const port = process.argv[2];
const openai = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: 'unused', maxRetries: 0 });

const weather = {
  type: 'object',
  properties: { location: { type: 'string', maxLength: 24 }, unit: { type: 'string', enum: ['C', 'F'] } },
  required: ['location', 'unit'],
  additionalProperties: false,
};
const add = {
  type: 'object',
  properties: { a: { type: 'integer', minimum: -1000, maximum: 1000 }, b: { type: 'integer' } },
  required: ['a', 'b'],
  additionalProperties: false,
};
const openaiTools = [
  { type: 'function', function: { name: 'get_weather', description: 'Current weather', parameters: weather } },
  { type: 'function', function: { name: 'add', description: 'Adds two integers', parameters: add } },
];
const anthropicTools = [
  { name: 'get_weather', description: 'Current weather', input_schema: weather },
  { name: 'add', description: 'Adds two integers', input_schema: add },
];

// The arguments of a call to `name`, checked against its schema.
function checkArgs(name, args) {
  assert.equal(typeof args, 'object');
  if (name === 'get_weather') {
    assert.deepEqual(Object.keys(args).sort(), ['location', 'unit'].sort());
    assert.equal(typeof args.location, 'string');
    // maxLength counts code points (JSON Schema), not UTF-16 units: an astral character is one
    assert.ok([...args.location].length <= 24, `location ${JSON.stringify(args.location)}`);
    assert.ok(['C', 'F'].includes(args.unit));
  } else {
    assert.equal(name, 'add');
    assert.deepEqual(Object.keys(args).sort(), ['a', 'b']);
    assert.ok(Number.isInteger(args.a) && args.a >= -1000 && args.a <= 1000 && Number.isInteger(args.b));
  }
}

let calls = 0;
for (const stream of [false, true]) {
  for (const choice of ['required', { type: 'function', function: { name: 'add' } }]) {
    const messages = [{ role: 'system', content: 'Use the tools.' }, { role: 'user', content: 'Weather in Paris?' }];
    const req = { model: 'm', messages, tools: openaiTools, tool_choice: choice, max_tokens: 400, seed: calls + 1 };
    let msg, finish;
    if (!stream) {
      const r = await openai.chat.completions.create(req);
      msg = r.choices[0].message;
      finish = r.choices[0].finish_reason;
    } else {
      // the SDK's stream helper assembles the tool calls from their deltas
      const s = openai.chat.completions.stream(req);
      const r = await s.finalChatCompletion();
      msg = r.choices[0].message;
      finish = r.choices[0].finish_reason;
    }
    assert.equal(finish, 'tool_calls', JSON.stringify(msg));
    assert.ok(msg.tool_calls.length >= 1, JSON.stringify(msg));
    for (const c of msg.tool_calls) {
      assert.equal(c.type, 'function');
      assert.ok(c.id.startsWith('call_'), c.id);
      if (typeof choice === 'object') assert.equal(c.function.name, 'add');
      checkArgs(c.function.name, JSON.parse(c.function.arguments));
      calls++;
    }
    // the results go back; the model answers in text
    messages.push({ role: 'assistant', content: msg.content ?? null, tool_calls: msg.tool_calls });
    for (const c of msg.tool_calls) messages.push({ role: 'tool', tool_call_id: c.id, content: '{"temperature": 21}' });
    const r2 = await openai.chat.completions.create({ model: 'm', messages, tools: openaiTools, tool_choice: 'none', max_tokens: 8 });
    assert.equal(typeof r2.choices[0].message.content, 'string');
    assert.ok(['stop', 'length'].includes(r2.choices[0].finish_reason));
    assert.equal(r2.choices[0].message.tool_calls, undefined);
  }
}

for (const stream of [false, true]) {
  for (const choice of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }]) {
    const messages = [{ role: 'user', content: 'Weather in Paris?' }];
    const req = { model: 'm', max_tokens: 400, system: 'Use the tools.', messages, tools: anthropicTools, tool_choice: choice };
    let msg;
    let partial = '';
    if (!stream) {
      msg = await anthropic.messages.create(req);
    } else {
      const s = anthropic.messages.stream(req);
      s.on('inputJson', (delta) => { partial += delta; });
      msg = await s.finalMessage();
    }
    assert.equal(msg.stop_reason, 'tool_use', JSON.stringify(msg));
    const uses = msg.content.filter((b) => b.type === 'tool_use');
    assert.ok(uses.length >= 1, JSON.stringify(msg));
    for (const u of uses) {
      assert.ok(u.id.startsWith('toolu_'), u.id);
      if (choice.type === 'tool') assert.equal(u.name, 'get_weather');
      checkArgs(u.name, u.input);
      calls++;
    }
    if (stream) assert.ok(partial.length > 0, 'no input_json_delta events');
    messages.push({ role: 'assistant', content: msg.content });
    messages.push({
      role: 'user',
      content: uses.map((u) => ({ type: 'tool_result', tool_use_id: u.id, content: [{ type: 'text', text: '21 C' }] })),
    });
    const r2 = await anthropic.messages.create({ model: 'm', max_tokens: 8, messages, tools: anthropicTools, tool_choice: { type: 'none' } });
    assert.ok(['end_turn', 'max_tokens'].includes(r2.stop_reason), r2.stop_reason);
    assert.equal(r2.content[0].type, 'text');
  }
}
console.log(`tools.mjs: ${calls} calls parsed by the SDKs, each answered`);
