// Reference encoder/decoder: Hugging Face `tokenizers` (npm) on a tokenizer.json.
// usage: node ref_tokenizers.js encode|decode TOKENIZER_JSON < lines > lines
// encode: each input line is a JSON string or {"bytes_b64": "..."} (decoded as node does:
// invalid UTF-8 becomes U+FFFD); prints a JSON array of ids per line.
// decode: each input line is a JSON array of ids; prints the decoded JSON string per line.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, 'node_modules', 'tokenizers'));

async function main() {
  const [mode, file] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(file);
  const lines = fs.readFileSync(0, 'utf8').split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  const out = [];
  for (const line of lines) {
    const v = JSON.parse(line);
    if (mode === 'encode') {
      const text = typeof v === 'string' ? v : Buffer.from(v.bytes_b64, 'base64').toString('utf8');
      const enc = await tok.encode(text);
      out.push(JSON.stringify(Array.from(enc.getIds())));
    } else if (mode === 'decode') {
      out.push(JSON.stringify(await tok.decode(v, false)));
    } else {
      throw new Error('mode must be encode or decode');
    }
  }
  process.stdout.write(out.join('\n') + (out.length ? '\n' : ''));
}
main().catch((e) => { console.error(e); process.exit(1); });
