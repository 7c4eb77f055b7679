// Load benchmark of `vlstack serve` (a benchmark, not a test): N concurrent clients stream chat
// completions in loops for a duration, a random fraction of them hanging up mid-stream.
//
// usage: node bench/server_load.mjs --url http://HOST:PORT [--clients 64] [--duration-s 600]
//          [--disconnect-rate 0.1] [--api-key K] [--max-tokens 64] [--pid PID] [--warmup-s 10]
//          [--model NAME] [--images-rate 0]
//
// Prints one JSON summary: requests (completed, deliberately aborted, errors by kind), tokens,
// throughput, time to first token and inter-token latency (p50/p99, client side), /metrics
// sampled each second (slots busy, queue depth, requests in flight), the server's RSS (with
// --pid: /proc/PID/status VmRSS every 10 s, the first sample after the warm-up against the last)
// and whether vlstack_slots_busy and vlstack_requests_in_flight return to 0 within 5 s after
// every client stopped (exit code 1 when they do not). Plain fetch, no dependencies.
import fs from 'node:fs';
import zlib from 'node:zlib';

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
if (!args.url) {
  console.error('usage: node bench/server_load.mjs --url http://HOST:PORT [--clients 64] [--duration-s 600] ' +
                '[--disconnect-rate 0.1] [--api-key K] [--max-tokens 64] [--pid PID]');
  process.exit(2);
}
const URL_ = String(args.url).replace(/\/$/, '');
const CLIENTS = Number(args.clients ?? 64);
const DURATION_S = Number(args['duration-s'] ?? 600);
const DISCONNECT = Number(args['disconnect-rate'] ?? 0.1);
const MAX_TOKENS = Number(args['max-tokens'] ?? 64);
const WARMUP_S = Number(args['warmup-s'] ?? 10);
const IMAGES_RATE = Number(args['images-rate'] ?? 0);
const PID = args.pid ? Number(args.pid) : null;
const headers = { 'Content-Type': 'application/json' };
if (args['api-key']) headers.Authorization = `Bearer ${args['api-key']}`;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => performance.now();

// A small PNG (RGB gradient) as a data URL, for the optional image requests.
function pngDataUrl(w, h) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (b) => {
    let c = 0xffffffff;
    for (const x of b) c = crcTable[(c ^ x) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (t, d) => {
    const td = Buffer.concat([Buffer.from(t), d]);
    const out = Buffer.alloc(12 + d.length);
    out.writeUInt32BE(d.length, 0);
    td.copy(out, 4);
    out.writeUInt32BE(crc(td), 8 + d.length);
    return out;
  };
  const raw = Buffer.alloc((w * 3 + 1) * h);
  for (let y = 0; y < h; y++) for (let x = 0; x < w * 3; x++) raw[y * (w * 3 + 1) + 1 + x] = (x * 3 + y * 7) & 255;
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8;
  ihdr[9] = 2;
  const png = Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk('IHDR', ihdr),
                             chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
  return `data:image/png;base64,${png.toString('base64')}`;
}
const IMAGE = IMAGES_RATE > 0 ? pngDataUrl(64, 48) : null;

const TOPICS = ['a lighthouse', 'the sea', 'a small robot', 'mountains at dawn', 'a busy market', 'rain in the city',
                'an old library', 'a garden in spring'];

// --- statistics --------------------------------------------------------------------------------

const stats = {
  started: 0, completed: 0, aborted: 0, errors: {}, completion_tokens: 0, prompt_tokens: 0,
  cached_tokens: 0, finish: {},
};
const ttft = [];
const itl = [];
const gauges = { slots_busy: [], queue_depth: [], requests_in_flight: [] };
const rss = [];
const errorSamples = {};  // the first message of each error kind

function countError(kind, detail) {
  stats.errors[kind] = (stats.errors[kind] || 0) + 1;
  if (!(kind in errorSamples)) errorSamples[kind] = String(detail).slice(0, 200);
}

function pct(values, p) {
  if (!values.length) return null;
  const s = Float64Array.from(values).sort();
  return +s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))].toFixed(2);
}

function summary(values) {
  return values.length ? { p50: pct(values, 50), p99: pct(values, 99), n: values.length,
                           mean: +(values.reduce((a, b) => a + b, 0) / values.length).toFixed(2) } : null;
}

// --- one streamed request ---------------------------------------------------------------------

