// `vlstack serve` on a mixture-of-experts model through the official `openai` npm client (issue 32
// "Done means": an image question answered on a qwen3-vl-30b-a3b-shaped model).
//
// usage: node tests/server/moe_test.mjs --vlstack PATH [--verbose] [--precision int4]
//        [--layers 1] [--vision-depth 2]
//
// The model: `make-test-model --shape qwen3-vl-30b-a3b --layers 1`, the released text width
// (hidden 2048, 32/4 heads of 128, 128 experts of width 768, top 8, vocabulary 151936, untied,
// the real Qwen3 tokenizer and Qwen3-VL template) with the released vision tower's width
// (hidden 1152, 16 heads, 2304 position embeddings) cut to --vision-depth blocks (default 2,
// DeepStack from block 0 into the decoder's layer 0): the tower is not what this test is about
// and its 27 blocks would take most of the time budget to write and prepare. Served at
// --precision int4 (the 24 GiB configuration of the issue). One server, cases:
// a streamed chat completion with a PNG as a data: URL (text arrives, usage in the last chunk
// with include_usage, the image grows the prompt, the streamed text equals the non-streamed
// reply of the same greedy request), several requests at once (the experts shared by rows of
// different slots), and /metrics counting them. A random model writes random text, so nothing
// asserts on wording. Exit 0 pass, 1 fail, 77 skip (an npm package missing).
//
// Time (the shared 2-core machine under a load of ~11): make-test-model 105 s (68 s of CPU for
// the whole run: 1.2 G random BF16 weights, 2.5 GB written), serve's int4 load 38 s, the cases
// 2 s. Over the ~60 s aimed at on a loaded machine; the width is the point of the test, so a
// cheaper variant would cut --experts (the expert tensors are half the bytes), not hidden.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import {
  check, checkEq, fetchMetrics, metric, NPM_TOKENIZER, parseArgs, pngDataUrl, Runner,
  startServer, tempDir, waitIdle,
} from './common.mjs';

const args = parseArgs();
if (!args.vlstack) {
  console.error('usage: node tests/server/moe_test.mjs --vlstack PATH');
  process.exit(2);
}
if (!fs.existsSync(NPM_TOKENIZER)) {
  console.log(`SKIP: ${NPM_TOKENIZER} is missing (run tests/tokenizer/setup.sh)`);
  process.exit(77);
}
let OpenAI;
try {
  OpenAI = (await import('openai')).default;
} catch {
  console.log('SKIP: the openai npm package is missing (run tests/server/setup.sh)');
  process.exit(77);
}

const MODEL_NAME = 'qwen3-vl-30b-a3b-1layer';
const PRECISION = args.precision || 'int4';
const SLOTS = 3;

const t0 = Date.now();
const work = tempDir('vls-moe-');
const modelDir = path.join(work, 'model');
const made = spawnSync(args.vlstack, [
  'make-test-model', '--out', modelDir, '--shape', 'qwen3-vl-30b-a3b',
  '--layers', String(args.layers || 1), '--vision-depth', String(args['vision-depth'] || 2),
  '--vision-deepstack-indexes', '0', '--seed', '5',
], { env: { ...process.env, VLS_TOKENIZER_JSON: NPM_TOKENIZER }, encoding: 'utf8' });
if (made.status !== 0) {
  console.log(`make-test-model exited ${made.status}: ${made.stderr}`);
  process.exit(1);
}
const config = JSON.parse(fs.readFileSync(path.join(modelDir, 'config.json'), 'utf8'));
const text = config.text_config;
checkEq(config.model_type, 'qwen3_vl_moe', 'model_type');
checkEq(JSON.stringify([text.hidden_size, text.num_experts, text.num_experts_per_tok,
                        text.moe_intermediate_size, text.vocab_size]),
        JSON.stringify([2048, 128, 8, 768, 151936]), 'the released text width');
const tMade = Date.now();
console.log(`     make-test-model ${((tMade - t0) / 1000).toFixed(1)} s`);

