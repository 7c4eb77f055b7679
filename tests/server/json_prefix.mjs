// A JSON prefix checker for the structured-output tests: whether a text can still be extended to
// one JSON text (RFC 8259), written here so that the check does not go through the server's
// grammar. It lexes and parses the text as far as it goes: structure ({ } [ ] : ,), strings
// (escapes, \u with its four hex digits, no raw control characters), numbers, true/false/null;
// the text is a valid prefix when nothing it holds is an error and only the end of input stops it
// (inside a string, a number, a literal or between tokens). Whitespace is RFC 8259's four.

const WS = new Set([' ', '\t', '\n', '\r']);
const NUMBER = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$/;
const NUMBER_CHARS = /[-+0-9.eE]/;

// null when `text` is a prefix of some JSON text (the complete text included); else what is wrong,
// with its offset.
export function jsonPrefixError(text) {
  const stack = [];  // '{' or '['
  // What may come next: 'value', 'value_or_close' (after '['), 'key_or_close' (after '{'), 'key',
  // 'colon', 'comma_or_close', 'end' (the top-level value is complete).
  let want = 'value';
  const afterValue = () => (stack.length === 0 ? 'end' : 'comma_or_close');
  let i = 0;
  const bad = (why) => `at ${i}: ${why} (${JSON.stringify(text.slice(Math.max(0, i - 20), i + 20))})`;
  while (i < text.length) {
    const c = text[i];
    if (WS.has(c)) {
      i++;
      continue;
    }
    if (want === 'end') return bad('text after the value');
    if (want === 'colon') {
      if (c !== ':') return bad('":" expected');
      i++;
      want = 'value';
      continue;
    }
    if (want === 'comma_or_close') {
      const top = stack[stack.length - 1];
      if (c === ',') {
        want = top === '{' ? 'key' : 'value';
        i++;
      } else if ((c === '}' && top === '{') || (c === ']' && top === '[')) {
        stack.pop();
        i++;
        want = afterValue();
      } else {
        return bad(`"," or "${top === '{' ? '}' : ']'}" expected`);
      }
      continue;
    }
    if ((want === 'key_or_close' && c === '}') || (want === 'value_or_close' && c === ']')) {
      stack.pop();
      i++;
      want = afterValue();
      continue;
    }
    const isKey = want === 'key' || want === 'key_or_close';
    if (c === '"') {
      i++;
      let closed = false;
      while (i < text.length) {
        const s = text[i];
        if (s === '"') {
          closed = true;
          i++;
          break;
        }
        if (s.charCodeAt(0) < 0x20) return bad('a raw control character in a string');
        if (s === '\\') {
          i++;
          if (i >= text.length) break;
          const e = text[i];
          if (e === 'u') {
            for (let k = 1; k <= 4 && i + k < text.length; k++) {
              if (!/[0-9a-fA-F]/.test(text[i + k])) {
                i += k;
                return bad('a \\u escape needs four hex digits');
              }
            }
            i += Math.min(5, text.length - i);
            continue;
          }
          if (!'"\\/bfnrt'.includes(e)) return bad(`a bad escape \\${e}`);
        }
        i++;
      }
      if (!closed) return null;  // the text ends inside the string
      want = isKey ? 'colon' : afterValue();
      continue;
    }
    if (isKey) return bad('a key (a string) expected');
    if (c === '{' || c === '[') {
      stack.push(c);
      i++;
      want = c === '{' ? 'key_or_close' : 'value_or_close';
      continue;
    }
    if (c === '-' || (c >= '0' && c <= '9')) {
      let j = i;
      while (j < text.length && NUMBER_CHARS.test(text[j])) j++;
      const tok = text.slice(i, j);
      // A number cut at the end of the text needs at most one more digit ("-", "1.", "1e+").
      const ok = NUMBER.test(tok) || (j === text.length && NUMBER.test(`${tok}0`));
      if (!ok) return bad(`a bad number ${JSON.stringify(tok)}`);
      i = j;
      want = afterValue();
      continue;
    }
    let matched = false;
    for (const lit of ['true', 'false', 'null']) {
      const part = text.slice(i, i + lit.length);
      if (lit.startsWith(part) && (part === lit || i + part.length === text.length)) {
        i += part.length;
        matched = true;
        break;
      }
    }
    if (!matched) return bad('a value expected');
    want = afterValue();
  }
  return null;
}

// The checker's own cases (run by the test before it relies on it).
export function selfTest() {
  const good = ['', ' ', '{', '{"a', '{"a\\', '{"a\\u00', '{"a"', '{"a":', '{"a": -', '{"a": 1.',
                '{"a": 1e+', '{"a": 10, "b": [tr', '[1, 2, {"x": null}]', '"x"', '0', '[]  ',
                '{"a": {"b": []}}', '[fals', 'nul'];
  const bad = ['}', '{,', '{"a" 1', '{"a": 01', '{"a": 1.}', '[1,]', '{"a":1,}', '[1 2]', '"\\x"',
               '"\u0001"', '{"a": tru }', '1 2', '{"a": .5}', '[1}', '{"a": "\\u12g"}', '{1: 2}',
               'nulll', '{"a": 1e}'];
  const wrong = [];
  for (const t of good) if (jsonPrefixError(t) !== null) wrong.push(`good ${JSON.stringify(t)}: ${jsonPrefixError(t)}`);
  for (const t of bad) if (jsonPrefixError(t) === null) wrong.push(`bad ${JSON.stringify(t)} accepted`);
  return wrong;
}
