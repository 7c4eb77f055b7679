// Throughput of `vlstack serve` measured the way `vlstack bench` measures the engine, so the two
// can be set side by side (a benchmark, not a test).
//
// usage: node bench/server_throughput.mjs --url http://HOST:PORT [--slots 8]
//          [--prompt-tokens 128] [--gen-tokens 128] [--reps 3] [--warmup 1] [--vocab 151936]
//          [--seed 1] [--json-schema FILE] [--temperature T]
//          [--scenario conversations [--conversations 32] [--turns 4] [--system-tokens 1000]
//           [--user-tokens 32]]
//
// After `--warmup` unmeasured repetitions (first-touch of the KV cache and scratch), each
// repetition sends `--slots` streamed /v1/completions requests at once, each a prompt of
// `--prompt-tokens` pseudo-random token ids (fresh every repetition, so nothing comes from the
// KV cache) generating exactly `--gen-tokens` greedy tokens (ignore_eos). As in `vlstack bench`:
// prompt tokens/s is all prompt tokens over the time until every request has its first token;
// generation tokens/s is the tokens after that over the time to the last one (the decode phase,
// every slot busy), counted from the usage of each stream and the chunks that arrived before the
// decode phase. Also time to first token and inter-token gaps (client side, p50/p99). Prints
// one JSON object.
//
// With `--scenario conversations`: `--conversations` (32) chats of `--turns` (4) turns each, all
// starting with the same `--system-tokens` (1000) token system prompt, run by `--slots` clients
// at once (each takes the next chat when its chat ends). A turn's prompt is the chat so far: the
// system prompt, then per earlier turn its `--user-tokens` (32) user tokens and `--gen-tokens`
// reply tokens, then this turn's user tokens. The reply tokens of the history are ids the client
// draws (the servers return text, not ids), so a server reuses the system prompt and the earlier
// prompts from its cache and recomputes the earlier replies' rows, both servers alike. Reports
// generated tokens/s over the whole run, and time to first token and inter-token gaps (p50/p99).
//
// With `--json-schema FILE` every request carries the schema as the `json_schema` extra field
// (vlstack and llama-server both take it on /v1/completions), sampled at `--temperature`
// (default 1 with a schema, so the mask decides): decode tokens/s with and without structured
// output (bench/schemas/ holds schemas). Without ignore_eos, since a grammar ends where it
// ends: pick a schema whose replies outlast --gen-tokens.
function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i].replace(/^--/, '');
    out[k] = i + 1 < argv.length && !argv[i + 1].startsWith('--') ? argv[++i] : true;
  }
  return out;
}
const a = parseArgs(process.argv.slice(2));
if (!a.url) {
  console.error('usage: node bench/server_throughput.mjs --url URL [--slots 8] [--prompt-tokens 128] ' +
                '[--gen-tokens 128] [--reps 3]');
  process.exit(2);
}
const URL_ = String(a.url).replace(/\/$/, '');
const SLOTS = Number(a.slots ?? 8);
const PROMPT = Number(a['prompt-tokens'] ?? 128);
const GEN = Number(a['gen-tokens'] ?? 128);
const REPS = Number(a.reps ?? 3);
const VOCAB = Number(a.vocab ?? 151936);
const WARMUP = Number(a.warmup ?? 1);
let seed = Number(a.seed ?? 1);
const { readFileSync } = await import('node:fs');
const SCHEMA = a['json-schema'] ? JSON.parse(readFileSync(String(a['json-schema']), 'utf8')) : null;
const TEMPERATURE = Number(a.temperature ?? (SCHEMA ? 1 : 0));