async function oneRequest(rand) {
  const abortAt = Math.random() < DISCONNECT ? 1 + Math.floor(Math.random() * Math.max(1, MAX_TOKENS / 2)) : 0;
  const text = `Tell me about ${TOPICS[Math.floor(rand() * TOPICS.length)]}, request ${stats.started}.`;
  const content = IMAGE && Math.random() < IMAGES_RATE
    ? [{ type: 'image_url', image_url: { url: IMAGE } }, { type: 'text', text }] : text;
  const body = {
    messages: [{ role: 'user', content }], max_tokens: MAX_TOKENS, temperature: 0.8,
    seed: Math.floor(Math.random() * 1e9), stream: true, stream_options: { include_usage: true },
  };
  if (args.model) body.model = args.model;
  const ac = new AbortController();
  stats.started++;
  const t0 = now();
  let res;
  try {
    res = await fetch(`${URL_}/v1/chat/completions`, { method: 'POST', headers, body: JSON.stringify(body),
                                                       signal: ac.signal });
  } catch (e) {
    countError('connection', e.cause?.code || e.message);
    await sleep(100);
    return;
  }
  if (res.status !== 200) {
    const detail = await res.text().catch(() => '');
    countError(`http_${res.status}`, detail);
    if (res.status === 429 || res.status === 503) {
      await sleep(1000 * Math.min(5, Number(res.headers.get('retry-after')) || 1));
    }
    return;
  }
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let last = null;
  let deltas = 0;
  let done = false;
  let usage = null;
  try {
    for (;;) {
      const { value, done: eof } = await reader.read();
      if (eof) break;
      buf += dec.decode(value, { stream: true });
      let sep;
      while ((sep = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, sep);
        buf = buf.slice(sep + 2);
        for (const line of event.split('\n')) {
          if (!line.startsWith('data: ')) continue;
          const data = line.slice(6);
          if (data === '[DONE]') {
            done = true;
            continue;
          }
          const j = JSON.parse(data);
          if (j.error) throw Object.assign(new Error(j.error.message), { kind: 'stream_error' });
          if (j.usage) usage = j.usage;
          const ch = j.choices?.[0];
          if (ch?.finish_reason) stats.finish[ch.finish_reason] = (stats.finish[ch.finish_reason] || 0) + 1;
          if (ch?.delta?.content) {
            const t = now();
            if (last === null) ttft.push(t - t0);
            else itl.push(t - last);
            last = t;
            deltas++;
            if (abortAt && deltas >= abortAt) {
              ac.abort();
              stats.aborted++;
              return;
            }
          }
        }
      }
    }
    if (!done) {
      countError('truncated_stream', `no [DONE] after ${deltas} deltas`);
      return;
    }
    if (!usage) {
      countError('no_usage', 'include_usage stream without usage');
      return;
    }
    stats.completed++;
    stats.completion_tokens += usage.completion_tokens;
    stats.prompt_tokens += usage.prompt_tokens;
    stats.cached_tokens += usage.prompt_tokens_details?.cached_tokens || 0;
  } catch (e) {
    if (e.name === 'AbortError') return;
    countError(e.kind || (e instanceof SyntaxError ? 'bad_json' : 'stream_read'), e.message);
  }
}

async function client(i, deadline) {
  let seed = 12345 + i;
  const rand = () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x80000000;
  };
  while (Date.now() < deadline) await oneRequest(rand);
}

// --- server-side sampling ---------------------------------------------------------------------

async function scrape() {
  const r = await fetch(`${URL_}/metrics`, { headers });
  const text = await r.text();
  const out = {};
  for (const line of text.split('\n')) {
    const m = /^(vlstack_(?:slots_busy|queue_depth|requests_in_flight)) (\S+)/.exec(line);
    if (m) out[m[1].slice(8)] = Number(m[2]);
  }
  return out;
}

function readRssMb() {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${PID}/status`, 'utf8'));
    return m ? +(Number(m[1]) / 1024).toFixed(1) : null;
  } catch {
    return null;
  }
}

async function main() {
  const t0 = Date.now();
  const deadline = t0 + DURATION_S * 1000;
  let sampling = true;
  const sampler = (async () => {
    let nextRss = t0 + WARMUP_S * 1000;
    while (sampling) {
      try {
        const g = await scrape();
        for (const k of Object.keys(gauges)) if (k in g) gauges[k].push(g[k]);
      } catch (e) {
        countError('metrics_scrape', e.message);
      }
      if (PID && Date.now() >= nextRss) {
        rss.push({ t_s: Math.round((Date.now() - t0) / 1000), mb: readRssMb() });
        nextRss += 10000;
      }
      await sleep(1000);
    }
  })();
  await Promise.all(Array.from({ length: CLIENTS }, (_, i) => client(i, deadline)));
  const elapsed = (Date.now() - t0) / 1000;
  sampling = false;
  await sampler;
  if (PID) rss.push({ t_s: Math.round((Date.now() - t0) / 1000), mb: readRssMb() });

  // After every client stopped, the server must come back to idle.
  const idleT0 = Date.now();
  let idle = null;
  let lastGauges = null;
  while (Date.now() - idleT0 < 5000) {
    try {
      lastGauges = await scrape();
      if (lastGauges.slots_busy === 0 && lastGauges.requests_in_flight === 0) {
        idle = Date.now() - idleT0;
        break;
      }
    } catch (e) {
      lastGauges = { error: e.message };
    }
    await sleep(100);
  }

  const gaugeSummary = (v) => (v.length ? { max: Math.max(...v), mean: +(v.reduce((a, b) => a + b, 0) / v.length).toFixed(2) } : null);
  const rssMb = rss.filter((x) => x.mb !== null);
  const out = {
    url: URL_, clients: CLIENTS, duration_s: +elapsed.toFixed(1), max_tokens: MAX_TOKENS, disconnect_rate: DISCONNECT,
    requests: {
      started: stats.started, completed: stats.completed, aborted_deliberately: stats.aborted,
      errors: stats.errors, error_samples: errorSamples, finish_reasons: stats.finish,
    },
    tokens: { completion: stats.completion_tokens, prompt: stats.prompt_tokens, cached: stats.cached_tokens },
    throughput: {
      requests_per_s: +(stats.completed / elapsed).toFixed(2),
      completion_tokens_per_s: +(stats.completion_tokens / elapsed).toFixed(1),
    },
    ttft_ms: summary(ttft),
    inter_token_ms: summary(itl),
    server: {
      slots_busy: gaugeSummary(gauges.slots_busy), queue_depth: gaugeSummary(gauges.queue_depth),
      requests_in_flight: gaugeSummary(gauges.requests_in_flight),
    },
    rss_mb: PID ? {
      first_after_warmup: rssMb[0]?.mb ?? null, last: rssMb.at(-1)?.mb ?? null,
      max: rssMb.length ? Math.max(...rssMb.map((x) => x.mb)) : null, samples: rssMb.length,
    } : null,
    idle_after_stop: { ok: idle !== null, ms: idle, gauges: lastGauges },
  };
  console.log(JSON.stringify(out, null, 2));
  process.exit(idle !== null ? 0 : 1);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
