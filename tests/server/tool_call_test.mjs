// Tool calls end to end through the official `openai` client, on a scripted test model
// (`make-test-model --script`: greedy decoding answers every chat prompt with a fixed reply that
// holds a Qwen3 `<tool_call>` block). A random model never writes one; this one always does, so
// the whole path is checked: the model's tokens -> text -> tool_calls, streamed and not, the
// finish reason, usage, stop strings cut exactly in a known reply, tool_choice "none", enforced
// tool_choice "required" and a named function (the call first, no content), a tool result sent
// back, and an image beside the tools.
//
// usage: node tests/server/tool_call_test.mjs --vlstack PATH   (exit 0 ok, 1 failed, 77 skipped)
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import OpenAI from 'openai';

import {
  check, checkEq, NPM_TOKENIZER, parseArgs, pngDataUrl, Runner, SMALL_MODEL, startServer, tempDir,
} from './common.mjs';

const args = parseArgs();
if (!args.vlstack) {
  console.error('usage: node tests/server/tool_call_test.mjs --vlstack PATH');
  process.exit(2);
}
if (!fs.existsSync(NPM_TOKENIZER)) {
  console.log(`SKIP: ${NPM_TOKENIZER} is missing (run tests/tokenizer/setup.sh)`);
  process.exit(77);
}

const CONTENT = 'Let me check.';
const CALL = '{"name":"get_weather","arguments":{"days":3}}';
const REPLY = `${CONTENT}<tool_call>${CALL}</tool_call>`;
const REPLY_TOKENS = 18 + 1;  // the reply's tokens and <|im_end|>

const work = tempDir('vls_tool_call_');
const model = path.join(work, 'm');
const made = spawnSync(args.vlstack, ['make-test-model', '--out', model, ...SMALL_MODEL,
                                      '--script', REPLY],
                       { env: { ...process.env, VLS_TOKENIZER_JSON: NPM_TOKENIZER }, encoding: 'utf8' });
if (made.status !== 0) {
  console.log(`FAIL make-test-model --script exited ${made.status}: ${made.stderr}`);
  process.exit(1);
}
const server = await startServer(args.vlstack, ['--model', model, '--port', '0', '--slots', '2',
                                                '--capacity', '1024', '--precision', 'f32']);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
const R = new Runner('tool_call_test');

const TOOLS = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather forecast',
    parameters: { type: 'object', properties: { days: { type: 'integer' } }, required: ['days'] },
  },
}];
const ASK = [{ role: 'user', content: 'What will the weather be?' }];

function checkCall(calls, what) {
  checkEq(calls?.length, 1, `${what}: tool_calls`);
  const c = calls[0];
  checkEq(c.type, 'function', `${what}: type`);
  checkEq(c.function.name, 'get_weather', `${what}: name`);
  checkEq(JSON.stringify(JSON.parse(c.function.arguments)), '{"days":3}', `${what}: arguments`);
  check(/^call_[A-Za-z0-9]{24}$/.test(c.id), `${what}: id ${c.id}`);
}

function checkUsage(u, what) {
  checkEq(u.completion_tokens, REPLY_TOKENS, `${what}: completion_tokens`);
  checkEq(u.total_tokens, u.prompt_tokens + u.completion_tokens, `${what}: total_tokens`);
}

