// anthropic.mjs PORT: the official @anthropic-ai/sdk client against `ft serve`'s
// /v1/messages, streaming and not. Exits non-zero with a message on the first failure.
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';

const port = process.argv[2];
const client = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: 'unused', maxRetries: 0 });

const req = { model: 'claude-sonnet-4-5', max_tokens: 12, temperature: 0, system: 'Be brief.',
  messages: [{ role: 'user', content: 'Hello' }] };
const msg = await client.messages.create(req);
assert.equal(msg.type, 'message');
assert.equal(msg.role, 'assistant');
assert.equal(msg.content[0].type, 'text');
assert.ok(['end_turn', 'max_tokens', 'stop_sequence'].includes(msg.stop_reason));

// the raw event sequence
const events = [];
let text = '';
for await (const ev of await client.messages.create({ ...req, stream: true })) {
  events.push(ev.type);
  if (ev.type === 'content_block_delta') text += ev.delta.text;
}
assert.equal(events[0], 'message_start');
assert.equal(events[1], 'content_block_start');
assert.deepEqual(events.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
assert.equal(text, msg.content[0].text);

// the SDK's stream helper assembles the same message
const final = await client.messages.stream(req).finalMessage();
assert.equal(final.content[0].text, msg.content[0].text);
assert.equal(final.usage.output_tokens, msg.usage.output_tokens);

await assert.rejects(client.messages.create({ ...req, max_tokens: 0 }), (e) => e.status === 400);
console.log('anthropic client: ok');
