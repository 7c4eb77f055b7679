// Benchmark (not a test): do the streams a `vlstack serve` is decoding keep their inter-token
// latency while a video clip is encoded beside them? (issue 35; docs/video.md "Benchmarks")
//
// usage: node bench/video_beside_streams.mjs --url http://HOST:PORT --clip FILE.mp4
//          [--streams 8] [--max-tokens 400] [--fps F] [--max-frames N] [--lead-tokens 16]
//          [--model NAME] [--image FILE.png] [--server-log FILE] [--dump FILE]
//
// Starts --streams streamed chat completions (--max-tokens each; a random-weight model rarely
// samples an end of turn); once every stream has received --lead-tokens tokens, sends one
// non-streamed request with the clip as a video_url data-URL part (max_tokens 1) and records
// when it was sent and answered. Prints one JSON object:
// the video request's wall time, and the streams' inter-token latency (client side, per token:
// the gap between two content deltas of a stream over the tokens the later one carries, as its
// logprobs count them) p50/p99/max in three windows: before the video request,
// while it was in flight, and after it. With --image FILE (a PNG) an image part is sent instead of
// the clip, for the same figures with a picture. With --server-log FILE (the server's stderr, its
// request log), the window while the request was in flight is split at the end of its
// preparation (the line's prepare_ms): "encoding" (gaps ending while the picture or clip was
// decoded and encoded) and "prefill" (gaps ending after, until the answer). Plain fetch, no
// dependencies.
import fs from 'node:fs';

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    if (!argv[i].startsWith('--')) throw new Error(`unexpected argument ${argv[i]}`);
    const k = argv[i].slice(2);
    out[k] = i + 1 < argv.length && !argv[i + 1].startsWith('--') ? argv[++i] : true;
  }
  return out;
}

const args = parseArgs(process.argv.slice(2));
if (!args.url || (!args.clip && !args.image)) {
  console.error('usage: node bench/video_beside_streams.mjs --url http://HOST:PORT --clip FILE ' +
                '[--streams 8] [--max-tokens 400] [--fps F] [--max-frames N] [--lead-tokens 16]');
  process.exit(2);
}
const URL_ = String(args.url).replace(/\/$/, '');
const STREAMS = Number(args.streams ?? 8);
const MAX_TOKENS = Number(args['max-tokens'] ?? 400);
const LEAD = Number(args['lead-tokens'] ?? 16);
const MODEL = args.model ? String(args.model) : undefined;
const headers = { 'Content-Type': 'application/json' };
const now = () => performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function quantile(sorted, q) {
  if (sorted.length === 0) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

function summary(gaps) {
  const s = [...gaps].sort((a, b) => a - b);
  const r = (x) => (x === null ? null : Math.round(x * 10) / 10);
  return { gaps: s.length, p50_ms: r(quantile(s, 0.5)), p99_ms: r(quantile(s, 0.99)),
           max_ms: r(s.length ? s[s.length - 1] : null) };
}

// One streamed request; `times` receives the arrival time of every content delta.
async function stream(i, times, counts) {
  const body = {
    messages: [{ role: 'user', content: `Stream ${i}: write a long story about the sea.` }],
    max_tokens: MAX_TOKENS, stream: true, temperature: 0.8, seed: i + 1, logprobs: true,
  };
  if (MODEL) body.model = MODEL;
  const res = await fetch(`${URL_}/v1/chat/completions`, { method: 'POST', headers,
                                                            body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`stream ${i}: HTTP ${res.status} ${await res.text()}`);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const j = JSON.parse(line.slice(6));
      if (j.error) throw new Error(`stream ${i}: ${j.error.message}`);
      // A delta may carry several tokens (text held back until a UTF-8 character or a possible
      // stop string completes): its logprobs say how many.
      if (j.choices?.[0]?.delta?.content) {
        times.push(now());
        counts.push(Math.max(1, j.choices[0].logprobs?.content?.length ?? 1));
      }
    }
  }
}

const clip = fs.readFileSync(String(args.image ?? args.clip));
const part = args.image
  ? { type: 'image_url', image_url: { url: `data:image/png;base64,${clip.toString('base64')}` } }
  : { type: 'video_url', video_url: { url: `data:video/mp4;base64,${clip.toString('base64')}` } };
if (args.fps) part.fps = Number(args.fps);
if (args['max-frames']) part.max_frames = Number(args['max-frames']);

const times = Array.from({ length: STREAMS }, () => []);
const counts = Array.from({ length: STREAMS }, () => []);  // tokens per delta
const t0 = now();
const running = times.map((t, i) => stream(i, t, counts[i]));
while (times.some((t) => t.length < LEAD)) await sleep(20);
const videoSent = now();
const vbody = { messages: [{ role: 'user', content: [part, { type: 'text', text: 'What happens?' }] }],
                max_tokens: 1 };
if (MODEL) vbody.model = MODEL;
const vres = await fetch(`${URL_}/v1/chat/completions`, { method: 'POST', headers,
                                                          body: JSON.stringify(vbody) });
const vjson = await vres.json();
const videoDone = now();
if (!vres.ok) throw new Error(`video request: HTTP ${vres.status} ${JSON.stringify(vjson)}`);
await Promise.all(running);

// The end of the request's preparation, from the server's log line for its id.
let encodeEnd = null;
if (args['server-log']) {
  await sleep(300);  // the line is written once the response has ended
  for (const line of fs.readFileSync(String(args['server-log']), 'utf8').split('\n')) {
    if (!line.startsWith('{')) continue;
    const j = JSON.parse(line);
    if (j.id === vjson.id && typeof j.prepare_ms === 'number') encodeEnd = videoSent + j.prepare_ms;
  }
  if (encodeEnd === null) throw new Error(`no prepare_ms for ${vjson.id} in ${args['server-log']}`);
}

// Per token: a delta of n tokens after a gap g counts n latencies of g / n.
const windows = { before: [], during: [], after: [], encoding: [], prefill: [] };
times.forEach((t, i) => {
  for (let k = 1; k < t.length; k++) {
    const n = counts[i][k];
    const w = t[k] <= videoSent ? 'before' : t[k - 1] >= videoDone ? 'after' : 'during';
    const ws = [w];
    if (w === 'during' && encodeEnd !== null) ws.push(t[k] <= encodeEnd ? 'encoding' : 'prefill');
    for (const x of ws) for (let c = 0; c < n; c++) windows[x].push((t[k] - t[k - 1]) / n);
  }
});
// --dump FILE: every stream's token arrival times and the request's marks (ms from the start).
if (args.dump) {
  fs.writeFileSync(String(args.dump), JSON.stringify({
    sent: videoSent - t0, prepared: encodeEnd === null ? null : encodeEnd - t0, done: videoDone - t0,
    streams: times.map((t) => t.map((x) => Math.round((x - t0) * 10) / 10)) }));
}
console.log(JSON.stringify({
  streams: STREAMS, max_tokens: MAX_TOKENS, clip_bytes: clip.length,
  video_request_ms: Math.round(videoDone - videoSent),
  video_prompt_tokens: vjson.usage?.prompt_tokens ?? null,
  total_s: Math.round((now() - t0) / 100) / 10,
  prepare_ms: encodeEnd === null ? null : Math.round(encodeEnd - videoSent),
  inter_token_latency: { before: summary(windows.before), during: summary(windows.during),
                         after: summary(windows.after),
                         ...(encodeEnd === null ? {} : { encoding: summary(windows.encoding),
                                                         prefill: summary(windows.prefill) }) },
}));