// Streams a request; returns {content, calls (merged by index), finish, usage, chunks}.
async function stream(body) {
  const s = await client.chat.completions.create({ ...body, stream: true,
                                                   stream_options: { include_usage: true } });
  let content = '';
  const calls = [];
  let finish = null, usage = null, chunks = 0;
  for await (const ch of s) {
    chunks++;
    if (ch.usage) usage = ch.usage;
    const c = ch.choices[0];
    if (!c) continue;
    if (c.delta?.content) content += c.delta.content;
    for (const t of c.delta?.tool_calls ?? []) {
      const cur = calls[t.index] ?? (calls[t.index] = { id: '', type: '', function: { name: '', arguments: '' } });
      if (t.id) cur.id = t.id;
      if (t.type) cur.type = t.type;
      if (t.function?.name) cur.function.name += t.function.name;
      if (t.function?.arguments) cur.function.arguments += t.function.arguments;
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { content, calls, finish, usage, chunks };
}

try {
  await R.run('without tools the reply is the scripted text', async () => {
    const r = await client.chat.completions.create({ messages: ASK, model: 'm' });
    checkEq(r.choices[0].message.content, REPLY, 'content');
    checkEq(r.choices[0].finish_reason, 'stop', 'finish_reason');
    check(!r.choices[0].message.tool_calls, 'no tool_calls without tools');
    checkUsage(r.usage, 'usage');
  });

  await R.run('with tools: tool_calls, content before the block, finish_reason tool_calls', async () => {
    const r = await client.chat.completions.create({ messages: ASK, model: 'm', tools: TOOLS });
    const m = r.choices[0].message;
    checkEq(m.content, CONTENT, 'content');
    checkCall(m.tool_calls, 'non-streamed');
    checkEq(r.choices[0].finish_reason, 'tool_calls', 'finish_reason');
    checkUsage(r.usage, 'usage');
  });

  await R.run('streamed: the same tool call in delta.tool_calls, the same content and usage', async () => {
    const s = await stream({ messages: ASK, model: 'm', tools: TOOLS, tool_choice: 'auto' });
    checkEq(s.content, CONTENT, 'content');
    checkCall(s.calls, 'streamed');
    checkEq(s.finish, 'tool_calls', 'finish_reason');
    checkUsage(s.usage, 'usage chunk');
  });

  // Enforced (issue 34): the grammar starts the reply with the call, so the script's content
  // cannot come first; the call's name and arguments are the script's.
  await R.run('a named function is enforced: one call and no content, streamed and not', async () => {
    const tool_choice = { type: 'function', function: { name: 'get_weather' } };
    const s = await stream({ messages: ASK, model: 'm', tools: TOOLS, tool_choice });
    checkEq(s.content, '', 'streamed content');
    checkCall(s.calls, 'streamed');
    checkEq(s.finish, 'tool_calls', 'streamed finish_reason');
    const r = await client.chat.completions.create({ messages: ASK, model: 'm', tools: TOOLS, tool_choice });
    checkEq(r.choices[0].message.content, null, 'content');
    checkCall(r.choices[0].message.tool_calls, 'not streamed');
    checkEq(r.choices[0].finish_reason, 'tool_calls', 'finish_reason');
  });

  await R.run('"required" is enforced: calls of get_weather only, no content between them', async () => {
    // The script does not end after its call here (the grammar moved it off its tokens), so the
    // calls repeat until max_tokens: each one is a valid call and the blanks between are no content.
    const r = await client.chat.completions.create({ messages: ASK, model: 'm', tools: TOOLS,
                                                     tool_choice: 'required', max_tokens: 100 });
    const m = r.choices[0].message;
    check(m.tool_calls?.length >= 1, `calls: ${JSON.stringify(m)}`);
    for (const c of m.tool_calls) {
      checkEq(c.function.name, 'get_weather', 'name');
      check(Number.isInteger(JSON.parse(c.function.arguments).days), `arguments ${c.function.arguments}`);
    }
    check(m.content === null || m.content.startsWith('<tool_call>'), `content: only a cut block: ${JSON.stringify(m.content)}`);
    const s = await stream({ messages: ASK, model: 'm', tools: TOOLS, tool_choice: 'required', max_tokens: 100 });
    checkEq(JSON.stringify(s.calls.map((c) => c.function)), JSON.stringify(m.tool_calls.map((c) => c.function)), 'streamed calls');
    checkEq(s.content, m.content ?? '', 'streamed content');
    checkEq(s.finish, r.choices[0].finish_reason, 'streamed finish_reason');
  });

  await R.run('tool_choice none: no tools in the prompt, the block stays text', async () => {
    const withTools = await client.chat.completions.create({ messages: ASK, model: 'm', tools: TOOLS });
    const none = await client.chat.completions.create({ messages: ASK, model: 'm', tools: TOOLS,
                                                        tool_choice: 'none' });
    checkEq(none.choices[0].message.content, REPLY, 'content');
    check(!none.choices[0].message.tool_calls, 'no tool_calls');
    check(withTools.usage.prompt_tokens > none.usage.prompt_tokens,
          `the tools are rendered into the prompt: ${withTools.usage.prompt_tokens} vs ${none.usage.prompt_tokens}`);
  });

  await R.run('stop strings are cut exactly in a known reply, streamed and not', async () => {
    const cases = [['check', 'Let me '], ['me ch', 'Let '], ['{"name"', 'Let me check.<tool_call>'],
                   ['.', 'Let me check'], ['nowhere', REPLY]];
    for (const [stop, want] of cases) {
      const r = await client.chat.completions.create({ messages: ASK, model: 'm', stop: [stop] });
      checkEq(r.choices[0].message.content, want, `stop ${JSON.stringify(stop)}`);
      checkEq(r.choices[0].finish_reason, 'stop', `finish_reason for ${JSON.stringify(stop)}`);
      const s = await stream({ messages: ASK, model: 'm', stop });
      checkEq(s.content, want, `streamed, stop ${JSON.stringify(stop)}`);
    }
    const both = await client.chat.completions.create({ messages: ASK, model: 'm', stop: ['me', 'Let'] });
    checkEq(both.choices[0].message.content, '', 'the earliest of several stop strings');
  });

  await R.run('max_tokens inside the block: finish_reason length, the partial block is text', async () => {
    const r = await client.chat.completions.create({ messages: ASK, model: 'm', tools: TOOLS, max_tokens: 8 });
    checkEq(r.choices[0].finish_reason, 'length', 'finish_reason');
    check(!r.choices[0].message.tool_calls, 'no tool call from an unfinished block');
    check(r.choices[0].message.content.startsWith(`${CONTENT}<tool_call>`),
          `content: ${JSON.stringify(r.choices[0].message.content)}`);
    checkEq(r.usage.completion_tokens, 8, 'completion_tokens');
  });

  await R.run('a tool result sent back (assistant content null + tool message) is accepted', async () => {
    const first = await client.chat.completions.create({ messages: ASK, model: 'm', tools: TOOLS });
    const call = first.choices[0].message.tool_calls[0];
    const r = await client.chat.completions.create({
      model: 'm', tools: TOOLS,
      messages: [...ASK,
                 { role: 'assistant', content: null, tool_calls: [call] },
                 { role: 'tool', tool_call_id: call.id, content: '{"forecast": "sunny"}' }],
    });
    checkCall(r.choices[0].message.tool_calls, 'second turn');
    check(r.usage.prompt_tokens > first.usage.prompt_tokens, 'the tool result is in the prompt');
  });

  await R.run('an image beside the tools', async () => {
    const r = await client.chat.completions.create({
      model: 'm', tools: TOOLS,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: pngDataUrl(64, 48, 1) } },
                                           { type: 'text', text: 'Weather where this was taken?' }] }],
    });
    checkCall(r.choices[0].message.tool_calls, 'with an image');
    check(r.usage.prompt_tokens > 100, `the image's tokens are in the prompt: ${r.usage.prompt_tokens}`);
  });
} finally {
  const info = await server.stop();
  await R.run('the server exits 0 on SIGTERM', async () => checkEq(info.code, 0, 'exit code'));
  fs.rmSync(work, { recursive: true, force: true });
}
process.exit(R.finish());
