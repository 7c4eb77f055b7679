// Structured output end to end (issue 34) through the official `openai` npm client and raw
// fetch, on the small random-weight test model with an untied head, sampled at temperature 1
// with several seeds: the model writes noise, so whatever is valid in a reply the token mask made
// so.
//
// usage: node tests/server/structured_output_test.mjs --vlstack PATH [--verbose]
//
// What is checked, per case (a schema feature of the subset, json_object, strict mode, GBNF,
// regex, the completions endpoint, enforced tool calls):
//   * every reply that ends with finish_reason "stop" is valid, by an independent checker:
//     Debian's python3-jsonschema (tests/server/validate_json.py, Draft 2020-12, strict formats)
//     for JSON, a JavaScript RegExp or a small recogniser written here for GBNF and regex;
//   * every reply cut by max_tokens says "length" and is a valid prefix, checked two ways:
//     syntactically by json_prefix.mjs (can still become one JSON text; for the JSON cases), and
//     by a witness: each seed is also asked with a larger max_tokens, the cut reply must be the
//     start of that one (the same seed draws the same tokens), and where that one stopped it was
//     validated above, so the cut text is the prefix of a valid reply;
//   * each case gets at least one reply that stops (so the check is never empty);
//   * enforced tool calls (tool_choice "required" and a named function), streamed and not: the
//     calls parse and their arguments validate against the function's parameters;
//   * refusals: an unsupported schema keyword is a 400 whose param is the field and whose message
//     names the keyword and its JSON path; a bad grammar and regex likewise;
//   * /metrics counts the structured requests.
// Exit 0 pass, 1 fail, 77 skip (the tokenizer npm package is missing).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import OpenAI from 'openai';

import {
  check, checkEq, fetchMetrics, HERE, makeTestModel, metric, parseArgs, Runner, startServer, tempDir,
} from './common.mjs';
import { jsonPrefixError, selfTest } from './json_prefix.mjs';

const args = parseArgs();
if (!args.vlstack) {
  console.error('usage: node tests/server/structured_output_test.mjs --vlstack PATH');
  process.exit(2);
}

const SEEDS = [1, 2, 3, 4, 5];
const SHORT = 12;  // max_tokens of the reply that is usually cut
const LONG = 96;   // max_tokens of the reply that usually stops
const SLOTS = 4;

const work = tempDir('vls-structured-');
const modelDir = path.join(work, 'model');
makeTestModel(args.vlstack, modelDir);
const server = await startServer(args.vlstack, [
  '--model', modelDir, '--port', '0', '--slots', String(SLOTS), '--capacity', '1024',
  '--precision', 'f32', '--threads', '2',
], { quiet: !args.verbose });
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120000 });
const R = new Runner('structured_output_test');
const USER = [{ role: 'user', content: 'Describe the picture as JSON.' }];
const SAMPLING = { temperature: 1, top_p: 1 };

// ---- independent checkers ---------------------------------------------------------------------

// validate_json.py over [{schema, texts}]: per case, per text, null or why it is invalid.
function validateJson(cases) {
  const p = spawnSync('/usr/bin/python3', [path.join(HERE, 'validate_json.py')],
                      { input: JSON.stringify({ cases }), encoding: 'utf8', maxBuffer: 1 << 26 });
  if (p.status !== 0) throw new Error(`validate_json.py exited ${p.status}: ${p.stderr}`);
  return JSON.parse(p.stdout).results;
}

// A reply cut inside a multi-byte character ends with U+FFFD (the text stream's flush); the
// character was never whole, so the comparisons leave it out.
const trimCut = (t) => t.replace(/\uFFFD+$/u, '');

// ---- sampling ---------------------------------------------------------------------------------

// One reply: {text, finish} through `ask(extra)`, which returns the API object.
async function chatReply(body) {
  const r = await client.chat.completions.create({ model: 'm', messages: USER, ...SAMPLING, ...body });
  return { text: r.choices[0].message.content ?? '', finish: r.choices[0].finish_reason, raw: r };
}

async function completionReply(body) {
  const r = await client.completions.create({ model: 'm', prompt: 'JSON:', ...SAMPLING, ...body });
  return { text: r.choices[0].text, finish: r.choices[0].finish_reason, raw: r };
}