const server = await startServer(args.vlstack, [
  '--model', modelDir, '--host', '127.0.0.1', '--port', '0', '--model-name', MODEL_NAME,
  '--slots', String(SLOTS), '--capacity', '1024', '--precision', PRECISION, '--threads', '2',
  '--drain-timeout', '5',
], { quiet: !args.verbose, timeoutMs: 120000 });
console.log(`     serve loaded (--precision ${PRECISION}) in ${((Date.now() - tMade) / 1000).toFixed(1)} s`);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
const R = new Runner('moe_test');

const QUESTION = { type: 'text', text: 'What is in the picture?' };
const IMAGE = { type: 'image_url', image_url: { url: pngDataUrl(64, 48, 1) } };

function checkUsage(u, what) {
  check(u && Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0, `${what}: usage ${JSON.stringify(u)}`);
  check(Number.isInteger(u.completion_tokens) && u.completion_tokens > 0, `${what}: completion_tokens`);
  checkEq(u.total_tokens, u.prompt_tokens + u.completion_tokens, `${what}: total_tokens`);
}

let imageReply = null;

await R.run('an image question, streamed, with usage', async () => {
  const params = { model: MODEL_NAME, messages: [{ role: 'user', content: [IMAGE, QUESTION] }],
                   max_tokens: 8, temperature: 0, ignore_eos: true };
  const stream = await client.chat.completions.create(
    { ...params, stream: true, stream_options: { include_usage: true } });
  let streamed = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta?.content) streamed += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  check(chunks >= 3, `${chunks} chunks`);
  check(streamed.length > 0, 'no text streamed');
  checkEq(finish, 'length', 'finish_reason');
  checkUsage(usage, 'streamed');
  checkEq(usage.completion_tokens, 8, 'completion_tokens');
  // 64 x 48 is below min_pixels: resized up to at least 65536 pixels, >= 64 merged tokens.
  const plain = await client.chat.completions.create(
    { ...params, messages: [{ role: 'user', content: [QUESTION] }], max_tokens: 2 });
  check(usage.prompt_tokens >= plain.usage.prompt_tokens + 64,
        `the image did not grow the prompt: ${usage.prompt_tokens} vs ${plain.usage.prompt_tokens}`);
  const whole = await client.chat.completions.create(params);
  checkEq(whole.choices[0].message.content, streamed, 'the non-streamed reply');
  checkEq(whole.usage.prompt_tokens, usage.prompt_tokens, 'non-streamed prompt_tokens');
  imageReply = streamed;
}, 60000);

await R.run('requests at once share the experts and keep their replies', async () => {
  check(imageReply !== null, 'the first case did not answer');
  const image = client.chat.completions.create({
    model: MODEL_NAME, messages: [{ role: 'user', content: [IMAGE, QUESTION] }], max_tokens: 8,
    temperature: 0, ignore_eos: true });
  const others = [1, 2].map((i) => client.chat.completions.create({
    model: MODEL_NAME, messages: [{ role: 'user', content: `Count to ${i}.` }], max_tokens: 6,
    temperature: 0, ignore_eos: true }));
  const [a, ...rest] = await Promise.all([image, ...others]);
  checkEq(a.choices[0].message.content, imageReply, 'the image reply beside other requests');
  for (const r of rest) checkUsage(r.usage, 'a text request');
}, 60000);

await R.run('/metrics counts the requests', async () => {
  await waitIdle(server.url, {}, 5000);
  const m = await fetchMetrics(server.url);
  checkEq(metric(m, 'vlstack_slots_total'), SLOTS, 'vlstack_slots_total');
  check(metric(m, 'vlstack_requests_total', { endpoint: 'chat', outcome: 'ok' }) >= 6,
        'requests_total{chat,ok}');
  check(metric(m, 'vlstack_generation_tokens_total') >= 8 + 2 + 8 + 8 + 12,
        `generation_tokens_total ${metric(m, 'vlstack_generation_tokens_total')}`);
});

await R.run('SIGTERM: exit 0', async () => {
  const info = await server.stop('SIGTERM', 15000);
  if (info.code !== 0) console.log(server.log.slice(-20).join('\n'));
  checkEq(JSON.stringify(info), JSON.stringify({ code: 0, signal: null }), 'exit');
}, 20000);

await server.stop('SIGKILL');
fs.rmSync(work, { recursive: true, force: true });
process.exit(R.finish());