function random() {  // xorshift32: the prompts are reproducible
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
// Ordinary token ids (the first 150,000 are text; the special tokens sit above).
const randomPrompt = () => Array.from({ length: PROMPT }, () => Math.floor(random() * Math.min(VOCAB, 150000)));

async function one(prompt, t0) {
  const res = await fetch(`${URL_}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: GEN, temperature: TEMPERATURE, seed: Math.floor(random() * 1e9),
                           stream: true, stream_options: { include_usage: true },
                           ...(SCHEMA ? { json_schema: SCHEMA } : { ignore_eos: true }) }),
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const times = [];
  let usage = null;
  let buf = '';
  const decoder = new TextDecoder();
  for await (const part of res.body) {
    const now = performance.now() - t0;
    buf += decoder.decode(part, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      if (j.usage) usage = j.usage;
      // Every event with a choice is a token (one may carry no text yet: a partial UTF-8
      // sequence, which llama-server sends as an empty string).
      const c = j.choices?.[0];
      if (c && (c.text || (c.text === '' && c.finish_reason == null))) times.push(now);
    }
  }
  return { times, tokens: usage?.completion_tokens ?? times.length };
}

const pct = (xs, p) => {
  if (!xs.length) return null;
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const median = (xs) => pct(xs, 50);

if (a.scenario === 'conversations') {
  const CONVS = Number(a.conversations ?? 32), TURNS = Number(a.turns ?? 4);
  const SYSTEM = Number(a['system-tokens'] ?? 1000), USER = Number(a['user-tokens'] ?? 32);
  const tokens = (n) => Array.from({ length: n }, () => Math.floor(random() * Math.min(VOCAB, 150000)));
  const system = tokens(SYSTEM);
  const runAll = async () => {
    const ttfts = [], itl = [];
    let generated = 0, next = 0, empty = 0;
    const t0 = performance.now();
    const client = async () => {
      while (next < CONVS) {
        next++;
        let history = [...system];
        for (let t = 0; t < TURNS; t++) {
          const prompt = [...history, ...tokens(USER)];
          const start = performance.now();
          const r = await one(prompt, start);
          // A reply without a single token event has no time to first token: counted apart, so
          // that it cannot turn the percentiles into nothing.
          if (r.times.length) ttfts.push(r.times[0]); else empty++;
          for (let i = 1; i < r.times.length; i++) itl.push(r.times[i] - r.times[i - 1]);
          generated += r.tokens;
          history = [...prompt, ...tokens(GEN)];
        }
      }
    };
    await Promise.all(Array.from({ length: SLOTS }, client));
    return { seconds: (performance.now() - t0) / 1e3, generated, ttfts, itl, empty };
  };
  for (let w = 0; w < WARMUP; w++) {  // a short warm-up: one turn per client, another system prompt
    const t0 = performance.now();
    await Promise.all(Array.from({ length: SLOTS }, () => one(tokens(SYSTEM + USER), t0)));
  }
  const r = await runAll();
  console.log(JSON.stringify({
    scenario: 'conversations', clients: SLOTS, conversations: CONVS, turns: TURNS,
    system_tokens: SYSTEM, user_tokens: USER, gen_tokens: GEN, seconds: r.seconds,
    generation_tokens_per_s: r.generated / r.seconds,
    time_to_first_token_ms: { p50: pct(r.ttfts, 50), p99: pct(r.ttfts, 99) },
    inter_token_ms: { p50: pct(r.itl, 50), p99: pct(r.itl, 99) },
    replies_without_tokens: r.empty,
  }));
  process.exit(0);
}

const promptTps = [], genTps = [], ttft = [], gaps = [];
let empty = 0;
for (let w = 0; w < WARMUP; w++) {
  const t0 = performance.now();
  await Promise.all(Array.from({ length: SLOTS }, randomPrompt).map((p) => one(p, t0)));
}
for (let r = 0; r < REPS; r++) {
  const prompts = Array.from({ length: SLOTS }, randomPrompt);
  const t0 = performance.now();
  const results = await Promise.all(prompts.map((p) => one(p, t0)));
  const firsts = results.filter((x) => x.times.length).map((x) => x.times[0]);
  empty += results.length - firsts.length;
  const prefillEnd = Math.max(...firsts);
  const last = Math.max(...results.filter((x) => x.times.length).map((x) => x.times.at(-1)));
  let decoded = 0;
  for (const x of results) {
    decoded += x.tokens - x.times.filter((t) => t <= prefillEnd).length;
    if (x.times.length) ttft.push(x.times[0]);
    for (let i = 1; i < x.times.length; i++) gaps.push(x.times[i] - x.times[i - 1]);
  }
  promptTps.push((PROMPT * SLOTS) / (prefillEnd / 1e3));
  genTps.push(decoded / ((last - prefillEnd) / 1e3));
  console.error(`[server_throughput] rep ${r + 1}/${REPS}: prompt ${promptTps.at(-1).toFixed(1)} tok/s, ` +
                `generation ${genTps.at(-1).toFixed(2)} tok/s`);
}
const stats = (xs) => ({ min: Math.min(...xs), median: median(xs), max: Math.max(...xs) });
console.log(JSON.stringify({
  slots: SLOTS, prompt_tokens: PROMPT, gen_tokens: GEN, reps: REPS, json_schema: !!SCHEMA,
  temperature: TEMPERATURE,
  prompt_tokens_per_s: stats(promptTps),
  generation_tokens_per_s: stats(genTps),
  time_to_first_token_ms: { p50: pct(ttft, 50), p99: pct(ttft, 99) },
  inter_token_ms: { p50: pct(gaps, 50), p99: pct(gaps, 99) },
  replies_without_tokens: empty,
}));
