// The demo's client: talks to a running `vlstack serve` with the official OpenAI client (npm
// `openai`, installed by tests/server/setup.sh), the way an application would.
//
// Usage: node scripts/demo_client.mjs --url http://127.0.0.1:PORT --image picture.png
//
// 1. a streamed chat request with the picture as a data: URL, the reply printed as it arrives,
//    with the usage of the last chunk; 2. the same question again (prefix reuse: cached tokens);
// 3. a non-streamed request with a stop string; 4. the server's metrics.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '../tests/server/package.json'));
const { OpenAI } = require('openai');

function arg(name, def) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
}

const url = arg('url');
const image = arg('image');
if (!url || !image) {
  console.error('usage: node scripts/demo_client.mjs --url URL --image FILE');
  process.exit(2);
}
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: process.env.VLSTACK_API_KEY || 'none' });
const dataUrl = `data:image/png;base64,${readFileSync(image).toString('base64')}`;

const models = await client.models.list();
const model = models.data[0].id;
console.log(`[client] models: ${models.data.map((m) => m.id).join(', ')}`);

const messages = [
  {
    role: 'user',
    content: [
      { type: 'image_url', image_url: { url: dataUrl } },
      { type: 'text', text: 'What is in this picture?' },
    ],
  },
];

async function streamOnce(label) {
  const t0 = performance.now();
  let first = 0;
  let usage = null;
  process.stdout.write(`[client] ${label}: `);
  const stream = await client.chat.completions.create({
    model,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: 24,
    temperature: 0.8,
    seed: 1,
  });
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta?.content;
    if (delta) {
      if (!first) first = performance.now();
      process.stdout.write(delta);
    }
    if (chunk.usage) usage = chunk.usage;
  }
  const ms = (x) => Math.round(x);
  console.log(`\n[client] usage: ${JSON.stringify(usage)}; time to first token ` +
              `${ms(first - t0)} ms, total ${ms(performance.now() - t0)} ms`);
  return usage;
}

await streamOnce('streamed reply about the picture');
await streamOnce('the same question again (its prompt comes from the KV cache)');

const plain = await client.chat.completions.create({
  model,
  messages: [{ role: 'user', content: 'Describe a sunrise in one sentence.' }],
  max_tokens: 24,
});
const text = plain.choices[0].message.content;
const words = text.split(/\s+/).filter((w) => /^[A-Za-z]{2,}$/.test(w));
const stop = words.length ? words[Math.floor(words.length / 2)] : null;
console.log(`[client] non-streamed reply: ${JSON.stringify(text)} ` +
            `(finish_reason ${plain.choices[0].finish_reason})`);
if (stop) {
  const cut = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: 'Describe a sunrise in one sentence.' }],
    max_tokens: 24,
    stop: [stop],
  });
  console.log(`[client] with stop ${JSON.stringify(stop)}: ` +
              `${JSON.stringify(cut.choices[0].message.content)} ` +
              `(finish_reason ${cut.choices[0].finish_reason})`);
}

const metrics = await (await fetch(`${url}/metrics`, {
  headers: { Authorization: `Bearer ${process.env.VLSTACK_API_KEY || 'none'}` },
})).text();
console.log('[client] metrics (selected lines of GET /metrics):');
for (const line of metrics.split('\n')) {
  if (/^vlstack_(requests_total\{endpoint="chat"|prompt_tokens|generation_tokens_total|slots_|time_to_first_token_seconds_(sum|count)|inter_token_latency_seconds_count)/.test(line) &&
      !/ 0$/.test(line)) {
    console.log(`  ${line}`);
  }
}
