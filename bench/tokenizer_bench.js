// Tokenization throughput of Hugging Face `tokenizers` (npm) on the same file, single call.
// usage: node bench/tokenizer_bench.js TOKENIZER_JSON TEXT_FILE [REPS]
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, '..', 'tests', 'tokenizer', 'node_modules', 'tokenizers'));

async function main() {
  const [file, textFile, repsArg] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(file);
  const text = fs.readFileSync(textFile, 'utf8');
  const bytes = Buffer.byteLength(text, 'utf8');
  let best = Infinity;
  let nTokens = 0;
  for (let r = 0; r < Number(repsArg || 3); r++) {
    const t0 = process.hrtime.bigint();
    const enc = await tok.encode(text);
    const t1 = process.hrtime.bigint();
    nTokens = enc.getIds().length;
    best = Math.min(best, Number(t1 - t0) / 1e9);
  }
  console.log(JSON.stringify({ impl: 'tokenizers-npm', bytes, tokens: nTokens, best_s: +best.toFixed(4),
                               mb_per_s: +(bytes / 1e6 / best).toFixed(2) }));
}
main().catch((e) => { console.error(e); process.exit(1); });