// Raw fetch (the extras the client has no types for), chat or completions.
async function rawReply(endpoint, body) {
  const base = endpoint === 'chat' ? { messages: USER } : { prompt: 'Text:' };
  const r = await fetch(`${server.url}/v1/${endpoint === 'chat' ? 'chat/completions' : 'completions'}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'm', ...base, ...SAMPLING, ...body }),
  });
  const j = await r.json();
  if (r.status !== 200) throw new Error(`${r.status}: ${JSON.stringify(j)}`);
  const c = j.choices[0];
  return { text: endpoint === 'chat' ? c.message.content ?? '' : c.text, finish: c.finish_reason, raw: j };
}

// Each seed asked twice, at SHORT and LONG max_tokens: [{seed, short, long}].
async function sample(reply, body, { seeds = SEEDS, short = SHORT, long = LONG } = {}) {
  return Promise.all(seeds.map(async (seed) => {
    const [s, l] = await Promise.all([reply({ ...body, seed, max_tokens: short }),
                                      reply({ ...body, seed, max_tokens: long })]);
    return { seed, short: s, long: l };
  }));
}

// The checks every case shares, given a validity test over the stopped texts
// (texts -> [null | why]) and whether the syntactic JSON prefix check applies. Returns counts.
function checkSamples(samples, validate, { jsonPrefix = true, what = '' } = {}) {
  const replies = samples.flatMap((s) => [['short', s], ['long', s]].map(([k, x]) => ({ ...x[k], seed: x.seed, k })));
  for (const r of replies) {
    check(r.finish === 'stop' || r.finish === 'length',
          `${what} seed ${r.seed} ${r.k}: finish_reason ${JSON.stringify(r.finish)}`);
  }
  const stopped = replies.filter((r) => r.finish === 'stop');
  const verdicts = validate(stopped.map((r) => r.text));
  const invalid = stopped.map((r, i) => [r, verdicts[i]]).filter(([, v]) => v !== null);
  check(invalid.length === 0, () => `${what}: ${invalid.length} of ${stopped.length} stopped replies invalid: ` +
        invalid.slice(0, 3).map(([r, v]) => `seed ${r.seed} ${r.k} ${JSON.stringify(r.text)}: ${v}`).join('; '));
  check(stopped.length > 0, `${what}: no reply stopped: ${JSON.stringify(replies.map((r) => r.text))}`);
  let witnessed = 0;
  let cut = 0;
  for (const s of samples) {
    const { short, long } = s;
    if (short.finish === 'stop') {
      checkEq(long.finish, 'stop', `${what} seed ${s.seed}: the longer reply of a stopped seed`);
      checkEq(long.text, short.text, `${what} seed ${s.seed}: the same seed, the same stopped reply`);
    }
    for (const r of [short, long]) {
      if (r.finish !== 'length') continue;
      cut++;
      if (jsonPrefix) {
        const e = jsonPrefixError(trimCut(r.text));
        check(e === null, `${what} seed ${s.seed}: the cut reply ${JSON.stringify(r.text)} is no JSON prefix: ${e}`);
      }
    }
    if (short.finish === 'length') {
      check(long.text.startsWith(trimCut(short.text)),
            `${what} seed ${s.seed}: the cut reply ${JSON.stringify(short.text)} does not start ${JSON.stringify(long.text)}`);
      if (long.finish === 'stop') witnessed++;
    }
  }
  return { stopped: stopped.length, replies: replies.length, cut, witnessed };
}

const report = (name, c) => console.log(`     ${name}: ${c.stopped}/${c.replies} stopped and valid, ` +
                                        `${c.cut} cut, ${c.witnessed} cut replies witnessed by a valid reply`);

// ---- the schema features ----------------------------------------------------------------------

const small = (lo, hi) => ({ type: 'integer', minimum: lo, maximum: hi });
const NODE = {
  type: 'object',
  properties: { v: small(0, 9), kids: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 } },
  required: ['v'], additionalProperties: false,
};
// [name, schema, more request fields]
const FEATURES = [
  ['type: scalars and a type list', { type: 'object', properties: {
    b: { type: 'boolean' }, n: { type: 'null' }, i: small(0, 99), s: { type: 'string', maxLength: 3 },
    u: { type: ['boolean', 'null', 'integer'] } }, required: ['b', 'n', 'i', 's', 'u'], additionalProperties: false }],
  ['type: integer and number unbounded', { type: 'array', prefixItems: [{ type: 'integer' }, { type: 'number' }], items: false, minItems: 2 }],
  ['properties, required (some optional)', { type: 'object', properties: {
    a: small(0, 9), b: { type: 'boolean' }, c: { enum: ['x', 'y'] }, d: { type: 'null' } },
  required: ['a', 'c'], additionalProperties: false }],
  ['additionalProperties: a schema', { type: 'object', properties: { id: small(0, 9) }, required: ['id'],
    additionalProperties: { type: 'boolean' } }],
  ['additionalProperties: true (by default)', { type: 'object', properties: { k: { type: 'boolean' } }, required: ['k'] }],
  ['items', { type: 'array', items: small(0, 9), maxItems: 6 }],
  ['prefixItems with items false', { type: 'array', prefixItems: [{ type: 'boolean' }, { enum: ['x', 'y'] }, { type: 'null' }], items: false }],
  ['prefixItems then items', { type: 'array', prefixItems: [{ const: 'head' }], items: { type: 'boolean' }, maxItems: 4 }],
  ['minItems / maxItems', { type: 'array', items: { type: 'boolean' }, minItems: 2, maxItems: 4 }],
  ['enum of mixed values', { enum: ['red', 'green', 7, null, false, { k: [1, 2] }, [true]] }],
  ['const', { type: 'object', properties: { v: { const: 'fixed' }, w: { const: [1, { a: true }] } },
    required: ['v', 'w'], additionalProperties: false }],
  ['anyOf', { anyOf: [small(0, 5), { type: 'boolean' }, { type: 'array', items: { type: 'null' }, maxItems: 2 }] }],
  ['oneOf (disjoint branches)', { oneOf: [
    { type: 'object', properties: { kind: { const: 'a' }, x: small(0, 9) }, required: ['kind', 'x'], additionalProperties: false },
    { type: 'object', properties: { kind: { const: 'b' }, y: { type: 'boolean' } }, required: ['kind', 'y'], additionalProperties: false }] }],
  ['$ref / $defs with recursion', { $defs: { node: NODE }, $ref: '#/$defs/node' }],
  ['$ref to a sibling definition', { type: 'object', $defs: { flag: { type: 'boolean' }, pair: { type: 'array', prefixItems: [{ $ref: '#/$defs/flag' }, { $ref: '#/$defs/flag' }], items: false, minItems: 2 } },
    properties: { p: { $ref: '#/$defs/pair' } }, required: ['p'], additionalProperties: false }],
  ['pattern', { type: 'object', properties: { code: { type: 'string', pattern: '^[A-Z]{2}-[0-9]{3}$' },
    tag: { type: 'string', pattern: '^(ab|cd)+x?$' } }, required: ['code', 'tag'], additionalProperties: false }],
  ['format date', { type: 'string', format: 'date' }],
  ['format time', { type: 'string', format: 'time' }],
  ['format date-time', { type: 'string', format: 'date-time' }],
  ['format uuid', { type: 'string', format: 'uuid' }],
  // A random model almost never writes the "@" (most tokens fit the unbounded local part): a bias
  // on "@" and '"' (ids 31, 1) makes some replies end; validity is still the mask's doing.
  ['format email', { type: 'string', format: 'email' }, { logit_bias: { 31: 10, 1: 8 } }],
  ['minLength / maxLength', { type: 'array', items: { type: 'string', minLength: 2, maxLength: 4 }, minItems: 1, maxItems: 2 }],
  ['integer bounds', { type: 'array', prefixItems: [small(-20, 300), { type: 'integer', exclusiveMinimum: 0, exclusiveMaximum: 10 },
    { type: 'integer', minimum: 5 }, { type: 'integer', maximum: -3 }], items: false, minItems: 4 }],
  ['number bounds', { type: 'array', prefixItems: [{ type: 'number', minimum: -1.5, maximum: 2.25 },
    { type: 'number', minimum: 0 }, { type: 'number', exclusiveMaximum: 10 }], items: false, minItems: 3 }],
];

const schemaValidator = (schema) => (texts) => validateJson([{ schema, texts }])[0];

try {
  await R.run('the JSON prefix checker', async () => {
    const wrong = selfTest();
    check(wrong.length === 0, wrong.join('; '));
  });

  for (const [name, schema, extra] of FEATURES) {
    await R.run(`json_schema: ${name}`, async () => {
      const body = { response_format: { type: 'json_schema', json_schema: { name: 'out', schema } }, ...extra };
      const c = checkSamples(await sample(chatReply, body), schemaValidator(schema), { what: name });
      report(name, c);
    }, 180000);
  }

  await R.run('strict: true: no property beyond those listed', async () => {
    const schema = { type: 'object', properties: { a: { type: 'boolean' }, b: small(0, 9) }, required: ['a', 'b'] };
    const body = { response_format: { type: 'json_schema', json_schema: { name: 's', schema, strict: true } } };
    const c = checkSamples(await sample(chatReply, body), schemaValidator({ ...schema, additionalProperties: false }),
                           { what: 'strict' });
    report('strict', c);
  }, 120000);

  await R.run('json_object: a JSON object', async () => {
    // Keys and strings are unbounded: a bias towards '"', '}' and '"}' (ids 1, 92, 9207) lets some
    // replies end; what is valid in them is still the mask's doing (the bias only moves mass
    // among the tokens the mask allows).
    const body = { response_format: { type: 'json_object' }, logit_bias: { 1: 4, 92: 6, 9207: 6 } };
    const c = checkSamples(await sample(chatReply, body, { long: 160 }), schemaValidator({ type: 'object' }),
                           { what: 'json_object' });
    report('json_object', c);
  }, 120000);

  await R.run('streamed: the same reply as not streamed, and valid', async () => {
    const schema = FEATURES.find(([n]) => n === 'const')[1];
    for (const seed of SEEDS.slice(0, 2)) {
      const body = { response_format: { type: 'json_schema', json_schema: { name: 'c', schema } }, seed, max_tokens: LONG };
      const plain = await chatReply(body);
      const s = await client.chat.completions.create({ model: 'm', messages: USER, ...SAMPLING, ...body, stream: true });
      let text = '';
      let finish = null;
      for await (const ch of s) {
        text += ch.choices[0]?.delta?.content ?? '';
        finish = ch.choices[0]?.finish_reason ?? finish;
      }
      checkEq(text, plain.text, `seed ${seed}: streamed text`);
      checkEq(finish, plain.finish, `seed ${seed}: streamed finish_reason`);
    }
  }, 60000);

  await R.run('with speculative decoding (prompt lookup): replies still valid', async () => {
    const schema = FEATURES.find(([n]) => n === '$ref / $defs with recursion')[1];
    const body = { response_format: { type: 'json_schema', json_schema: { name: 'r', schema } },
                   speculative: { method: 'ngram', draft_tokens: 4 } };
    const c = checkSamples(await sample(chatReply, body), schemaValidator(schema), { what: 'speculative' });
    report('speculative', c);
  }, 120000);

  await R.run('llama-server / vLLM extras on /v1/chat/completions: json_schema', async () => {
    const schema = FEATURES.find(([n]) => n === 'anyOf')[1];
    const c = checkSamples(await sample((b) => rawReply('chat', b), { json_schema: schema }), schemaValidator(schema),
                           { what: 'json_schema extra' });
    report('json_schema extra', c);
  }, 120000);

  // GBNF: a bounded list and a recursive grammar, each with an independent recogniser.
  const LIST_GBNF = 'root ::= item (", " item){0,3} "."\nitem ::= "cat" | "dog" | [0-9] [0-9]?\n';
  const LIST_RE = /^(?:cat|dog|[0-9]{1,2})(?:, (?:cat|dog|[0-9]{1,2})){0,3}\.$/;
  // Recursive: each level holds up to two letters and at most one deeper level.
  const PARENS_GBNF = '# nested brackets around letters\nroot ::= "(" inner ")"\ninner ::= [a-c]{0,2} ("(" inner ")")?\n';
  // The language: n >= 1 opening brackets, each followed by up to two letters, then n closing.
  const NESTED = /^((?:\([a-c]{0,2})*)(\)*)$/;
  const opens = (t) => [...t].filter((ch) => ch === '(').length;
  const nested = (t) => {
    const m = NESTED.exec(t);
    return m !== null && opens(m[1]) >= 1 && m[2].length === opens(m[1]);
  };
  const nestedPrefix = (t) => {
    const m = NESTED.exec(t);
    return m !== null && m[2].length <= opens(m[1]);
  };
  await R.run('grammar (GBNF): a bounded list, raw fetch, chat and completions', async () => {
    for (const endpoint of ['chat', 'completions']) {
      const samples = await sample((b) => rawReply(endpoint, b), { grammar: LIST_GBNF }, { short: 3, long: 40 });
      const c = checkSamples(samples, (texts) => texts.map((t) => (LIST_RE.test(t) ? null : 'not in the language')),
                             { jsonPrefix: false, what: `gbnf list (${endpoint})` });
      check(samples.every((x) => x.long.finish === 'stop'), 'a bounded language ends within 40 tokens');
      report(`gbnf list (${endpoint})`, c);
    }
  }, 120000);

  await R.run('grammar (GBNF): recursion (nested brackets)', async () => {
    const samples = await sample((b) => rawReply('chat', b), { grammar: PARENS_GBNF }, { short: 4, long: 64 });
    const c = checkSamples(samples, (texts) => texts.map((t) => (nested(t) ? null : 'not in the language')),
                           { jsonPrefix: false, what: 'gbnf parens' });
    for (const s of samples) {
      for (const r of [s.short, s.long]) {
        if (r.finish === 'length') check(nestedPrefix(trimCut(r.text)), `a cut reply ${JSON.stringify(r.text)} is no prefix`);
      }
    }
    report('gbnf parens', c);
  }, 120000);

  await R.run('regex, raw fetch, chat and completions', async () => {
    const regex = '(yes|no)-[0-9]{1,3}(\\.[a-z]{2})?';
    const re = new RegExp(`^(?:${regex})$`);
    for (const endpoint of ['chat', 'completions']) {
      const samples = await sample((b) => rawReply(endpoint, b), { regex }, { short: 2, long: 32 });
      const c = checkSamples(samples, (texts) => texts.map((t) => (re.test(t) ? null : 'no match')),
                             { jsonPrefix: false, what: `regex (${endpoint})` });
      check(samples.every((x) => x.long.finish === 'stop'), `a bounded language ends within 32 tokens: ${
        JSON.stringify(samples.map((x) => x.long))}`);
      report(`regex (${endpoint})`, c);
    }
  }, 120000);

  await R.run('/v1/completions: response_format json_schema through the client', async () => {
    const schema = FEATURES.find(([n]) => n === 'oneOf (disjoint branches)')[1];
    const body = { response_format: { type: 'json_schema', json_schema: { name: 'o', schema } } };
    const c = checkSamples(await sample(completionReply, body), schemaValidator(schema), { what: 'completions' });
    report('completions json_schema', c);
  }, 120000);

  // ---- tool calls -----------------------------------------------------------------------------

  const WEATHER = { type: 'object', properties: { city: { enum: ['Paris', 'Oslo', 'Lima'] }, days: small(1, 7) },
                    required: ['city', 'days'], additionalProperties: false };
  const ALARM = { type: 'object', properties: { at: { type: 'string', format: 'time' }, loud: { type: 'boolean' } },
                  required: ['at'], additionalProperties: false };
  const TOOLS = [
    { type: 'function', function: { name: 'get_weather', description: 'The forecast', parameters: WEATHER } },
    { type: 'function', function: { name: 'set_alarm', description: 'An alarm', parameters: ALARM } },
  ];
  const PARAMS = { get_weather: WEATHER, set_alarm: ALARM };

  // {calls, content, finish} from a streamed reply (calls merged by index).
  async function streamedTools(body) {
    const s = await client.chat.completions.create({ model: 'm', messages: USER, ...SAMPLING, ...body, stream: true });
    const calls = [];
    let content = '';
    let finish = null;
    for await (const ch of s) {
      const c = ch.choices[0];
      if (!c) continue;
      content += c.delta?.content ?? '';
      for (const t of c.delta?.tool_calls ?? []) {
        const cur = calls[t.index] ?? (calls[t.index] = { id: '', function: { name: '', arguments: '' } });
        if (t.id) cur.id = t.id;
        cur.function.name += t.function?.name ?? '';
        cur.function.arguments += t.function?.arguments ?? '';
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
    return { calls, content, finish };
  }

  // The calls of stopped replies parse and validate; returns the number of calls checked.
  function checkCalls(replies, named, what) {
    const cases = [];
    let stopped = 0;
    for (const r of replies) {
      check(r.finish === 'tool_calls' || r.finish === 'length', `${what}: finish_reason ${r.finish}`);
      if (r.finish !== 'tool_calls') continue;
      stopped++;
      check(r.calls.length >= 1, `${what}: finish_reason tool_calls without calls`);
      check(!r.content || !r.content.trim(), `${what}: content beside enforced calls: ${JSON.stringify(r.content)}`);
      if (named) checkEq(r.calls.length, 1, `${what}: calls of a named function`);
      for (const c of r.calls) {
        check(c.function.name in PARAMS, `${what}: an unknown function ${c.function.name}`);
        if (named) checkEq(c.function.name, named, `${what}: the named function`);
        cases.push({ schema: PARAMS[c.function.name], texts: [c.function.arguments] });
      }
    }
    check(stopped > 0, `${what}: no reply finished with tool_calls`);
    const bad = validateJson(cases).flatMap((v, i) => (v[0] === null ? [] : [`${cases[i].texts[0]}: ${v[0]}`]));
    check(bad.length === 0, `${what}: invalid arguments: ${bad.slice(0, 3).join('; ')}`);
    return { stopped, calls: cases.length };
  }

  for (const [label, toolChoice, named] of [
    ['required', 'required', null],
    ['a named function', { type: 'function', function: { name: 'set_alarm' } }, 'set_alarm'],
  ]) {
    await R.run(`tool_choice ${label}: calls parse and validate, not streamed`, async () => {
      const replies = await Promise.all(SEEDS.map(async (seed) => {
        const r = await chatReply({ tools: TOOLS, tool_choice: toolChoice, seed, max_tokens: 256 });
        const m = r.raw.choices[0].message;
        return { calls: m.tool_calls ?? [], content: m.content, finish: r.finish };
      }));
      const c = checkCalls(replies, named, label);
      console.log(`     ${label}: ${c.stopped}/${replies.length} replies with calls, ${c.calls} calls valid`);
    }, 120000);
    await R.run(`tool_choice ${label}: streamed, the same calls`, async () => {
      const replies = await Promise.all(SEEDS.slice(0, 3).map(async (seed) => {
        const body = { tools: TOOLS, tool_choice: toolChoice, seed, max_tokens: 256 };
        const [s, plain] = await Promise.all([streamedTools(body), chatReply(body)]);
        const want = plain.raw.choices[0].message.tool_calls ?? [];
        checkEq(JSON.stringify(s.calls.map((c) => c.function)), JSON.stringify(want.map((c) => c.function)),
                `seed ${seed}: streamed calls`);
        return s;
      }));
      checkCalls(replies, named, `${label} streamed`);
    }, 120000);
  }

  await R.run('strict tools under "auto": any call the reply holds validates', async () => {
    const strict = TOOLS.map((t) => ({ ...t, function: { ...t.function, strict: true } }));
    const replies = await Promise.all(SEEDS.map((seed) => chatReply({ tools: strict, seed, max_tokens: 48 })));
    const cases = [];
    for (const r of replies) {
      for (const c of r.raw.choices[0].message.tool_calls ?? []) {
        cases.push({ schema: PARAMS[c.function.name], texts: [c.function.arguments] });
      }
      check(['stop', 'length', 'tool_calls'].includes(r.finish), `finish_reason ${r.finish}`);
    }
    const bad = validateJson(cases).filter((v) => v[0] !== null);
    check(bad.length === 0, `invalid arguments: ${JSON.stringify(bad.slice(0, 3))}`);
  }, 120000);

  // ---- refusals -------------------------------------------------------------------------------

  async function refused(endpoint, body, param, words) {
    const base = endpoint === 'chat' ? { messages: USER } : { prompt: 'x' };
    const r = await fetch(`${server.url}/v1/${endpoint === 'chat' ? 'chat/completions' : 'completions'}`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'm', max_tokens: 4, ...base, ...body }),
    });
    const j = await r.json();
    checkEq(r.status, 400, `status of ${JSON.stringify(body).slice(0, 120)}: ${JSON.stringify(j)}`);
    checkEq(j.error?.param, param, `param of ${JSON.stringify(body).slice(0, 120)} (${j.error?.message})`);
    for (const w of words) check(j.error.message.includes(w), `the message ${JSON.stringify(j.error.message)} names ${w}`);
    return j.error;
  }

  await R.run('an unsupported keyword: 400 naming the keyword and its JSON path, through the client too', async () => {
    const schema = { type: 'object', properties: { a: { not: { type: 'string' } } } };
    await refused('chat', { response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } },
                  'response_format', ['"not"', '/properties/a']);
    await refused('chat', { json_schema: schema }, 'json_schema', ['"not"', '/properties/a']);
    await refused('completions', { json_schema: schema }, 'json_schema', ['"not"', '/properties/a']);
    const tools = [{ type: 'function', function: { name: 'f', parameters: schema, strict: true } }];
    await refused('chat', { tools, tool_choice: 'required' }, 'tools[0].function.parameters', ['"not"', '/properties/a']);
    try {
      await client.chat.completions.create({ model: 'm', messages: USER, max_tokens: 4,
                                             response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } });
      check(false, 'the client did not throw');
    } catch (e) {
      check(e instanceof OpenAI.BadRequestError, `the client's error: ${e}`);
      checkEq(e.param, 'response_format', 'APIError.param');
    }
  });

  await R.run('a bad grammar, a bad regex, fields that do not go together: 400 naming the field', async () => {
    await refused('chat', { grammar: 'root ::= missing' }, 'grammar', ['missing']);
    await refused('chat', { grammar: 'root ::= "a" (' }, 'grammar', []);
    await refused('completions', { grammar: 'item ::= "a"' }, 'grammar', ['root']);
    await refused('chat', { regex: '(a)\\1' }, 'regex', []);
    await refused('chat', { regex: '[z-a]' }, 'regex', []);
    await refused('chat', { regex: 'a', grammar: 'root ::= "a"' }, 'regex', ['grammar']);
    await refused('chat', { response_format: { type: 'yaml' } }, 'response_format.type', ['yaml']);
    await refused('chat', { response_format: { type: 'json_schema' } }, 'response_format.json_schema', []);
    await refused('chat', { tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' } },
                  'response_format', ['required']);
    await refused('completions', { tools: TOOLS }, 'tools', []);
    // A stop string would end a reply with "stop" before the grammar does.
    await refused('chat', { stop: ['}'], response_format: { type: 'json_object' } }, 'stop', ['cannot be combined']);
    await refused('completions', { stop: 'x', regex: 'a+' }, 'stop', ['cannot be combined']);
  });

  await R.run('/metrics counts structured requests by kind', async () => {
    const before = await fetchMetrics(server.url);
    const kinds = ['json_schema', 'json_object', 'grammar', 'regex', 'tools'];
    for (const k of kinds) check(metric(before, 'vlstack_structured_requests_total', { kind: k }) > 0, `kind ${k} counted`);
    const delta = (a, b, name, labels) => metric(b, name, labels) - metric(a, name, labels);
    await rawReply('chat', { regex: 'ok|fine', max_tokens: 4 });
    const after = await fetchMetrics(server.url);
    checkEq(delta(before, after, 'vlstack_structured_requests_total', { kind: 'regex' }), 1, 'one more regex request');
    checkEq(delta(before, after, 'vlstack_grammar_cache_misses_total'), 1, 'a new regex compiled');
    await rawReply('completions', { regex: 'ok|fine', max_tokens: 4 });
    const again = await fetchMetrics(server.url);
    checkEq(delta(after, again, 'vlstack_grammar_cache_hits_total'), 1, 'the same regex again: a cache hit');
    checkEq(delta(after, again, 'vlstack_grammar_cache_misses_total'), 0, 'the same regex again: not compiled');
    check(metric(again, 'vlstack_grammar_cache_hits_total') > 20, 'the seeds of a case share one compiled grammar');
  });
} finally {
  const info = await server.stop();
  await R.run('the server exits 0 on SIGTERM', async () => checkEq(info.code, 0, 'exit code'));
  fs.rmSync(work, { recursive: true, force: true });
}
process.exit(R.finish());
