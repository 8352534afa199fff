// openai.mjs PORT: the official openai client against `ft serve` (chat and completions,
// streaming and not). Exits non-zero with a message on the first failure.
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const port = process.argv[2];
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0 });

const models = await client.models.list();
assert.equal(models.data.length, 1);
const model = models.data[0].id;

const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello' }];
const full = await client.chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 12, temperature: 0 });
assert.equal(full.object, 'chat.completion');
assert.equal(full.choices.length, 1);
assert.equal(typeof full.choices[0].message.content, 'string');
assert.ok(['stop', 'length'].includes(full.choices[0].finish_reason));
assert.equal(full.usage.completion_tokens <= 12, true);

// streaming: the deltas concatenate to the non-streamed (greedy) text
const stream = await client.chat.completions.create({
  model, messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let text = '', usage = null, finish = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    if (c.delta?.content) text += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
}
assert.equal(text, full.choices[0].message.content);
assert.equal(finish, full.choices[0].finish_reason);
assert.equal(usage.completion_tokens, full.usage.completion_tokens);

// logprobs
const lp = await client.chat.completions.create({ model, messages, max_tokens: 4, logprobs: true, top_logprobs: 2 });
assert.equal(lp.choices[0].logprobs.content.length, lp.usage.completion_tokens);

// legacy completions, streaming and not
const c1 = await client.completions.create({ model, prompt: 'Once upon', max_tokens: 8, temperature: 0 });
let t2 = '';
for await (const ch of await client.completions.create({ model, prompt: 'Once upon', max_tokens: 8, temperature: 0, stream: true }))
  t2 += ch.choices[0]?.text ?? '';
assert.equal(t2, c1.choices[0].text);

// errors surface as the SDK's typed errors with the status
await assert.rejects(client.chat.completions.create({ model, messages, n: 3 }), (e) => e.status === 400);
console.log('openai client: ok');
