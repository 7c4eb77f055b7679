#!/usr/bin/env python3
"""llama.cpp's example grammar languages give only strings in their languages (issue 34).

For each grammar of tests/grammar/gbnf (arithmetic, JSON, list, chess), gbnf_sample generates
random strings through GrammarMatcher with the real Qwen3 vocabulary (uniformly random allowed
tokens, seeded, until the grammar may end and a coin flip says stop), and every string is checked
by an independent recogniser: Lark's Earley parser with the same language written in Lark's
syntax (NAME.lark beside NAME.gbnf). JSON strings must also load with Python's json module.
Strings cut at the token cap are counted, not checked (they are prefixes); most must complete.

Before sampling, the recognisers are checked on fixed strings in and out of each language, so a
recogniser that accepts everything fails the test.

Usage: gbnf_languages_test.py --sampler PATH --tokenizer tokenizer.json [--count N] [--seeds S]
Exits 77 (skipped) when the tokenizer or lark is missing.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GRAMMARS = os.path.join(HERE, "gbnf")

# Strings each recogniser must accept and reject (its self-test).
KNOWN = {
    "arithmetic": (["1+2=3\n", "(a1 * 2.5) - x = y\n1=1\n"],
                   ["1+2=3", "=3\n", "A=1\n", "1++2=3\n"]),
    "json": (['{"a": [1, -2.5e+3, true, null, "\\u00e9\\n"]}', ' "ok"', "[]", "0"],
             ["{a:1}", "[1,]", "01", '"\n"', "[1]       "]),
    "list": (["- a\n", "- one\n- two \u00e9\n"], ["- \n", "- a", "- a\u2028b\n", "-a\n"]),
    "chess": (["1. e4 e5\n2. Nf3 Nc6\n", "1. O-O O-O-O+\n12. exd8=Q# Rxa1\n"],
              ["1. e4 e5\n", "1. e9 e5\n2. a3 a4\n", "1. e4 e5\n0. a3 a4\n", "1. e4 e5\n2. Ke Kd\n"]),
}


def recogniser(name):
    import lark  # Debian python3-lark
    with open(os.path.join(GRAMMARS, name + ".lark"), encoding="utf-8") as f:
        return lark.Lark(f.read(), parser="earley", lexer="dynamic")


def accepts(parser, text):
    import lark
    try:
        parser.parse(text)
        return True
    except lark.exceptions.LarkError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sampler", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--count", type=int, default=40, help="strings per grammar and seed")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=1000)
    args = ap.parse_args()
    if not os.path.exists(args.tokenizer):
        print("skip: no tokenizer at", args.tokenizer, "(tests/tokenizer/setup.sh)")
        return 77
    if importlib.util.find_spec("lark") is None:
        print("skip: Python lark is not installed (Debian python3-lark)")
        return 77

    failures = 0
    for name, (good, bad) in KNOWN.items():
        parser = recogniser(name)
        for s in good:
            if not accepts(parser, s):
                print(f"FAIL {name}.lark rejects {s!r}, which is in the language")
                failures += 1
        for s in bad:
            if accepts(parser, s):
                print(f"FAIL {name}.lark accepts {s!r}, which is not in the language")
                failures += 1
    if failures:
        return 1

    for name in KNOWN:
        parser = recogniser(name)
        complete = cut = checked_chars = 0
        start = time.time()
        for seed in range(1, args.seeds + 1):
            run = subprocess.run(
                [args.sampler, args.tokenizer, os.path.join(GRAMMARS, name + ".gbnf"),
                 str(seed * 7919 + len(name)), str(args.count), str(args.max_tokens)],
                capture_output=True, timeout=600)
            if run.returncode != 0:
                print(f"FAIL {name} seed {seed}: gbnf_sample exited {run.returncode}: "
                      f"{run.stderr.decode(errors='replace')[-2000:]}")
                failures += 1
                continue
            for line in run.stdout.decode().splitlines():
                sample = json.loads(line)
                data = bytes.fromhex(sample["hex"])
                if not sample["complete"]:
                    cut += 1
                    continue
                complete += 1
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    print(f"FAIL {name}: a complete string is not UTF-8: {data!r}")
                    failures += 1
                    continue
                checked_chars += len(text)
                if not accepts(parser, text):
                    print(f"FAIL {name}: the matcher produced {text[:400]!r}, not in the language")
                    failures += 1
                elif name == "json":
                    try:
                        json.loads(text)
                    except ValueError as e:
                        print(f"FAIL json: {text[:400]!r} does not load with Python's json: {e}")
                        failures += 1
        total = complete + cut
        print(f"{name}: {complete} complete strings checked ({checked_chars} characters), "
              f"{cut} cut at {args.max_tokens} tokens, {time.time() - start:.1f} s")
        if total and complete < total // 2:
            print(f"FAIL {name}: fewer than half the strings completed; the check is too weak")
            failures += 1
    print("FAILED" if failures else "PASSED", failures, "failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
